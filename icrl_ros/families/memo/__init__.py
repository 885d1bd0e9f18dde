"""Memo: a ReLIC core that summarises every segment into a few summary tokens and keeps only
those (``model.py``: :class:`MemoPolicy`; ``memory.py``: :class:`MemoMemory`; ``graphs.py``: the
``summarize`` graph beside the shared encoder / core / heads)."""

from icrl_ros.families import Family
from icrl_ros.families.relic import positions as relic_positions


def positions(a) -> dict:
    """RoPE over summary-set slots (Memo's rule), the step embedding as ReLIC's."""
    return {**relic_positions(a), "rope": "memo_slots", "l_seg": a.l_seg, "l_sum": a.l_sum, "variant": a.memo_variant}


FAMILY = Family(
    kind="memo",
    policy="icrl_ros.families.memo.model:MemoPolicy",
    config="icrl_ros.families.memo.config:MemoArgs",
    memories={"memo": "icrl_ros.families.memo.memory:MemoMemory"},
    graphs="icrl_ros.families.memo.graphs",
    positions=positions,
    kv_dtypes=("fp32", "fp16", "int8"),
    segments=True,
)
