"""How much of the house teacher's labels a student could match: the teacher against itself.

    python experiments/house_label_noise.py --trials 10 --steps 500 --seed 1000 --out runs/label_noise

The imitation students agree with the in-context teacher on 0.64-0.68 of held-out steps, the
same on training trials. Whether that is underfitting depends on how sharp the labels are. This
drives the teacher as the saved imitation data were collected (train houses, its own action,
a random move with probability ``--noise``) and, at every state, asks it again

* with a fresh plan (its plan cache of ``REPLAN`` steps is state no student sees), and
* at the same state with its pose perturbed by Gaussian noise (per axis in metres, yaw in
  degrees; ``--pose-noise``), i.e. a teacher that knows where it is and what it saw a little
  less exactly than it does, as any student does,

and prints the share of states where the label stays the same, overall and split by whether the
goal was already known (the teacher then drives to it) or not (it explores).

With ``--encoder`` (a frozen encoder file of ``training/house_encoder.py``, e.g.
``checkpoints/house_encoder.pt``) it also compares what the teacher knows with what a student can
see: at every state, the goal's size in the image (pixels, by ray cast) against the encoder's
P(goal category in view); and the goal's size at the step the teacher first recognised it (the
moment its labels start to act on where the goal is). ``--teacher-pixels`` sets the size at which
the teacher recognises an instance (the env's ``teacher_pixels``). Writes ``label_noise.json``.
Nothing here is an evaluation: train houses, a diagnosis of the labels.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import numpy as np

from icrl_ros.sim.house import HouseEnv
from icrl_ros.sim.house_view import MIN_PIXELS
from icrl_ros.training._cli import fail


def parse_noise(text: str) -> list[tuple[float, float]]:
    try:
        pairs = [tuple(float(v) for v in item.split(":")) for item in text.split(",")]
    except ValueError:
        pairs = []
    if not pairs or any(len(p) != 2 or p[0] < 0 or p[1] < 0 for p in pairs):
        fail(f"--pose-noise {text!r}: expected metres:degrees pairs, e.g. 0.02:1,0.05:3")
    return pairs


PIXEL_BINS = (0, 1, 10, 20, 40, 80, 160, math.inf)


class Sightings:
    """Per state: the goal's largest instance size in pixels (ray cast at 64x64) and the frozen
    encoder's P(goal category in view) for the rendered image; per episode whose goal the
    teacher did not know at its start, the size at the step it first recognised it."""

    def __init__(self, encoder_path: str) -> None:
        import torch

        from icrl_ros.models.encoders import FeatureEncoder, FeatureHeads, load_frozen, read_encoder_file
        from icrl_ros.sim.house_layout import CATEGORIES

        self.torch = torch
        state = read_encoder_file(encoder_path)
        if "heads.present.weight" not in state:
            raise ValueError(f"--encoder {encoder_path}: no heads.present.weight; not an encoder file of "
                             "training/house_encoder.py")
        d_feat = int(state["heads.present.weight"].shape[1])  # the file's feature size
        self.enc, self.heads = FeatureEncoder(d_feat, 64), FeatureHeads(d_feat, len(CATEGORIES))
        load_frozen(self.enc, encoder_path, state=state)
        load_frozen(self.heads, encoder_path, prefix="heads.", state=state)
        self.rows: list[tuple[float, float]] = []
        self.first: list[float] = []

    def see(self, env: HouseEnv, obs: dict, newly_known: bool) -> None:
        pixels = env.teacher.view.pixels  # the teacher's own cast of this image
        px = float(max(pixels[k] for k, o in enumerate(env.layout.objects) if o.category == env.goal))
        with self.torch.no_grad():
            logit = self.heads(self.enc(self.torch.as_tensor(obs["rgb"])[None]))["present"][0, int(obs["goal"])]
        self.rows.append((px, float(logit.sigmoid())))
        if newly_known:
            self.first.append(px)

    def summary(self) -> dict:
        r = np.array(self.rows).reshape(-1, 2)
        bins = []
        for lo, hi in zip(PIXEL_BINS[:-1], PIXEL_BINS[1:]):
            m = (r[:, 0] >= lo) & (r[:, 0] < hi)
            bins.append({"pixels": [lo, hi if math.isfinite(hi) else None], "n": int(m.sum()),
                         "mean_p": float(r[m, 1].mean()) if m.any() else None,
                         "p_above_0.5": float((r[m, 1] > 0.5).mean()) if m.any() else None})
        f = np.array(self.first)
        first = {"n": len(f), "quartiles": np.percentile(f, [25, 50, 75]).tolist() if len(f) else None,
                 "share_by_bin": [float(((f >= lo) & (f < hi)).mean()) if len(f) else None
                                  for lo, hi in zip(PIXEL_BINS[:-1], PIXEL_BINS[1:])]}
        return {"by_goal_pixels": bins, "first_recognition": first}


def measure(trials: int, steps: int, seed: int, noise: float, levels: list[tuple[float, float]],
            teacher_pixels: float = MIN_PIXELS, sightings: Sightings | None = None) -> dict:
    rng = np.random.default_rng(seed)
    same: dict[str, dict[bool, list[bool]]] = {k: {True: [], False: []} for k in
                                               ["fresh plan"] + [f"pose noise {m} m, {d} deg" for m, d in levels]}
    for trial in range(trials):
        env = HouseEnv(split="train", teacher="memory", teacher_pixels=teacher_pixels)
        obs, info = env.reset(seed=seed + trial)
        teacher = env.teacher
        known_before = bool(info["teacher_goal_known"])
        for _ in range(steps):
            label, known = int(info["teacher_action"]), bool(info["teacher_goal_known"])
            if sightings is not None:
                sightings.see(env, obs, known and not known_before)
            known_before = known
            plan = teacher._plan
            teacher._plan = None
            fresh = teacher.act()
            same["fresh plan"][known].append(fresh == label)
            x, z, yaw = env.x, env.z, env.yaw
            for m, d in levels:
                teacher._plan = None
                env.x, env.z = x + rng.normal(0.0, m), z + rng.normal(0.0, m)
                env.yaw = yaw + rng.normal(0.0, math.radians(d))
                same[f"pose noise {m} m, {d} deg"][known].append(teacher.act() == fresh)
                env.x, env.z, env.yaw = x, z, yaw
            teacher._plan = plan
            action = label if rng.random() >= noise else int(rng.integers(1, 4))
            obs, _, terminated, truncated, info = env.step(action)
            if terminated or truncated:
                obs, info = env.reset()
                known_before = bool(info["teacher_goal_known"])
        env.close()
    out = {}
    for name, split in same.items():
        every = split[True] + split[False]
        out[name] = {"all": float(np.mean(every)), "goal_known": float(np.mean(split[True])) if split[True] else None,
                     "exploring": float(np.mean(split[False])) if split[False] else None,
                     "n": len(every), "n_goal_known": len(split[True])}
    return out


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--trials", type=int, default=10, help="train houses, one trial each")
    p.add_argument("--steps", type=int, default=500, help="steps per trial (episodes restart within it)")
    p.add_argument("--seed", type=int, default=1000)
    p.add_argument("--noise", type=float, default=0.2, help="random move probability (as the saved data)")
    p.add_argument("--pose-noise", default="0.02:1,0.05:3,0.15:8", help="metres:degrees pairs")
    p.add_argument("--teacher-pixels", type=float, default=float(MIN_PIXELS),
                   help="size (pixels of a 64x64 image) at which the teacher recognises an instance")
    p.add_argument("--encoder", help="a frozen encoder file (checkpoints/house_encoder.pt): also compare the goal's "
                                     "size with the encoder's P(goal in view)")
    p.add_argument("--out", help="directory for label_noise.json")
    a = p.parse_args(argv)
    if a.trials < 1 or a.steps < 1 or not 0 <= a.noise <= 1:
        fail("--trials and --steps must be >= 1 and --noise in [0, 1]")
    if a.teacher_pixels < MIN_PIXELS:
        fail(f"--teacher-pixels {a.teacher_pixels}: must be >= {MIN_PIXELS} (the recognition rule)")
    if a.encoder and not Path(a.encoder).is_file():
        fail(f"--encoder {a.encoder}: no such file (training/house_encoder.py writes one; the shipped one is "
             f"checkpoints/house_encoder.pt)")
    try:
        sightings = Sightings(a.encoder) if a.encoder else None
    except (ValueError, RuntimeError) as e:  # not an encoder file, or one whose layers do not fit
        fail(str(e))
    result = measure(a.trials, a.steps, a.seed, a.noise, parse_noise(a.pose_noise), a.teacher_pixels, sightings)
    print(f"{'the teacher asked again':32s} | {'same label':>10} | {'goal known':>10} | {'exploring':>9} | n")
    def f(v: float | None, width: int) -> str:
        return f"{v:>{width}.3f}" if v is not None else f"{'-':>{width}}"

    for name, r in result.items():
        print(f"{name:32s} | {f(r['all'], 10)} | {f(r['goal_known'], 10)} | {f(r['exploring'], 9)} | {r['n']} "
              f"({r['n_goal_known']} goal known)")
    report = {"args": vars(a), "same_label": result}
    if sightings is not None:
        report["sightings"] = s = sightings.summary()
        print(f"\n{'goal size (pixels)':20s} | {'states':>6} | {'mean P(in view)':>15} | {'P > 0.5':>7} | "
              f"teacher's first recognitions")
        for b, share in zip(s["by_goal_pixels"], s["first_recognition"]["share_by_bin"]):
            hi = "inf" if b["pixels"][1] is None else f"{b['pixels'][1]:g}"
            print(f"{'[' + format(b['pixels'][0], 'g') + ', ' + hi + ')':20s} | {b['n']:>6} | "
                  f"{f(b['mean_p'], 15)} | {f(b['p_above_0.5'], 7)} | {f(share, 5)}")
        print(f"teacher's first recognitions of the goal: n = {s['first_recognition']['n']}, "
              f"quartiles {s['first_recognition']['quartiles']} pixels")
    if a.out:
        Path(a.out).mkdir(parents=True, exist_ok=True)
        (Path(a.out) / "label_noise.json").write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    from icrl_ros.training._cli import run_main

    raise SystemExit(run_main(main))
