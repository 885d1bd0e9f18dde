"""HCAM: a local window of the last C steps plus hierarchical attention over a store of past
chunks (``model.py``: :class:`HCAMPolicy`; ``memory.py``: :class:`HCAMMemory`; ``graphs.py``:
the core graph that reads the chunk store)."""

from icrl_ros.families import Family
from icrl_ros.families.relic import positions as relic_positions


def positions(a) -> dict:
    """ReLIC's, plus the chunking: chunks counted from the trial start, the window the last C steps."""
    return {**relic_positions(a), "local_window": a.hcam_chunk, "chunk": a.hcam_chunk, "top_k": a.hcam_top_k,
            "memory_layers": list(a.memory_layers)}


FAMILY = Family(
    kind="hcam",
    policy="icrl_ros.families.hcam.model:HCAMPolicy",
    config="icrl_ros.families.hcam.config:HCAMArgs",
    memories={"hcam": "icrl_ros.families.hcam.memory:HCAMMemory"},
    graphs="icrl_ros.families.hcam.graphs",
    positions=positions,
    kv_dtypes=("fp32", "fp16", "int8"),  # the chunk store's contents (HCAMMemory)
    chunk_store=True,
)
