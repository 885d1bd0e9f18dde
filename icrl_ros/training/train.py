"""Train a ReLIC in-context policy with PPO + partial updates.

    python training/train.py --config config/train/darkroom.yaml
    python training/train.py --config config/train/darkroom.yaml --set ppo.lr=1e-3 --set model.iea=false
    python training/train.py --config ... --resume runs/darkroom/checkpoints/latest.pt
    python training/train.py --config ... --init runs/imitated/checkpoints/final.pt   # fine-tune its weights
    torchrun --nproc_per_node 2 training/train.py --config ...     # gloo on CPU, nccl on GPU

Writes TensorBoard scalars (``charts/*``, ``losses/*``), ``checkpoints/latest.pt`` every
``checkpoint_every`` rollouts and ``checkpoints/final.pt`` at the end.
"""

from __future__ import annotations


import argparse
import math
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist

from icrl_ros.models import build_policy, save_checkpoint
from icrl_ros.models.checkpoint import FORMAT
from icrl_ros.sim import make_vec
from icrl_ros.training._cli import fail, load_init_weights
from icrl_ros.training.config import config_from_cli
from icrl_ros.training.ppo import PPOTrainer


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", help="YAML file in config/train/")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a config field")
    p.add_argument("--resume", help="checkpoint to resume from (weights, optimiser, progress)")
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
    cfg = config_from_cli(args.config, args.set, args.run_dir)
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
        if model_args.depth_dropout > 0 and rank == 0:  # fine-tuning a trained policy: see README, PPO
            print(f"note: model.depth_dropout={model_args.depth_dropout} drops whole layers in PPO's update but not "
                  "when acting, so the ratio starts away from 1; fine-tune with --set model.depth_dropout=0",
                  file=sys.stderr, flush=True)
    if args.resume:
        blob = torch.load(args.resume, map_location=device, weights_only=False)
        if blob.get("format") != FORMAT or "optimizer" not in blob:
            fail(f"--resume {args.resume}: not a training checkpoint (needs format {FORMAT!r} and an optimizer)")
        policy.load_state_dict(blob["state_dict"])
        trainer.opt.load_state_dict(blob["optimizer"])
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

    t_start = time.perf_counter()
    for r in range(start, total_rollouts):
        t0 = time.perf_counter()
        stats = trainer.rollout_and_update()
        dt = time.perf_counter() - t0
        if rank != 0:
            continue
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
    raise SystemExit(main())
