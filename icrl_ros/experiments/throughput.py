"""Training throughput: env steps/s of the full PPO loop (rollout + partial updates).

    python experiments/throughput.py --config config/train/darkroom.yaml --rollouts 3 --threads 1 2

Runs a few rollouts per thread setting after one warm-up rollout and prints env steps/s,
the rollout/update split, and writes a CSV (``--csv``). Numbers depend on what else runs.
"""

from __future__ import annotations


import argparse
import csv
import time

import torch

from icrl_ros.models import build_policy
from icrl_ros.sim import make_vec
from icrl_ros.training._cli import fail
from icrl_ros.training.config import TrainConfig
from icrl_ros.training.ppo import PPOTrainer


def measure(cfg: TrainConfig, rollouts: int, threads: int, device: str) -> dict:
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    env = make_vec(cfg.env.id, cfg.env.num_envs, seed=0)
    policy = build_policy(cfg.model_args(**env.model_fields())).to(device)
    trainer = PPOTrainer(policy, env, cfg.ppo, rollouts + 1, device)
    update_time = 0.0
    original = trainer.update

    def timed_update(*a, **k):
        nonlocal update_time
        t = time.perf_counter()
        original(*a, **k)
        update_time += time.perf_counter() - t

    trainer.update = timed_update  # type: ignore[method-assign]
    trainer.rollout_and_update()  # warm-up
    update_time = 0.0
    t0 = time.perf_counter()
    for _ in range(rollouts):
        trainer.rollout_and_update()
    dt = time.perf_counter() - t0
    steps = rollouts * cfg.env.num_envs * cfg.ppo.rollout_length
    return {"env": cfg.env.id, "kind": policy.args.kind, "threads": threads, "device": device,
            "steps": steps, "seconds": round(dt, 2), "steps_per_s": round(steps / dt, 1),
            "update_share": round(update_time / dt, 3)}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", action="append", required=True)
    p.add_argument("--set", action="append", default=[])
    p.add_argument("--rollouts", type=int, default=3)
    p.add_argument("--threads", type=int, nargs="+", default=[1])
    p.add_argument("--device", default="cpu")
    p.add_argument("--csv", default="throughput.csv")
    args = p.parse_args(argv)
    rows = []
    for path in args.config:
        try:
            cfg = TrainConfig.load(path, args.set)
        except (ValueError, FileNotFoundError) as e:
            fail(str(e))
        for th in args.threads:
            row = measure(cfg, args.rollouts, th, args.device)
            rows.append(row)
            print(f"{row['env']:<28} {row['kind']:<6} threads={th} {row['steps_per_s']:>9.0f} steps/s "
                  f"(update share {row['update_share']:.0%})", flush=True)
    with open(args.csv, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    print(f"wrote {args.csv}")
    return 0


if __name__ == "__main__":
    from icrl_ros.training._cli import run_main

    raise SystemExit(run_main(main))
