"""HCAM's deploy graphs: the shared encoder and heads, and a core over the local window (a
static C slots) that also reads the chunk store and returns what the store keeps. ``kv_dtype``
is how the chunk store keeps its contents (:class:`~icrl_ros.families.hcam.memory.HCAMMemory`)."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from icrl_ros.families.hcam.model import HCAMPolicy
from icrl_ros.memory.quant import storage_dtype
from icrl_ros.models.attention import QuantizedKV
from icrl_ros.runtime.graphs import CoreGraph, cache_dtype, dtype_name, io_spec, shared_graph_modules, shared_graph_specs


class HCAMCoreGraph(CoreGraph):
    """HCAM's core: as :class:`CoreGraph` over the local window (P = C slots), then the
    chunk store: Lm ``chunk_x`` (B, N, C, D) (``int8``: uint8 codes, then Lm ``chunk_x_scale``
    (B, N, C)), Lm ``chunk_key`` (B, N, D), ``chunk_valid`` (B, N), and with ``hcam_episode_rope``
    ``chunk_episode`` (B, N, C). Also returns the token's memory-layer inputs ``x_mem`` (Lm, B, 1, D),
    which :meth:`HCAMMemory.commit` writes into the current chunk.
    """

    def __init__(self, policy: HCAMPolicy, kv_dtype: str = "fp32") -> None:
        super().__init__(policy)
        self.n_mem = len(policy.args.memory_layers)
        self.episode_rope = policy.args.hcam_episode_rope
        self.int8 = kv_dtype == "int8"

    def forward(self, x: Tensor, position: Tensor, mask: Tensor, *rest: Tensor
                ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        L, Lm = self.n_layers, self.n_mem
        chunk_episode = None
        if self.episode_rope:  # the last input (HCAMMemory.core_inputs)
            rest, chunk_episode = rest[:-1], rest[-1]
        kv, store, chunk_valid = rest[:2 * L], list(rest[2 * L:-1]), rest[-1]
        chunk_x, chunk_key = store[:Lm], store[-Lm:]
        if self.int8:
            chunk_x = [QuantizedKV(c, s) for c, s in zip(chunk_x, store[Lm:2 * Lm])]
        full = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=1)[:, None]  # (B, 1, C + 1)
        h, k, v, x_mem = self.core(x[:, None], position[:, None], full, list(kv[:L]), list(kv[L:]), chunk_x,
                                   list(chunk_key), chunk_valid[:, None, :], chunk_episode=chunk_episode)
        return h[:, 0], k, v, x_mem.to(chunk_key[0].dtype)


def graph_specs(policy: HCAMPolicy, precision: str = "fp32", kv_dtype: str = "fp32") -> dict:
    """The window is static (``hcam_chunk`` slots); ``cache`` is the chunk store's slots, handed
    over as :meth:`HCAMMemory.core_inputs` does; ``kv_dtype``: the store's contents."""
    a = policy.args
    Lm, C, D = len(a.memory_layers), a.hcam_chunk, a.d_model
    f = dtype_name(cache_dtype(precision))
    store = dtype_name(storage_dtype(kv_dtype, cache_dtype(precision)))
    scales = [io_spec(f"chunk_x_scale_{j}", "float32", ["batch", "cache", C]) for j in range(Lm)] \
        if kv_dtype == "int8" else []
    specs = shared_graph_specs(policy, precision, window=C)
    specs["core"]["inputs"] += ([io_spec(f"chunk_x_{j}", store, ["batch", "cache", C, D]) for j in range(Lm)] + scales
                                + [io_spec(f"chunk_key_{j}", f, ["batch", "cache", D]) for j in range(Lm)]
                                + [io_spec("chunk_valid", "bool", ["batch", "cache"])]
                                + ([io_spec("chunk_episode", "int64", ["batch", "cache", C])] if a.hcam_episode_rope
                                   else []))
    specs["core"]["outputs"].append(io_spec("x_mem", f, [Lm, "batch", 1, D]))
    return specs


def graph_modules(policy: HCAMPolicy, kv_dtype: str = "fp32") -> dict[str, nn.Module]:
    return shared_graph_modules(policy, core=HCAMCoreGraph(policy, kv_dtype))
