"""How much of the house teacher's labels a student could match: the teacher against itself.

    python training/house_label_noise.py --trials 10 --steps 500 --seed 1000 --out runs/label_noise

The imitation students agree with the in-context teacher on 0.64-0.68 of held-out steps, the
same on training trials. Whether that is underfitting depends on how sharp the labels are. This
drives the teacher as the saved imitation data were collected (train houses, its own action,
a random move with probability ``--noise``) and, at every state, asks it again

* with a fresh plan (its plan cache of ``REPLAN`` steps is state no student sees), and
* at the same state with its pose perturbed by Gaussian noise (per axis in metres, yaw in
  degrees; ``--pose-noise``), i.e. a teacher that knows where it is and what it saw a little
  less exactly than it does, as any student does,

and prints the share of states where the label stays the same, overall and split by whether the
goal was already known (the teacher then drives to it) or not (it explores). Writes
``label_noise.json``. Nothing here is an evaluation: train houses, a diagnosis of the labels.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import numpy as np

from icrl_ros.sim.house import HouseEnv
from icrl_ros.training._cli import fail


def parse_noise(text: str) -> list[tuple[float, float]]:
    try:
        pairs = [tuple(float(v) for v in item.split(":")) for item in text.split(",")]
    except ValueError:
        pairs = []
    if not pairs or any(len(p) != 2 or p[0] < 0 or p[1] < 0 for p in pairs):
        fail(f"--pose-noise {text!r}: expected metres:degrees pairs, e.g. 0.02:1,0.05:3")
    return pairs


def measure(trials: int, steps: int, seed: int, noise: float, levels: list[tuple[float, float]]) -> dict:
    rng = np.random.default_rng(seed)
    same: dict[str, dict[bool, list[bool]]] = {k: {True: [], False: []} for k in
                                               ["fresh plan"] + [f"pose noise {m} m, {d} deg" for m, d in levels]}
    for trial in range(trials):
        env = HouseEnv(split="train", teacher="memory")
        _, info = env.reset(seed=seed + trial)
        teacher = env.teacher
        for _ in range(steps):
            label, known = int(info["teacher_action"]), bool(info["teacher_goal_known"])
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
            _, _, terminated, truncated, info = env.step(action)
            if terminated or truncated:
                _, info = env.reset()
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
    p.add_argument("--out", help="directory for label_noise.json")
    a = p.parse_args(argv)
    if a.trials < 1 or a.steps < 1 or not 0 <= a.noise <= 1:
        fail("--trials and --steps must be >= 1 and --noise in [0, 1]")
    result = measure(a.trials, a.steps, a.seed, a.noise, parse_noise(a.pose_noise))
    print(f"{'the teacher asked again':32s} | {'same label':>10} | {'goal known':>10} | {'exploring':>9} | n")
    def f(v: float | None, width: int) -> str:
        return f"{v:>{width}.3f}" if v is not None else f"{'-':>{width}}"

    for name, r in result.items():
        print(f"{name:32s} | {f(r['all'], 10)} | {f(r['goal_known'], 10)} | {f(r['exploring'], 9)} | {r['n']} "
              f"({r['n_goal_known']} goal known)")
    if a.out:
        Path(a.out).mkdir(parents=True, exist_ok=True)
        (Path(a.out) / "label_noise.json").write_text(json.dumps({"args": vars(a), "same_label": result}, indent=1))


if __name__ == "__main__":
    main()
