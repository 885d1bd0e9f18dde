"""How often a frozen house encoder recognises a category, by how large it is in the image.

    python training/encoder_recall.py --encoder shipped=checkpoints/house_encoder.pt@64 \\
        --encoder e128=runs/enc128/encoder.pt@128 --frames 10000 --out runs/encoder_recall

Frames of held-out (test) houses are rendered at each encoder's resolution from the same
poses (the same ``--seed`` and ``--frames`` give the same scenes at every size) and labelled by
ray casting at 64x64, so every encoder is scored on the same objects. For each category in a
frame the label is the size of its largest instance in pixels of a 64x64 frame; the in-context
teacher recognises a category from 10 pixels on. The report gives, per size bin and per
distance bin, the share of (frame, category) pairs the encoder's presence head calls present
(P > 0.5), with 95% Wilson intervals, and its false-positive rate on categories with no pixel
in view. Frames from one house are not independent, so the intervals are optimistic.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import numpy as np
import torch

from icrl_ros.models.encoders import FeatureEncoder, feature_encoder_for
from icrl_ros.training.house_encoder import Probe, collect, load_state

SIZE_EDGES = (0.0, 5.0, 10.0, 15.0, 20.0, 40.0, 80.0, math.inf)  # pixels of a 64x64 frame
METRE_EDGES = (0.0, 1.0, 2.0, 3.5, 6.0, math.inf)
RESOLVED_PX = 10.0


def wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """95% Wilson score interval of a proportion k / n."""
    if n == 0:
        return (math.nan, math.nan)
    p = k / n
    den = 1 + z * z / n
    mid = (p + z * z / (2 * n)) / den
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / den
    return (mid - half, mid + half)


def _rate(hit: np.ndarray) -> dict:
    k, n = int(hit.sum()), int(hit.size)
    lo, hi = wilson(k, n)
    return {"n": n, "rate": k / n if n else math.nan, "ci95": [lo, hi]}


def load_encoder(path: str, size: int) -> tuple[FeatureEncoder, Probe]:
    """An encoder.pt (trunk + ``heads.*``) as written by ``house_encoder.py``."""
    state = torch.load(path, map_location="cpu", weights_only=True)
    d_feat = state["heads.present.weight"].shape[1]
    enc, probe = feature_encoder_for(state, size), Probe(d_feat)
    load_state(enc, probe, state)
    return enc.eval(), probe.eval()


@torch.no_grad()
def presence(enc: FeatureEncoder, probe: Probe, rgb: np.ndarray, batch: int = 500) -> np.ndarray:
    """(N, H, W, 3) uint8 -> (N, C) P(category in view)."""
    out = [probe(enc(torch.as_tensor(rgb[s:s + batch])))["present"].sigmoid().numpy()
           for s in range(0, len(rgb), batch)]
    return np.concatenate(out)


def category_names(n: int) -> list[str]:
    """The house's goal categories (``n`` of them: the presence head's outputs), by index."""
    from icrl_ros.sim.house_layout import GOAL_NAMES

    return [GOAL_NAMES[c] if c < len(GOAL_NAMES) else str(c) for c in range(n)]


def recall_table(p: np.ndarray, size_px: np.ndarray, metres: np.ndarray, threshold: float = 0.5) -> dict:
    """Detection rates of presence probabilities ``p`` (N, C) against the pixel sizes and
    distances of each frame's categories; per category, recall at 10-20 px, at 80+ px and over all resolved."""
    pred = p > threshold
    by_size = []
    for lo, hi in zip(SIZE_EDGES[:-1], SIZE_EDGES[1:]):
        m = (size_px > lo) & (size_px < hi) if lo == 0 else (size_px >= lo) & (size_px < hi)
        by_size.append({"px": [lo, hi], **_rate(pred[m])})
    resolved = size_px >= RESOLVED_PX
    by_metres = []
    for lo, hi in zip(METRE_EDGES[:-1], METRE_EDGES[1:]):
        m = resolved & (metres >= lo) & (metres < hi)
        by_metres.append({"m": [lo, hi], **_rate(pred[m])})
    absent = size_px <= 0
    tp, fp = int((pred & resolved).sum()), int((pred & ~resolved).sum())
    prec, rec = tp / max(tp + fp, 1), tp / max(int(resolved.sum()), 1)
    small, big = (size_px >= 10) & (size_px < 20), size_px >= 80
    by_category = [{"category": name, "recall_10_20px": _rate(pred[:, c][small[:, c]]),
                    "recall_80px": _rate(pred[:, c][big[:, c]]), "recall_resolved": _rate(pred[:, c][resolved[:, c]])}
                   for c, name in enumerate(category_names(p.shape[1]))]
    return {"by_size_px": by_size, "by_metres_resolved": by_metres, "by_category": by_category,
            "recall_10_20px": _rate(pred[(size_px >= 10) & (size_px < 20)]),
            "recall_resolved": _rate(pred[resolved]),
            "false_positive_not_in_view": _rate(pred[absent]),
            "precision_resolved": prec, "f1_resolved": 2 * prec * rec / max(prec + rec, 1e-9),
            "frames": int(len(p))}


def plot(results: dict, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 4.2))
    labels = None
    for k, (name, r) in enumerate(results.items()):
        rows = r["by_size_px"]
        labels = [f"{int(a)}-{int(b)}" if math.isfinite(b) else f"{int(a)}+" for a, b in (x["px"] for x in rows)]
        xs = np.arange(len(rows)) + (k - (len(results) - 1) / 2) * 0.12
        y = np.array([x["rate"] for x in rows])
        lo = y - np.array([x["ci95"][0] for x in rows])
        hi = np.array([x["ci95"][1] for x in rows]) - y
        ax.errorbar(xs, y, yerr=[lo, hi], marker="o", capsize=3, label=f"{name} ({r['image_size']} px)")
    ax.axvspan(1.5, len(labels) - 0.5, color="0.93", zorder=0)
    ax.text(1.55, 0.02, "teacher recognises (>= 10 px)", fontsize=8, color="0.35")
    ax.set_xticks(range(len(labels)), labels)
    ax.set_xlabel("size of the category's largest instance (pixels of a 64x64 frame)")
    ax.set_ylabel("share called present (P > 0.5)")
    ax.set_ylim(0, 1)
    ax.grid(alpha=0.3)
    ax.set_title("Held-out houses: encoder recall by object size (95% Wilson CI)")
    ax.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _spec(text: str) -> tuple[str, str, int]:
    try:
        name, rest = text.split("=", 1)
        path, size = rest.rsplit("@", 1)
        return name, path, int(size)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--encoder {text!r}: expected NAME=PATH@IMAGE_SIZE, "
                                         "e.g. shipped=checkpoints/house_encoder.pt@64") from None


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--encoder", type=_spec, action="append", required=True, help="NAME=PATH@IMAGE_SIZE (repeat)")
    ap.add_argument("--frames", type=int, default=10_000, help="held-out frames per image size (default %(default)s)")
    ap.add_argument("--seed", type=int, default=1, help="pose seed of the held-out frames (default %(default)s)")
    ap.add_argument("--workers", type=int, default=2, help="render processes (default %(default)s)")
    ap.add_argument("--threads", type=int, default=2, help="torch threads (default %(default)s)")
    ap.add_argument("--out", default="runs/encoder_recall", help="report folder (default %(default)s)")
    args = ap.parse_args(argv)
    for name, path, size in args.encoder:
        if not Path(path).is_file():
            ap.error(f"--encoder {name}: {path} is not a file")
    torch.set_num_threads(args.threads)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    frames: dict[int, dict] = {}
    results: dict[str, dict] = {}
    for name, path, size in args.encoder:
        if size not in frames:
            cache = out / f"frames_{size}px_seed{args.seed}_n{args.frames}.npz"
            if cache.is_file():
                z = np.load(cache)
                frames[size] = {k: z[k] for k in z.files}
            else:
                frames[size], rates = collect("test", args.frames, args.seed, args.workers, image_size=size)
                print(f"collected {args.frames} held-out frames at {size} px: {rates['frames_per_s']:.0f} frames/s",
                      flush=True)
                np.savez(cache, **frames[size])
        f = frames[size]
        enc, probe = load_encoder(path, size)
        r = recall_table(presence(enc, probe, f["rgb"]), f["size_px"], f["metres"])
        results[name] = {"encoder": path, "image_size": size, **r}
        print(f"{name}: recall at 10-20 px {r['recall_10_20px']['rate']:.3f} (n {r['recall_10_20px']['n']}), "
              f"all resolved {r['recall_resolved']['rate']:.3f}, false positives not in view "
              f"{r['false_positive_not_in_view']['rate']:.4f}, F1 {r['f1_resolved']:.3f}", flush=True)
    sizes = sorted(frames)
    for a, b in zip(sizes[:-1], sizes[1:]):  # the same scenes at every size
        if not np.array_equal(frames[a]["size_px"], frames[b]["size_px"]):
            raise SystemExit(f"the {a} px and {b} px frames show different scenes: delete the cached frames in {out}")
    for name, r in results.items():
        print(f"\n{name} ({r['image_size']} px)\n  size px    n       recall  95% CI")
        for row in r["by_size_px"]:
            print(f"  {row['px'][0]:>4.0f}-{row['px'][1]:<4.0f} {row['n']:>7d} {row['rate']:8.3f}  "
                  f"[{row['ci95'][0]:.3f}, {row['ci95'][1]:.3f}]")
        print("  distance m (resolved)")
        for row in r["by_metres_resolved"]:
            print(f"  {row['m'][0]:>4.1f}-{row['m'][1]:<4.1f} {row['n']:>7d} {row['rate']:8.3f}")
    names = [row["category"] for row in next(iter(results.values()))["by_category"]]
    print("\nrecall by category, 10-20 px / 80+ px:\n  " + f"{'category':14s}"
          + "".join(f" {name:>13s}" for name in results))
    for c, cat in enumerate(names):
        rows = [r["by_category"][c] for r in results.values()]
        cells = "".join(f" {x['recall_10_20px']['rate']:6.2f}/{x['recall_80px']['rate']:<6.2f}" for x in rows)
        print(f"  {cat:14s}{cells}")
    (out / "recall.json").write_text(json.dumps({"settings": {k: v for k, v in vars(args).items() if k != "encoder"},
                                                 "results": results}, indent=1, default=float))
    plot(results, out / "recall_by_size.png")
    print(f"wrote {out / 'recall.json'} and {out / 'recall_by_size.png'}")
    return 0


if __name__ == "__main__":
    from icrl_ros.training._cli import run_main

    raise SystemExit(run_main(main))
