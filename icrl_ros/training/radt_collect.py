"""Offline RA-DT dataset for Darkroom: learning histories of one learner per training goal.

    python training/radt_collect.py --out runs/radt/darkroom_histories.npz

RA-DT (Schmied et al., App. B.1) trains on the stored transitions of per-goal PPO agents,
so the data runs from exploratory (poor) to exploitative (near-optimal) episodes of every
training goal. Here each of the 80 training goals gets ``--learners`` independent tabular
Q-learners (epsilon-greedy, epsilon decaying linearly from 1 to ``--eps-end`` over
``--explore-episodes``), all stepped together as one numpy batch: the same poor-to-good
mixture in seconds of CPU instead of hours of per-goal PPO. Every episode is stored.

Writes a compressed ``.npz``: ``obs`` (E, H) int16 cells, ``action`` (E, H) int8,
``reward`` (E, H) float32, ``task`` (E,) goal cell, ``learner`` (E,), ``history`` (E,)
the episode's index in its learner's history, plus ``env_id`` / ``n_obs`` / ``n_actions``.
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


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default="runs/radt/darkroom_histories.npz")
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
    t0 = time.perf_counter()
    data = collect(args.episodes, args.learners, args.explore_episodes, args.eps_end, args.lr, args.gamma, args.seed,
                   args.eps_start, args.q_init)
    env = make_vec(ENV_ID, 1)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(out, **data, env_id=np.array(ENV_ID), n_obs=env.n_obs, n_actions=env.n_actions)
    ret = data["reward"].sum(1)
    hist = data["history"]
    E = args.episodes
    print(f"{len(ret)} episodes, {data['reward'].size:,} transitions in {time.perf_counter() - t0:.1f} s "
          f"-> {out} ({out.stat().st_size / 2**20:.1f} MiB)")
    for lo in range(0, E, max(1, E // 5)):
        sel = (hist >= lo) & (hist < lo + max(1, E // 5))
        print(f"  history episodes {lo:4d}-{min(E, lo + E // 5) - 1:4d}: mean return {ret[sel].mean():6.2f}, "
              f"zero-return {np.mean(ret[sel] == 0):5.1%}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
