"""Bounded memory managers that own the key/value cache between steps.

One class per memory policy (see :mod:`icrl_ros.memory.base` for the shared contract):

===========  ====================  ==========================================================
name         class                 what it keeps
===========  ====================  ==========================================================
``full``     FullContextMemory     every step up to a capacity; then on_full (error /
                                   evict_oldest / reset)
``window``   SinkWindowMemory      sink (weights or pinned token) + the newest W steps, a ring
``memo``     MemoMemory            accumulating Memo summary sets up to max_sets; then on_full
                                   (evict_oldest = streaming Memo)
===========  ====================  ==========================================================

Not yet in the registry (its own tests: ``tests/test_hcam.py``): ``HCAMMemory`` (local
window + a ring of HCAM chunks, oldest evicted). RA-DT's episodic index is
``RetrievalIndex`` (faiss, imported lazily; ``tests/test_retrieval.py``).
"""

from __future__ import annotations

import torch

from icrl_ros.memory.base import ON_FULL, Memory, MemoryBudgetError, MemoryFullError, slot_bytes
from icrl_ros.memory.kv_cache import FullContextMemory, KVCache, SinkWindowMemory
from icrl_ros.memory.hcam import HCAMMemory
from icrl_ros.memory.memo import MemoMemory
from icrl_ros.memory.retrieval import RetrievalIndex, Retrieved
from icrl_ros.memory.snapshot import SnapshotError

MEMORY_POLICIES: dict[str, type[Memory]] = {
    "full": FullContextMemory,
    "window": SinkWindowMemory,
    "memo": MemoMemory,
}
"""Registry: memory policy name -> class."""

RELIC_POLICIES = ("full", "window")
MEMO_POLICIES = ("memo",)


def create_memory(name: str, *, kind: str, n_layers: int, n_heads: int, head_dim: int, batch: int = 1,
                  n_prefix: int = 0, l_seg: int = 0, l_sum: int = 0, variant: str = "memo",
                  dtype=torch.float32, device=None, budget_bytes: int | None = None, **cfg) -> Memory:
    """Build a memory by policy name for a model of ``kind`` ("relic" | "memo").

    ``cfg``: ``capacity`` and ``on_full`` (full), ``window`` (window), ``max_sets`` and
    ``on_full`` (memo). A size field left out (None) is derived from ``budget_bytes``
    (the largest memory that fits); a given size must fit the budget.
    """
    if name not in MEMORY_POLICIES:
        raise ValueError(f"memory: unknown policy {name!r}; known: {sorted(MEMORY_POLICIES)}")
    allowed = MEMO_POLICIES if kind == "memo" else RELIC_POLICIES
    if name not in allowed:
        raise ValueError(f"memory: policy {name!r} does not apply to a {kind} model; use one of {list(allowed)}")
    dims = dict(n_layers=n_layers, batch=batch, n_heads=n_heads, head_dim=head_dim)
    common = dict(dtype=dtype, device=device, budget_bytes=budget_bytes)
    size = cfg.get
    if name == "full":
        return FullContextMemory(**dims, capacity=size("capacity"), n_prefix=n_prefix,
                                 on_full=cfg.get("on_full", "error"), **common)
    if name == "window":
        return SinkWindowMemory(**dims, window=size("window"), n_prefix=n_prefix, **common)
    return MemoMemory(n_layers, batch, n_heads, head_dim, l_seg, l_sum, variant, size("max_sets"),
                      on_full=cfg.get("on_full", "evict_oldest"), **common)


__all__ = ["Memory", "KVCache", "HCAMMemory", "RetrievalIndex", "Retrieved", "FullContextMemory", "SinkWindowMemory", "MemoMemory", "MEMORY_POLICIES",
           "create_memory", "MemoryBudgetError", "MemoryFullError", "SnapshotError", "ON_FULL", "slot_bytes"]
