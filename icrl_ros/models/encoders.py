"""Per-step token encoders: one embedding per environment step."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from icrl_ros.models.config import ModelArgs


class StepEncoder(nn.Module):
    """obs + previous action + previous reward + goal + within-episode step -> token (B, T, D).

    ``prev_action == n_actions`` means "no previous action" (start of a trial). The
    within-episode step is a learnable position; the episode index goes to RoPE instead.
    """

    def __init__(self, a: ModelArgs) -> None:
        super().__init__()
        self.args = a
        self.obs = nn.Embedding(a.n_obs, a.d_model)
        self.prev_action = nn.Embedding(a.n_actions + 1, a.d_model)
        self.prev_reward = nn.Linear(1, a.d_model)
        self.step = nn.Embedding(a.max_episode_steps, a.d_model)
        self.goal = nn.Embedding(a.n_goals, a.d_model) if a.n_goals else None

    def forward(
        self, obs: Tensor, prev_action: Tensor, prev_reward: Tensor, episode_step: Tensor, goal: Tensor | None = None
    ) -> Tensor:
        x = self.obs(obs) + self.prev_action(prev_action) + self.prev_reward(prev_reward.unsqueeze(-1).float())
        x = x + self.step(episode_step.clamp(max=self.args.max_episode_steps - 1))
        if self.goal is not None and goal is not None:
            x = x + self.goal(goal)
        return x
