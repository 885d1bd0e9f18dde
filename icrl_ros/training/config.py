"""Typed training configuration with YAML files in ``config/train/`` and loud validation.

``TrainConfig.load("config/train/darkroom.yaml", ["ppo.lr=1e-3"])`` reads a file and
applies dotted overrides; every unknown field or bad value raises ``ValueError`` naming
the field and what is allowed.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field, fields
from pathlib import Path

import yaml

from icrl_ros.models.config import ModelArgs, check_positive, normalise_model_dict
from icrl_ros.sim import GRID_ENVS, VEC_ENVS


class ConfigLoader(yaml.SafeLoader):
    """PyYAML follows YAML 1.1, whose floats need a dot: ``1e-3`` would load as the string
    "1e-3". Configs and ``--set`` write exponents the way Python does, so they are floats here."""


ConfigLoader.add_implicit_resolver("tag:yaml.org,2002:float", re.compile(r"^[-+]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)[eE][-+]?[0-9]+$"),
                                   list("-+0123456789."))


@dataclass
class EnvConfig:
    id: str = "icrl_ros/Darkroom-v0"
    """Registered env id (see icrl_ros.sim.VEC_ENVS)."""
    num_envs: int = 64
    """Parallel trials per process."""
    options: dict = field(default_factory=dict)
    """Env arguments (the house: ``pose_frame``, ``max_episode_steps``, ``goal_instances``,
    ``start_away``, ``min_start_distance``, ``teacher``); the grid worlds take none."""

    def validate(self) -> None:
        if self.id not in VEC_ENVS:
            raise ValueError(f"env.id: unknown id {self.id!r}; allowed: {sorted(VEC_ENVS)}")
        check_positive("env.num_envs", self.num_envs)
        if not isinstance(self.options, dict):
            raise ValueError(f"env.options: must be a mapping of env arguments, got {self.options!r}")
        if self.options and self.id in GRID_ENVS:
            raise ValueError(f"env.options: {self.id} takes no options, got {sorted(self.options)}")


@dataclass
class PPOConfig:
    rollout_length: int = 512
    """Steps per env per rollout; each rollout is one trial (the training context)."""
    num_updates: int = 4
    """Updates per rollout (K chunks); the last one is a full update."""
    partial_updates: bool = True
    """False: a single full update at the end of each rollout (the ablation)."""
    num_minibatches: int = 2
    """Env minibatches per update (one optimiser step each)."""
    grad_accum: int = 1
    """Micro-batches per minibatch whose gradients are accumulated."""
    update_epochs: int = 1
    gamma: float = 0.99
    gae_lambda: float = 0.95
    trial_returns: bool = False
    """True: returns and advantages run across episode boundaries to the end of the trial
    (the meta-RL objective of RL^2 / AMAGO: finishing an episode sooner earns the next
    episode's reward sooner, and exploring pays off in later episodes); the rollout's end is
    the trial's end. False: each episode is its own return (a terminal at every ``done``)."""
    clip_coef: float = 0.2
    ent_coef: float = 0.1
    vf_coef: float = 0.5
    reward_scale: float = 1.0
    """Rewards are multiplied by this for the value targets and advantages (the policy
    still sees raw rewards as inputs); keeps value gradients from swamping the clip."""
    max_grad_norm: float = 0.5
    lr: float = 3e-4
    min_lr_frac: float = 0.1
    """Cosine schedule floor as a fraction of lr."""
    warmup_steps: int = 20
    """Optimiser steps of linear warm-up."""
    shuffle_episodes: bool = True
    """Shuffle the completed episodes of each context after every update."""
    target_kl: float = 0.0
    """> 0: an update stops its remaining epochs and minibatches (that minibatch's step not
    taken) once a minibatch's approx KL exceeds 1.5 x this, as Stable-Baselines3's
    ``target_kl``; measured on the steps acted since the previous update, so it is how far this
    update has moved the policy. The rollout's log reports the share of updates stopped
    (``kl_stop``). 0 (default): every epoch runs."""
    fp16_storage: bool = False
    """Store the rollout key/value cache in float16."""
    teacher: str = ""
    """A scripted teacher (``training/teachers.py``; "" = none) that labels every rollout step
    with its action on the policy's own history; with ``teacher_coef`` > 0 the loss adds
    ``teacher_coef`` x the cross-entropy to those labels on the PPO loss's steps
    (kickstarting, Schmitt et al. 2018, with DAgger labels)."""
    teacher_coef: float = 0.0
    teacher_when: str = "always"
    """Where the teacher term counts: ``always``, or ``goal_known`` (the house teacher only): on the
    steps where the teacher knows where an instance of the goal is, so the term teaches the way to a
    remembered goal and leaves the search, whose labels rest on what the policy cannot know, to PPO."""
    critic_warmup_rollouts: int = 0
    """Rollouts at the start of a run (counted from rollout 0, so a resumed run keeps the count)
    in which only the critic head learns, from the value loss alone; the actor and the trunk are
    held. For fine-tuning an imitated policy (``train.py --init``): its value head was fitted to
    the teacher's returns, and advantages from it would move the policy at random before the
    critic has seen the policy's own returns."""
    critic_warmup_lr: float = 1e-3
    """Learning rate of the critic during those rollouts (constant)."""
    train_only: list = field(default_factory=list)
    """Parameter-name prefixes (``policy.named_parameters()``) that PPO / imitation train; every other
    parameter keeps the weights it started with (e.g. ``[encoder.route.weight]``: teach a shipped policy
    a new input through its own layer and nothing else). Empty: all trainable parameters train."""

    def validate(self) -> None:
        for name in ("rollout_length", "num_updates", "num_minibatches", "grad_accum", "update_epochs", "lr"):
            check_positive(f"ppo.{name}", getattr(self, name))
        check_positive("ppo.reward_scale", self.reward_scale)
        check_positive("ppo.critic_warmup_lr", self.critic_warmup_lr)
        for name in ("ent_coef", "vf_coef", "max_grad_norm", "warmup_steps", "clip_coef", "teacher_coef",
                     "critic_warmup_rollouts", "target_kl"):
            check_positive(f"ppo.{name}", getattr(self, name), allow_zero=True)
        for name in ("gamma", "gae_lambda", "min_lr_frac"):
            v = getattr(self, name)
            if not 0.0 <= v <= 1.0:
                raise ValueError(f"ppo.{name}: must be in [0, 1], got {v}")
        if self.teacher_when not in ("always", "goal_known"):
            raise ValueError(f"ppo.teacher_when: 'always' or 'goal_known', got {self.teacher_when!r}")
        if self.teacher_coef > 0 and not self.teacher:
            raise ValueError("ppo.teacher_coef: > 0 needs ppo.teacher (a scripted teacher's name, e.g. cycle)")
        if not isinstance(self.train_only, list) or not all(isinstance(x, str) and x for x in self.train_only):
            raise ValueError(f"ppo.train_only: a list of parameter-name prefixes, got {self.train_only!r}")
        if self.train_only and self.critic_warmup_rollouts:
            raise ValueError("ppo.train_only with ppo.critic_warmup_rollouts: the warm-up trains the critic head, "
                             "which train_only holds; set one of them")
        if self.rollout_length < self.num_updates:
            raise ValueError(f"ppo.rollout_length: {self.rollout_length} is shorter than ppo.num_updates")


@dataclass
class TrainConfig:
    env: EnvConfig = field(default_factory=EnvConfig)
    ppo: PPOConfig = field(default_factory=PPOConfig)
    model: dict = field(default_factory=dict)
    """ModelArgs overrides; n_obs / n_actions / max_episode_steps come from the env."""
    total_steps: int = 5_000_000
    """Env steps over all processes."""
    seed: int = 0
    run_dir: str = "runs/darkroom"
    checkpoint_every: int = 20
    """Rollouts between checkpoints (the last one is always saved)."""
    threads: int = 0
    """torch intra-op threads per process (0 = torch default)."""
    device: str = "cpu"

    def validate(self) -> None:
        self.env.validate()
        self.ppo.validate()
        check_positive("total_steps", self.total_steps)
        check_positive("checkpoint_every", self.checkpoint_every)
        check_positive("threads", self.threads, allow_zero=True)
        args = self.model_args(n_obs=1, n_actions=1, max_episode_steps=1)  # validates the overrides
        if args.house.route_memory and self.ppo.shuffle_episodes:
            raise ValueError("ppo.shuffle_episodes: set it false for a model with model.house.route_memory (the route "
                             "input is written while acting, in the trial's order; a reordered context would not "
                             "match it)")

    def model_args(self, **env_fields) -> ModelArgs:
        """ModelArgs from the config's ``model`` overrides plus what the env determines
        (``env.model_fields()``: sizes, observation type, goals)."""
        d = dict(self.model)
        d.update(env_fields)
        return ModelArgs.from_dict(d)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> TrainConfig:
        d = dict(d)
        if "data" in d and "ppo" not in d:
            raise ValueError("config: this is an offline RA-DT config (it names a data file): "
                             "train it with training/train_radt.py")
        unknown = set(d) - {f.name for f in fields(cls)}
        if unknown:
            raise ValueError(f"config: unknown fields {sorted(unknown)}; allowed: {[f.name for f in fields(cls)]}")
        d["model"] = normalise_model_dict(d.get("model") or {})
        sub = {"env": EnvConfig, "ppo": PPOConfig}
        for key, typ in sub.items():
            raw = d.get(key) or {}
            bad = set(raw) - {f.name for f in fields(typ)}
            if bad:
                raise ValueError(f"{key}: unknown fields {sorted(bad)}; allowed: {[f.name for f in fields(typ)]}")
            d[key] = typ(**raw)
        cfg = cls(**d)
        cfg.validate()
        return cfg

    @classmethod
    def load(cls, path: str | Path | None = None, overrides: list[str] | None = None) -> TrainConfig:
        return cls.from_dict(read_config(path, overrides))


def read_config(path: str | Path | None = None, overrides: list[str] | None = None) -> dict:
    """A YAML file (or nothing) as a dict, with dotted ``key=value`` overrides applied."""
    d: dict = {}
    if path is not None:
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"config file {path}: no such file")
        try:
            d = yaml.load(path.read_text(), Loader=ConfigLoader) or {}
        except (yaml.YAMLError, UnicodeDecodeError) as e:
            raise ValueError(f"config file {path}: not YAML ({str(e).splitlines()[0]})") from None
        if not isinstance(d, dict):
            raise ValueError(f"config file {path}: expected a YAML mapping of fields (env:, model:, ppo:, ...), "
                             f"got a {type(d).__name__}")
    return apply_overrides(d, overrides)


def apply_overrides(d: dict, overrides: list[str] | None) -> dict:
    """Dotted ``key=value`` overrides (``--set``) applied to the config dict ``d`` in place; returns it."""
    for o in overrides or []:
        if "=" not in o:
            raise ValueError(f"override {o!r}: expected key=value, e.g. ppo.lr=1e-3")
        key, raw = o.split("=", 1)
        node = d
        parts = key.split(".")
        for p in parts[:-1]:
            node = node.setdefault(p, {})
        node[parts[-1]] = yaml.load(raw, Loader=ConfigLoader)
    return d


def config_from_cli(path: str | None, overrides: list[str], run_dir: str | None = None,
                    base: dict | None = None) -> TrainConfig:
    """A script's ``--config`` / ``--set`` / ``--run-dir`` -> TrainConfig, or exit with the error. ``base``
    (without ``path``): the config a checkpoint carries, which the overrides then change."""
    import copy

    from icrl_ros.training._cli import fail

    try:
        if path is None and base is not None:
            cfg = TrainConfig.from_dict(apply_overrides(copy.deepcopy(base), overrides))
        else:
            cfg = TrainConfig.load(path, overrides)
    except (ValueError, FileNotFoundError) as e:
        fail(str(e))
    if run_dir:
        cfg.run_dir = run_dir
    return cfg
