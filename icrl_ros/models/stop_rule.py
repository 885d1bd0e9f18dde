"""The stop rule: a house policy stops on what its camera shows, not on where it thinks it is.

A house episode ends at the first stop, and succeeds only if an instance of the goal category is
in reach and in view. The students' commonest failure was a blind stop: where their memory said
the goal was, with the frozen label heads saying it was not in view (median P 0.07 at wrong stops
against 0.95 at right ones). With ``model.house.stop_gate`` the acting policy may not
stop while the heads give P(goal in view) below the gate; with ``model.house.stop_sure`` it stops as soon
as they give at least that P with an expected goal distance within ``model.house.stop_sure_m``.

The rule reads the :data:`~icrl_ros.models.object_memory.STRUCT_DIM` entries the step encoder
writes into every token (``model.house.object_memory``): the goal, the most likely category in view,
its P and the house-frame position the heads put it at, and the robot's position. It applies
where actions are chosen (:class:`~icrl_ros.runtime.control.ControlStep`: training rollouts,
evaluation, export checks and the robot alike), so a bundle carries it in its manifest's model
arguments and needs no new graph. It is not part of the imitation loss: imitation still learns the
teacher's stops, and the rule only masks or forces the stop logit when acting. PPO, which scores
what was acted on, applies it to the logits of its update too (``PPOTrainer.acted_logits``).
"""

from __future__ import annotations

import torch
from torch import Tensor

from icrl_ros.models.encoders import OBJECT_SCALE_M
from icrl_ros.models.object_memory import STRUCT_DIM

STOP_ACTION = 0
"""The house envs' stop action (``icrl_ros.sim.house.STOP``; a test checks they agree)."""
MASKED = -1e4
"""A logit no sampler at any sensible temperature draws."""


class StopRule:
    """``gate``: P(goal in view) needed before a stop may be chosen (0: any time); ``sure``: P at
    or above which, with the expected distance within ``sure_m`` metres, the stop is taken (0: never
    forced). ``n_goals``: the categories (the token stores indices divided by it)."""

    def __init__(self, gate: float, sure: float, sure_m: float, n_goals: int) -> None:
        self.gate, self.sure, self.sure_m, self.n_goals = gate, sure, sure_m, n_goals

    @classmethod
    def from_args(cls, args) -> StopRule | None:
        """The rule a model's arguments ask for, or None when they ask for none."""
        house = args.house
        if not house.stop_rule:
            return None
        return cls(house.stop_gate, house.stop_sure, house.stop_sure_m, args.n_goals)

    def goal_view(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """Tokens (..., D) -> P(goal in view) (...) and the heads' expected distance to it (...) in
        metres. P is the heads' confidence when the goal is the most likely category in view, else
        0 (the token keeps only the most likely one)."""
        s = x[..., -STRUCT_DIM:].float()
        goal = torch.round(s[..., 0] * self.n_goals)
        seen = torch.round(s[..., 1] * self.n_goals)
        p = torch.where(goal == seen, s[..., 2], torch.zeros_like(s[..., 2]))
        dist = (s[..., 3:5] - s[..., 5:7]).norm(dim=-1) * OBJECT_SCALE_M
        return p, dist

    def __call__(self, logits: Tensor, x: Tensor) -> Tensor:
        """Logits (..., A) of the tokens ``x`` (..., D) -> the logits acted on (a new tensor): one
        step of a batch (``ControlStep``) or whole trials (B, T, A) (PPO's update, the export check)."""
        return self.apply(logits, *self.goal_view(x))

    def apply(self, logits: Tensor, p: Tensor, dist: Tensor) -> Tensor:
        """The rule on logits (..., A) given P(goal in view) (...) and the expected distance (...) from
        wherever they come (``house_diagnose``'s what-if reads the heads directly); a new tensor."""
        out = logits.float().clone()
        if self.gate > 0:
            out[..., STOP_ACTION] = torch.where(p < self.gate, torch.full_like(p, MASKED), out[..., STOP_ACTION])
        if self.sure > 0:
            sure = ((p >= self.sure) & (dist <= self.sure_m))[..., None]
            forced = torch.full_like(out, MASKED)
            forced[..., STOP_ACTION] = 0.0
            out = torch.where(sure, forced, out)
        return out


__all__ = ["StopRule", "STOP_ACTION"]
