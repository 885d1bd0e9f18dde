"""Offline RA-DT dataset for Darkroom: learning histories of one learner per training goal.

    python training/radt_collect.py --out runs/radt/darkroom_histories.npz

RA-DT (Schmied et al., App. B.1) trains on the stored transitions of per-goal PPO agents,
so the data runs from exploratory (poor) to exploitative (near-optimal) episodes of every
training goal. Here each of the 80 training goals gets ``--learners`` independent tabular
Q-learners (epsilon-greedy, epsilon decaying linearly from 1 to ``--eps-end`` over
``--explore-episodes``), all stepped together as one numpy batch: the same poor-to-good
mixture in seconds of CPU instead of hours of per-goal PPO. Every episode is stored.

``--learner room`` records an *in-context learner* instead: each learner is one trial of
the scripted :class:`~icrl_ros.training.teachers.RoomExplorer` (snake search until the goal
is found, then straight to it in every later episode), so later episodes exploit what earlier
ones found, as at evaluation. ``--epsilon`` (one value or a comma list, cycled over the
learners of a goal) is the per-step probability that the *executed* action is uniform random
instead of the teacher's; the teacher observes what was executed and carries on from there.

    python training/radt_collect.py --learner room --epsilon 0,0.1,0.2,0.3 --learners 4 --episodes 60

Writes a compressed ``.npz``: ``obs`` (E, H) int16 cells, ``action`` (E, H) int8 (the
executed action), ``reward`` (E, H) float32, ``task`` (E,) goal cell, ``learner`` (E,),
``history`` (E,) the episode's index in its learner's history, plus ``env_id`` / ``n_obs`` /
``n_actions``. ``--learner room`` adds ``label`` (E, H) int8, the teacher's action at every
step (equal to ``action`` where no random action was executed; the training target when
present, see :mod:`icrl_ros.training.radt_data`), and ``epsilon`` (E,) float32.
"""

from __future__ import annotations


import argparse
import time
from pathlib import Path

import numpy as np

from icrl_ros.sim import make_vec
from icrl_ros.training._cli import fail

ENV_ID = "icrl_ros/Darkroom-v0"


def collect(episodes: int, learners: int, explore_episodes: int, eps_end: float, lr: float, gamma: float,
            seed: int, eps_start: float = 1.0, q_init: float = 0.0) -> dict[str, np.ndarray]:
    """Run ``learners`` Q-learners on each training goal for ``episodes`` episodes each."""
    probe = make_vec(ENV_ID, 1, split="train")
    goals = np.repeat(probe.goal_pool, learners)  # (N,) learner n works on goals[n]
    N = len(goals)
    env = make_vec(ENV_ID, N, split="train", seed=seed)
    rng = np.random.default_rng(seed)
    H, A, S = env.max_episode_steps, env.n_actions, env.n_obs
    q = np.full((N, S, A), q_init, dtype=np.float32)  # q_init > 0: optimism drives systematic exploration
    rows = np.arange(N)
    obs_buf = np.zeros((episodes, N, H), dtype=np.int16)
    act_buf = np.zeros((episodes, N, H), dtype=np.int8)
    rew_buf = np.zeros((episodes, N, H), dtype=np.float32)
    s = env.set_tasks(goals)
    for e in range(episodes):
        eps = max(eps_end, eps_start - (eps_start - eps_end) * e / max(explore_episodes, 1))
        for t in range(H):
            qs = q[rows, s]  # (N, A); random tie-break so an untrained table walks randomly
            greedy = (qs + rng.uniform(0, 1e-6, qs.shape)).argmax(1)
            a = np.where(rng.random(N) < eps, rng.integers(0, A, N), greedy)
            s2, r, done, _ = env.step(a)
            target = r + gamma * q[rows, s2].max(1) * ~done  # time-limit end: no bootstrap from the reset cell
            q[rows, s, a] += lr * (target - q[rows, s, a])
            obs_buf[e, :, t], act_buf[e, :, t], rew_buf[e, :, t] = s, a, r
            s = s2
    # (episodes, N, H) -> one row per episode, grouped by learner in history order
    flat = lambda x: x.transpose(1, 0, 2).reshape(N * episodes, H)  # noqa: E731
    return {"obs": flat(obs_buf), "action": flat(act_buf), "reward": flat(rew_buf),
            "task": np.repeat(goals, episodes).astype(np.int64),
            "learner": np.repeat(rows, episodes).astype(np.int64),
            "history": np.tile(np.arange(episodes), N).astype(np.int64)}


def collect_teacher(episodes: int, learners: int, epsilon: list[float], seed: int) -> dict[str, np.ndarray]:
    """One :class:`RoomExplorer` trial of ``episodes`` episodes per learner, ``learners`` per
    training goal; learner n of a goal executes a random action with probability
    ``epsilon[n % len(epsilon)]`` per step. Same arrays as :func:`collect` plus ``label`` and
    ``epsilon``."""
    from icrl_ros.training.teachers import RoomExplorer

    probe = make_vec(ENV_ID, 1, split="train")
    goals = np.repeat(probe.goal_pool, learners)
    N = len(goals)
    eps = np.resize(np.asarray(epsilon, dtype=np.float64), learners)[np.tile(np.arange(learners), len(probe.goal_pool))]
    env = make_vec(ENV_ID, N, split="train", seed=seed)
    rng = np.random.default_rng(seed)
    H, A = env.max_episode_steps, env.n_actions
    teacher = RoomExplorer(N, env.size)
    bufs = {n: np.zeros((episodes, N, H), dtype=d)
            for n, d in (("obs", np.int16), ("action", np.int8), ("label", np.int8), ("reward", np.float32))}
    s = env.set_tasks(goals)
    for e in range(episodes):
        for t in range(H):
            label = teacher.act(s)
            a = np.where(rng.random(N) < eps, rng.integers(0, A, N), label)
            s2, r, done, info = env.step(a)
            teacher.observe(info["final_obs"], r, done, a)
            for n, x in (("obs", s), ("action", a), ("label", label), ("reward", r)):
                bufs[n][e, :, t] = x
            s = s2
    flat = lambda x: x.transpose(1, 0, 2).reshape(N * episodes, H)  # noqa: E731
    return {**{n: flat(x) for n, x in bufs.items()},
            "task": np.repeat(goals, episodes).astype(np.int64),
            "learner": np.repeat(np.arange(N), episodes).astype(np.int64),
            "history": np.tile(np.arange(episodes), N).astype(np.int64),
            "epsilon": np.repeat(eps, episodes).astype(np.float32)}


def parse_epsilon(text: str) -> list[float]:
    """``--epsilon``: one probability or a comma list; exits with a clear message otherwise."""
    try:
        vals = [float(v) for v in text.split(",")]
    except ValueError:
        fail(f"--epsilon: a probability or a comma list of them, e.g. 0,0.1,0.3; got {text!r}")
    if not all(0 <= v <= 1 for v in vals):
        fail(f"--epsilon: every value must be in [0, 1], got {text!r}")
    return vals


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default="runs/radt/darkroom_histories.npz")
    p.add_argument("--learner", choices=("q", "room"), default="q",
                   help="q: tabular Q-learners (default); room: the RoomExplorer in-context teacher")
    p.add_argument("--epsilon", default=None,
                   help="--learner room only: per-step probability of a random executed action, one value or a "
                        "comma list cycled over each goal's learners (default 0)")
    p.add_argument("--episodes", type=int, default=250, help="episodes per learner (its whole history)")
    p.add_argument("--learners", type=int, default=2, help="independent learners per training goal")
    p.add_argument("--explore-episodes", type=int, default=150, help="episodes over which epsilon decays")
    p.add_argument("--eps-start", type=float, default=1.0)
    p.add_argument("--eps-end", type=float, default=0.05)
    p.add_argument("--q-init", type=float, default=0.0,
                   help="initial Q-values; > 0 is optimism: untried moves look good, so the learner sweeps the room")
    p.add_argument("--lr", type=float, default=0.2)
    p.add_argument("--gamma", type=float, default=0.95)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    for name in ("episodes", "learners"):
        if getattr(args, name) <= 0:
            fail(f"--{name.replace('_', '-')} must be positive, got {getattr(args, name)}")
    if not 0 <= args.eps_end <= args.eps_start <= 1 or not 0 < args.lr <= 1 or not 0 <= args.gamma < 1:
        fail(f"need 0 <= --eps-end <= --eps-start <= 1, 0 < --lr <= 1, 0 <= --gamma < 1; got {args.eps_end}, "
             f"{args.eps_start}, {args.lr}, {args.gamma}")
    if args.learner == "q" and args.epsilon is not None:
        fail("--epsilon applies to --learner room; Q-learners explore by --eps-start / --eps-end")
    t0 = time.perf_counter()
    if args.learner == "room":
        data = collect_teacher(args.episodes, args.learners, parse_epsilon(args.epsilon or "0"), args.seed)
    else:
        data = collect(args.episodes, args.learners, args.explore_episodes, args.eps_end, args.lr, args.gamma,
                       args.seed, args.eps_start, args.q_init)
    env = make_vec(ENV_ID, 1)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(out, **data, env_id=np.array(ENV_ID), n_obs=env.n_obs, n_actions=env.n_actions)
    ret = data["reward"].sum(1)
    hist = data["history"]
    E = args.episodes
    print(f"{len(ret)} episodes, {data['reward'].size:,} transitions in {time.perf_counter() - t0:.1f} s "
          f"-> {out} ({out.stat().st_size / 2**20:.1f} MiB)")
    if "label" in data:
        for v in np.unique(data["epsilon"]):
            sel = data["epsilon"] == v
            print(f"  epsilon {v:.2f}: mean return {ret[sel].mean():6.2f} "
                  f"(episode 1: {ret[sel & (hist == 0)].mean():6.2f}), executed != label on {np.mean(data['action'][sel] != data['label'][sel]):5.1%} of steps")
    for lo in range(0, E, max(1, E // 5)):
        sel = (hist >= lo) & (hist < lo + max(1, E // 5))
        print(f"  history episodes {lo:4d}-{min(E, lo + E // 5) - 1:4d}: mean return {ret[sel].mean():6.2f}, "
              f"zero-return {np.mean(ret[sel] == 0):5.1%}")
    return 0


if __name__ == "__main__":
    from icrl_ros.training._cli import run_main

    raise SystemExit(run_main(main))
