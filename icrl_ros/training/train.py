"""Train a ReLIC in-context policy with PPO + partial updates.

    python training/train.py --config config/train/darkroom.yaml
    python training/train.py --config config/train/darkroom.yaml --set ppo.lr=1e-3 --set model.iea=false
    python training/train.py --resume runs/darkroom/checkpoints/latest.pt   # its own config and run dir
    python training/train.py --config ... --init runs/imitated/checkpoints/final.pt   # fine-tune its weights
    torchrun --nproc_per_node 2 training/train.py --config ...     # gloo on CPU, nccl on GPU

Writes TensorBoard scalars (``charts/*``, ``losses/*``), ``checkpoints/latest.pt`` every
``checkpoint_every`` rollouts and ``checkpoints/final.pt`` at the end. Ctrl-C (SIGINT) or SIGTERM
saves ``checkpoints/latest.pt`` at the last finished rollout and exits (status 130 / 143) with the
command that resumes it.
"""

from __future__ import annotations


import argparse
import math
import os
import signal
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist

from icrl_ros.models import build_policy, save_checkpoint
from icrl_ros.models.checkpoint import read_checkpoint
from icrl_ros.sim import make_vec
from icrl_ros.training._cli import fail, load_init_weights
from icrl_ros.training.config import config_from_cli
from icrl_ros.training.ppo import PPOTrainer


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", help="YAML file in config/train/")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a config field")
    p.add_argument("--resume", help="checkpoint to resume from (weights, optimiser, progress); without --config "
                   "the run's own config (and run dir) from the checkpoint")
    p.add_argument("--init-partial", action="store_true",
                   help="with --init: the checkpoint may differ from the config; copy the weights whose names and "
                        "shapes match (printed), keep the rest fresh")
    p.add_argument("--init", help="start from this checkpoint's weights (a fresh optimiser and schedule; the "
                   "model arguments must match the config's), e.g. one from training/imitate.py")
    p.add_argument("--run-dir", help="output directory (overrides run_dir)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    return p.parse_args(argv)


def setup_distributed(device: str) -> tuple[int, int]:
    if "WORLD_SIZE" not in os.environ or int(os.environ["WORLD_SIZE"]) == 1:
        return 0, 1
    backend = "nccl" if device.startswith("cuda") else "gloo"
    dist.init_process_group(backend)
    return dist.get_rank(), dist.get_world_size()


def summarise(stats, n_ep_first: int = 1) -> dict[str, float]:
    out: dict[str, float] = {}
    if stats.episode_returns:
        idx = np.array([e for e, _ in stats.episode_returns])
        ret = np.array([r for _, r in stats.episode_returns])
        out["charts/episode_return"] = float(ret.mean())
        out["charts/return_first_episode"] = float(ret[idx == 0].mean()) if (idx == 0).any() else float("nan")
        hi = idx.max()
        out["charts/return_last_episode"] = float(ret[idx == hi].mean())
    out["charts/trial_return_normalised"] = stats.trial_return_normalised
    for k, v in stats.losses.items():
        out[f"losses/{k}" if k not in ("lr",) else "charts/learning_rate"] = float(np.mean(v))
    return out


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.init and args.resume:
        fail("--init and --resume: give one (--resume continues a run, --init starts one from given weights)")
    blob = None
    if args.resume:
        try:
            blob = read_checkpoint(args.resume)
        except (FileNotFoundError, ValueError) as e:
            fail(f"--resume: {e}")
        if "optimizer" not in blob or not isinstance(blob.get("config"), dict):
            fail(f"--resume {args.resume}: a shipped checkpoint (no optimiser state or config); resume from a run's "
                 "checkpoints/latest.pt, or start from these weights with --init")
    elif args.config is None:
        fail("--config: give a training config (config/train/*.yaml), or --resume a run's checkpoints/latest.pt")
    cfg = config_from_cli(args.config, args.set, args.run_dir, base=blob["config"] if blob else None)
    rank, world = setup_distributed(cfg.device)
    device = cfg.device
    if device.startswith("cuda") and world > 1:
        device = f"cuda:{int(os.environ.get('LOCAL_RANK', 0))}"
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    torch.manual_seed(cfg.seed + 1000 * rank)
    try:
        env = make_vec(cfg.env.id, cfg.env.num_envs, split="train", seed=cfg.seed + 1000 * rank, **cfg.env.options)
    except (TypeError, ValueError) as e:
        fail(f"env.options: {e}")
    model_args = cfg.model_args(**env.model_fields())
    policy = build_policy(model_args, load_pretrained=True).to(device)
    if world > 1:  # identical initial weights on every rank
        for p in policy.parameters():
            dist.broadcast(p.data, 0)
    steps_per_rollout = cfg.env.num_envs * cfg.ppo.rollout_length * world
    total_rollouts = math.ceil(cfg.total_steps / steps_per_rollout)
    try:
        trainer = PPOTrainer(policy, env, cfg.ppo, total_rollouts, device, world)
    except ValueError as e:  # ppo.teacher for an env it does not play
        fail(f"ppo.teacher: {e}")
    start = 0
    if args.init:
        load_init_weights(args.init, policy, map_location=device, partial=args.init_partial)
        if model_args.depth_dropout > 0 and rank == 0:  # fine-tuning a trained policy: see docs/training.md, PPO
            print(f"note: model.depth_dropout={model_args.depth_dropout} drops whole layers in PPO's update but not "
                  "when acting, so the ratio starts away from 1; fine-tune with --set model.depth_dropout=0",
                  file=sys.stderr, flush=True)
    if blob is not None:
        try:
            policy.load_state_dict(blob["state_dict"])
            trainer.opt.load_state_dict(blob["optimizer"])
        except (RuntimeError, ValueError) as e:
            fail(f"--resume {args.resume}: its weights do not fit the model of "
                 f"{args.config or 'its config'} with these --set values ({str(e).splitlines()[0][:160]}); "
                 "resume without --config to use the run's own")
        trainer.opt_step, start = blob["opt_step"], blob["rollout"]
        trainer.rollout = start
        env.rng = np.random.default_rng(cfg.seed + 1000 * rank + start)
    run_dir = Path(cfg.run_dir)
    writer = None
    if rank == 0:
        from torch.utils.tensorboard import SummaryWriter

        run_dir.mkdir(parents=True, exist_ok=True)
        writer = SummaryWriter(str(run_dir / "tb"))
        (run_dir / "config.yaml").write_text(__import__("yaml").safe_dump(cfg.to_dict(), sort_keys=False))
        n_params = sum(p.numel() for p in policy.parameters())
        print(f"training {cfg.env.id}: {n_params:,} parameters, {total_rollouts} rollouts of "
              f"{steps_per_rollout:,} steps, {world} process(es), run dir {run_dir}", flush=True)
    bar = None
    if rank == 0 and not args.no_progress:
        from tqdm import tqdm

        bar = tqdm(total=total_rollouts * steps_per_rollout, initial=start * steps_per_rollout, unit="step",
                   dynamic_ncols=True)

    def save(name: str, rollout: int) -> None:
        save_checkpoint(run_dir / "checkpoints" / name, policy, cfg.to_dict(), optimizer=trainer.opt.state_dict(),
                        opt_step=trainer.opt_step, rollout=rollout, env_steps=rollout * steps_per_rollout)

    def report(r: int, stats, dt: float) -> None:
        scalars = summarise(stats)
        scalars["charts/SPS"] = steps_per_rollout / dt
        step = (r + 1) * steps_per_rollout
        for k, v in scalars.items():
            writer.add_scalar(k, v, step)
        if bar is not None:
            bar.update(steps_per_rollout)
            bar.set_postfix(ret0=f"{scalars.get('charts/return_first_episode', float('nan')):.1f}",
                            retN=f"{scalars.get('charts/return_last_episode', float('nan')):.1f}",
                            sps=f"{scalars['charts/SPS']:.0f}")
        else:
            print(f"rollout {r + 1}/{total_rollouts} steps {step:,} " +
                  " ".join(f"{k.split('/')[1]}={v:.3g}" for k, v in scalars.items()), flush=True)
        if (r + 1) % cfg.checkpoint_every == 0:
            save("latest.pt", r + 1)

    def interrupted(signum, frame):
        raise KeyboardInterrupt(signum)

    # SIGTERM, and SIGINT explicitly: a process started in the background of a script (or by a test runner's worker)
    # inherits SIGINT ignored, and Python then installs no KeyboardInterrupt for it
    old_term = signal.signal(signal.SIGTERM, interrupted)
    old_int = signal.signal(signal.SIGINT, interrupted)
    t_start, done = time.perf_counter(), start
    try:
        for r in range(start, total_rollouts):
            t0 = time.perf_counter()
            stats = trainer.rollout_and_update()
            done = r + 1
            if rank == 0:
                report(r, stats, time.perf_counter() - t0)
    except KeyboardInterrupt as e:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not cut the save short
        signum = e.args[0] if e.args and isinstance(e.args[0], int) else signal.SIGINT
        if bar is not None:
            bar.close()
        if rank == 0:
            save("latest.pt", done)
            writer.close()
            print(f"\ninterrupted ({signal.Signals(signum).name}): saved {run_dir / 'checkpoints' / 'latest.pt'} at "
                  f"rollout {done}/{total_rollouts} ({done * steps_per_rollout:,} steps; an unfinished rollout is "
                  f"redone). Resume with: python training/train.py --resume {run_dir / 'checkpoints' / 'latest.pt'}",
                  file=sys.stderr, flush=True)
        if hasattr(env, "close"):
            env.close()
        return 128 + int(signum)
    finally:
        signal.signal(signal.SIGTERM, old_term)
        signal.signal(signal.SIGINT, old_int)
    if rank == 0:
        save("latest.pt", total_rollouts)
        save("final.pt", total_rollouts)
        writer.close()
        if bar is not None:
            bar.close()
        elapsed = time.perf_counter() - t_start
        done_steps = (total_rollouts - start) * steps_per_rollout
        print(f"done: {done_steps:,} steps in {elapsed:.0f}s ({done_steps / max(elapsed, 1e-9):.0f} steps/s); "
              f"checkpoint {run_dir / 'checkpoints' / 'final.pt'}", flush=True)
    if hasattr(env, "close"):
        env.close()
    if world > 1:
        # Tear down together, not while rank 0 still writes checkpoints: rank 1 once aborted at
        # exit ("terminate called without an active exception") in a fresh-clone make test.
        dist.barrier()
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    from icrl_ros.training._cli import run_main

    raise SystemExit(run_main(main))
