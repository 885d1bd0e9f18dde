"""Memo's deploy graphs: the shared encoder / core / heads plus ``summarize``, run at every
segment end on the segment's keys / values (:meth:`MemoMemory.summary_inputs`). The core reads the
memory as stored (``kv_dtype``); ``summarize`` reads it decoded, in the bundle's float dtype."""

from __future__ import annotations

from torch import Tensor, nn

from icrl_ros.families.memo.model import MemoPolicy
from icrl_ros.runtime.graphs import cache_dtype, dtype_name, io_spec, shared_graph_modules, shared_graph_specs


class SummarizeGraph(nn.Module):
    """``MemoPolicy.summarize`` as a graph (arguments as in :meth:`MemoMemory.summary_inputs`)."""

    def __init__(self, policy: MemoPolicy) -> None:
        super().__init__()
        self.policy = policy

    def forward(self, mem_k, mem_v, mem_valid, sum_valid, pos_base, seg_len, new_base) -> tuple[Tensor, Tensor]:
        return self.policy.summarize(mem_k, mem_v, mem_valid, sum_valid, pos_base, seg_len, new_base)


def graph_specs(policy: MemoPolicy, precision: str = "fp32", kv_dtype: str = "fp32") -> dict:
    a = policy.args
    L, H, hd = a.n_layers, a.n_heads, a.head_dim
    f = dtype_name(cache_dtype(precision))
    kv = lambda n: io_spec(n, f, [L, "batch", H, "cache", hd])  # noqa: E731
    return {**shared_graph_specs(policy, precision, kv_dtype=kv_dtype), "summarize": {
        "inputs": [kv("mem_k"), kv("mem_v"), io_spec("mem_valid", "bool", ["batch", "cache"]),
                   io_spec("sum_valid", "bool", ["batch", "cache"]), io_spec("pos_base", "int64", ["batch"]),
                   io_spec("seg_len", "int64", ["batch"]), io_spec("new_base", "int64", ["batch"])],
        "outputs": [io_spec("sum_k", f, [L, "batch", H, a.l_sum, hd]), io_spec("sum_v", f, [L, "batch", H, a.l_sum, hd])],
    }}


def graph_modules(policy: MemoPolicy, kv_dtype: str = "fp32") -> dict[str, nn.Module]:
    return {**shared_graph_modules(policy, kv_dtype=kv_dtype), "summarize": SummarizeGraph(policy)}
