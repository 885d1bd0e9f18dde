"""LLaMA-style causal transformer core as a pure function of its inputs.

``core(x, rope_pos, mask, past_k, past_v) -> (hidden, new_k, new_v)``: the full-sequence
training pass calls it with an empty past; a cached step calls it with one token and
the memory's keys/values. Keys are returned after RoPE, so a cache never re-rotates.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from icrl_ros.models.attention import MASK_NEG, RMSNorm, SinkAttention, rope_angles
from icrl_ros.models.config import ModelArgs
from icrl_ros.models.encoders import OBJECT_SCALE_M
from icrl_ros.models.object_memory import ObjectMemoryHead
from icrl_ros.models.place_memory import PlaceMemoryHeads


class Block(nn.Module):
    def __init__(self, a: ModelArgs, object_memory: bool = False) -> None:
        super().__init__()
        self.norm1, self.norm2 = RMSNorm(a.d_model), RMSNorm(a.d_model)
        self.attn = SinkAttention(a.d_model, a.n_heads, a.sink, a.n_sink)
        self.mlp = nn.Sequential(nn.Linear(a.d_model, a.d_mlp), nn.GELU(), nn.Linear(a.d_mlp, a.d_model))
        self.object_memory = ObjectMemoryHead(a.n_goals, a.head_dim, a.d_model) if object_memory else None
        self.place_memory = (PlaceMemoryHeads(a.head_dim, a.d_model, OBJECT_SCALE_M)
                             if object_memory and a.place_memory else None)

    def forward(self, x, cos, sin, mask_add, past_k, past_v, keep: Tensor | None):
        if self.object_memory is None:
            a, k, v = self.attn(self.norm1(x), cos, sin, mask_add, past_k, past_v)
        else:  # head 0 is the object memory (heads 1.. the place memory): fed from the token's last entries
            om, pm = self.object_memory, self.place_memory
            fixed = [(*om.qkv(x), om.sink_key)]
            if pm is not None:
                s = om.struct(x)
                fixed += pm.qkv(s, x.dtype)
            a, k, v, ys = self.attn(self.norm1(x), cos, sin, mask_add, past_k, past_v, fixed)
            a = a + om.readout(ys[:, 0], x)
            if pm is not None:
                a = a + pm.readout(ys[:, 1:], s, x.dtype)
        delta = a
        delta = delta + self.mlp(self.norm2(x + a))
        if keep is not None:  # depth dropout: drop the whole layer for some samples
            delta = delta * keep
        return x + delta, k, v


class TransformerCore(nn.Module):
    def __init__(self, a: ModelArgs) -> None:
        super().__init__()
        self.args = a
        self.blocks = nn.ModuleList(Block(a, object_memory=a.object_memory and i == 0) for i in range(a.n_layers))

    def empty_cache(self, batch: int, device=None, dtype=torch.float32) -> tuple[Tensor, Tensor]:
        a = self.args
        shape = (a.n_layers, batch, a.n_heads, 0, a.head_dim)
        return torch.zeros(shape, device=device, dtype=dtype), torch.zeros(shape, device=device, dtype=dtype)

    def forward(
        self, x: Tensor, rope_pos: Tensor, mask: Tensor, past_k: Tensor | None = None, past_v: Tensor | None = None
    ) -> tuple[Tensor, Tensor, Tensor]:
        """x (B, T, D); rope_pos (B, T) episode indices; mask (B, T, P + T) bool, True = may attend;
        past_k / past_v (L, B, H, P, hd). Returns hidden (B, T, D), new_k / new_v (L, B, H, T, hd)."""
        B = x.shape[0]
        if past_k is None or past_v is None:
            past_k, past_v = self.empty_cache(B, x.device, x.dtype)
        cos, sin = rope_angles(rope_pos, self.args.head_dim, self.args.rope_base)
        mask_add = torch.where(mask, 0.0, MASK_NEG).to(x.dtype)[:, None]  # (B, 1, T, P + T)
        p = self.args.depth_dropout
        ks, vs = [], []
        for i, blk in enumerate(self.blocks):
            keep = None
            if self.training and p > 0:
                keep = (torch.rand(B, 1, 1, device=x.device) >= p).to(x.dtype) / (1 - p)
            x, k, v = blk(x, cos, sin, mask_add, past_k[i], past_v[i], keep)
            ks.append(k)
            vs.append(v)
        return x, torch.stack(ks), torch.stack(vs)


def sequence_mask(episode_index: Tensor, iea: bool, n_prefix: int = 0) -> Tensor:
    """Causal mask for a full trial (B, T): True where query t may attend key s <= t.

    Without inter-episode attention (``iea=False``) keys must lie in the query's episode.
    ``n_prefix`` always-visible key columns are prepended (the StreamingLLM sink token).
    """
    B, T = episode_index.shape
    causal = torch.ones(T, T, dtype=torch.bool, device=episode_index.device).tril()
    m = causal.expand(B, T, T)
    if not iea:
        m = m & (episode_index[:, :, None] == episode_index[:, None, :])
    if n_prefix:
        m = F.pad(m, (n_prefix, 0), value=True)
    return m

