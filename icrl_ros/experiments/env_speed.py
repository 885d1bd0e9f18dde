"""Frames per second of the MiniWorld house env (icrl_ros/MiniWorldHouse-v0) here.

    python experiments/env_speed.py
    python experiments/env_speed.py --steps-per-env 1000 --workers 1 2 --num-envs 8 --csv runs/env_speed.csv

One frame = one env step (one rendered observation). Actions are random with the mix a
searching agent produces (stop 2%, forward 50%, turn left / right 24% each); finished
episodes start the next episode of the same house, as in training. Every env runs the
same number of steps in every row, so each row pays the same per-trial set-up (house
generation, navigation grid, geodesic fields: ~0.1-0.3 s per house). Rows:

* ``render only``: the MiniWorld renderer alone (camera pose changes every frame);
* ``single process``: ``--num-envs`` ``HouseEnv``s (the same houses as the vectorised
  rows) stepped in turn in this process: render + collisions + geodesic reward (+ the
  teacher's label of every step with ``--teacher``);
* ``vectorised, W workers``: ``HouseVecEnv`` with ``--num-envs`` envs over W processes,
  frames summed over envs (includes the pipe round trips).

Prints a table and writes a CSV. Other jobs on the machine slow every row, so each row
also reports frames per CPU-second (the process's CPU time, plus the workers' read from
/proc for the vectorised rows), which other load barely changes, and the load average.
"""

from __future__ import annotations


import argparse
import csv
import os
import platform
import time
from pathlib import Path

import numpy as np

ACTION_P = (0.02, 0.5, 0.24, 0.24)


def _cpu_seconds(pids: list[int]) -> float:
    """User + system CPU seconds of other processes (Linux /proc); NaN elsewhere."""
    total = 0.0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            return float("nan")
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


class Timer:
    """Wall-clock and CPU seconds (this process + the given worker pids) of a block."""

    def __init__(self, pids: list[int] | None = None) -> None:
        self.pids = pids or []

    def __enter__(self) -> Timer:
        self.wall, self.cpu = time.perf_counter(), time.process_time() + _cpu_seconds(self.pids)
        return self

    def __exit__(self, *exc) -> None:
        self.wall = time.perf_counter() - self.wall
        self.cpu = time.process_time() + _cpu_seconds(self.pids) - self.cpu


def bench_render(image_size: int, frames: int, seed: int) -> tuple[int, Timer]:
    from icrl_ros.sim.house import HouseEnv

    env = HouseEnv(image_size=image_size)
    env.reset(seed=seed)
    r = env._renderer
    rng = np.random.default_rng(seed)
    x, z = env.x, env.z
    yaws = rng.uniform(-np.pi, np.pi, frames)
    for yaw in yaws[:50]:  # warm-up
        r.render(x, z, yaw)
    with Timer() as t:
        for yaw in yaws:
            r.render(x, z, yaw)
    env.close()
    return frames, t


def bench_single(image_size: int, steps: int, num_envs: int, seed: int, teacher: str | None = None) -> tuple[int, Timer]:
    from icrl_ros.sim.house import HouseEnv
    from icrl_ros.sim.house_vec import env_seeds

    envs = [HouseEnv(image_size=image_size, teacher=teacher) for _ in range(num_envs)]
    for env, s in zip(envs, env_seeds(seed, num_envs)):
        env.reset(seed=s)
    acts = np.random.default_rng(seed).choice(4, size=(steps + 20, num_envs), p=ACTION_P)

    def run(actions: np.ndarray) -> None:
        for row in actions:
            for env, a in zip(envs, row):
                _, _, term, trunc, _ = env.step(a)
                if term or trunc:
                    env.reset()

    run(acts[:20])  # warm-up, as in bench_vec
    with Timer() as t:
        run(acts[20:])
    for env in envs:
        env.close()
    return steps * num_envs, t


def bench_vec(image_size: int, steps: int, num_envs: int, workers: int, seed: int,
              teacher: str | None = None) -> tuple[int, Timer]:
    from icrl_ros.sim.house_vec import HouseVecEnv

    rng = np.random.default_rng(seed)
    n_batches = steps
    with HouseVecEnv(num_envs, "train", seed=seed, image_size=image_size, num_workers=workers, teacher=teacher) as env:
        env.reset_trial()
        for _ in range(20):  # warm-up
            env.step(rng.choice(4, size=num_envs, p=ACTION_P))
        with Timer([p.pid for p in env._procs]) as t:
            for _ in range(n_batches):
                env.step(rng.choice(4, size=num_envs, p=ACTION_P))
    return n_batches * num_envs, t


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--image-size", type=int, default=64)
    p.add_argument("--steps-per-env", type=int, default=1000, help="steps each env takes per row")
    p.add_argument("--workers", type=int, nargs="*", default=[1, 2],
                   help="worker counts to measure (none: the single-process rows only)")
    p.add_argument("--num-envs", type=int, default=8, help="envs in the vectorised runs")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--teacher", choices=["memory", "wiped"],
                   help="label every step with the in-context teacher's action, as the imitation stages' envs do")
    p.add_argument("--csv", type=Path, default=Path("runs/env_speed.csv"))
    args = p.parse_args()

    rows = []

    def record(mode: str, workers: int, envs: int, result: tuple[int, Timer]) -> None:
        frames, t = result
        fps, per_cpu, load = frames / t.wall, frames / t.cpu, os.getloadavg()[0]
        rows.append({"mode": mode, "workers": workers, "num_envs": envs, "image_size": args.image_size,
                     "teacher": args.teacher or "", "frames": frames, "frames_per_s": round(fps, 1),
                     "frames_per_cpu_s": round(per_cpu, 1),
                     "cpus": os.cpu_count(), "load_avg_1min": round(load, 2), "host": platform.node()})
        print(f"{mode:<28} {workers:>7} {envs:>8} {fps:>10.0f} {per_cpu:>14.0f} {load:>9.2f}", flush=True)

    print(f"MiniWorld house, {args.image_size}x{args.image_size} RGB, {os.cpu_count()} CPUs, "
          f"{args.steps_per_env} steps per env" + (f", teacher {args.teacher}" if args.teacher else ""))
    print(f"{'mode':<28} {'workers':>7} {'num_envs':>8} {'frames/s':>10} {'frames/cpu-s':>14} {'load avg':>9}")
    n = args.steps_per_env
    record("render only", 0, 1, bench_render(args.image_size, n, args.seed))
    record("single process", 0, args.num_envs, bench_single(args.image_size, n, args.num_envs, args.seed, args.teacher))
    for w in args.workers:
        result = bench_vec(args.image_size, n, args.num_envs, w, args.seed, args.teacher)
        record(f"vectorised, {w} worker(s)", w, args.num_envs, result)

    args.csv.parent.mkdir(parents=True, exist_ok=True)
    with args.csv.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    print(f"wrote {args.csv}")


if __name__ == "__main__":
    from icrl_ros.training._cli import run_main

    raise SystemExit(run_main(main))
