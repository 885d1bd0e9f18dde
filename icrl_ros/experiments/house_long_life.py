"""A long life in one house: trials of many episodes through a deployed bundle.

    python experiments/house_long_life.py bundles/house_relic_scan --trials 20 --episodes 100 --seed 401 \\
        --out docs/results/house_long_life

Every trial is one held-out house for ``--episodes`` episodes, run through the bundle on ONNX Runtime
with the memory its manifest names (:func:`~icrl_ros.training.house_eval.run_house_trials`, as
``training/evaluate.py`` runs it). Reported per block of ``--block`` episodes: success and SPL (mean
and 95% CI over trials), the policy's step time (``PolicyRunner.step`` for the whole batch, divided by
the batch: the env is not timed) and, when the block ended, the memory's bytes per trial (its buffers are
allocated whole, so this is constant) and the steps it holds (trial 0 of the batch). A memory that fills evicts as its manifest says
(``memory.on_full``); the question is whether what it learnt of the house stays: success in the last
block against episodes 10-20, and step time flat. Writes ``long_life.json`` and ``long_life.png``.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from icrl_ros.training import house_curves


class _Timed:
    """A stepper whose ``logits`` calls are timed and whose memory is read at block ends."""

    def __init__(self, stepper, block: int, progress=None) -> None:
        self.inner, self.block, self.progress = stepper, block, progress
        self.args, self.wipe_each_episode = stepper.args, stepper.wipe_each_episode
        self.ms: list[tuple[int, float]] = []  # (block of the batch's median episode, ms per trial-step)
        self.memory: dict[int, dict] = {}
        self.episode = np.zeros(1)

    def reset(self, batch: int, steps: int) -> None:
        self.inner.reset(batch, steps)
        self.episode = np.zeros(batch)

    def logits(self, inp):
        t = time.perf_counter()
        out = self.inner.logits(inp)
        b = int(np.median(self.episode)) // self.block
        self.ms.append((b, 1e3 * (time.perf_counter() - t) / len(self.episode)))
        return out

    def forget(self) -> None:
        self.inner.forget()

    def memory_stats(self) -> dict:
        return self.inner.memory_stats()

    def observer(self, labels, start, action, logits, done, info, done_eps) -> None:
        before = int(self.episode.min())
        self.episode = done_eps + np.asarray(done, np.int64)
        if self.progress is not None and int(self.episode.min()) // self.block > before // self.block:
            self.progress(f"trials {start + 1}-{start + len(self.episode)}: every trial past episode "
                          f"{int(self.episode.min())}")
        b = int(self.episode[0])
        if done[0] and b % self.block == 0 and b not in self.memory:
            stats = self.inner.memory_stats()
            self.memory[b] = {"memory_bytes_per_trial": int(stats["memory_bytes"]) // len(self.episode),
                              "memory_steps": int(stats["memory_tokens"])}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("bundle", help="a house bundle directory (training/export.py)")
    p.add_argument("--trials", type=int, default=20)
    p.add_argument("--episodes", type=int, default=100)
    p.add_argument("--block", type=int, default=10, help="episodes per reported block")
    p.add_argument("--seed", type=int, default=401, help="evaluation seed (houses, starts, goals, action draws)")
    p.add_argument("--batch", type=int, default=20, help="trials run at once")
    p.add_argument("--out", default="runs/house_long_life")
    p.add_argument("--replot", action="store_true", help="redraw --out's long_life.png from its long_life.json")
    args = p.parse_args(argv)
    if args.replot:
        doc = json.loads((Path(args.out) / "long_life.json").read_text())
        st = doc["settings"]
        _plot(doc["blocks"], Path(args.out) / "long_life.png",
              f"{st['bundle']}: {st['trials']} held-out houses x {st['episodes']} episodes")
        return 0
    if not (Path(args.bundle) / "manifest.yaml").is_file():
        p.error(f"{args.bundle}: not a bundle directory (no manifest.yaml); export one with training/export.py")
    if args.episodes < max(20, 2 * args.block) or args.episodes % args.block:
        p.error(f"--episodes must be a multiple of --block ({args.block}) and at least 20 (the last block is compared "
                f"with episodes 10-20), got {args.episodes}")
    from icrl_ros.training.house_eval import run_house_trials, stepper_for

    stepper, opts, desc = stepper_for(args.bundle)
    t0 = time.perf_counter()

    def say(message: str) -> None:
        print(f"[{time.perf_counter() - t0:.0f} s] {message}", flush=True)

    timed = _Timed(stepper, args.block, say)
    res = run_house_trials(timed, args.trials, args.episodes, seed=args.seed, batch=args.batch, env_options=opts,
                           observer=timed.observer, progress=say)
    blocks = []
    ms = np.array(timed.ms)
    for b in range(args.episodes // args.block):
        sl = slice(b * args.block, (b + 1) * args.block)
        row = {"episodes": [b * args.block + 1, (b + 1) * args.block]}
        for k in ("success", "spl"):
            mu, ci, n = house_curves.mean_ci(res[k][:, sl].mean(axis=1))
            row[k], row[k + "_ci"], row["n"] = float(mu), float(ci), int(n)
        sel = ms[ms[:, 0] == b, 1] if len(ms) else np.zeros(0)
        row["step_ms_median"] = float(np.median(sel)) if len(sel) else float("nan")
        row["step_ms_p95"] = float(np.percentile(sel, 95)) if len(sel) else float("nan")
        row.update(timed.memory.get((b + 1) * args.block, {}))
        blocks.append(row)
    ref = house_curves.window_rise(res["success"])
    last = res["success"][:, -args.block:].mean(axis=1) - res["success"][:, 9:20].mean(axis=1)  # needs >= 20 episodes
    mu, ci, n = house_curves.mean_ci(last)
    doc = {"settings": {**vars(args), **desc}, "blocks": blocks, "episode_1_success": ref["first"],
           "episodes_10_20_success": ref["late"], "last_block_minus_10_20": {"mean": float(mu), "ci": float(ci), "n": n},
           "wall_s": res["wall_s"], "agent_steps": res["agent_steps"],
           "raw": {k: res[k].tolist() for k in ("success", "spl", "steps")}, "house_seed": res["house_seed"].tolist()}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "long_life.json").write_text(json.dumps(doc, indent=1))
    print(f"{'episodes':>9} | success (95% CI)     | SPL (95% CI)         | step ms median / p95 | memory MB per trial, steps held")
    for r in blocks:
        mem = f"{r['memory_bytes_per_trial'] / 2**20:6.1f}, {r['memory_steps']}" if "memory_steps" in r else "-"
        print(f"{r['episodes'][0]:>4}-{r['episodes'][1]:<4} | {r['success']:.3f} +- {r['success_ci']:.3f}      | "
              f"{r['spl']:.3f} +- {r['spl_ci']:.3f}      | {r['step_ms_median']:7.2f} / {r['step_ms_p95']:7.2f}     | {mem}")
    print(f"last block minus episodes 10-20: {mu:+.3f} +- {ci:.3f} (n={n}); {res['agent_steps']:,} steps in "
          f"{res['wall_s']:.0f} s")
    _plot(blocks, out / "long_life.png", f"{args.bundle}: {args.trials} held-out houses x {args.episodes} episodes")
    print(f"wrote {out}/long_life.json and long_life.png")
    return 0


def _plot(blocks: list[dict], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    x = [(r["episodes"][0] + r["episodes"][1]) / 2 for r in blocks]
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.8))
    for k, c in (("success", "C0"), ("spl", "C1")):
        y, e = np.array([r[k] for r in blocks]), np.array([r[k + "_ci"] for r in blocks])
        a.plot(x, y, "o-", color=c, label=k)
        a.fill_between(x, y - e, y + e, color=c, alpha=0.2)
    a.set_xlabel("episode in the trial (blocks)")
    a.set_ylabel("per block (95% CI over trials)")
    a.set_ylim(0, 1)
    a.legend()
    a.grid(alpha=0.3)
    b.plot(x, [r["step_ms_median"] for r in blocks], "o-", color="C2", label="policy step, ms per trial (median)")
    b.set_xlabel("episode in the trial (blocks)")
    b.set_ylabel("ms")
    b.set_ylim(0, 1.5 * max(r["step_ms_median"] for r in blocks))
    if all("memory_steps" in r for r in blocks):
        m = b.twinx()
        m.plot(x, [r["memory_steps"] for r in blocks], "s--", color="C3", label="steps held in memory")
        m.set_ylabel("steps in memory at block end")
        m.set_ylim(0, 1.2 * max(r["memory_steps"] for r in blocks))  # headroom: a full memory's line stays clear of the legends
        m.legend(loc="lower right")
    b.legend(loc="upper left")
    b.grid(alpha=0.3)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    from icrl_ros.training._cli import run_main

    raise SystemExit(run_main(main))
