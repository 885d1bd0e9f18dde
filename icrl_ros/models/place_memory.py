"""Place memory: heads of the first layer wired as "have I already looked at the floor there?".

The house teacher explores toward floor its camera has not swept yet and drives to a
remembered goal over floor it has; a student that only sees frozen image features and its
pose must rebuild that map by attention, and the imitation students of issue 12 did not
(agreement with the teacher stalled at 0.64-0.68, the same on training and held-out trials).
With ``model.house.place_memory`` (beside ``object_memory``, whose token entries it reads: the pose
in the house frame) heads 1 .. len(PROBES) of layer 0 stop being learnt:

* a step's key is its *view point*, the floor :data:`VIEW_AHEAD_M` ahead of where it stood
  (the middle of what its camera swept), its value that point and a 1;
* head ``1 + i``'s query is probe ``i``, a point fixed in the robot frame (:data:`PROBES`:
  here, and 2 m ahead), and the logits are a Gaussian kernel of width :data:`SIGMA_M` in the
  distance between probe and view point, built from dot products (``2 p.k - |k|^2``, with the
  ``|p|^2`` term moved onto the sink's key, so the sink stands in for :data:`PRIOR_VIEWS`
  views right at the probe);
* the block reads each head's output back as the attention mass on past views (0 = never
  looked there, toward 1 = looked there often) and the mean view point's offset from the
  probe in the robot frame (where the looked-at floor lies around it), and adds a learnt
  projection of those to the residual stream.

As with the object memory the keys and values sit unrotated in the KV cache, so the training
pass, the cached step, ONNX export and the streaming runtime need nothing new, and the
memory is bounded like the rest of the cache (Memo's summaries carry a segment's views by
:func:`summarize_views`). What to do with "the floor ahead is new" (explore there) or "the
way back to my goal runs over floor I know" is learnt.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

PROBES = ((0.0, 0.0), (2.0, 0.0))
"""Probe points (forward, left) in the robot frame, metres: one head each."""
VIEW_AHEAD_M = 1.0
"""A step's view point lies this far ahead of the robot (the camera sweeps about 0.3-3 m)."""
SIGMA_M = 1.0
"""Kernel width: a view point d metres from a probe weighs exp(-(d / SIGMA_M)^2)."""
PRIOR_VIEWS = 8.0
"""The sink weighs as much as this many views right at the probe: one pass by (about four
0.25 m steps within a metre, each with a few turns) reads about 0.5, none reads 0."""
FEATURES_PER_PROBE = 3
"""Per probe: attention mass on past views, mean view point's offset (forward, left)."""


def _rotate(fwd: Tensor, left: Tensor, cos: Tensor, sin: Tensor) -> tuple[Tensor, Tensor]:
    """Robot-frame (forward, left) -> house-frame (dx, dy) for a robot at yaw (cos, sin)."""
    return cos * fwd - sin * left, sin * fwd + cos * left


class PlaceMemoryHeads(nn.Module):
    """Builds one head's query, key and value per probe from the pose entries the object memory
    writes into every token (house frame, in units of ``scale_m``), and reads their outputs back
    as robot-frame features. Which heads they replace is the caller's order (:class:`Block`:
    right after the object memory's head 0)."""

    def __init__(self, head_dim: int, d_model: int, scale_m: float) -> None:
        super().__init__()
        if head_dim < 4:
            raise ValueError(f"model.house.place_memory: head size {head_dim} must be at least 4")
        self.head_dim = head_dim
        self.sigma = SIGMA_M / scale_m
        self.ahead = VIEW_AHEAD_M / scale_m
        probes = torch.tensor(PROBES, dtype=torch.float32) / scale_m
        self.register_buffer("probes", probes, persistent=False)  # (N, 2)
        sink = torch.zeros(head_dim)
        sink[3] = 1.0  # its query entry carries |p|^2 and the prior: the sink's logit
        self.register_buffer("sink_key", sink, persistent=False)
        self.out = nn.Linear(FEATURES_PER_PROBE * len(PROBES), d_model)
        nn.init.zeros_(self.out.weight)  # starts as no input: a trained model gains it by --init-partial unchanged
        nn.init.zeros_(self.out.bias)

    @property
    def n_heads(self) -> int:
        return len(PROBES)

    @staticmethod
    def pose(s: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """x, y (scaled), cos, sin yaw from the object memory's token entries (..., STRUCT_DIM)."""
        return s[..., 5:6], s[..., 6:7], s[..., 7:8], s[..., 8:9]

    def view_point(self, s: Tensor) -> Tensor:
        x, y, c, sn = self.pose(s)
        return torch.cat([x + self.ahead * c, y + self.ahead * sn], -1)

    def probe_points(self, s: Tensor) -> Tensor:
        """(..., STRUCT_DIM) -> the probes' house-frame points (..., N, 2), scaled."""
        x, y, c, sn = self.pose(s)
        dx, dy = _rotate(self.probes[:, 0], self.probes[:, 1], c, sn)  # (..., N)
        return torch.stack([x + dx, y + dy], -1)

    def key_value(self, point: Tensor) -> tuple[Tensor, Tensor]:
        """View points (..., 2) -> a head's key and value (..., head_dim)."""
        pad = point.new_zeros(*point.shape[:-1], self.head_dim - 4)
        one = torch.ones_like(point[..., :1])
        k = torch.cat([point, point.square().sum(-1, keepdim=True), torch.zeros_like(one), pad], -1)
        v = torch.cat([point, one, torch.zeros_like(one), pad], -1)
        return k, v

    def qkv(self, s: Tensor, dtype: torch.dtype) -> list[tuple[Tensor, Tensor, Tensor, Tensor]]:
        """The object memory's token entries (B, T, STRUCT_DIM) -> per probe head (query, key,
        value (B, T, head_dim), sink key (head_dim,)). Logit of a view point k for probe p
        minus the sink's: -(|p - k| / sigma)^2 - ln(PRIOR_VIEWS)."""
        k, v = (t.to(dtype) for t in self.key_value(self.view_point(s)))  # the same for every probe
        p = self.probe_points(s)  # (B, T, N, 2)
        scale = math.sqrt(self.head_dim) / self.sigma ** 2  # undo the attention's 1/sqrt(head_dim)
        prior = math.log(PRIOR_VIEWS) * self.sigma ** 2
        pad = p.new_zeros(*p.shape[:-1], self.head_dim - 4)
        q = torch.cat([2 * p, -torch.ones_like(p[..., :1]), p.square().sum(-1, keepdim=True) + prior, pad], -1) * scale
        return [(q[..., i, :].to(dtype), k, v, self.sink_key) for i in range(self.n_heads)]

    def readout(self, ys: Tensor, s: Tensor, dtype: torch.dtype) -> Tensor:
        """The heads' outputs (B, N, T, head_dim) and the token entries -> (B, T, D)."""
        ys = ys.float()
        mass = ys[..., 2:3].clamp(0.0, 1.0)  # (B, N, T, 1)
        mean = ys[..., 0:2] / mass.clamp(min=1e-3)
        p = self.probe_points(s).transpose(1, 2)  # (B, N, T, 2)
        _, _, c, sn = (t.unsqueeze(1) for t in self.pose(s))
        d = (mean - p) / self.sigma  # in kernel widths
        fwd, left = c * d[..., 0:1] + sn * d[..., 1:2], -sn * d[..., 0:1] + c * d[..., 1:2]
        gate = (mass > 1e-3).float()
        feats = torch.cat([mass, fwd * gate, left * gate], -1).clamp(-3.0, 3.0)  # (B, N, T, 3)
        return self.out(feats.permute(0, 2, 1, 3).flatten(2).to(dtype))


def summarize_views(k: Tensor, v: Tensor, seg: Tensor, slots: int, sigma: float) -> tuple[Tensor, Tensor]:
    """A Memo segment's view points in ``slots`` summary slots.

    k / v (B, P, hd): a probe head's keys and values of the memory in layer 0 (every probe head
    holds the same ones); ``seg`` (B, P) the slots of the segment. The segment's steps are cut
    into ``slots`` runs of consecutive steps; a run becomes one slot at its mean view point whose
    logit carries the log of its step count (on the key's ``|k|^2`` entry, which every query
    reads with weight -1 / sigma^2), so a slot weighs what its steps weighed when they sit at one
    point. Lossy only within a run (<= l_seg / slots steps of 0.25 m or a turn each).
    Returns keys and values (B, slots, hd)."""
    seg_f = seg.float()
    n = seg_f.sum(1, keepdim=True).clamp(min=1.0)  # (B, 1)
    j = seg_f.cumsum(1) - 1.0  # index within the segment
    run = torch.floor(j * slots / n).clamp(0, slots - 1)
    onehot = (run[..., None] == torch.arange(slots, device=k.device, dtype=run.dtype)).float() * seg_f[..., None]
    count = onehot.sum(1)  # (B, slots)
    point = torch.einsum("bps,bpc->bsc", onehot, v[..., 0:2].float()) / count.clamp(min=1.0)[..., None]
    hd = k.shape[-1]
    weight = torch.where(count > 0, count.clamp(min=1.0).log(), torch.full_like(count, -1.0e4))
    sq = point.square().sum(-1, keepdim=True) - sigma ** 2 * weight[..., None]
    pad = point.new_zeros(*point.shape[:-1], hd - 4)
    zero = torch.zeros_like(sq)
    key = torch.cat([point, sq, zero, pad], -1)
    val = torch.cat([point, (count > 0).float()[..., None], zero, pad], -1)
    return key.to(k.dtype), val.to(v.dtype)
