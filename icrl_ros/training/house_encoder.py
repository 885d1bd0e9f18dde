"""Pretrain the house policy's visual encoder on labels the simulator gives for free.

    python training/house_encoder.py --frames 120000 --out runs/house_encoder
    python training/house_encoder.py --data runs/house_encoder/frames.npz ...   # reuse collected frames
    python training/house_encoder.py ... --out runs/house_encoder --resume       # go on after a stop

Frames are rendered at random free poses of training houses (half of them facing an object
a few metres away, so objects are common); every frame is labelled by ray casting the layout
(:mod:`icrl_ros.sim.house_view`):

* per goal category: whether an instance of it is *resolved* (covers >= 10 pixels of the
  64x64 image), its bearing (5 bins across the view) and distance (5 bins);
* free space: per 8 column bands of the image, the horizontal distance to the first wall or
  object (log-metres), and whether a forward step is blocked.

The :class:`~icrl_ros.models.encoders.FeatureEncoder` (CNN trunk -> 128 features) is
trained with linear heads on these labels, then frozen: policies built with
``visual_encoder: features`` and ``pretrained_encoder: <out>/encoder.pt`` train on its
cached features. Accuracy is measured on frames of held-out (test) houses; throughput of
every stage is printed and written to ``<out>/encoder.json``.
"""

from __future__ import annotations


import argparse
import json
import math
import multiprocessing as mp
import os
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from icrl_ros.models.config import FEATURE_STEMS
from icrl_ros.models.encoders import BEARING_BINS, DIST_BINS, FREE_BANDS, FeatureEncoder, FeatureHeads
from icrl_ros.sim.house_layout import CATEGORIES

N_CAT = len(CATEGORIES)
LABELS = ("present", "size_px", "metres", "bearing", "dist", "free", "blocked")
DIST_EDGES, BANDS = (1.0, 2.0, 3.5, 6.0), FREE_BANDS
assert len(DIST_EDGES) + 1 == DIST_BINS


def _labels(env, view) -> dict[str, np.ndarray]:
    """Labels of one frame from its cast ``view``."""
    from icrl_ros.sim.house_render import CAMERA_HEIGHT, CAMERA_PITCH_DEG, FOV_Y_DEG
    from icrl_ros.sim.house_view import obstacle_bands

    present = np.zeros(N_CAT, np.float32)
    size_px = np.zeros(N_CAT, np.float32)  # the category's largest instance, pixels of a 64x64 frame
    metres = np.full(N_CAT, np.nan, np.float32)  # and its distance to the camera (m, surface)
    bearing = np.full(N_CAT, -1, np.int64)  # -1: no label (category not resolved)
    dist = np.full(N_CAT, -1, np.int64)
    pix = view.pixels
    res = view.resolved()
    half = math.radians(FOV_Y_DEG) / 2
    for k in np.argsort(-pix):  # largest first: it names the category's bearing / distance
        if pix[k] <= 0:
            break
        o = env.layout.objects[k]
        c = o.category
        if size_px[c] > 0:
            continue
        size_px[c] = pix[k]
        metres[c] = math.hypot(o.x - env.x, o.z - env.z) - o.cat.radius
        if not res[k]:
            continue
        present[c] = 1
        b = math.atan2(-(o.z - env.z), o.x - env.x) - env.yaw
        b = (b + math.pi) % (2 * math.pi) - math.pi  # CCW, 0 = straight ahead
        bearing[c] = int(np.clip((half - b) / (2 * half) * BEARING_BINS, 0, BEARING_BINS - 1))  # 0 = left
        d = math.hypot(o.x - env.x, o.z - env.z) - o.cat.radius
        dist[c] = int(np.searchsorted(DIST_EDGES, d))
    band = obstacle_bands(view, BANDS, CAMERA_HEIGHT, CAMERA_PITCH_DEG, FOV_Y_DEG)
    step = 0.25
    blocked = env.nav.collides(env.x + step * math.cos(env.yaw), env.z - step * math.sin(env.yaw))
    return {"present": present, "size_px": size_px, "metres": metres, "bearing": bearing, "dist": dist,
            "free": np.log1p(band).astype(np.float32), "blocked": np.float32(blocked)}


def _collect(job: tuple) -> dict[str, np.ndarray]:
    split, seed, n_frames, per_house, image_size = job
    os.environ.setdefault("LP_NUM_THREADS", "1")
    from icrl_ros.sim.house import HouseEnv
    from icrl_ros.sim.house_render import CAMERA_HEIGHT, CAMERA_PITCH_DEG, FOV_Y_DEG
    from icrl_ros.sim.house_view import cast_view

    rng = np.random.default_rng(seed)
    env = HouseEnv(split=split, image_size=image_size, goal_instances=0, start_away=False, min_start_distance=0.0)
    out: dict[str, list] = {k: [] for k in ("rgb", *LABELS)}
    env.reset(seed=seed)
    t_render = t_label = 0.0
    for i in range(n_frames):
        if i and i % per_house == 0:
            env.reset(options={"new_trial": True})
        free = np.argwhere(env.nav.free)
        r, c = free[rng.integers(len(free))]
        env.x, env.z = float(env.nav.xs[c]), float(env.nav.zs[r])
        yaw = rng.uniform(-math.pi, math.pi)
        if rng.random() < 0.5:  # face an object (with some error) so that objects are common
            o = env.layout.objects[rng.integers(len(env.layout.objects))]
            if math.hypot(o.x - env.x, o.z - env.z) < 7.0:
                yaw = math.atan2(-(o.z - env.z), o.x - env.x) + rng.normal(0, 0.4)
        env.yaw = (yaw + math.pi) % (2 * math.pi) - math.pi
        t0 = time.perf_counter()
        out["rgb"].append(env.observe()["rgb"])
        t1 = time.perf_counter()
        view = cast_view(env.layout, env.nav.walls, env.x, env.z, env.yaw, 64, CAMERA_HEIGHT, CAMERA_PITCH_DEG,
                         FOV_Y_DEG)
        for k, v in _labels(env, view).items():
            out[k].append(v)
        t_render += t1 - t0
        t_label += time.perf_counter() - t1
    env.close()
    res = {k: np.stack(v) for k, v in out.items()}
    res["t_render"], res["t_label"] = np.float64(t_render), np.float64(t_label)
    return res


def collect(split: str, n: int, seed: int, workers: int, per_house: int = 200,
            image_size: int = 64) -> tuple[dict, dict]:
    """``n`` labelled frames of ``split`` houses rendered at ``image_size``. The poses depend on
    ``seed`` and ``n`` only, so two image sizes collected with the same arguments show the
    same scenes (labels are always cast at 64x64)."""
    jobs, per = [], math.ceil(n / max(workers * 4, 1))
    for k in range(0, n, per):
        jobs.append((split, seed * 1000 + k, min(per, n - k), per_house, image_size))
    t0 = time.perf_counter()
    with mp.get_context("forkserver").Pool(workers) as pool:
        parts = pool.map(_collect, jobs, chunksize=1)
    wall = time.perf_counter() - t0
    data = {k: np.concatenate([p[k] for p in parts]) for k in parts[0] if not k.startswith("t_")}
    rates = {"frames": n, "wall_s": wall, "frames_per_s": n / wall, "workers": workers,
             "render_ms": 1e3 * sum(float(p["t_render"]) for p in parts) / n,
             "label_ms": 1e3 * sum(float(p["t_label"]) for p in parts) / n}
    return data, rates


def jitter(x: torch.Tensor, amount: float, gen: torch.Generator) -> torch.Tensor:
    """uint8 (B, H, W, 3) -> the same images under a random brightness and per-channel gain
    each, drawn uniformly in [1 - amount, 1 + amount] (lighting and white balance)."""
    b = x.shape[0]
    gain = 1 + amount * (2 * torch.rand(b, 1, 1, 3, generator=gen) - 1)
    gain = gain * (1 + amount * (2 * torch.rand(b, 1, 1, 1, generator=gen) - 1))
    return (x.float() * gain).clamp(0, 255).to(torch.uint8)


class Probe(FeatureHeads):
    """The label heads trained with the encoder; saved beside it as ``heads.*`` (a policy with
    ``goal_readout`` reads the goal category's heads as inputs)."""

    def __init__(self, d_feat: int) -> None:
        super().__init__(d_feat, N_CAT)


def losses(out: dict, y: dict) -> dict[str, torch.Tensor]:
    b, d = y["bearing"], y["dist"]
    return {"present": F.binary_cross_entropy_with_logits(out["present"], y["present"]),
            "bearing": F.cross_entropy(out["bearing"].reshape(-1, BEARING_BINS), b.reshape(-1), ignore_index=-1)
            if (b >= 0).any() else out["bearing"].sum() * 0,
            "dist": F.cross_entropy(out["dist"].reshape(-1, out["dist"].shape[-1]), d.reshape(-1), ignore_index=-1)
            if (d >= 0).any() else out["dist"].sum() * 0,
            "free": F.smooth_l1_loss(out["free"], y["free"]),
            "blocked": F.binary_cross_entropy_with_logits(out["blocked"], y["blocked"])}


def _batch(data: dict, idx: np.ndarray) -> tuple[torch.Tensor, dict]:
    x = torch.as_tensor(data["rgb"][idx])
    y = {k: torch.as_tensor(data[k][idx]) for k in ("present", "bearing", "dist", "free", "blocked")}
    return x, y


@torch.no_grad()
def accuracy(enc: FeatureEncoder, probe: Probe, data: dict, batch: int = 512) -> dict[str, float]:
    """Held-out accuracy: per-category presence (F1 over positives, and accuracy), bearing and
    distance bin accuracy where present, free-space error (m), blocked accuracy."""
    enc.eval()
    tp = fp = fn = correct = total = 0
    b_ok = b_n = d_ok = d_n = 0
    free_err, blk_ok = [], 0
    n = len(data["rgb"])
    for s in range(0, n, batch):
        idx = np.arange(s, min(s + batch, n))
        x, y = _batch(data, idx)
        out = probe(enc(x))
        pred = out["present"] > 0
        truth = y["present"] > 0.5
        tp += int((pred & truth).sum())
        fp += int((pred & ~truth).sum())
        fn += int((~pred & truth).sum())
        correct += int((pred == truth).sum())
        total += truth.numel()
        m = y["bearing"] >= 0
        b_ok += int((out["bearing"].argmax(-1) == y["bearing"])[m].sum())
        b_n += int(m.sum())
        m = y["dist"] >= 0
        d_ok += int((out["dist"].argmax(-1) == y["dist"])[m].sum())
        d_n += int(m.sum())
        free_err.append((torch.expm1(out["free"]) - torch.expm1(y["free"])).abs().median(dim=1).values)
        blk_ok += int(((out["blocked"] > 0) == (y["blocked"] > 0.5)).sum())
    prec, rec = tp / max(tp + fp, 1), tp / max(tp + fn, 1)
    return {"present_f1": 2 * prec * rec / max(prec + rec, 1e-9), "present_precision": prec, "present_recall": rec,
            "present_accuracy": correct / total, "positives_per_frame": (tp + fn) / n,
            "bearing_accuracy": b_ok / max(b_n, 1), "distance_accuracy": d_ok / max(d_n, 1),
            "free_median_abs_error_m": float(torch.cat(free_err).median()), "blocked_accuracy": blk_ok / n,
            "frames": n}


def load_state(enc: FeatureEncoder, probe: Probe, state: dict) -> None:
    """Load an encoder file's state dict (the encoder's tensors and its heads' as ``heads.*``) into both."""
    enc.load_state_dict({k: v for k, v in state.items() if not k.startswith("heads.")})
    probe.load_state_dict({k[6:]: v for k, v in state.items() if k.startswith("heads.")})


def _save(enc: FeatureEncoder, probe: Probe, folder: Path) -> None:
    """``folder/encoder.pt``: the encoder and its heads (``heads.*``), the file policies and ``--init`` read."""
    folder.mkdir(parents=True, exist_ok=True)
    torch.save({**enc.state_dict(), **{f"heads.{k}": v for k, v in probe.state_dict().items()}}, folder / "encoder.pt")


def _run_settings(args) -> dict:
    """The options that make a run what it is (a resumed run must be given the same)."""
    return {k: v for k, v in vars(args).items() if k not in ("resume", "data", "workers", "threads", "out")}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--frames", type=int, default=120_000, help="training frames (train houses)")
    p.add_argument("--test-frames", type=int, default=10_000, help="held-out frames (test houses)")
    p.add_argument("--epochs", type=int, default=6)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--feature-dim", type=int, default=128)
    p.add_argument("--pooled", type=int, default=0,
                   help="features read as the maximum of a per-cell head over the conv map (0: none)")
    p.add_argument("--image-size", type=int, default=64,
                   help="camera resolution the frames are rendered at (a policy on this encoder sets model.image_size)")
    p.add_argument("--stem", choices=FEATURE_STEMS, default="strided",
                   help="the trunk's first layers: strided convs (one more per doubling past 64 px) or patch "
                        "(image-size / 32 pixel patches: a 96 / 128 px camera at the 64 px trunk's cost; a policy on "
                        "it sets model.feature_stem: patch)")
    p.add_argument("--jitter", type=float, default=0.0,
                   help="photometric augmentation: per-image brightness and per-channel gains drawn in [1 - j, 1 + j]")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--data", help="frames.npz from an earlier run (skips collection)")
    p.add_argument("--init", help="a run directory whose encoder.pt (encoder + heads) to continue training from")
    p.add_argument("--out", default="runs/house_encoder")
    p.add_argument("--resume", action="store_true",
                   help="go on with the run in --out that stopped: its frames, and its state after the last finished "
                        "epoch (weights, optimiser, schedule, random streams), so it ends as an unstopped run would; "
                        "give the run's other options again")
    args = p.parse_args(argv)
    if args.init and not (Path(args.init) / "encoder.pt").is_file():
        p.error(f"--init: {args.init}/encoder.pt does not exist (a run directory of this script, or its last_epoch/)")
    if args.resume:
        if args.init or args.data:
            p.error("--resume goes on with the run in --out (its frames and state): drop --init / --data")
        for need in ("frames.npz", "last_epoch/state.pt"):
            if not (Path(args.out) / need).is_file():
                p.error(f"--resume: {args.out}/{need} does not exist (no epoch of a run there finished before it "
                        f"stopped: start it again without --resume)")
        args.data = str(Path(args.out) / "frames.npz")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    report: dict = {"settings": vars(args)}
    if args.data:
        z = np.load(args.data)
        train = {k[6:]: z[k] for k in z.files if k.startswith("train_")}
        test = {k[5:]: z[k] for k in z.files if k.startswith("test_")}
    else:
        train, report["collect_train"] = collect("train", args.frames, args.seed, args.workers,
                                                 image_size=args.image_size)
        print(f"collected {args.frames:,} train frames: {report['collect_train']}", flush=True)
        test, report["collect_test"] = collect("test", args.test_frames, args.seed + 1, args.workers,
                                               image_size=args.image_size)
        print(f"collected {args.test_frames:,} test frames: {report['collect_test']}", flush=True)
        np.savez(out / "frames.npz", **{f"train_{k}": v for k, v in train.items()},
                 **{f"test_{k}": v for k, v in test.items()})
    size = train["rgb"].shape[1]
    if size != args.image_size:
        raise SystemExit(f"--image-size {args.image_size} but the frames in {args.data} are {size} px: pass --image-size {size}")
    try:
        enc = FeatureEncoder(args.feature_dim, size, pooled=args.pooled, stem=args.stem)
    except ValueError as e:
        raise SystemExit(f"--stem {args.stem} / --pooled {args.pooled}: {e}")
    probe = Probe(args.feature_dim)
    if args.init:
        load_state(enc, probe, torch.load(Path(args.init) / "encoder.pt", weights_only=True))
        report["init"] = str(args.init)
    params = [*enc.parameters(), *probe.parameters()]
    opt = torch.optim.AdamW(params, lr=args.lr, weight_decay=1e-4)
    n = len(train["rgb"])
    steps = args.epochs * (n // args.batch)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=args.lr, total_steps=steps, pct_start=0.1)
    g = np.random.default_rng(args.seed)
    t0, step, first = time.perf_counter(), 0, 0
    step0 = 0  # steps before this process (a resumed run's): throughput counts this process's own
    if args.resume:
        state = torch.load(out / "last_epoch" / "state.pt", weights_only=False)
        if state["settings"] != _run_settings(args):
            raise SystemExit(f"--resume: the run in {out} had other options ({state['settings']}); give the same")
        load_state(enc, probe, torch.load(out / "last_epoch" / "encoder.pt", weights_only=True))
        opt.load_state_dict(state["optimiser"])
        sched.load_state_dict(state["schedule"])
        g.bit_generator.state = state["rng"]
        torch.set_rng_state(state["torch_rng"])
        first, step = state["epochs_done"], state["step"]
        step0 = step
        report["resumed_at_epoch"] = first
        print(f"resumed {out} after epoch {first} of {args.epochs} (step {step})", flush=True)
    for epoch in range(first, args.epochs):
        enc.train()
        perm = g.permutation(n)
        for s in range(0, n - args.batch + 1, args.batch):
            x, y = _batch(train, np.sort(perm[s:s + args.batch]))
            if g.random() < 0.5:  # mirror left-right: bearings and bands flip, labels stay true
                x = x.flip(2)
                y["bearing"] = torch.where(y["bearing"] >= 0, BEARING_BINS - 1 - y["bearing"], y["bearing"])
                y["free"] = y["free"].flip(1)
            if args.jitter > 0:
                x = jitter(x, args.jitter, torch.Generator().manual_seed(int(g.integers(2**31))))
            ls = losses(probe(enc(x)), y)
            loss = sum(ls.values())
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sched.step()
            step += 1
            if step % 100 == 0:
                print(f"epoch {epoch} step {step}/{steps} loss {loss.item():.3f} " +
                      " ".join(f"{k}={v.item():.3f}" for k, v in ls.items()) +
                      f" {(step - step0) * args.batch / (time.perf_counter() - t0):.0f} frames/s", flush=True)
        acc = accuracy(enc, probe, test)
        print(f"epoch {epoch}: held-out {json.dumps({k: round(v, 3) for k, v in acc.items()})}", flush=True)
        if epoch + 1 < args.epochs:  # a run stopped later goes on from here (--resume)
            _save(enc, probe, out / "last_epoch")
            torch.save({"epochs_done": epoch + 1, "step": step, "optimiser": opt.state_dict(),
                        "schedule": sched.state_dict(), "rng": g.bit_generator.state, "torch_rng": torch.get_rng_state(),
                        "settings": _run_settings(args)}, out / "last_epoch" / "state.pt")
            (out / "last_epoch" / "epoch.json").write_text(json.dumps({"epochs_done": epoch + 1, "held_out": acc}))
    report["train_frames_per_s"] = (step - step0) * args.batch / (time.perf_counter() - t0)
    report["held_out"] = acc
    report["train_fit"] = accuracy(enc, probe, {k: v[:10_000] for k, v in train.items()})
    enc.eval()
    x = torch.as_tensor(test["rgb"][:512])
    t = time.perf_counter()
    with torch.no_grad():
        for _ in range(5):
            enc(x)
    report["feature_frames_per_s"] = 5 * 512 / (time.perf_counter() - t)
    _save(enc, probe, out)
    (out / "encoder.json").write_text(json.dumps(report, indent=1, default=float))
    print(json.dumps({k: v for k, v in report.items() if k != "settings"}, indent=1, default=float))
    print(f"wrote {out / 'encoder.pt'}")
    return 0


if __name__ == "__main__":
    from icrl_ros.training._cli import run_main

    raise SystemExit(run_main(main))
