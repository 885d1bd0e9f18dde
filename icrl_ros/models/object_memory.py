"""Object memory: one attention head of the first layer wired as "where did I see my goal?".

The frozen encoder's label heads say, per frame, which category is most likely in view, how
sure they are, and the house-frame position that sighting implies (odometry + expected bearing
and distance, :meth:`FeatureHeads.object_estimates`). With ``model.house.object_memory`` the step
encoder writes that, the goal and the pose into the last :data:`STRUCT_DIM` entries of every
token, and head 0 of layer 0 stops being learnt:

* its key is the sighted category (one-hot) times the heads' confidence, its value the implied
  position (and a 1), and its query the goal category (one-hot), all scaled by :data:`BETA`;
* its sink key (the attention sink every head has) gives a logit that a sighting beats only
  when the heads' confidence exceeds :data:`SIGHTING_P`, so with no confident sighting of the
  goal the head reads the sink's zero value;
* the block turns the head's output into the goal's remembered offset in the robot frame
  (forward, left), its bearing and how much of the head's attention found a sighting, and adds
  a learnt projection of those to the residual stream.

The keys and values sit in the KV cache like any other head's (unrotated: place, not time,
is what matches), so the training pass, the cached step, ONNX export and the streaming
runtime need nothing new, and the memory is bounded like the rest of the cache. Everything
downstream of the retrieved offset (steering to it round walls, when to trust it) is learnt.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

STRUCT_DIM = 9
"""Token entries the object memory owns: goal / C, sighted category / C, confidence, the
sighting's house-frame x, y (/ ``OBJECT_SCALE_M``), the robot's x, y (same units), cos, sin yaw."""
SIGHTING_P = 0.8
"""A sighting is remembered when the heads' P(in view) exceeds this: on 1,511 test-house frames
the implied position was within 1.5 m of a true instance for 84% of such sightings (65% at 0.5)."""
BETA = 30.0
"""Query scale: a confident match's logit exceeds the sink's by BETA x (P - SIGHTING_P), and
a non-matching token's lies BETA x SIGHTING_P below it (about e^-24: no leak over 64k tokens)."""
FEATURES = 6
"""What the block reads out: the offset (forward, left), its unit bearing (2), its length and
the attention mass on sightings."""
ROUTE_DIM = 6
"""Width of the ``route`` input the runtime's route memory writes (:mod:`icrl_ros.memory.route`):
found, waypoint (forward, left), its unit direction (2), route length."""


def object_struct(p: Tensor, xy: Tensor, odom: Tensor, goal: Tensor, scale_m: float) -> Tensor:
    """The token entries the object memory reads, from the heads' per-category P(in view) (..., C)
    and implied positions (..., C, 2) (:meth:`FeatureHeads.object_estimates`), the odometry
    (..., 3) and the goal (...); positions in units of ``scale_m`` -> (..., STRUCT_DIM)."""
    c = p.shape[-1]
    conf, cat = p.max(-1)
    at = xy.gather(-2, cat[..., None, None].expand(*cat.shape, 1, 2)).squeeze(-2)
    yaw = odom[..., 2]
    return torch.cat([goal.float()[..., None] / c, cat.float()[..., None] / c, conf[..., None], at / scale_m,
                      odom[..., :2] / scale_m, yaw.cos()[..., None], yaw.sin()[..., None]], -1)


class ObjectMemoryHead(nn.Module):
    """Builds head 0's query, key and value from a token's :func:`object_struct` entries and reads
    its output back as robot-frame features (``readout``)."""

    def __init__(self, n_cat: int, head_dim: int, d_model: int) -> None:
        super().__init__()
        if head_dim < n_cat + 1:
            raise ValueError(f"model.house.object_memory: head size {head_dim} must exceed the {n_cat} categories "
                             "(raise d_model or lower n_heads)")
        self.n_cat, self.head_dim = n_cat, head_dim
        scale = BETA * math.sqrt(head_dim)  # undo the attention's 1/sqrt(head_dim)
        sink = torch.zeros(head_dim)
        sink[n_cat] = SIGHTING_P
        self.register_buffer("sink_key", sink, persistent=False)
        self.register_buffer("arange", torch.arange(n_cat, dtype=torch.float32), persistent=False)
        self.scale = scale
        self.out = nn.Linear(FEATURES, d_model)

    def struct(self, x: Tensor) -> Tensor:
        return x[..., -STRUCT_DIM:].float()

    def qkv(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Token (B, T, D) -> head 0's query, key and value (B, T, head_dim)."""
        s = self.struct(x)
        goal = (torch.round(s[..., 0:1] * self.n_cat) == self.arange).float()
        seen = (torch.round(s[..., 1:2] * self.n_cat) == self.arange).float() * s[..., 2:3]
        pad = self.head_dim - self.n_cat - 1
        zeros = s.new_zeros(*s.shape[:-1], pad)
        one = torch.ones_like(s[..., :1])
        q = torch.cat([goal, one, zeros], -1) * self.scale
        k = torch.cat([seen, torch.zeros_like(one), zeros], -1)
        v = torch.cat([s[..., 3:5], one, s.new_zeros(*s.shape[:-1], self.head_dim - 3)], -1)
        return q.to(x.dtype), k.to(x.dtype), v.to(x.dtype)

    def readout(self, y0: Tensor, x: Tensor) -> Tensor:
        """Head 0's output (B, T, head_dim) and the tokens -> (B, T, D) added to the residual."""
        s = self.struct(x)
        y0 = y0.float()
        mass = y0[..., 2:3].clamp(0.0, 1.0)
        est = y0[..., 0:2] / mass.clamp(min=1e-3)
        d = est - s[..., 5:7]
        cos, sin = s[..., 7:8], s[..., 8:9]
        fwd, left = cos * d[..., 0:1] + sin * d[..., 1:2], -sin * d[..., 0:1] + cos * d[..., 1:2]
        dist = (fwd.square() + left.square() + 1e-6).sqrt()
        gate = (mass > 0.5).float()
        feats = torch.cat([fwd * gate, left * gate, fwd / dist * gate, left / dist * gate, dist * gate, mass], -1)
        return self.out(feats.clamp(-3.0, 3.0).to(x.dtype))
