"""Memo's model arguments: :class:`~icrl_ros.models.config.ModelArgs` plus its segments and summaries."""

from __future__ import annotations

from dataclasses import dataclass

from icrl_ros.models.config import ModelArgs, check_choice, check_positive

MEMO_VARIANTS = ("memo", "rmt")


@dataclass
class MemoArgs(ModelArgs):
    """A Memo model: every ``l_seg`` steps the core writes ``l_sum`` summary tokens, and later
    segments attend to the summaries instead of the raw steps."""

    kind: str = "memo"
    l_seg: int = 64
    """steps per segment (randomised in [0.8, 1.2] x l_seg during training)."""
    l_sum: int = 8
    """summary tokens written at each segment end."""
    memo_variant: str = "memo"
    """``memo`` accumulates every summary; ``rmt`` keeps only the newest set."""
    seg_jitter: float = 0.2
    """training segment lengths are drawn in [1 - j, 1 + j] x l_seg."""

    def validate(self) -> None:
        super().validate()
        check_positive("model.l_seg", self.l_seg)
        check_positive("model.l_sum", self.l_sum)
        check_choice("model.memo_variant", self.memo_variant, MEMO_VARIANTS)
        if not 0.0 <= self.seg_jitter < 1.0:
            raise ValueError(f"model.seg_jitter: must be in [0, 1), got {self.seg_jitter}")
        if not self.iea:
            raise ValueError("model.iea: memo attends across episodes through its summaries; iea must be true")
        if self.sink == "token":
            raise ValueError("model.sink: memo supports ['kv', 'kv0', 'k0v0', 'none'], got 'token'")

    def describe(self) -> str:
        return f"{super().describe()}, l_seg {self.l_seg}, l_sum {self.l_sum} ({self.memo_variant})"

    def memory_fields(self) -> dict:
        return dict(l_seg=self.l_seg, l_sum=self.l_sum, variant=self.memo_variant)
