"""Frames per second of the MiniWorld house env (icrl_ros/MiniWorldHouse-v0) here.

    python training/env_speed.py
    python training/env_speed.py --image-size 64 --steps 3000 --workers 1 2 --num-envs 8 --csv runs/env_speed.csv

One frame = one env step (one rendered observation). Actions are random with the mix a
searching agent produces (stop 2%, forward 50%, turn left / right 24% each); finished
episodes start the next episode of the same house, as in training. Rows:

* ``render only``: the MiniWorld renderer alone (camera pose changes every frame);
* ``single process``: ``HouseEnv.step`` (render + collisions + geodesic reward);
* ``vectorised, W workers``: ``HouseVecEnv`` with ``--num-envs`` envs over W processes,
  frames summed over envs (includes the pipe round trips).

Prints a table and writes a CSV. Other jobs on the machine slow every row: the CSV
records the 1-minute load average and the CPU count next to each number.
"""

from __future__ import annotations

if __package__ in (None, ""):
    from _cli import ensure_repo_on_path  # type: ignore[no-redef]

    ensure_repo_on_path()

import argparse
import csv
import os
import platform
import time
from pathlib import Path

import numpy as np

ACTION_P = (0.02, 0.5, 0.24, 0.24)


def bench_render(image_size: int, frames: int, seed: int) -> float:
    from icrl_ros.sim.house import HouseEnv

    env = HouseEnv(image_size=image_size)
    env.reset(seed=seed)
    r = env._renderer
    rng = np.random.default_rng(seed)
    x, z = env.x, env.z
    yaws = rng.uniform(-np.pi, np.pi, frames)
    for yaw in yaws[:50]:  # warm-up
        r.render(x, z, yaw)
    t = time.perf_counter()
    for yaw in yaws:
        r.render(x, z, yaw)
    fps = frames / (time.perf_counter() - t)
    env.close()
    return fps


def bench_single(image_size: int, steps: int, seed: int) -> float:
    from icrl_ros.sim.house import HouseEnv

    env = HouseEnv(image_size=image_size)
    env.reset(seed=seed)
    acts = np.random.default_rng(seed).choice(4, size=steps + 50, p=ACTION_P)
    t = None
    for k, a in enumerate(acts):
        if k == 50:  # after a warm-up
            t = time.perf_counter()
        _, _, term, trunc, _ = env.step(a)
        if term or trunc:
            env.reset()
    fps = steps / (time.perf_counter() - t)
    env.close()
    return fps


def bench_vec(image_size: int, steps: int, num_envs: int, workers: int, seed: int) -> float:
    from icrl_ros.sim.house_vec import HouseVecEnv

    rng = np.random.default_rng(seed)
    n_batches = max(steps // num_envs, 1)
    with HouseVecEnv(num_envs, "train", seed=seed, image_size=image_size, num_workers=workers) as env:
        env.reset_trial()
        for _ in range(20):  # warm-up
            env.step(rng.choice(4, size=num_envs, p=ACTION_P))
        t = time.perf_counter()
        for _ in range(n_batches):
            env.step(rng.choice(4, size=num_envs, p=ACTION_P))
        return n_batches * num_envs / (time.perf_counter() - t)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--image-size", type=int, default=64)
    p.add_argument("--steps", type=int, default=3000, help="frames per measurement")
    p.add_argument("--workers", type=int, nargs="+", default=[1, 2], help="worker counts to measure")
    p.add_argument("--num-envs", type=int, default=8, help="envs in the vectorised runs")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--csv", type=Path, default=Path("runs/env_speed.csv"))
    args = p.parse_args()

    rows = []

    def record(mode: str, workers: int, envs: int, fps: float) -> None:
        load = os.getloadavg()[0]
        rows.append({"mode": mode, "workers": workers, "num_envs": envs, "image_size": args.image_size,
                     "frames_per_s": round(fps, 1), "cpus": os.cpu_count(), "load_avg_1min": round(load, 2),
                     "host": platform.node()})
        print(f"{mode:<28} {workers:>7} {envs:>8} {fps:>10.0f} {load:>9.2f}", flush=True)

    print(f"MiniWorld house, {args.image_size}x{args.image_size} RGB, {os.cpu_count()} CPUs, "
          f"{args.steps} frames per row")
    print(f"{'mode':<28} {'workers':>7} {'num_envs':>8} {'frames/s':>10} {'load avg':>9}")
    record("render only", 0, 1, bench_render(args.image_size, args.steps, args.seed))
    record("single process", 0, 1, bench_single(args.image_size, args.steps, args.seed))
    for w in args.workers:
        record(f"vectorised, {w} worker(s)", w, args.num_envs,
               bench_vec(args.image_size, args.steps, args.num_envs, w, args.seed))

    args.csv.parent.mkdir(parents=True, exist_ok=True)
    with args.csv.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    print(f"wrote {args.csv}")


if __name__ == "__main__":
    main()
