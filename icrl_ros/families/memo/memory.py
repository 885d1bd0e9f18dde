"""Memo memory: summary-token slots plus one segment region, in one static buffer.

Layout per env: ``[summary slots (kept sets x l_sum) | segment slots]``. Every step
appends to the segment; at a segment end the caller runs the model's ``summarize`` on
:meth:`MemoMemory.summary_inputs` and hands the result to :meth:`add_summary`, which
writes one summary set and clears the segment. Positions keep counting across
evictions (keys are stored rotated).

Bound (``max_sets`` summary sets, default: as many as ``budget_bytes`` holds): summaries
accumulate until the bound; then ``on_full`` decides: ``"evict_oldest"`` (streaming
Memo: the newest ``max_sets`` sets are kept, a ring over sets), ``"error"`` (raise
:class:`~icrl_ros.memory.base.MemoryFullError`), ``"reset"`` (forget everything, as at a
trial start). The ``rmt`` variant keeps exactly one set (fixed-size memory).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from icrl_ros.memory.base import Memory, MemoryBudgetError, MemoryFullError, check_on_full


class MemoMemory(Memory):
    policy = "memo"
    episode_masked = False  # summaries mix episodes
    quantizable = True
    """Takes a ``kv_dtype`` other than fp32: summaries and the segment's steps are stored in it (quantised as they
    are written); ``summarize`` reads them decoded (:meth:`~icrl_ros.memory.base.Memory.float_kv`)."""

    def write_position(self, episode: Tensor, out: Tensor) -> None:
        out.fill_(self.pos_base() + self.seg_count)  # Memo's slots rule, not the episode index

    def commit_step(self, engine, k: Tensor, v: Tensor, episode: Tensor, *more: Tensor) -> None:
        if self.commit(k, v, episode):  # the segment is complete: summarise it
            self.add_summary(*engine.summarize(*self.summary_inputs()))

    def load_trial(self, policy, seq: dict[str, Tensor], schedule: list[int] | None = None) -> tuple[Tensor, Tensor]:
        logits, values, state = policy.forward_sequence(seq, schedule)
        self.load_state(state)
        return logits, values

    @classmethod
    def create(cls, dims: dict, model: dict, cfg: dict, common: dict) -> MemoMemory:
        return cls(dims["n_layers"], dims["batch"], dims["n_heads"], dims["head_dim"], model["l_seg"], model["l_sum"],
                   model.get("variant", "memo"), cfg.get("max_sets"), segment_capacity=cfg.get("segment_capacity"),
                   schedule=cfg.get("schedule"), on_full=cfg.get("on_full", "evict_oldest"),
                   kv_dtype=cfg.get("kv_dtype", "fp32"), **common)

    @classmethod
    def bundle_defaults(cls, args) -> dict:
        return {"max_sets": 256, "on_full": "evict_oldest"}  # accumulates, then streaming Memo

    @classmethod
    def trial_sizes(cls, args, steps: int, schedule: list[int] | None = None) -> dict:
        """Every summary set: one per segment (segments per ``schedule``, else ``l_seg`` long)."""
        shortest = min(schedule) if schedule else args.l_seg
        return {"max_sets": max(1, math.ceil(steps / shortest)), "on_full": "error"}

    def __init__(self, n_layers: int, batch: int, n_heads: int, head_dim: int, l_seg: int, l_sum: int,
                 variant: str = "memo", max_sets: int | None = 64, segment_capacity: int | None = None,
                 schedule: list[int] | None = None, dtype=torch.float32, device=None,
                 on_full: str = "evict_oldest", budget_bytes: int | None = None, kv_dtype: str = "fp32") -> None:
        self.l_seg, self.l_sum, self.variant = l_seg, l_sum, variant
        self.seg_cap = segment_capacity or l_seg
        if max_sets is None:
            if budget_bytes is None:
                raise ValueError("max_sets: give max_sets or memory_budget_bytes")
            slots = self.slots_for_budget(budget_bytes, batch, n_layers, n_heads, head_dim, dtype, kv_dtype)
            max_sets = (slots - self.seg_cap) // l_sum
            if max_sets < 1:
                raise MemoryBudgetError(
                    f"memory_budget_bytes: {budget_bytes:,} bytes do not hold one summary set ({l_sum} slots) plus "
                    f"the {self.seg_cap}-slot segment of MemoMemory (batch {batch})")
        if max_sets <= 0:
            raise ValueError(f"max_sets: must be > 0, got {max_sets}")
        self.on_full = check_on_full(on_full)
        self.kept_cap = 1 if variant == "rmt" else max_sets
        self.sum_slots = self.kept_cap * l_sum
        self.schedule = schedule
        self._allocate(n_layers, batch, n_heads, head_dim, self.sum_slots + self.seg_cap, dtype, device, budget_bytes,
                       kv_dtype)
        self.is_summary = torch.zeros(self.slots, dtype=torch.bool, device=device)
        self.is_summary[: self.sum_slots] = True
        self.n_generated = 0
        self.seg_count = 0

    # -- bookkeeping --------------------------------------------------------------
    def reset(self) -> None:
        self.valid[:] = False
        self.n_generated = 0
        self.seg_count = 0

    def kept_sets(self, n_generated: int) -> int:
        return min(n_generated, 1) if self.variant == "rmt" else n_generated

    def pos_base(self) -> int:
        return self.kept_sets(self.n_generated) * self.l_sum

    def segment_length(self) -> int:
        if self.schedule is not None and self.n_generated < len(self.schedule):
            return self.schedule[self.n_generated]
        return self.l_seg

    # -- writes -------------------------------------------------------------------
    def commit(self, k: Tensor, v: Tensor, episode: Tensor) -> bool:
        """Append one step (L, B, H, 1, hd). Returns True when the segment is complete and
        the caller must summarise before the next step."""
        if self.seg_count >= self.seg_cap:
            raise RuntimeError(f"MemoMemory: segment capacity {self.seg_cap} exceeded; summarise first")
        s = self.sum_slots + self.seg_count
        self._store(slice(s, s + 1), k, v)
        self.episode[:, s] = episode
        self.valid[:, s] = True
        self.seg_count += 1
        return self.seg_count >= self.segment_length()

    def summary_inputs(self) -> tuple[Tensor, ...]:
        """Arguments of ``MemoPolicy.summarize`` for the current segment end."""
        B, dev = self.batch, self.k.device
        sum_valid = self.valid & self.is_summary
        if self.variant == "rmt":
            sum_valid = torch.zeros_like(sum_valid)
        full = lambda x: torch.full((B,), x, dtype=torch.long, device=dev)  # noqa: E731
        new_base = full(self.pos_base() if self.variant == "memo" else 0)
        return (*self.float_kv(), self.valid, sum_valid, full(self.pos_base()), full(self.seg_count), new_base)

    def add_summary(self, k: Tensor, v: Tensor) -> None:
        """Write one summary set (L, B, H, l_sum, hd) and clear the segment."""
        if self.variant == "memo" and self.n_generated >= self.kept_cap and self.on_full != "evict_oldest":
            if self.on_full == "error":
                raise MemoryFullError(f"MemoMemory full: {self.kept_cap} summary sets kept (on_full='error'); "
                                      "reset the trial, raise max_sets or use on_full='evict_oldest'")
            self.reset()  # on_full == "reset": the new set is dropped too (its positions assume the old memory)
            return
        self._write_set(k, v)
        self.n_generated += 1
        self.valid[:, self.sum_slots:] = False
        self.seg_count = 0

    def _write_set(self, k: Tensor, v: Tensor) -> None:
        slot = 0 if self.variant == "rmt" else self.n_generated % self.kept_cap
        a, b = slot * self.l_sum, (slot + 1) * self.l_sum
        self._store(slice(a, b), k, v)
        self.valid[:, a:b] = True

    def load_state(self, state: dict) -> None:
        """Adopt the memory a full-sequence forward ended with (``MemoPolicy.forward_sequence``)."""
        self.reset()
        sums = state["summaries"][-self.kept_cap:]
        n_gen = state["n_generated"]
        first = n_gen - len(sums)
        for j, (k, v) in enumerate(sums):
            self.n_generated = first + j
            self._write_set(k, v)
        self.n_generated = n_gen
        seg_k, seg_v = state["segment"]
        n = state["seg_count"]
        if n:
            s = self.sum_slots
            self._store(slice(s, s + n), seg_k, seg_v)
            self.valid[:, s:s + n] = True
        self.seg_count = n

    def fill_synthetic(self, steps: int, generator: torch.Generator | None = None, episode_len: int = 500) -> None:
        n_gen, seg = divmod(steps, self.l_seg)
        kept = min(self.kept_sets(n_gen), self.kept_cap)
        sums = [self._random_kv(self.l_sum, generator) for _ in range(kept)]
        segment = self._random_kv(seg, generator) if seg else (None, None)
        self.load_state({"summaries": sums, "n_generated": n_gen, "segment": segment, "seg_count": seg})

    # -- snapshot contract ------------------------------------------------------------
    def config(self) -> dict:
        return {**super().config(), "l_seg": self.l_seg, "l_sum": self.l_sum, "variant": self.variant,
                "max_sets": self.kept_cap, "segment_capacity": self.seg_cap}

    def counters(self) -> dict:
        return {"n_generated": self.n_generated, "seg_count": self.seg_count}

    def _load_counters(self, c: dict) -> None:
        self.n_generated, self.seg_count = c["n_generated"], c["seg_count"]

    def _check_counters(self, c: dict) -> str | None:
        bad = super()._check_counters(c)
        if bad is None and c["seg_count"] > self.seg_cap:
            return "seg_count"
        return bad
