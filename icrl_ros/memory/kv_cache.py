"""ReLIC memories: full context (bounded) and sink + sliding window, one static buffer each.

Static shapes: attention always runs over the whole buffer and ``valid`` says which
slots hold data. Keys are stored after RoPE, so attention does not depend on slot order
and a ring buffer overwrites its oldest slot without shifting or re-rotating anything.

Layout per env: ``[pinned prefix (n_prefix, the StreamingLLM sink token) | step slots]``.
Step ``t`` (counted from the trial start, or from the last on-full reset) lives in slot
``n_prefix + t % steps_cap`` whenever the memory rings. Stored as ``int8_gqa`` the buffer has one
more row, last: the scratch row the core writes the step into (always valid, never a step's slot),
and the prefix holds the Sink-KV rows (the bundle's ``kv_static.npz``) besides any sink token.
"""

from __future__ import annotations

import torch
from torch import Tensor

from icrl_ros.memory.base import DEFAULT_STEPS, Memory, MemoryBudgetError, MemoryFullError, check_on_full
from icrl_ros.memory.quant import STATIC_KV_DTYPES


def scratch_rows(kv_dtype: str) -> int:
    """Rows a buffer keeps after its step slots: ``int8_gqa``'s scratch row, which the core writes the step into."""
    return 1 if kv_dtype in STATIC_KV_DTYPES else 0


class KVCache(Memory):
    """Cache of ``capacity`` step slots per env plus ``n_prefix`` pinned slots.

    ``window=None``: full context; at the bound ``on_full`` decides: ``"error"`` raises
    :class:`MemoryFullError`, ``"evict_oldest"`` overwrites the oldest step (the memory
    becomes a sliding window of ``capacity`` steps), ``"reset"`` forgets every step and
    starts filling again (episode indices keep counting).
    ``window=W``: the newest ``W`` steps in a ring (StreamingLLM-style sliding window;
    the Sink-KV slots live in the model's weights, a sink token in the pinned prefix),
    constant memory forever.
    ``kv_dtype`` (:mod:`icrl_ros.memory.quant`): how K / V are stored; ``"int8"`` quantises each
    step on commit and hands the core its per-layer scales (:meth:`core_inputs`); ``"int8_gqa"``
    quantises with static scales (:meth:`set_static_scales`) and keeps a scratch row last.
    """

    takes_static_kv = True

    def __init__(self, n_layers: int, batch: int, n_heads: int, head_dim: int, capacity: int,
                 window: int | None = None, n_prefix: int = 0, dtype=torch.float32, device=None,
                 on_full: str = "error", budget_bytes: int | None = None, kv_dtype: str = "fp32") -> None:
        if window is not None and window <= 0:
            raise ValueError(f"window: must be > 0, got {window}")
        if window is None and capacity <= 0:
            raise ValueError(f"capacity: must be > 0, got {capacity}")
        self.window, self.n_prefix = window, n_prefix
        self.on_full = check_on_full(on_full)
        self.steps_cap = window if window is not None else capacity
        self.capacity = n_prefix + self.steps_cap  # slots per env (the scratch row of int8_gqa after them)
        self.n_scratch = scratch_rows(kv_dtype)
        self._allocate(n_layers, batch, n_heads, head_dim, self.capacity + self.n_scratch, dtype, device, budget_bytes,
                       kv_dtype)
        self.valid[:, self.capacity:] = True  # the scratch row: the step itself
        self.count = 0  # steps committed since the trial start (or the last on-full reset)

    @property
    def policy(self) -> str:  # type: ignore[override]
        return "full" if self.window is None else "window"

    @property
    def rings(self) -> bool:
        return self.window is not None or self.on_full == "evict_oldest"

    def set_prefix(self, k: Tensor, v: Tensor) -> None:
        """Pin the sink-token keys/values (L, B, H, n_prefix, hd)."""
        n = self.n_prefix
        self._store(slice(0, n), k, v)
        self.valid[:, :n] = True
        self.episode[:, :n] = -1

    def reset(self) -> None:
        """New trial: forget every step (the pinned prefix stays)."""
        self.valid[:, self.n_prefix:self.capacity] = False
        self.episode[:, self.n_prefix:self.capacity] = -1
        self.count = 0

    def next_slot(self) -> int:
        if self.rings:
            return self.n_prefix + self.count % self.steps_cap
        if self.count >= self.steps_cap:
            if self.on_full == "error":
                raise MemoryFullError(f"KVCache full: capacity {self.steps_cap} steps reached (on_full='error'); "
                                      "reset the trial, raise the capacity or use on_full='evict_oldest'")
            self.reset()  # on_full == "reset"
        return self.n_prefix + self.count

    def commit(self, k: Tensor, v: Tensor, episode: Tensor) -> None:
        """Store one step's keys/values (L, B, H, 1, hd) and episode indices (B,)."""
        s = self.next_slot()
        self._store(slice(s, s + 1), k, v)
        self.episode[:, s] = episode
        self.valid[:, s] = True
        self.count += 1

    def _kept(self, T: int) -> int:
        """First step of a T-step history that this memory still holds."""
        if T <= self.steps_cap:
            return 0
        if self.rings:
            return T - self.steps_cap
        if self.on_full == "error":
            raise MemoryFullError(f"KVCache full: {T} steps do not fit capacity {self.steps_cap} (on_full='error')")
        return ((T - 1) // self.steps_cap) * self.steps_cap  # the steps after the last reset

    def _place(self, k: Tensor, v: Tensor, episode: Tensor, t0: int, T: int) -> None:
        """Write steps t0 .. T-1 (k/v (L, B, H, T - t0, hd)) where stepping would have put them."""
        self.reset()
        n, cap = self.n_prefix, self.steps_cap
        first = t0 if self.rings else t0 - self._kept(T)
        slots = (torch.arange(first, first + (T - t0)) % cap) + n
        slots = slots.to(self.k.device)
        self._store(slots, k, v)
        self.episode.index_copy_(1, slots, episode)
        self.valid[:, slots] = True
        self.count = T if self.rings else T - self._kept(T)

    def load_sequence(self, k: Tensor, v: Tensor, episode: Tensor) -> None:
        """Replace the steps with a whole recomputed prefix (L, B, H, T, hd)."""
        T = k.shape[3]
        t0 = self._kept(T)
        self._place(k[:, :, :, t0:], v[:, :, :, t0:], episode[:, t0:], t0, T)

    def fill_synthetic(self, steps: int, generator: torch.Generator | None = None, episode_len: int = 500) -> None:
        t0 = self._kept(steps)
        k, v = self._random_kv(steps - t0, generator)
        ep = (torch.arange(t0, steps) // episode_len).expand(self.batch, -1).to(self.episode.device)
        self._place(k, v, ep, t0, steps)

    # -- snapshot contract ------------------------------------------------------------
    def config(self) -> dict:
        return {**super().config(), "window": self.window, "n_prefix": self.n_prefix, "steps_cap": self.steps_cap}

    @property
    def tokens(self) -> int:
        """Cached tokens of env 0 (valid slots, pinned prefix included; not the scratch row)."""
        return int(self.valid[0, :self.capacity].sum())

    def counters(self) -> dict:
        return {"count": self.count}

    def _load_counters(self, c: dict) -> None:
        self.count = c["count"]

    def _check_counters(self, c: dict) -> str | None:
        bad = super()._check_counters(c)
        if bad is None and not self.rings and c["count"] > self.steps_cap:
            return "count"
        return bad


def _steps_from_budget(cls_name: str, budget_bytes: int | None, batch: int, n_layers: int, n_heads: int,
                       head_dim: int, dtype, n_prefix: int, what: str, kv_dtype: str = "fp32") -> int:
    if budget_bytes is None:
        raise ValueError(f"{what}: give {what} or memory_budget_bytes")
    n = Memory.slots_for_budget(budget_bytes, batch, n_layers, n_heads, head_dim, dtype, kv_dtype) - n_prefix
    n -= scratch_rows(kv_dtype)
    if n < 1:
        raise MemoryBudgetError(f"memory_budget_bytes: {budget_bytes:,} bytes do not hold one step of {cls_name} "
                                f"(batch {batch}, {n_prefix} pinned slots)")
    return n


class FullContextMemory(KVCache):
    """Full context, bounded: every step of the trial up to ``capacity`` steps (default:
    as many as ``budget_bytes`` holds), then ``on_full`` ("error" | "evict_oldest" | "reset")."""

    quantizable = True
    """Takes a ``kv_dtype`` other than fp32 (:func:`icrl_ros.memory.create_memory` refuses it elsewhere)."""

    def __init__(self, n_layers: int, batch: int, n_heads: int, head_dim: int, capacity: int | None = None,
                 n_prefix: int = 0, on_full: str = "error", budget_bytes: int | None = None,
                 dtype=torch.float32, device=None, kv_dtype: str = "fp32") -> None:
        if capacity is None:
            capacity = _steps_from_budget("FullContextMemory", budget_bytes, batch, n_layers, n_heads, head_dim,
                                          dtype, n_prefix, "capacity", kv_dtype)
        super().__init__(n_layers, batch, n_heads, head_dim, capacity, None, n_prefix, dtype, device, on_full,
                         budget_bytes, kv_dtype)

    @classmethod
    def create(cls, dims: dict, model: dict, cfg: dict, common: dict) -> FullContextMemory:
        return cls(**dims, capacity=cfg.get("capacity"), n_prefix=model.get("n_prefix", 0),
                   on_full=cfg.get("on_full", "error"), kv_dtype=cfg.get("kv_dtype", "fp32"), **common)

    @classmethod
    def trial_sizes(cls, args, steps: int, schedule: list[int] | None = None) -> dict:
        return {"capacity": steps, "on_full": "error"}

    @classmethod
    def bundle_defaults(cls, args) -> dict:
        return {"capacity": DEFAULT_STEPS, "on_full": "evict_oldest"}  # streams at the bound


class SinkWindowMemory(KVCache):
    """Sink + sliding window: the newest ``window`` steps in a ring (default: as many as
    ``budget_bytes`` holds) plus the pinned sink-token prefix; constant memory forever."""

    quantizable = True

    def __init__(self, n_layers: int, batch: int, n_heads: int, head_dim: int, window: int | None = None,
                 n_prefix: int = 0, budget_bytes: int | None = None, dtype=torch.float32, device=None,
                 kv_dtype: str = "fp32") -> None:
        if window is None:
            window = _steps_from_budget("SinkWindowMemory", budget_bytes, batch, n_layers, n_heads, head_dim,
                                        dtype, n_prefix, "window", kv_dtype)
        super().__init__(n_layers, batch, n_heads, head_dim, window, window, n_prefix, dtype, device,
                         "evict_oldest", budget_bytes, kv_dtype)

    @classmethod
    def create(cls, dims: dict, model: dict, cfg: dict, common: dict) -> SinkWindowMemory:
        return cls(**dims, window=cfg.get("window"), n_prefix=model.get("n_prefix", 0),
                   kv_dtype=cfg.get("kv_dtype", "fp32"), **common)

    @classmethod
    def bundle_defaults(cls, args) -> dict:
        return {"window": DEFAULT_STEPS // 2}
