"""LLaMA-style causal transformer core as a pure function of its inputs.

``core(x, rope_pos, mask, past_k, past_v) -> (hidden, new_k, new_v)``: the full-sequence
training pass calls it with an empty past; a cached step calls it with one token and
the memory's keys/values. Keys are returned after RoPE, so a cache never re-rotates.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from icrl_ros.extensions import block_heads
from icrl_ros.models.attention import MASK_NEG, RMSNorm, SinkAttention, rope_angles
from icrl_ros.models.config import ModelArgs


class Block(nn.Module):
    """Pre-norm attention + MLP. An extension may make the first heads of the attention fixed
    (:func:`icrl_ros.extensions.block_heads`): their modules are attached to the block by name."""

    def __init__(self, a: ModelArgs, layer: int = 0) -> None:
        super().__init__()
        self.norm1, self.norm2 = RMSNorm(a.d_model), RMSNorm(a.d_model)
        self.attn = SinkAttention(a.d_model, a.n_heads, a.sink, a.n_sink)
        self.mlp = nn.Sequential(nn.Linear(a.d_model, a.d_mlp), nn.GELU(), nn.Linear(a.d_mlp, a.d_model))
        self.fixed_heads = block_heads(a, layer)
        for name, module in (self.fixed_heads.modules() if self.fixed_heads is not None else {}).items():
            self.add_module(name, module)

    def forward(self, x, cos, sin, mask_add, past_k, past_v, keep: Tensor | None):
        if self.fixed_heads is None:
            a, k, v = self.attn(self.norm1(x), cos, sin, mask_add, past_k, past_v)
        else:  # the first heads are the extension's, their q / k / v from the token itself
            fh = self.fixed_heads
            a, k, v, ys = self.attn(self.norm1(x), cos, sin, mask_add, past_k, past_v, fh.fixed(x))
            a = a + fh.readout(ys, x)
        delta = a
        delta = delta + self.mlp(self.norm2(x + a))
        if keep is not None:  # depth dropout: drop the whole layer for some samples
            delta = delta * keep
        return x + delta, k, v


class TransformerCore(nn.Module):
    def __init__(self, a: ModelArgs) -> None:
        super().__init__()
        self.args = a
        self.blocks = nn.ModuleList(Block(a, i) for i in range(a.n_layers))

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

