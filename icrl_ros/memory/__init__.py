"""Bounded memory managers that own the key/value cache between steps.

The shared contract (:mod:`icrl_ros.memory.base`), ReLIC's KV caches (:mod:`.kv_cache`) and
snapshots live here; each other family's memory lives in its folder (``icrl_ros/families/<kind>/
memory.py``) and is registered by its ``FAMILY``. One class per memory policy:

=============  ====================  ==========================================================
name           class                 what it keeps
=============  ====================  ==========================================================
``full``       FullContextMemory     every step up to a capacity; then on_full (error /
                                     evict_oldest / reset)
``window``     SinkWindowMemory      sink (weights or pinned token) + the newest W steps, a ring
``memo``       MemoMemory            accumulating Memo summary sets up to max_sets; then on_full
                                     (evict_oldest = streaming Memo)
``hcam``       HCAMMemory            local window of C steps + a ring of max_chunks HCAM chunks
                                     (oldest evicted)
``retrieval``  SubTrajectoryMemory   RA-DT: the current episode's window + up to max_episodes
                                     stored episodes in a faiss ``RetrievalIndex``; then on_full
                                     (evict_oldest: whole episodes). Not a KV cache: numpy +
                                     faiss on the CPU, faiss imported when one is built
=============  ====================  ==========================================================
"""

from __future__ import annotations

import torch

from icrl_ros.families import FAMILIES, _load, family_of, memory_policies
from icrl_ros.memory.base import ON_FULL, Memory, MemoryBudgetError, MemoryFullError, slot_bytes
from icrl_ros.memory.kv_cache import FullContextMemory, KVCache, SinkWindowMemory
from icrl_ros.memory.quant import KV_DTYPES, check_kv_dtype
from icrl_ros.memory.snapshot import SnapshotError

MEMORY_POLICIES: dict[str, str] = memory_policies()
"""The built-in memory policies: name -> ``module:Class`` (each family's ``FAMILY.memories``; the class
is imported by :func:`memory_class` when asked for). :func:`memory_class` also finds those of a
family registered later."""

KIND_POLICIES = {kind: tuple(f.memories) for kind, f in FAMILIES.items()}
"""The built-in model kinds -> the memory policies that apply (the first is the default; :func:`default_memory`
answers for any registered family)."""


def default_memory(kind: str) -> str:
    """The default memory policy of a model kind (its family's first)."""
    return next(iter(family_of(kind).memories))


def memory_class(name: str) -> type[Memory]:
    """The class of memory policy ``name``."""
    known = memory_policies()
    if name not in known:
        raise ValueError(f"memory: unknown policy {name!r}; known: {sorted(known)}")
    return _load(known[name])


def create_memory(name: str, *, kind: str, n_layers: int, n_heads: int, head_dim: int, batch: int = 1,
                  n_prefix: int = 0, l_seg: int = 0, l_sum: int = 0, variant: str = "memo",
                  n_mem_layers: int = 0, chunk: int = 0, top_k: int = 0, episode_rope: bool = False,
                  dtype=torch.float32, device=None, budget_bytes: int | None = None, kv_dtype: str = "fp32",
                  **cfg) -> Memory:
    """Build a memory by policy name for a model of ``kind`` ("relic" | "memo" | "hcam" | "radt").

    ``cfg``: ``capacity`` and ``on_full`` (full), ``window`` (window), ``max_sets`` and
    ``on_full`` (memo), ``max_chunks`` (hcam; its model gives ``n_mem_layers``, ``chunk``,
    ``top_k`` and ``episode_rope``), ``max_episodes`` and ``on_full`` (retrieval; its model gives
    ``key_proj``, ``context``, ``horizon``, ``n_actions``, ``obs_features`` (image models) and the re-ranking weights
    ``relevance_weight`` / ``utility_weight``; the KV dims are ignored). A size field left
    out (None) is derived from ``budget_bytes`` (the largest memory that fits); a given
    size must fit the budget. Each class builds itself (``Memory.create``).
    ``kv_dtype`` (:mod:`icrl_ros.memory.quant`): how K / V are stored, for the memories that hold raw
    steps or summaries (full, window, memo) and HCAM's chunk store; the budget counts the stored bytes, so int8
    holds ~3.5x the steps.
    """
    memory_class(name)  # an unknown name fails before a family mismatch
    cls = family_of(kind).memory_class(name)
    check_kv_dtype(kv_dtype)
    if kv_dtype != "fp32":
        if not _quantizable(cls):
            takes = [n for n in memory_policies() if _quantizable(memory_class(n))]
            raise ValueError(f"kv_dtype: {kv_dtype!r} is for the memories that keep raw steps, summaries or chunks "
                             f"({', '.join(takes)}); memory {name!r} stores fp32 only")
        cfg["kv_dtype"] = kv_dtype
    dims = dict(n_layers=n_layers, batch=batch, n_heads=n_heads, head_dim=head_dim)
    model = dict(n_prefix=n_prefix, l_seg=l_seg, l_sum=l_sum, variant=variant, n_mem_layers=n_mem_layers,
                 chunk=chunk, top_k=top_k, episode_rope=episode_rope)
    return cls.create(dims, model, cfg, dict(dtype=dtype, device=device, budget_bytes=budget_bytes))


def _quantizable(cls: type) -> bool:
    """Whether the memory class itself (not a base it extends) stores K / V in another ``kv_dtype``."""
    return bool(cls.__dict__.get("quantizable", False))


def model_dims(args) -> dict:
    """What :func:`create_memory` needs from a model's arguments (``ModelArgs``; RA-DT's
    retrieval memory takes its own from the bundle)."""
    return dict(kind=args.kind, n_layers=args.n_layers, n_heads=args.n_heads, head_dim=args.head_dim,
                **args.memory_fields())


def trial_sizes(name: str, args, steps: int, schedule: list[int] | None = None) -> dict:
    """The sizes of memory policy ``name`` that keep everything a trial of ``steps`` steps
    needs, so stepping equals the whole-sequence forward: every step (full), every summary
    set (memo; segments per ``schedule``, else ``l_seg``), every chunk (hcam), one stored
    episode per step at most (retrieval). A sliding window keeps a trial only when it is longer
    than the trial, so it has no such size."""
    return memory_class(name).trial_sizes(args, steps, schedule)


__all__ = ["Memory", "KVCache", "FullContextMemory", "SinkWindowMemory", "MEMORY_POLICIES", "memory_class",
           "KIND_POLICIES", "default_memory", "create_memory", "model_dims", "trial_sizes", "MemoryBudgetError",
           "MemoryFullError", "SnapshotError", "ON_FULL", "slot_bytes", "KV_DTYPES"]
