"""Per-episode curves of house object search: success, SPL and steps per in-context episode.

Every trial runs the same fixed number of episodes, so each episode index averages over all
trials (no survivor-only tail); figures carry their n and a 95% confidence interval (normal
approximation, 1.96 standard errors). Used by the teacher benchmark
(``training/house_teacher_curves.py``) and by ``training/evaluate.py`` on house policies.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import numpy as np

METRICS = ("success", "spl", "steps")


def mean_ci(x: np.ndarray, axis: int = 0) -> tuple[np.ndarray, np.ndarray, int]:
    """Mean, 95% CI half-width and n over ``axis``."""
    x = np.asarray(x, dtype=np.float64)
    n = x.shape[axis]
    sd = x.std(axis=axis, ddof=1) if n > 1 else np.zeros(np.delete(x.shape, axis))
    return x.mean(axis=axis), 1.96 * sd / np.sqrt(max(n, 1)), n


def window_rise(m: np.ndarray, first: int = 1, lo: int = 10, hi: int = 20) -> dict[str, float]:
    """Per-trial mean over episodes ``lo``..``hi`` (1-based, inclusive) minus episode ``first``:
    mean, 95% CI and n over trials (the in-context gain of a curve)."""
    m = np.asarray(m, dtype=np.float64)
    hi = min(hi, m.shape[1])
    late = m[:, lo - 1:hi].mean(axis=1)
    rise = late - m[:, first - 1]
    mu, ci, n = mean_ci(rise)
    lmu, lci, _ = mean_ci(late)
    return {"rise": float(mu), "rise_ci": float(ci), "late": float(lmu), "late_ci": float(lci),
            "first": float(m[:, first - 1].mean()), "n": int(n), "window": [lo, hi]}


def summarise(episodes: dict[str, np.ndarray]) -> dict:
    """(trials, E) matrices per metric -> per-episode mean / CI / n and the rises from episode 1 to
    episodes 10-20 (the issue's window; trials of fewer than 20 episodes: their second half, so a
    10-episode trial reports 6-10 rather than episode 10 alone)."""
    out = {}
    for k in METRICS:
        mu, ci, n = mean_ci(episodes[k])
        out[k] = {"mean": mu.tolist(), "ci": ci.tolist(), "n": n}
        E = episodes[k].shape[1]
        if E >= 2:
            out[k]["rise"] = window_rise(episodes[k], 1, 10 if E >= 20 else E // 2 + 1, 20)
    return out


def print_table(curves: dict[str, dict], every: int = 1) -> None:
    """Per-episode success / SPL / steps for each label, side by side."""
    labels = list(curves)
    E = max(len(c["spl"]["mean"]) for c in curves.values())
    head = "episode " + " ".join(f"| {lab[:22]:>22} success   SPL steps" for lab in labels)
    print(head)
    for e in range(0, E, every):
        row = f"{e + 1:7d} "
        for lab in labels:
            c = curves[lab]
            if e < len(c["spl"]["mean"]):
                row += (f"| {'':>22} {c['success']['mean'][e]:7.2f} {c['spl']['mean'][e]:5.2f} "
                        f"{c['steps']['mean'][e]:5.0f}")
        print(row)
    for lab in labels:
        c = curves[lab]
        for k in ("success", "spl", "steps"):
            r = c[k].get("rise")
            if r:
                print(f"{lab}: {k} episode 1 {r['first']:.3f} -> episodes {r['window'][0]}-{r['window'][1]} "
                      f"{r['late']:.3f} +- {r['late_ci']:.3f}; rise {r['rise']:+.3f} +- {r['rise_ci']:.3f} (n={r['n']})")


def plot(curves: dict[str, dict], path: Path, title: str) -> None:
    """Success and SPL per in-context episode, with 95% CI bands and n in the legend."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from matplotlib.ticker import MaxNLocator

    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    styles = [("-", "o"), ("--", "s"), (":", "^"), ("-.", "x")]  # identical curves stay visible
    for j, (lab, c) in enumerate(curves.items()):
        ls, mk = styles[j % len(styles)]
        for ax, k in zip(axes, METRICS):
            mu, ci = np.array(c[k]["mean"]), np.array(c[k]["ci"])
            x = np.arange(1, len(mu) + 1)
            ax.plot(x, mu, ls=ls, marker=mk, ms=4, mfc="none", label=f"{lab} (n={c[k]['n']})")
            ax.fill_between(x, mu - ci, mu + ci, alpha=0.2)
    for ax, k, ylab in zip(axes, METRICS, ("success rate", "SPL", "steps per episode")):
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel("in-context episode (same house)")
        ax.set_ylabel(ylab)
        if k != "steps":
            ax.set_ylim(0, 1.02)
        else:
            ax.set_ylim(bottom=0)  # from zero: a cropped axis made a 10-step wobble look like a fall
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8, loc="best")  # teacher curves sit near 1, students near 0.2
    fig.suptitle(textwrap.fill(title + "  (bands: 95% CI)", 150))  # a long settings line would run off the figure
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write(curves: dict[str, dict], raw: dict[str, dict[str, np.ndarray]], settings: dict, out: Path,
          title: str) -> None:
    out.mkdir(parents=True, exist_ok=True)
    doc = {"settings": settings, "curves": curves,
           "raw": {lab: {k: np.asarray(v).tolist() for k, v in r.items()} for lab, r in raw.items()}}
    (out / "curves.json").write_text(json.dumps(doc, indent=1))
    plot(curves, out / "icl_curve.png", title)


def paired_gap(a: dict[str, np.ndarray], b: dict[str, np.ndarray], lo: int = 10, hi: int = 20) -> dict:
    """Per metric, the paired difference a - b of the per-trial means over episodes ``lo``..``hi``
    (1-based, inclusive): mean, 95% CI, n. ``a`` and ``b`` are raw (trials, E) matrices of two
    runs on the same trials (same seed: same houses, starts and goals), e.g. a policy and its
    memory-wiped ablation; the houses must agree."""
    if "house_seed" in a and "house_seed" in b and not np.array_equal(np.asarray(a["house_seed"]),
                                                                      np.asarray(b["house_seed"])):
        raise ValueError("the two runs were not on the same houses (house_seed differs): not paired")
    out = {}
    for k in METRICS:
        x, y = np.asarray(a[k], np.float64), np.asarray(b[k], np.float64)
        h = min(hi, x.shape[1], y.shape[1])
        d = x[:, lo - 1:h].mean(1) - y[:, lo - 1:h].mean(1)
        mu, ci, n = mean_ci(d)
        out[k] = {"gap": float(mu), "ci": float(ci), "n": int(n), "window": [lo, h]}
    return out


def pool(runs: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """Several evaluations of one policy on disjoint trials (different evaluation seeds: other
    houses, starts and goals) as one: their (trials, E) matrices stacked, cut to the shortest E."""
    E = min(np.asarray(r["success"]).shape[1] for r in runs)
    out = {k: np.concatenate([np.asarray(r[k], np.float64)[:, :E] for r in runs]) for k in METRICS}
    seeds = [np.asarray(r["house_seed"]) for r in runs if "house_seed" in r]
    if len(seeds) == len(runs):
        out["house_seed"] = np.concatenate(seeds)
    goals = [np.asarray(r["goal"])[:, :E] for r in runs if "goal" in r]
    if len(goals) == len(runs):
        out["goal"] = np.concatenate(goals)
    return out


def by_goal(r: dict[str, np.ndarray], lo: int = 1, hi: int = 20) -> list[dict]:
    """Success and SPL of the episodes ``lo``..``hi`` (1-based, inclusive) of a raw run, split by the episode's goal
    category (``goal``, an index into the house's goal names; runs written before it was recorded have none):
    per category the episodes n, success with its 95% Wilson interval, and the mean SPL."""
    from icrl_ros.training.encoder_recall import category_names, wilson

    if "goal" not in r:
        raise ValueError("this run has no per-episode goals (evaluated before evaluate.py recorded them)")
    g = np.asarray(r["goal"])[:, lo - 1:hi].reshape(-1)
    succ = np.asarray(r["success"], np.float64)[:, lo - 1:hi].reshape(-1)
    spl = np.asarray(r["spl"], np.float64)[:, lo - 1:hi].reshape(-1)
    rows, present = [], np.unique(g[g >= 0])
    names = category_names(int(present.max()) + 1) if len(present) else []
    for c in present:
        m = g == c
        k, n = int(succ[m].sum()), int(m.sum())
        rows.append({"goal": names[c], "n": n, "success": k / n,
                     "ci95": [min(max(v, 0.0), 1.0) for v in wilson(k, n)], "spl": float(spl[m].mean())})
    return sorted(rows, key=lambda x: x["success"])


def rebuilt_goals(policy: str, r: dict, settings: dict, batch: int | None = None) -> np.ndarray:
    """The per-episode goals of an evaluation written before they were recorded (:func:`episode_goals`), with
    ``batch`` where its settings do not say; the houses must match the run's."""
    from icrl_ros.training.house_eval import episode_goals

    if settings.get("seed") is None or (settings.get("batch") or batch) is None:
        raise SystemExit("--goals-of: the run's settings lack its seed or batch (give the evaluation's --batch)")
    trials, episodes = np.asarray(r["success"]).shape
    g = episode_goals(policy, trials, episodes, int(settings["seed"]), int(settings.get("batch") or batch),
                      settings.get("split") or "test")
    if "house_seed" in r and not np.array_equal(np.asarray(r["house_seed"]), g["house_seed"]):
        raise SystemExit("--goals-of: the replayed trials are in other houses than the run's (seed / batch / split differ)")
    return g["goal"]


def main(argv=None) -> int:
    """``python training/house_curves.py gap A/curves.json[:label] B/curves.json[:label] [--window 10 20]``:
    the paired gap of two evaluations of the same trials (e.g. ``evaluate.py`` with and without
    ``--wipe-memory``).

    ``python training/house_curves.py pool A/curves.json[:label] B/curves.json[:label] ... --out DIR``:
    one policy's evaluations on different seeds pooled into one curve (table, rises with their CIs
    over all trials, ``DIR/curves.json`` and ``DIR/icl_curve.png``).

    ``python training/house_curves.py goals A/curves.json[:label] [--window 1 20] [--goals-of POLICY]``: success and
    SPL over the window's episodes by the episode's goal category (hardest first), with 95% Wilson intervals. A run
    written before evaluations recorded goals gets them from ``--goals-of`` (the evaluated checkpoint or bundle; its
    settings' seed, trials, episodes and batch, ``--batch`` where the run did not record it): the envs are replayed
    with a policy that stops at once."""
    import argparse

    p = argparse.ArgumentParser(description=main.__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("command", choices=["gap", "pool", "goals"])
    p.add_argument("runs", nargs="+", metavar="curves.json[:label]")
    p.add_argument("--window", type=int, nargs=2, default=[10, 20], metavar=("LO", "HI"))
    p.add_argument("--out", help="pool: directory for the pooled curves.json and icl_curve.png")
    p.add_argument("--label", help="pool: the pooled run's label (default: the first run's)")
    p.add_argument("--batch", type=int, help="goals --goals-of: the evaluation's --batch, for runs that did not record it")
    p.add_argument("--goals-of", metavar="POLICY",
                   help="goals: rebuild the episodes' goals of a run that has none (the checkpoint or bundle it evaluated)")
    args = p.parse_args(argv)

    def load(spec: str) -> tuple[str, dict, dict]:
        path, _, label = spec.partition(":")
        try:
            doc = json.loads(Path(path).read_text())
            raw = doc["raw"]
        except (OSError, ValueError, KeyError) as e:
            raise SystemExit(f"{path}: not a curves.json written by evaluate.py ({e})")
        label = label or next(iter(raw))
        if label not in raw:
            raise SystemExit(f"{path}: no run labelled {label!r}; it has {list(raw)}")
        return label, raw[label], doc.get("settings") or {}

    runs = [load(r) for r in args.runs]
    if args.command == "goals":
        for lab, r, settings in runs:
            if "goal" not in r and args.goals_of:
                r = {**r, "goal": rebuilt_goals(args.goals_of, r, settings, args.batch)}
            try:
                rows = by_goal(r, *args.window)
            except ValueError as e:
                raise SystemExit(f"{lab}: {e}")
            lo, hi = args.window
            print(f"{lab}: episodes {lo}-{hi} by goal category (hardest first)")
            for x in rows:
                print(f"  {x['goal']:14s} n {x['n']:5d}  success {x['success']:.3f} [{x['ci95'][0]:.3f}, "
                      f"{x['ci95'][1]:.3f}]  SPL {x['spl']:.3f}")
        return 0
    if args.command == "gap":
        if len(runs) != 2:
            raise SystemExit(f"gap compares two runs of the same trials, got {len(runs)}")
        (la, a, _), (lb, b, _) = runs
        try:
            g = paired_gap(a, b, *args.window)
        except ValueError as e:
            raise SystemExit(str(e))
        for k, r in g.items():
            print(f"{la} - {lb}: {k} over episodes {r['window'][0]}-{r['window'][1]} {r['gap']:+.3f} +- {r['ci']:.3f} "
                  f"(paired, n={r['n']})")
        return 0
    seeds = [st.get("seed") for _, _, st in runs]
    if len(runs) < 2 or len(set(seeds)) < len(seeds):
        raise SystemExit(f"pool joins evaluations on different seeds (disjoint trials); got seeds {seeds}")
    label = args.label or runs[0][0]
    raw = pool([r for _, r, _ in runs])
    curves = {label: summarise(raw)}
    print(f"{label}: {len(raw['success'])} trials pooled from seeds {seeds} ({', '.join(args.runs)})")
    print_table(curves)
    if args.out:
        settings = {**runs[0][2], "seed": seeds, "trials": int(len(raw["success"])), "pooled_from": args.runs}
        write(curves, {label: raw}, settings, Path(args.out), f"{label}: {len(raw['success'])} trials, seeds {seeds}")
        print(f"wrote {args.out}/curves.json and {args.out}/icl_curve.png")
    return 0


if __name__ == "__main__":
    from icrl_ros.training._cli import run_main

    raise SystemExit(run_main(main))
