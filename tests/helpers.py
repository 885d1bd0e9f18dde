"""Shared test helpers: random trials with episode boundaries, cached-step rollouts."""

from __future__ import annotations

import torch

from icrl_ros.models import ICLPolicy, make_memory
from icrl_ros.runtime.control import ControlStep


def random_trial(args, batch: int, steps: int, episode_len: int, seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    t = torch.arange(steps)
    inp = {
        "obs": torch.randint(0, args.n_obs, (batch, steps), generator=g),
        "rgb": torch.randint(0, 256, (batch, steps, args.image_size, args.image_size, 3), generator=g).to(torch.uint8),
        "odom": torch.randn(batch, steps, 3, generator=g),
        "prev_action": torch.randint(0, args.n_actions + 1, (batch, steps), generator=g),
        "prev_reward": torch.rand(batch, steps, generator=g),
        "episode_step": (t % episode_len).expand(batch, steps).clone(),
        "episode_index": (t // episode_len).expand(batch, steps).clone(),
    }
    if getattr(args, "last_obs", False):
        inp["last_obs"] = torch.randint(0, args.n_obs, (batch, steps), generator=g)
    if args.n_goals:
        inp["goal"] = torch.randint(0, args.n_goals, (batch, steps), generator=g)
    drop = ("obs",) if args.obs_type == "image" else ("rgb", "odom")
    return {k: v for k, v in inp.items() if k not in drop}


@torch.no_grad()
def cached_rollout(policy: ICLPolicy, inp: dict[str, torch.Tensor], schedule: list[int] | None = None,
                   **mem_kw) -> tuple[torch.Tensor, torch.Tensor]:
    """Step the policy one token at a time over a trial (its live control step); returns logits (B, T, A), values (B, T)."""
    B, T = inp["episode_index"].shape
    step = ControlStep.live(policy, make_memory(policy, B, T, schedule=schedule, **mem_kw))
    logits, values = [], []
    for t in range(T):
        lg, val = step({key: val[:, t] for key, val in inp.items()})
        logits.append(lg)
        values.append(val)
    return torch.stack(logits, 1), torch.stack(values, 1)
