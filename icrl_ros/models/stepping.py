"""A torch policy's memory for training and evaluation, and the whole-sequence refresh.

Stepping itself is :class:`icrl_ros.runtime.control.ControlStep` (``ControlStep.live(policy,
memory)``), the step the deploy runtime runs. ReLIC uses a :class:`~icrl_ros.memory.KVCache`,
Memo a :class:`~icrl_ros.memory.MemoMemory` (which summarises at segment ends), HCAM an
:class:`~icrl_ros.memory.HCAMMemory` (local window + chunk store).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from icrl_ros.memory import HCAMMemory, KVCache, MemoMemory
from icrl_ros.models.hcam import HCAMPolicy
from icrl_ros.models.memo import MemoPolicy
from icrl_ros.models.policy import ICLPolicy


def make_memory(policy: ICLPolicy, batch: int, steps: int, window: int | None = None, dtype=torch.float32,
                device=None, schedule: list[int] | None = None, max_sets: int | None = None,
                max_chunks: int | None = None):
    """A memory sized for trials of ``steps`` steps.

    ReLIC: full context (``window=None``) or sink + sliding window. Memo: every summary
    set of the trial (or ``max_sets``, oldest dropped), segments per ``schedule``.
    HCAM: every chunk of the trial (or ``max_chunks``, oldest evicted).
    """
    a = policy.args
    if isinstance(policy, HCAMPolicy):
        n = max_chunks or max(a.hcam_top_k, steps // a.hcam_chunk)
        return HCAMMemory(a.n_layers, batch, a.n_heads, a.head_dim, len(a.memory_layers), a.hcam_chunk,
                          a.hcam_top_k, n, dtype=dtype, device=device)
    if isinstance(policy, MemoPolicy):
        shortest = min(schedule) if schedule else a.l_seg
        sets = max_sets or max(1, math.ceil(steps / shortest))
        mem = MemoMemory(a.n_layers, batch, a.n_heads, a.head_dim, a.l_seg, a.l_sum, a.memo_variant, sets,
                         segment_capacity=max(schedule) if schedule else a.l_seg, schedule=schedule,
                         dtype=dtype, device=device)
        return mem
    mem = KVCache(a.n_layers, batch, a.n_heads, a.head_dim, steps, window=window, n_prefix=policy.n_prefix,
                  dtype=dtype, device=device)
    if policy.n_prefix:
        with torch.no_grad():
            mem.set_prefix(*policy.initial_cache(batch, device))
    return mem


@torch.no_grad()
def refresh(policy: ICLPolicy, mem, seq: dict[str, Tensor], schedule: list[int] | None = None) -> Tensor:
    """Recompute the memory and the values of a trial prefix with the current weights."""
    if isinstance(mem, HCAMMemory):
        _, values, k, v, extras = policy.forward_sequence(seq, max_chunks=mem.max_chunks)
        mem.load_sequence(k, v, extras["layer_inputs"], seq["episode_index"])
        return values
    if isinstance(mem, MemoMemory):
        _, values, state = policy.forward_sequence(seq, schedule)
        mem.load_state(state)
        return values
    _, values, k, v = policy.forward_sequence(seq)
    mem.load_sequence(k, v, seq["episode_index"])
    if policy.n_prefix:
        mem.set_prefix(*policy.initial_cache(k.shape[1], k.device))
    return values


def build_policy(args, load_pretrained: bool = False) -> ICLPolicy:
    """The policy class for ``args.kind``; ``load_pretrained`` loads and freezes
    ``args.pretrained_encoder`` (at training start)."""
    if args.kind == "radt":  # a DT over the episode window + retrieval, not a cached-step policy
        from icrl_ros.models.radt import RADTPolicy

        return RADTPolicy(args)
    policy = {"memo": MemoPolicy, "hcam": HCAMPolicy}.get(args.kind, ICLPolicy)(args)
    if load_pretrained:
        policy.encoder.load_pretrained()
    return policy
