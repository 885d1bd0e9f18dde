"""Offline training of an RA-DT policy on stored learning histories (cross-entropy on actions).

    python training/radt_collect.py --out runs/radt/darkroom_histories.npz
    python training/train_radt.py --config config/train/darkroom_radt.yaml
    python training/train_radt.py --config config/train/darkroom_radt.yaml --set steps=500 --set lr=1e-3

Every batch retrieves, for each window, sub-trajectories of *other* episodes from the
index of the whole dataset (see :mod:`icrl_ros.training.radt_data`). Writes TensorBoard scalars
(``losses/action_ce``, ``charts/action_accuracy``, ``charts/retrieved_same_task``,
``charts/learning_rate``, ``charts/SPS``), ``checkpoints/latest.pt`` every
``checkpoint_every`` steps and ``checkpoints/final.pt`` at the end.
"""

from __future__ import annotations


import argparse
import dataclasses
import math
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from icrl_ros.models import save_checkpoint
from icrl_ros.models.config import check_positive, from_known_fields
from icrl_ros.families.radt.model import RADTArgs, RADTPolicy, as_tensors
from icrl_ros.sim import make_vec
from icrl_ros.training._cli import fail
from icrl_ros.training.config import read_config
from icrl_ros.training.radt_data import OfflineRetrievalBatches, load_dataset


@dataclass
class RADTTrainConfig:
    data: str = "runs/radt/darkroom_histories.npz"
    """Dataset from training/radt_collect.py (its env id sets the model's sizes)."""
    model: dict = field(default_factory=dict)
    """RADTArgs overrides; n_obs / n_actions / max_episode_steps / grid_size come from the env."""
    steps: int = 4000
    """Gradient steps."""
    batch_size: int = 64
    lr: float = 1e-3
    min_lr: float = 1e-5
    """Cosine decay floor."""
    warmup_steps: int = 100
    weight_decay: float = 0.01
    grad_clip: float = 0.25
    retrieve_l: int = 50
    """Candidates by cosine before re-ranking (RA-DT: 50)."""
    utility_weight: float = 1.0
    """alpha: weight of the utility (task match in training, return at inference)."""
    query_dropout: float = 0.2
    similarity_cutoff: float | None = 0.98
    """Training candidates more similar than this are dropped (None: off)."""
    dedup_threshold: float | None = 0.98
    """Index deduplication threshold (None: keep every entry)."""
    min_retrieval_len: int = 10
    """Windows shorter than this get a random same-task sub-trajectory instead."""
    retrieval_dropout: float = 0.1
    """Probability of an empty retrieved context (as at the start of an evaluation trial). With
    ``retrieve_from: history`` set 0: episode-1 windows have nothing retrieved already, and a later
    window stripped of its retrieved context teaches episode 1 that later episode's behaviour."""
    failure_retrieval: float = 0.0
    """Probability of retrieving a random zero-return episode of the same task instead."""
    use_labels: bool = True
    """Train on the dataset's ``label`` (a teacher's action) instead of the executed ``action``
    where the dataset has one (``radt_collect.py --learner room``)."""
    retrieve_from: str = "dataset"
    """Training retrieval: ``dataset`` (other episodes of the same task, RA-DT) or ``history``
    (the same learner's earlier episodes only, ranked by return, as in an evaluation trial)."""
    target_return: float = 90.0
    """Evaluation: mean of the return-to-go the DT is conditioned on per episode (RA-DT: N(90, 5))."""
    target_return_std: float = 5.0
    seed: int = 0
    run_dir: str = "runs/radt"
    log_every: int = 50
    checkpoint_every: int = 500
    threads: int = 1
    """torch intra-op threads."""

    def validate(self) -> None:
        for name in ("steps", "batch_size", "lr", "retrieve_l", "log_every", "checkpoint_every", "min_retrieval_len"):
            check_positive(name, getattr(self, name))
        for name in ("min_lr", "warmup_steps", "weight_decay", "grad_clip", "utility_weight", "target_return_std",
                     "threads"):
            check_positive(name, getattr(self, name), allow_zero=True)
        for name in ("query_dropout", "retrieval_dropout", "failure_retrieval"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise ValueError(f"{name}: must be in [0, 1), got {getattr(self, name)}")
        if self.retrieve_from not in ("dataset", "history"):
            raise ValueError(f"retrieve_from: 'dataset' or 'history', got {self.retrieve_from!r}")
        if not isinstance(self.use_labels, bool):
            raise ValueError(f"use_labels: true or false, got {self.use_labels!r}")
        for name in ("similarity_cutoff", "dedup_threshold"):
            v = getattr(self, name)
            if v is not None and not -1.0 <= v <= 1.0:
                raise ValueError(f"{name}: a cosine threshold in [-1, 1] or null, got {v}")
        top_k = self.model.get("top_k", 1)
        if not isinstance(top_k, int) or not 0 < top_k <= self.retrieve_l:
            raise ValueError(f"model.top_k: must be in [1, retrieve_l={self.retrieve_l}], got {top_k!r}")
        self.model_args(n_obs=1, n_actions=1, max_episode_steps=1, grid_size=1)  # validates the overrides (the env gives these)

    def model_args(self, **env_fields) -> RADTArgs:
        return RADTArgs.from_dict({**self.model, **env_fields})

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def load(cls, path: str | Path | None = None, overrides: list[str] | None = None) -> RADTTrainConfig:
        cfg = from_known_fields(cls, read_config(path, overrides), "config")
        cfg.validate()
        return cfg


def lr_at(cfg: RADTTrainConfig, step: int) -> float:
    """Linear warm-up, then cosine decay to ``min_lr`` (RA-DT's schedule)."""
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    frac = (step - cfg.warmup_steps) / max(1, cfg.steps - cfg.warmup_steps)
    return cfg.min_lr + 0.5 * (cfg.lr - cfg.min_lr) * (1 + math.cos(math.pi * min(frac, 1.0)))


def make_batches(cfg: RADTTrainConfig, policy: RADTPolicy, data: dict) -> OfflineRetrievalBatches:
    return OfflineRetrievalBatches(policy, data, cfg.retrieve_l, cfg.utility_weight, cfg.query_dropout,
                                   cfg.similarity_cutoff, cfg.dedup_threshold, cfg.min_retrieval_len,
                                   cfg.retrieval_dropout, cfg.failure_retrieval, cfg.seed, cfg.use_labels,
                                   cfg.retrieve_from)


def resume(path: str, cfg: RADTTrainConfig, policy: RADTPolicy, opt: torch.optim.Optimizer,
           batches: OfflineRetrievalBatches) -> tuple[int, float]:
    """Load a run's latest.pt into ``policy``, ``opt`` and the random streams (torch's, for
    dropout, and the batch sampler's); returns (its step, its wall seconds). With the same config
    the resumed run takes the steps the first run would have taken."""
    try:
        blob = torch.load(path, map_location="cpu", weights_only=False)
    except (OSError, RuntimeError) as e:
        fail(f"--resume {path}: not readable ({e})")
    if not isinstance(blob, dict) or not {"optimizer", "rng", "train_steps"} <= blob.keys():
        fail(f"--resume {path}: not a train_radt.py checkpoint with an optimiser (checkpoints/latest.pt of a run)")
    if blob["model_args"] != policy.args.to_dict():
        fail(f"--resume {path}: its model differs from the config's; resume with the run's own config and --set")
    step = int(blob["train_steps"])
    if step >= cfg.steps:
        fail(f"--resume {path}: already at step {step:,} of steps={cfg.steps:,}; raise steps to train on")
    policy.load_state_dict(blob["state_dict"])
    opt.load_state_dict(blob["optimizer"])
    torch.set_rng_state(blob["rng"]["torch"])
    batches.rng.bit_generator.state = blob["rng"]["batches"]
    print(f"resumed {path} at step {step:,}", flush=True)
    return step, float(blob.get("wall_s", 0.0))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", help="YAML file in config/train/")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a config field")
    p.add_argument("--run-dir", help="output directory (overrides run_dir)")
    p.add_argument("--resume", help="a checkpoint of this run (latest.pt) to continue from: weights, optimiser, "
                                    "step and random streams (with the same config it ends where an unbroken run would)")
    args = p.parse_args(argv)
    try:
        cfg = RADTTrainConfig.load(args.config, args.set)
        data = load_dataset(cfg.data)
    except (ValueError, FileNotFoundError) as e:
        fail(str(e))
    if args.run_dir:
        cfg.run_dir = args.run_dir
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    torch.manual_seed(cfg.seed)
    env_id = str(data["env_id"])
    env = make_vec(env_id, 1)
    policy = RADTPolicy(cfg.model_args(**env.model_fields()))
    t0 = time.perf_counter()
    batches = make_batches(cfg, policy, data)
    print(f"dataset {cfg.data}: {len(data['obs']):,} episodes, {data['obs'].size:,} steps, "
          f"{len(np.unique(data['task']))} tasks, targets {'action' if batches.label is None else 'label'}; "
          f"index {batches.entries:,} sub-trajectories after dedup "
          f"({time.perf_counter() - t0:.1f} s); model {sum(q.numel() for q in policy.parameters()):,} parameters")
    opt = torch.optim.AdamW(policy.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    start, wall_before = 0, 0.0
    if args.resume:
        start, wall_before = resume(args.resume, cfg, policy, opt, batches)
    run_dir = Path(cfg.run_dir)
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(str(run_dir / "tb"))
    config = {**cfg.to_dict(), "env": {"id": env_id}}
    policy.train()
    acc: dict[str, list[float]] = {}
    t_log = time.perf_counter()
    t_run = time.perf_counter()
    for step in range(start, cfg.steps):
        win, ret, target, rows = batches.sample(cfg.batch_size)
        w, r = as_tensors(win), as_tensors(ret)
        logits = policy(w, r)
        m = w["valid"]
        tgt = torch.as_tensor(target)[m]
        loss = F.cross_entropy(logits[m], tgt)
        for g in opt.param_groups:
            g["lr"] = lr_at(cfg, step)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if cfg.grad_clip:
            torch.nn.utils.clip_grad_norm_(policy.parameters(), cfg.grad_clip)
        opt.step()
        has = ret["slot"][:, 0] >= 0
        stats = {"losses/action_ce": loss.item(),
                 "charts/action_accuracy": (logits[m].argmax(-1) == tgt).float().mean().item(),
                 "charts/retrieved_same_task": float((batches.task[ret["slot"][has, 0]] == batches.task[rows[has]]).mean())
                 if has.any() else float("nan")}
        for k, v in stats.items():
            acc.setdefault(k, []).append(v)
        if (step + 1) % cfg.log_every == 0 or step + 1 == cfg.steps:
            sps = cfg.log_every * cfg.batch_size / (time.perf_counter() - t_log)
            t_log = time.perf_counter()
            row = {k: float(np.nanmean(v)) for k, v in acc.items()}
            row.update({"charts/learning_rate": lr_at(cfg, step), "charts/SPS": sps})
            for k, v in row.items():
                writer.add_scalar(k, v, step + 1)
            print(f"step {step + 1:6d}  ce {row['losses/action_ce']:.4f}  acc {row['charts/action_accuracy']:.3f}  "
                  f"same-task {row['charts/retrieved_same_task']:.2f}  lr {row['charts/learning_rate']:.2e}  "
                  f"{sps:.0f} samples/s", flush=True)
            acc = {}
        if (step + 1) % cfg.checkpoint_every == 0 or step + 1 == cfg.steps:
            name = "final.pt" if step + 1 == cfg.steps else "latest.pt"
            save_checkpoint(run_dir / "checkpoints" / name, policy.eval(), config, train_steps=step + 1,
                            optimizer=opt.state_dict(), wall_s=wall_before + time.perf_counter() - t_run,
                            rng={"torch": torch.get_rng_state(), "batches": batches.rng.bit_generator.state})
            policy.train()
    writer.close()
    print(f"done in {time.perf_counter() - t0:.0f} s -> {run_dir / 'checkpoints' / 'final.pt'}")
    return 0


if __name__ == "__main__":
    from icrl_ros.training._cli import run_main

    raise SystemExit(run_main(main))
