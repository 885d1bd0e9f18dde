"""Memo memory: summary-token slots plus one segment region, in one static buffer.

Layout per env: ``[summary slots (kept sets x l_sum) | segment slots]``. Every step
appends to the segment; at a segment end the caller runs the model's ``summarize`` on
:meth:`MemoMemory.summary_inputs` and hands the result to :meth:`add_summary`, which
writes one summary set (a ring over sets when bounded, oldest dropped) and clears the
segment. Positions keep counting across evictions (keys are stored rotated).
"""

from __future__ import annotations

import torch
from torch import Tensor


class MemoMemory:
    def __init__(self, n_layers: int, batch: int, n_heads: int, head_dim: int, l_seg: int, l_sum: int,
                 variant: str = "memo", max_sets: int = 64, segment_capacity: int | None = None,
                 schedule: list[int] | None = None, dtype=torch.float32, device=None) -> None:
        if max_sets <= 0:
            raise ValueError(f"max_sets: must be > 0, got {max_sets}")
        self.l_seg, self.l_sum, self.variant = l_seg, l_sum, variant
        self.kept_cap = 1 if variant == "rmt" else max_sets
        self.sum_slots = self.kept_cap * l_sum
        self.seg_cap = segment_capacity or l_seg
        self.schedule = schedule
        P = self.sum_slots + self.seg_cap
        shape = (n_layers, batch, n_heads, P, head_dim)
        self.k = torch.zeros(shape, dtype=dtype, device=device)
        self.v = torch.zeros(shape, dtype=dtype, device=device)
        self.valid = torch.zeros(batch, P, dtype=torch.bool, device=device)
        self.episode = torch.full((batch, P), -1, dtype=torch.long, device=device)  # unused by memo's mask
        self.is_summary = torch.zeros(P, dtype=torch.bool, device=device)
        self.is_summary[: self.sum_slots] = True
        self.batch = batch
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

    def position(self) -> Tensor:
        """RoPE index (B,) of the next step."""
        return torch.full((self.batch,), self.pos_base() + self.seg_count, dtype=torch.long, device=self.k.device)

    def segment_length(self) -> int:
        if self.schedule is not None and self.n_generated < len(self.schedule):
            return self.schedule[self.n_generated]
        return self.l_seg

    @property
    def tokens(self) -> int:
        """Cached tokens per env (summaries kept + segment)."""
        return int(self.valid[0].sum())

    @property
    def nbytes(self) -> int:
        return self.k.nbytes + self.v.nbytes + self.valid.nbytes + self.episode.nbytes

    # -- writes -------------------------------------------------------------------
    def commit(self, k: Tensor, v: Tensor, episode: Tensor) -> bool:
        """Append one step (L, B, H, 1, hd). Returns True when the segment is complete and
        the caller must summarise before the next step."""
        if self.seg_count >= self.seg_cap:
            raise RuntimeError(f"MemoMemory: segment capacity {self.seg_cap} exceeded; summarise first")
        s = self.sum_slots + self.seg_count
        self.k[:, :, :, s], self.v[:, :, :, s] = k[:, :, :, 0], v[:, :, :, 0]
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
        return self.k, self.v, self.valid, sum_valid, full(self.pos_base()), full(self.seg_count), new_base

    def add_summary(self, k: Tensor, v: Tensor) -> None:
        """Write one summary set (L, B, H, l_sum, hd) and clear the segment."""
        slot = 0 if self.variant == "rmt" else self.n_generated % self.kept_cap
        a, b = slot * self.l_sum, (slot + 1) * self.l_sum
        self.k[:, :, :, a:b], self.v[:, :, :, a:b] = k, v
        self.valid[:, a:b] = True
        self.n_generated += 1
        self.valid[:, self.sum_slots:] = False
        self.seg_count = 0

    def load_state(self, state: dict) -> None:
        """Adopt the memory a full-sequence forward ended with (``MemoPolicy.forward_sequence``)."""
        self.reset()
        sums = state["summaries"][-self.kept_cap:]
        n_gen = state["n_generated"]
        first = n_gen - len(sums)
        for j, (k, v) in enumerate(sums):
            self.n_generated = first + j
            self.add_summary(k, v)
        self.n_generated = n_gen
        seg_k, seg_v = state["segment"]
        n = state["seg_count"]
        if n:
            s = self.sum_slots
            self.k[:, :, :, s:s + n], self.v[:, :, :, s:s + n] = seg_k, seg_v
            self.valid[:, s:s + n] = True
        self.seg_count = n
