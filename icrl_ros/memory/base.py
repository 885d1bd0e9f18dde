"""The contract every memory manager keeps, and the byte-budget arithmetic they share.

A memory owns the keys/values a policy attends to between steps, in *static* buffers
allocated once (static shapes for ONNX Runtime / TensorRT / CUDA graphs):

* ``k``, ``v`` (L, B, H, P, hd): keys stored after RoPE, so slot order never matters; in the
  memory's ``kv_dtype`` (:mod:`icrl_ros.memory.quant`: float, float16, or uint8 codes with
  ``k_scale`` / ``v_scale`` (L, B, H, P) float32 beside them);
* ``valid`` (B, P) bool: which slots hold data (the attention mask's source);
* ``episode`` (B, P) int64: episode index of each slot (-1 = pinned prefix / unused).

Contract (checked by ``tests/memory/test_memory.py`` over every registered policy):

* ``nbytes`` is the bytes the buffers hold; it never changes after construction and
  never exceeds ``budget_bytes`` when a budget is given (too small a budget raises
  :class:`MemoryBudgetError` at construction, naming the bytes needed).
* ``commit(k, v, episode)`` stores one step; what happens when the memory is full is
  the policy's documented ``on_full`` behaviour, never silent growth.
* episode boundaries do nothing to memory (ICL attends across episodes); ``reset()``
  is the trial reset and forgets every step (a pinned sink-token prefix stays).
* ``snapshot(path, **meta)`` writes the state atomically; ``restore(path, expect)``
  validates the file completely before changing anything, so a refused restore leaves
  the memory exactly as it was.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import Tensor

from icrl_ros.memory.quant import (STATIC_KV_DTYPES, check_kv_dtype, dequantize, kv_bytes, quantize, quantize_static,
                                   storage_dtype, zero_code)

ON_FULL = ("error", "evict_oldest", "reset")
DEFAULT_STEPS = 8192
"""A bundle's default memory spans this many steps (ReLIC's 8k context): :meth:`Memory.bundle_defaults`."""


class MemoryFullError(RuntimeError):
    """A bounded memory with ``on_full="error"`` was asked to store one step too many."""


class MemoryBudgetError(ValueError):
    """The requested memory does not fit its byte budget."""


def check_on_full(value: str) -> str:
    if value not in ON_FULL:
        raise ValueError(f"on_full: {value!r} is not one of {list(ON_FULL)}")
    return value


def slot_bytes(n_layers: int, n_heads: int, head_dim: int, dtype: torch.dtype, kv_dtype: str = "fp32") -> int:
    """Bytes one cache slot costs per env: K and V for every layer (in ``kv_dtype``: int8 codes
    and their per-head scales), plus validity (bool) and episode index (int64)."""
    return 2 * n_layers * n_heads * kv_bytes(kv_dtype, head_dim, dtype) + 1 + 8


def static_bytes(n_layers: int, n_heads: int, head_dim: int, kv_dtype: str) -> int:
    """Bytes of a memory's static per-channel scales (``int8_gqa``; 0 otherwise), whatever its size."""
    return 2 * n_layers * n_heads * head_dim * 4 if kv_dtype in STATIC_KV_DTYPES else 0


class Memory:
    """Base class: static buffers, byte accounting, snapshot / restore.

    Subclasses set ``policy`` (registry name), allocate with :meth:`_allocate`, and
    implement ``commit``, ``reset``, :meth:`config` (what a snapshot must match) and
    :meth:`counters` / :meth:`_load_counters` (their Python-side bookkeeping).
    """

    policy: str = ""
    k: Tensor
    v: Tensor
    valid: Tensor
    episode: Tensor
    kv_dtype: str = "fp32"
    k_scale: Tensor | None = None
    v_scale: Tensor | None = None
    k_static: Tensor | None = None
    v_static: Tensor | None = None
    """``int8_gqa``: the static per-channel scales (L, 1, H, 1, hd), set once by :meth:`set_static_scales`."""
    takes_static_kv: bool = False
    """Whether this memory keeps the ``int8_gqa`` layout (a scratch row last: the full and window memories)."""

    @classmethod
    def create(cls, dims: dict, model: dict, cfg: dict, common: dict) -> Memory:
        """Build from :func:`icrl_ros.memory.create_memory`'s arguments: ``dims`` (n_layers, batch,
        n_heads, head_dim), ``model`` (the model's fields a memory needs: n_prefix, l_seg, l_sum,
        variant, n_mem_layers, chunk, top_k, episode_rope), ``cfg`` (this policy's own settings), ``common``
        (dtype, device, budget_bytes)."""
        raise NotImplementedError(f"{cls.__name__}.create")

    @classmethod
    def bundle_defaults(cls, args) -> dict:
        """The settings an exported bundle's manifest records for this policy unless told
        otherwise (``training/export.py``), for a model with arguments ``args``."""
        raise NotImplementedError(f"{cls.__name__}.bundle_defaults")

    @classmethod
    def trial_sizes(cls, args, steps: int, schedule: list[int] | None = None) -> dict:
        """The settings that keep everything a trial of ``steps`` steps needs (see
        :func:`icrl_ros.memory.trial_sizes`); a memory that cannot raises."""
        raise ValueError(f"memory: a {cls.__name__} has no size that keeps a whole trial")

    def _allocate(self, n_layers: int, batch: int, n_heads: int, head_dim: int, slots: int, dtype, device,
                  budget_bytes: int | None, kv_dtype: str = "fp32") -> None:
        self.kv_dtype, self.float_dtype = check_kv_dtype(kv_dtype), dtype
        if kv_dtype in STATIC_KV_DTYPES and not self.takes_static_kv:
            raise ValueError(f"kv_dtype: {kv_dtype!r} is for the full and window memories, not {type(self).__name__}")
        need = batch * slots * slot_bytes(n_layers, n_heads, head_dim, dtype, kv_dtype) \
            + static_bytes(n_layers, n_heads, head_dim, kv_dtype)
        if budget_bytes is not None and need > budget_bytes:
            raise MemoryBudgetError(
                f"memory_budget_bytes: {type(self).__name__} with {slots} slots x batch {batch} needs {need:,} bytes, "
                f"budget is {budget_bytes:,}; raise the budget or lower the capacity")
        self.n_layers, self.batch, self.n_heads, self.head_dim = n_layers, batch, n_heads, head_dim
        self.budget_bytes = budget_bytes
        shape = (n_layers, batch, n_heads, slots, head_dim)
        store = storage_dtype(kv_dtype, dtype)
        self.k = torch.full(shape, zero_code(kv_dtype), dtype=store, device=device)
        self.v = torch.full(shape, zero_code(kv_dtype), dtype=store, device=device)
        if kv_dtype == "int8":
            self.k_scale = torch.zeros(shape[:-1], dtype=torch.float32, device=device)
            self.v_scale = torch.zeros(shape[:-1], dtype=torch.float32, device=device)
        if kv_dtype in STATIC_KV_DTYPES:  # unset (zero) until the bundle's calibrated scales arrive
            self.k_static = torch.zeros(n_layers, 1, n_heads, 1, head_dim, dtype=torch.float32, device=device)
            self.v_static = torch.zeros_like(self.k_static)
        self.valid = torch.zeros(batch, slots, dtype=torch.bool, device=device)
        self.episode = torch.full((batch, slots), -1, dtype=torch.long, device=device)

    @staticmethod
    def slots_for_budget(budget_bytes: int, batch: int, n_layers: int, n_heads: int, head_dim: int, dtype,
                         kv_dtype: str = "fp32") -> int:
        """The most slots per env that fit ``budget_bytes``."""
        budget_bytes -= static_bytes(n_layers, n_heads, head_dim, kv_dtype)
        return max(0, budget_bytes) // (batch * slot_bytes(n_layers, n_heads, head_dim, dtype, kv_dtype))

    def set_static_scales(self, k_scale: Tensor, v_scale: Tensor) -> None:
        """``int8_gqa``: the per-channel scales (L, H, hd) every key / value is stored with (the bundle's
        calibration); set before the first write."""
        if self.k_static is None:
            raise ValueError(f"static scales: this memory stores {self.kv_dtype!r}, not {list(STATIC_KV_DTYPES)}")
        for buf, x in ((self.k_static, k_scale), (self.v_static, v_scale)):
            if tuple(x.shape) != (self.n_layers, self.n_heads, self.head_dim) or not bool((x > 0).all()):
                raise ValueError(f"static scales: expected positive (L, H, hd) = {(self.n_layers, self.n_heads, self.head_dim)}, "
                                 f"got {tuple(x.shape)}")
            buf.copy_(x[:, None, :, None, :])

    def _store(self, slots: slice | Tensor, k: Tensor, v: Tensor) -> None:
        """Write K / V (L, B, H, n, hd) into ``slots`` (a slice or an index tensor of n slots), in the
        memory's ``kv_dtype``: int8 quantises here, on commit (per head and token; ``int8_gqa`` with the
        static per-channel scales)."""
        for buf, scale, static, x in ((self.k, self.k_scale, self.k_static, k), (self.v, self.v_scale, self.v_static, v)):
            if static is not None:
                x = quantize_static(x, static)
            if scale is not None:
                x, s = quantize(x)
                if isinstance(slots, slice):
                    scale[:, :, :, slots] = s
                else:
                    scale.index_copy_(3, slots, s)
            if isinstance(slots, slice):
                buf[:, :, :, slots] = x
            else:
                buf.index_copy_(3, slots, x.to(buf.dtype))

    def float_kv(self) -> tuple[Tensor, Tensor]:
        """K and V (L, B, H, P, hd) in the memory's float dtype: the buffers themselves when stored so, else
        decoded copies (for a graph that reads floats, Memo's ``summarize``)."""
        if self.k_scale is not None:
            return dequantize(self.k, self.k_scale), dequantize(self.v, self.v_scale)
        if self.k_static is not None:
            return self.k.float() * self.k_static, self.v.float() * self.v_static
        if self.k.dtype != self.float_dtype:
            return self.k.to(self.float_dtype), self.v.to(self.float_dtype)
        return self.k, self.v

    def view(self) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """What a step attends to: the static buffers ``k``, ``v`` (L, B, H, P, hd),
        ``valid`` and ``episode`` (B, P), in place (no copy; engines bind them by address)."""
        return self.k, self.v, self.valid, self.episode

    def core_inputs(self) -> tuple[Tensor, ...]:
        """Buffers the deploy core graph reads after the window's K/V: int8, the scales after the codes
        (``k_scale`` then ``v_scale``, one (B, H, P) view per layer; HCAM: the chunk store); the core then
        returns one extra output per ``commit`` argument beyond (k, v, episode)."""
        if self.k_static is not None:  # int8_gqa: per layer (1, H, 1, hd)
            return (*self.k_static.unbind(0), *self.v_static.unbind(0))
        if self.k_scale is None:
            return ()
        return (*self.k_scale.unbind(0), *self.v_scale.unbind(0))

    # -- one control step (icrl_ros.runtime.control.ControlStep asks; a family's memory may differ) --
    episode_masked: bool = True
    """Without inter-episode attention the step masks slots of other episodes (Memo's summaries
    mix episodes, so its memory says False)."""

    def write_position(self, episode: Tensor, out: Tensor) -> None:
        """The next step's RoPE index (B,) into ``out``: the episode index."""
        out.copy_(episode)

    def commit_step(self, engine, k: Tensor, v: Tensor, episode: Tensor, *more: Tensor) -> None:
        """Store one step's core outputs (``more``: the core's extra outputs, see
        :meth:`core_inputs`); ``engine`` runs any graph the memory needs (Memo: summarize)."""
        self.commit(k, v, episode, *more)

    def load_trial(self, policy, seq: dict[str, Tensor], schedule: list[int] | None = None) -> tuple[Tensor, Tensor]:
        """Adopt what ``policy``'s whole-sequence forward over a trial prefix ``seq`` ends with
        (the memory the same steps one at a time would hold); returns that forward's logits
        (B, T, A) and values (B, T)."""
        logits, values, k, v = policy.forward_sequence(seq)
        self.load_sequence(k, v, seq["episode_index"])
        if policy.n_prefix:
            self.set_prefix(*policy.initial_cache(k.shape[1], k.device))
        return logits, values

    # -- sizes ------------------------------------------------------------------------
    @property
    def slots(self) -> int:
        """Slots per env in the static buffer (the cache length engines see)."""
        return self.k.shape[3]

    @property
    def nbytes(self) -> int:
        """Bytes held by the buffers (constant for the memory's whole life)."""
        scales = sum(t.nbytes for t in (self.k_scale, self.v_scale, self.k_static, self.v_static) if t is not None)
        return self.k.nbytes + self.v.nbytes + scales + self.valid.nbytes + self.episode.nbytes

    @property
    def tokens(self) -> int:
        """Cached tokens of env 0 (valid slots, pinned prefix included)."""
        return int(self.valid[0].sum())

    @property
    def live_bytes(self) -> int:
        """Bytes of the slots that hold data (env 0 x batch)."""
        return self.tokens * self.batch * slot_bytes(self.n_layers, self.n_heads, self.head_dim, self.float_dtype,
                                                     self.kv_dtype)

    # -- snapshot contract ------------------------------------------------------------
    def config(self) -> dict:
        """What a snapshot must match to be restored into this memory."""
        return {"policy": self.policy, "n_layers": self.n_layers, "batch": self.batch, "n_heads": self.n_heads,
                "head_dim": self.head_dim, "slots": self.slots, "dtype": str(self.k.dtype).replace("torch.", ""),
                **({"kv_dtype": self.kv_dtype} if self.kv_dtype != "fp32" else {})}

    def counters(self) -> dict:
        raise NotImplementedError

    def _load_counters(self, c: dict) -> None:
        raise NotImplementedError

    def _check_counters(self, c: dict) -> str | None:
        """Name of the first counter that is missing or out of range, else None."""
        for key in self.counters():
            if not isinstance(c.get(key), int) or c[key] < 0:
                return key
        return None

    def tensors(self) -> dict[str, Tensor]:
        """What a snapshot holds: the buffers as stored (int8: the codes and their scales)."""
        scales = {name: t for name, t in (("k_scale", self.k_scale), ("v_scale", self.v_scale),
                                          ("k_static", self.k_static), ("v_static", self.v_static)) if t is not None}
        return {"k": self.k, "v": self.v, **scales, "valid": self.valid, "episode": self.episode}

    def snapshot(self, path: str | Path, extra: dict[str, Tensor] | None = None, **meta) -> None:
        """Write the memory (and ``meta``: model hash, trial id, step counts ...; ``extra``: more
        tensors kept beside it, e.g. the route memory's grids) atomically."""
        from icrl_ros.memory.snapshot import write_snapshot

        write_snapshot(path, {**self.tensors(), **(extra or {})},
                       {"memory": self.config(), "counters": self.counters(), **meta})

    def restore(self, path: str | Path, expect: dict | None = None, check_meta=None,
                extra: dict[str, Tensor] | None = None) -> dict:
        """Load a snapshot after validating all of it; returns its metadata.

        ``expect`` maps metadata fields to required values (e.g. ``{"model_hash": ...}``);
        ``check_meta(meta)`` may raise to refuse it on the caller's own fields; ``extra``: tensors
        written beside the memory (:meth:`snapshot`), checked like its own and loaded in place.
        Raises :class:`~icrl_ros.memory.snapshot.SnapshotError` naming the file and field;
        on any error the memory is left untouched.
        """
        from icrl_ros.memory.snapshot import read_snapshot, validate_snapshot

        extra = extra or {}
        arrays, meta = read_snapshot(path)
        tensors = validate_snapshot(path, arrays, meta, self, expect or {}, extra)
        if check_meta is not None:
            check_meta(meta)
        self._adopt({k: v for k, v in tensors.items() if k not in extra}, meta["counters"])
        for name, t in extra.items():
            t.copy_(tensors[name])
        return meta

    def _adopt(self, tensors: dict[str, Tensor], counters: dict) -> None:
        """Take over a validated snapshot's tensors and counters (cannot fail)."""
        for name, t in self.tensors().items():
            t.copy_(tensors[name])
        self._load_counters(counters)

    # -- benchmark support ------------------------------------------------------------
    def fill_synthetic(self, steps: int, generator: torch.Generator | None = None) -> None:
        """Put the memory in the state it would have after ``steps`` steps of one
        episode, with random keys/values, through its own write API (bookkeeping exact)."""
        raise NotImplementedError

    def _random_kv(self, n: int, generator: torch.Generator | None) -> tuple[Tensor, Tensor]:
        shape = (self.n_layers, self.batch, self.n_heads, n, self.head_dim)
        k = torch.randn(shape, generator=generator).to(self.float_dtype)
        v = torch.randn(shape, generator=generator).to(self.float_dtype)
        return k.to(self.k.device), v.to(self.k.device)
