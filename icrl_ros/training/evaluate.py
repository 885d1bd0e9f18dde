"""In-context learning curves on held-out tasks.

    python training/evaluate.py runs/darkroom/checkpoints/final.pt
    python training/evaluate.py ckpt_a.pt ckpt_b.pt --label relic --label no-iea --out eval/darkroom
    python training/evaluate.py runs/radt/checkpoints/final.pt --label ra-dt   # RA-DT: retrieval memory
    python training/evaluate.py --merge eval/a/eval.json eval/b/eval.json --out eval/all   # one table + plot
    python training/evaluate.py r0.pt r1.pt m0.pt m1.pt --label relic/s0 --label relic/s1 \\
        --label memo/s0 --label memo/s1      # name/seed labels: also a per-name summary over seeds

For each checkpoint: trials on held-out tasks (``--split test``), each ``--steps`` long
(default: the env's evaluation trial, 40 episodes for Darkroom, 500 steps for
Dark-Key-To-Door); return and oracle-normalised return per in-context episode index
with mean and 95% CI, and the trial return. Prints a table and writes ``eval.json``
and ``icl_curve.png`` to ``--out``.

A grid-world deploy bundle (a directory from ``training/export.py``) runs through
:class:`~icrl_ros.runtime.runner.PolicyRunner` (``--backend``, ONNX Runtime by default) with the
memory and the action choice of its manifest, batched over the same tasks and seeds as its
checkpoint: the curve of what a node deploys::

    python training/evaluate.py runs/darkroom/checkpoints/final.pt runs/darkroom_bundle --label torch --label bundle

House policies (a checkpoint trained on ``icrl_ros/MiniWorldHouse-v0``, or a bundle
directory, evaluated through the deployed runtime): ``--episodes`` episodes per trial in
held-out houses; success, SPL and steps per in-context episode with 95% CIs and n, and the
rise from episode 1 to episodes 10-20 (``icrl_ros/training/house_eval.py``); writes ``curves.json`` and
``icl_curve.png``::

    python training/evaluate.py checkpoints/house_memo.pt bundles/house_memo --label torch --label bundle \\
        --trials 100 --episodes 20 --seed 7 --out eval/house

Defaults: a checkpoint samples at temperature 1 with a window of its training context (ReLIC);
a bundle acts and remembers as its manifest says (``action.selection``, ``action.temperature``,
``memory.policy``: what it was evaluated with and runs with on the robot). ``--greedy`` /
``--sample``, ``--temperature`` and ``--memory`` override both.
"""

from __future__ import annotations


import argparse
import json
import re
import sys
import time
from pathlib import Path

import numpy as np
import torch

from icrl_ros.families import family_of
from icrl_ros.models import ICLPolicy, load_checkpoint, make_memory
from icrl_ros.models.checkpoint import read_checkpoint
from icrl_ros.runtime.control import ControlStep
from icrl_ros.sim import VecTrialEnv, make_vec
from icrl_ros.runtime.runner_base import choose_actions
from icrl_ros.training._cli import fail
from icrl_ros.training.ppo import episode_returns_matrix, next_step_inputs, trial_start_inputs
from icrl_ros.training.radt_eval import engine_graph, run_radt_trials


@torch.no_grad()
def run_trials(policy: ICLPolicy, env: VecTrialEnv, steps: int, window: int | None = None,
               greedy: bool = False, seed: int = 0, max_sets: int | None = None,
               max_chunks: int | None = None, temperature: float = 1.0, runner=None,
               record: list | None = None, progress=None) -> dict[str, np.ndarray]:
    """Run ``env.num_envs`` trials of ``steps`` steps from the env's current tasks.

    Returns per-env episode returns ``returns`` (N, E) with NaN for episodes that did not
    finish, and ``trial_return`` (N,). ``window``: ReLIC keeps only the newest steps (sink +
    sliding window memory); None keeps the whole trial. ``max_sets``: Memo keeps only the
    newest summary sets (streaming Memo); None keeps every set. ``max_chunks``: HCAM keeps only
    the newest chunks (a ring); None keeps every chunk of the trial. ``temperature``: sampled
    actions are drawn from softmax(logits / temperature). ``runner``: a deploy bundle's
    :class:`~icrl_ros.runtime.runner.PolicyRunner` (batched over the trials, with the memory it
    was built with) steps instead of ``policy``, which is then the bundle (for its ``args``).
    ``record``: a list that gets every step's policy inputs (dicts of (B,) tensors), in order.
    ``progress(message)``: called at every tenth of the steps with how far the trials are.
    """
    g = torch.Generator().manual_seed(seed)
    a, B = policy.args, env.num_envs
    if runner is None:
        mem = make_memory(policy, B, steps, window=window, max_sets=max_sets, max_chunks=max_chunks)
        step = ControlStep.live(policy, mem)
    else:
        mem, names = runner.memory, list(runner.spec)

        def step(inp):
            return runner.step({n: inp[n] for n in names}, inp["episode_index"])
    obs = env.observe()
    cur = trial_start_inputs(env, obs, a.n_actions, "cpu")
    episodes: list[list[float]] = [[] for _ in range(B)]
    ep_ret = np.zeros(B)
    trial_ret = np.zeros(B)
    t0, tenth = time.perf_counter(), max(steps // 10, 1)
    for t in range(steps):
        if progress is not None and t and t % tenth == 0:
            el = time.perf_counter() - t0
            progress(f"step {t:,}/{steps:,} of {B} trials ({t * B / el:.0f} steps/s), "
                     f"{sum(len(e) for e in episodes) / B:.1f} episodes per trial so far")
        if record is not None:
            record.append(cur)
        logits, _ = step(cur)
        action = choose_actions(logits, greedy, temperature, g)
        obs, reward, done, info = env.step(action.numpy())
        ep_ret += reward
        trial_ret += reward
        for i in np.flatnonzero(done):
            episodes[i].append(ep_ret[i])
        ep_ret[done] = 0
        cur = next_step_inputs(env, obs, action, reward, done, cur, "cpu", info)
    returns = episode_returns_matrix(episodes)
    return {"returns": returns, "trial_return": trial_ret, "memory_bytes": int(mem.nbytes),
            "memory_tokens": int(mem.valid[0].sum())}


def mean_ci(x: np.ndarray) -> tuple[float, float, int]:
    x = x[~np.isnan(x)]
    if len(x) == 0:
        return float("nan"), float("nan"), 0
    ci = 1.96 * x.std(ddof=1) / np.sqrt(len(x)) if len(x) > 1 else float("nan")
    return float(x.mean()), float(ci), int(len(x))


def episode_rows(R: np.ndarray, oracle_ep: float | None = None) -> list[dict]:
    """Per in-context episode of a (trials, episodes) return matrix (NaN = not reached): mean,
    95% CI and ``n``, the trials that finished that episode. Trials of a fixed number of steps
    finish different numbers of episodes, so late rows average only the faster trials."""
    rows = []
    for e in range(R.shape[1]):
        m, ci, n = mean_ci(R[:, e])
        row = {"episode": e + 1, "mean": m, "ci95": ci, "n": n}
        if oracle_ep is not None:
            row["normalised"] = mean_ci(R[:, e] / oracle_ep)[0]
        rows.append(row)
    return rows


def episodes_all_trials(rows: list[dict], trials: int) -> int:
    """How many leading episodes every trial finished: the curve up to here is an all-trial
    average; beyond it, a survivors-only one."""
    k = 0
    while k < len(rows) and rows[k]["n"] == trials:
        k += 1
    return k


def held_out_tasks(env: VecTrialEnv, trials: int, seed: int) -> None:
    """Darkroom: every held-out goal equally often; other envs: draw held-out tasks."""
    if hasattr(env, "goal_pool") and env.split == "test":
        goals = np.resize(env.goal_pool, trials)
        env.set_tasks(goals)
    else:
        env.rng = np.random.default_rng(seed)
        env.reset_trial()


def evaluate_bundle(path: str, split: str, trials: int, steps: int | None, seed: int, memory: str | None,
                    greedy: bool, temperature: float, backend: str = "onnxruntime") -> dict:
    """A grid-world deploy bundle through :class:`~icrl_ros.runtime.runner.PolicyRunner` (ONNX
    Runtime by default) and the memory its manifest names (or ``memory``), batched over the
    trials: the policy a node would run, on the tasks and seeds :func:`evaluate` uses."""
    from icrl_ros.runtime.bundle import load_bundle
    from icrl_ros.runtime.engine import make_engine
    from icrl_ros.runtime.runner import PolicyRunner, build_memory

    bundle = load_bundle(path)
    env_id = (bundle.manifest.created or {}).get("env_id")
    env = make_vec(env_id, trials, split=split, seed=seed)
    steps = steps or env.trial_steps
    held_out_tasks(env, trials, seed)
    engine = make_engine(bundle, backend, "cpu")
    if not family_of(bundle).cached_step:  # RA-DT: the bundle's graph on the engine, one retrieval index per trial
        r = bundle.manifest.retrieval
        out = run_radt_trials(bundle.load_policy(), env, steps, greedy=greedy, seed=seed, temperature=temperature,
                              target_return=r.target_return, target_return_std=0.0, retrieve_l=r.l,
                              utility_weight=r.utility_weight, graph=engine_graph(bundle, engine, trials))
        policy_name = "retrieval"
    else:
        mem = build_memory(bundle, memory, batch=trials)
        out = run_trials(bundle, env, steps, greedy=greedy, seed=seed, temperature=temperature,
                         runner=PolicyRunner(bundle, engine, mem))
        policy_name = mem.policy
    return summarise(out, env, steps, {
        "checkpoint": str(path), "bundle": True, "backend": backend, "env": env_id, "split": split, "trials": trials,
        "steps": steps, "memory": policy_name, "window": None, "max_sets": None, "max_chunks": None, "greedy": greedy,
        "temperature": None if greedy else temperature, "model": bundle.args.to_dict(),
        "env_steps_trained": (bundle.manifest.created or {}).get("env_steps")})


def summarise(out: dict, env: VecTrialEnv, steps: int, head: dict) -> dict:
    """One run's result: ``head`` (what ran) + the per-episode rows, trial return and memory."""
    oracle_trial = env.oracle_trial_return(steps)
    oracle_ep = env.oracle_episode_return() if hasattr(env, "oracle_episode_return") else None
    rows = episode_rows(out["returns"], oracle_ep)
    tm, tci, _ = mean_ci(out["trial_return"])
    nm, nci, _ = mean_ci(out["trial_return"] / oracle_trial)
    return {**head, "episodes": rows, "episodes_all_trials": episodes_all_trials(rows, head["trials"]),
            "memory_bytes": out["memory_bytes"], "memory_tokens_at_end": out["memory_tokens"],
            "trial_return": {"mean": tm, "ci95": tci, "oracle_normalised": nm, "oracle_normalised_ci95": nci}}


def evaluate(ckpt: str, split: str, trials: int, steps: int | None, window: int | None, greedy: bool,
             seed: int, memory: str, max_sets: int | None = None, max_chunks: int | None = None,
             temperature: float = 1.0) -> dict:
    policy, blob = load_checkpoint(ckpt)
    env_id = blob["config"]["env"]["id"]
    env = make_vec(env_id, trials, split=split, seed=seed)
    steps = steps or env.trial_steps
    print(f"{ckpt}: {trials} held-out trials of {steps} steps on {env_id}, stepped together ...", file=sys.stderr,
          flush=True)
    held_out_tasks(env, trials, seed)
    if not family_of(policy).cached_step:  # RA-DT: its memory is a retrieval index, empty at the trial start
        cfg = blob["config"]
        memory, window = "retrieval", None
        out = run_radt_trials(policy, env, steps, greedy=greedy, seed=seed, temperature=temperature,
                              target_return=cfg["target_return"],
                              target_return_std=cfg["target_return_std"], retrieve_l=cfg["retrieve_l"],
                              utility_weight=cfg["utility_weight"])
    else:
        if memory == "window":
            window = window or blob["config"]["ppo"]["rollout_length"]
        elif memory == "full":
            window = None
        out = run_trials(policy, env, steps, window=window, greedy=greedy, seed=seed, max_sets=max_sets,
                         max_chunks=max_chunks, temperature=temperature,
                         progress=lambda m: print(f"  {m}", file=sys.stderr, flush=True))
    return summarise(out, env, steps, {
        "checkpoint": str(ckpt), "env": env_id, "split": split, "trials": trials, "steps": steps,
        "memory": memory, "window": window, "max_sets": max_sets, "max_chunks": max_chunks, "greedy": greedy,
        "temperature": None if greedy else temperature, "model": blob["model_args"],
        "env_steps_trained": blob.get("env_steps")})


def default_label(path: str) -> str:
    """A checkpoint's or bundle's name in tables and plots: the run folder of ``RUN/checkpoints/X.pt``, a
    bundle folder's own name (its parent's when it is just ``bundle``), else the file's stem."""
    p = Path(path)
    if p.is_dir() or not p.suffix:
        return p.parent.name if p.name == "bundle" and p.parent.name else p.name
    return p.parent.parent.name if p.parent.name == "checkpoints" and p.parent.parent.name else p.stem


def print_table(results: list[dict], labels: list[str], max_rows: int = 40) -> None:
    print(f"{'episode':>7} " + " ".join(f"{lab:>23}" for lab in labels))
    n = max(len(r["episodes"]) for r in results)
    for e in range(min(n, max_rows)):
        cells = []
        for r in results:
            if e < len(r["episodes"]) and r["episodes"][e]["n"]:
                row = r["episodes"][e]
                mark = "*" if row["n"] < r["trials"] else " "
                cells.append(f"{row['mean']:8.2f} ± {row['ci95']:5.2f} (n={row['n']:3d}){mark}")
            else:
                cells.append(f"{'-':>22}")
        print(f"{e + 1:>7} " + " ".join(f"{c:>23}" for c in cells))
    if any(row["n"] < r["trials"] for r in results for row in r["episodes"]):
        print("* fewer than all trials reached this episode: the mean is over the faster trials only")
    for lab, r in zip(labels, results):
        t = r["trial_return"]
        print(f"{lab}: trial return {t['mean']:.2f} ± {t['ci95']:.2f}, oracle-normalised "
              f"{t['oracle_normalised']:.3f} ± {t['oracle_normalised_ci95']:.3f}; memory "
              f"{r['memory_bytes'] / 2**10:.1f} KiB for {r['trials']} trials, {r['memory_tokens_at_end']} tokens "
              f"per trial at the end")


# Two-sided 95% quantiles of Student's t for 1..30 degrees of freedom (then ~normal).
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145,
         2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048,
         2.045, 2.042)


def t975(df: float) -> float:
    return _T975[min(max(int(df), 1), len(_T975)) - 1] if df < 31 else 1.96


def seed_groups(results: list[dict], labels: list[str]) -> dict:
    """Labels ``name/seed`` (e.g. ``relic/s0``) -> per group: each seed's oracle-normalised
    trial return, their mean, sample std and 95% CI (t over seeds); and for each group
    after the first, the difference to the first with its Welch 95% CI. Only a suffix that
    names a seed (``s0``, ``seed0``, ``0``) groups: ``memo/checkpoint`` and ``memo/bundle``
    are two evaluations of one model, not two seeds. Empty when no label names a seed."""
    groups: dict[str, list[float]] = {}
    for lab, r in zip(labels, results):
        name, _, suffix = lab.partition("/")
        if re.fullmatch(r"(s|seed)?\d+", suffix):
            groups.setdefault(name, []).append(r["trial_return"]["oracle_normalised"])
    out = {}
    for name, v in groups.items():
        x = np.array(v)
        sd = float(x.std(ddof=1)) if len(x) > 1 else float("nan")
        out[name] = {"seeds": v, "mean": float(x.mean()), "std": sd,
                     "ci95": t975(len(x) - 1) * sd / np.sqrt(len(x)) if len(x) > 1 else float("nan")}
    names = list(out)
    for name in names[1:]:
        a, b = np.array(out[names[0]]["seeds"]), np.array(out[name]["seeds"])
        if len(a) < 2 or len(b) < 2:
            continue
        va, vb = a.var(ddof=1) / len(a), b.var(ddof=1) / len(b)
        se = float(np.sqrt(va + vb))
        df = (va + vb) ** 2 / max(va ** 2 / (len(a) - 1) + vb ** 2 / (len(b) - 1), 1e-300)
        out[name]["vs"] = {"baseline": names[0], "diff": float(b.mean() - a.mean()), "ci95": t975(df) * se,
                           "welch_df": float(df)}
    return out


def print_seed_groups(groups: dict) -> None:
    for name, g in groups.items():
        seeds = ", ".join(f"{x:.3f}" for x in g["seeds"])
        line = (f"{name}: oracle-normalised trial return over {len(g['seeds'])} seeds {g['mean']:.3f} "
                f"± {g['ci95']:.3f} (95% CI; std {g['std']:.3f}; seeds {seeds})")
        if "vs" in g:
            v = g["vs"]
            line += f"; minus {v['baseline']}: {v['diff']:+.3f} ± {v['ci95']:.3f} (Welch 95% CI)"
        print(line)


def plot(results: list[dict], labels: list[str], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    survivors = False
    markers = "osx^dv"  # open markers, offset per curve: identical curves (a bundle and its checkpoint) stay visible
    for j, (lab, r) in enumerate(zip(labels, results)):
        rows = [row for row in r["episodes"] if row["n"] >= max(2, r["trials"] // 2)]
        k = episodes_all_trials(r["episodes"], r["trials"])
        x = np.array([row["episode"] for row in rows])
        m = np.array([row["mean"] for row in rows])
        ci = np.array([row["ci95"] for row in rows])
        # solid and shaded: every trial reached the episode; dotted: only the trials that got that
        # far (more than half of them), so a rise there may be the fast trials taking over
        line, = ax.plot(x[:k], m[:k], marker=markers[j % len(markers)], ms=4, mfc="none",
                        markevery=(j % 4, 4), label=f"{lab} (n={r['trials']})")
        ax.fill_between(x[:k], m[:k] - ci[:k], m[:k] + ci[:k], alpha=0.25, color=line.get_color())
        if len(x) > k:
            survivors = True
            lo = max(k - 1, 0)
            ax.plot(x[lo:], m[lo:], ls=":", color=line.get_color())
    ax.set_xlabel("in-context episode")
    ax.set_ylabel("episode return")
    note = "\ndotted: mean over only the trials that reached the episode (at least half)" if survivors else ""
    ax.set_title(f"{results[0]['env']} ({results[0]['split']} tasks, mean ± 95% CI over all trials){note}",
                 fontsize=9)
    ax.grid(alpha=0.3)
    if len(labels) > 3:  # beside the axes: the curves fill the plot
        fig.set_size_inches(7.5, 4)
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=9)
    else:
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("checkpoints", nargs="+", help="checkpoints to evaluate, or eval.json files with --merge")
    p.add_argument("--merge", action="store_true",
                   help="the arguments are eval.json files written earlier: one table, plot and eval.json of all "
                        "their results (labels as stored), nothing re-run")
    p.add_argument("--label", action="append", default=[], help="one per checkpoint (default: the run folder or file name)")
    p.add_argument("--split", default="test", choices=["train", "test", "all"],
                   help="which tasks / houses (default %(default)s: held out)")
    p.add_argument("--trials", type=int, default=100, help="trials (houses or tasks) to run (default %(default)s)")
    p.add_argument("--steps", type=int, help="steps per trial (default: the env's evaluation trial)")
    p.add_argument("--wipe-memory", action="store_true",
                   help="house: the no-memory ablation. ReLIC: each episode attends only to itself (the same "
                        "weights with inter-episode attention off); Memo / HCAM: memory cleared at every episode "
                        "start (needs --batch 1; run the memory-kept policy with --batch 1 too: the houses "
                        "depend on the batch layout)")
    p.add_argument("--forget-contradicted", type=int, default=0, metavar="STEPS",
                   help="house models with the route memory: forget the goal's sightings after STEPS steps in a row "
                        "with its remembered place in front of the camera and the goal not recognised "
                        "(model.house.forget_contradicted; default 0: the model's own setting)")
    p.add_argument("--route-over-looked", action="store_true",
                   help="house models with the route and frontier memories: the route input's way to a remembered "
                        "goal runs over the floor the camera looked at (model.house.route_over_looked)")
    p.add_argument("--memory", choices=["window", "full"],
                   help="ReLIC memory: window = sink + sliding window of the training context (checkpoints' "
                        "default); full = whole trial. Memo always keeps its summaries (see --max-sets), HCAM its "
                        "chunks (see --max-chunks). Bundles: default the manifest's memory.policy")
    p.add_argument("--window", type=int, help="window size in steps (default: the training rollout length)")
    p.add_argument("--max-sets", type=int, help="Memo: keep only the newest N summary sets (streaming Memo)")
    p.add_argument("--max-chunks", type=int, help="HCAM: keep only the newest N chunks (default: every chunk of "
                   "the trial)")
    pick = p.add_mutually_exclusive_group()
    pick.add_argument("--greedy", dest="selection", action="store_const", const="greedy",
                      help="argmax actions instead of sampling (default: sample; a bundle: its manifest's)")
    pick.add_argument("--sample", dest="selection", action="store_const", const="sample",
                      help="sample actions (the default for checkpoints; overrides a greedy bundle)")
    p.add_argument("--temperature", type=float,
                   help="sampled actions: softmax(logits / T) (default 1: the policy's own distribution; a bundle: "
                        "its manifest's action.temperature)")
    p.add_argument("--seed", type=int, default=0, help="seed of the tasks, starts and action draws (default %(default)s)")
    p.add_argument("--episodes", type=int, default=20, help="house: episodes per trial (default %(default)s)")
    p.add_argument("--backend", default="onnxruntime", choices=["onnxruntime", "torch"],
                   help="bundles: the runtime engine (default %(default)s)")
    p.add_argument("--batch", type=int, default=25, help="house: trials stepped together (default %(default)s)")
    p.add_argument("--loc-noise", metavar="M,DEG[,TAU_S]",
                   help="house: the policy's pose comes from a localiser with this bounded, slowly varying map-frame "
                        "error (RMS metres, RMS degrees, correlation time in seconds, default 30; clipped at 2x the "
                        "RMS), e.g. 0.15,3 (icrl_ros/sim/pose_noise.py)")
    p.add_argument("--odom-drift", metavar="SCALE,HEADING,BIAS",
                   help="house: odometry drifts (scale error fraction, heading random walk in radians per sqrt(radian "
                        "turned + metre driven), heading bias in degrees per minute), e.g. 0.01,0.01,1; alone, the policy's pose "
                        "is this odometry since boot; with --loc-noise, the odometry between localiser fixes")
    p.add_argument("--loc-every", type=int, default=1, metavar="N",
                   help="house, with --loc-noise: a localiser fix every N steps, odometry composed in between "
                        "(default %(default)s)")
    p.add_argument("--step-s", type=float, default=1.0, metavar="S",
                   help="house, with --loc-noise / --odom-drift: simulated seconds per step (default %(default)s)")
    p.add_argument("--out", default="eval", help="output directory for eval.json / curves.json and icl_curve.png "
                   "(default %(default)s)")
    args = p.parse_args(argv)
    if args.merge:
        labels, results = [], []
        for path in args.checkpoints:
            try:
                stored = json.loads(Path(path).read_text())
            except (OSError, ValueError) as e:
                fail(f"--merge {path}: not a readable eval.json ({e})")
            if not isinstance(stored, dict) or not all(isinstance(r, dict) and "episodes" in r for r in stored.values()):
                fail(f"--merge {path}: not an eval.json written by training/evaluate.py (label -> result with 'episodes')")
            labels += list(stored)
            results += list(stored.values())
        if len(set(labels)) != len(labels):
            fail(f"--merge: labels repeat across files {labels}; re-run evaluate.py with distinct --label values")
        return write_results(results, labels, Path(args.out))
    labels = args.label or [default_label(c) for c in args.checkpoints]
    if len(labels) != len(args.checkpoints):
        fail(f"--label given {len(labels)} times for {len(args.checkpoints)} checkpoints; give one per checkpoint")
    if args.trials <= 0:
        fail(f"--trials must be positive, got {args.trials}")
    if args.temperature is not None and not args.temperature > 0:
        fail(f"--temperature must be positive, got {args.temperature}")
    house = [is_house(c) for c in args.checkpoints]
    if args.wipe_memory and not all(house):
        fail("--wipe-memory is the house no-memory ablation; grid-world checkpoints have no_iea configs instead")
    if args.forget_contradicted and (args.forget_contradicted < 0 or not all(house)):
        fail("--forget-contradicted: a number of steps >= 1, for house policies with the route memory")
    if args.route_over_looked and not all(house):
        fail("--route-over-looked: for house policies with the route and frontier memories")
    pose_errors = parse_pose_errors(args)
    if pose_errors is not None and not all(house):
        fail("--loc-noise / --odom-drift are for house policies (their odometry input)")
    if any(house):
        if not all(house):
            fail("house policies and grid-world checkpoints cannot share one evaluation; run them separately")
        return evaluate_house(args, labels, pose_errors)
    results = []
    for c in args.checkpoints:
        try:
            if Path(c).is_dir():  # a grid-world bundle: as it acts and remembers on the robot
                from icrl_ros.runtime.manifest import Manifest

                if args.window is not None or args.max_sets is not None or args.max_chunks is not None:
                    fail(f"{c}: a bundle's memory sizes are its manifest's; re-export it with training/export.py "
                         "to change them (--window / --max-sets / --max-chunks are for checkpoints)")
                greedy, temperature = acting(args, Manifest.load(c))
                results.append(evaluate_bundle(c, args.split, args.trials, args.steps, args.seed, args.memory,
                                               greedy, temperature, args.backend))
                continue
            greedy, temperature = acting(args)
            results.append(evaluate(c, args.split, args.trials, args.steps, args.window, greedy,
                                    args.seed, args.memory or "window", args.max_sets, args.max_chunks, temperature))
        except (FileNotFoundError, ValueError, KeyError) as e:
            fail(f"{c}: {e}")
    return write_results(results, labels, Path(args.out))


def acting(args, bundle=None) -> tuple[bool, float]:
    """(greedy, temperature): the command line's, else the bundle's manifest (what it was
    evaluated with), else sampling at temperature 1 (the training-side default)."""
    manifest = getattr(bundle, "manifest", bundle)  # a Bundle or its Manifest
    default = manifest.action if manifest is not None else None
    selection = args.selection or (default.selection if default is not None else "sample")
    temperature = args.temperature if args.temperature is not None else (default.temperature if default is not None else 1.0)
    return selection == "greedy", float(temperature)


HOUSE_ENV = "icrl_ros/MiniWorldHouse-v0"


def is_house(path: str) -> bool:
    """A bundle directory, or a checkpoint trained on the MiniWorld house."""
    p = Path(path)
    if p.is_dir():
        from icrl_ros.runtime.manifest import Manifest, ManifestError

        try:
            env_id = (Manifest.load(p).created or {}).get("env_id")
        except ManifestError as e:
            fail(f"{path}: not a bundle ({e})")
        if env_id is None:
            fail(f"{path}: the bundle records no env (manifest created.env_id); re-export it with training/export.py")
        return env_id == HOUSE_ENV
    if not p.is_file():
        fail(f"{path}: no such checkpoint file or bundle directory")
    try:
        blob = read_checkpoint(p)
    except (FileNotFoundError, ValueError) as e:
        fail(str(e))
    return ((blob.get("config") or {}).get("env") or {}).get("id") == HOUSE_ENV


def parse_pose_errors(args):
    """The command line's :class:`~icrl_ros.sim.pose_noise.PoseErrors`, or None (none asked for); a mistake
    ends the run with one line."""
    from icrl_ros.sim.pose_noise import LocalisationNoise, OdometryDrift, PoseErrors

    if args.loc_noise is None and args.odom_drift is None:
        if args.loc_every != 1 or args.step_s != 1.0:
            fail("--loc-every / --step-s apply only with --loc-noise or --odom-drift")
        return None
    try:
        loc = LocalisationNoise.parse(args.loc_noise) if args.loc_noise is not None else None
        drift = OdometryDrift.parse(args.odom_drift) if args.odom_drift is not None else None
        if args.loc_every != 1 and loc is None:
            raise ValueError("--loc-every needs --loc-noise (a localiser to take fixes from)")
        return PoseErrors(loc=loc, drift=drift, fix_every=args.loc_every, dt_s=args.step_s)
    except ValueError as e:
        fail(str(e))


def evaluate_house(args, labels: list[str], pose_errors=None) -> int:
    from icrl_ros.training import house_curves
    from icrl_ros.training.house_eval import check_wipe_batch, run_house_trials, stepper_for

    if args.episodes <= 0:
        fail(f"--episodes must be positive, got {args.episodes}")
    curves, raw, runs = {}, {}, {}
    if args.window is not None and any(Path(c).is_dir() for c in args.checkpoints):
        fail("--window: a bundle's memory sizes are its manifest's (memory.window.window); re-export it with "
             "training/export.py --memory window --window N")
    if args.memory is not None and not all(Path(c).is_dir() for c in args.checkpoints):
        fail("--memory: a house checkpoint keeps its whole trial (the training code has no window); export it "
             "(training/export.py --memory window --window N) and evaluate the bundle to try another memory")
    acts = {}
    for path, lab in zip(args.checkpoints, labels):
        try:
            memory = args.memory if Path(path).is_dir() else None
            house_opts = {**({"forget_contradicted": args.forget_contradicted} if args.forget_contradicted else {}),
                          **({"route_over_looked": True} if args.route_over_looked else {})}
            stepper, options, desc = stepper_for(path, args.backend, memory, wipe=args.wipe_memory,
                                                 house=house_opts or None)
            if memory is not None:  # refused here, not in the middle of the trials, when it does not apply
                from icrl_ros.runtime.runner import build_memory

                build_memory(stepper.bundle, memory)
            check_wipe_batch(stepper, args.batch)  # refused here too, before any trial runs
            if pose_errors is not None and options.get("pose_frame", "house") != "house":
                raise ValueError(f"--loc-noise / --odom-drift apply to house-frame odometry; this policy reads "
                                 f"{options['pose_frame']!r}")
        except (FileNotFoundError, ValueError, KeyError) as e:
            fail(f"{path}: {e}")
        greedy, temperature = acting(args, getattr(stepper, "bundle", None))
        acts[lab] = {"greedy": greedy, "temperature": None if greedy else temperature}
        print(f"{lab}: {args.trials} trials x {args.episodes} episodes in held-out houses, {args.batch} at a time ...",
              file=sys.stderr, flush=True)
        res = run_house_trials(stepper, args.trials, args.episodes, seed=args.seed, split=args.split,
                               greedy=greedy, temperature=temperature, batch=args.batch,
                               env_options=options, progress=lambda m, lab=lab: print(f"  {lab}: {m}",
                                                                                       file=sys.stderr, flush=True),
                               pose_errors=pose_errors)
        raw[lab] = {k: res[k] for k in ("success", "spl", "steps", "house_seed", "goal")}
        curves[lab] = house_curves.summarise(raw[lab])
        runs[lab] = {**desc, **acts[lab], "env_options": options,
                     **{k: res[k] for k in ("agent_steps", "wall_s", "steps_per_s")},
                     **({"pose_errors": pose_errors.describe()} if pose_errors is not None else {}),
                     **{k: v for k, v in res.items() if k.startswith("pose_error_m")},
                     **{k: v for k, v in res.items() if k.startswith("memory")}}
        print(f"{lab}: {args.trials} trials x {args.episodes} episodes, {res['agent_steps']} steps in "
              f"{res['wall_s']:.0f} s ({res['steps_per_s']:.0f} steps/s)", flush=True)
    house_curves.print_table(curves)
    same = len({tuple(a.values()) for a in acts.values()}) == 1  # one action choice for every run: also at the top
    settings = {"trials": args.trials, "episodes": args.episodes, "split": args.split, "seed": args.seed,
                "batch": args.batch, **(next(iter(acts.values())) if same else {"greedy": None, "temperature": "per run"}),
                "runs": runs}
    house_curves.write(curves, raw, settings, Path(args.out), f"House policies, {args.split} houses, seed {args.seed}")
    print(f"wrote {Path(args.out) / 'curves.json'} and {Path(args.out) / 'icl_curve.png'}")
    return 0


def write_results(results: list[dict], labels: list[str], out: Path) -> int:
    """Print the table and write ``eval.json`` and ``icl_curve.png`` to ``out``."""
    print_table(results, labels)
    groups = seed_groups(results, labels)
    print_seed_groups(groups)
    out.mkdir(parents=True, exist_ok=True)
    (out / "eval.json").write_text(json.dumps(dict(zip(labels, results)), indent=1))
    if groups:
        (out / "seeds.json").write_text(json.dumps(groups, indent=1))
    plot(results, labels, out / "icl_curve.png")
    print(f"wrote {out / 'eval.json'} and {out / 'icl_curve.png'}")
    return 0


if __name__ == "__main__":
    from icrl_ros.training._cli import run_main

    raise SystemExit(run_main(main))
