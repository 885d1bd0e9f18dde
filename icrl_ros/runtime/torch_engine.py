"""Torch backend: the bundle's weights run by the graph modules of :mod:`.graphs`.

CPU: eager, ``torch.no_grad``. CUDA: the core and heads are captured once per set of
buffer addresses into CUDA graphs (static shapes: the memory's buffers never move), so
a step is two graph replays plus the encoder; ``cuda_graphs=False`` runs eagerly.
"""

from __future__ import annotations

import copy

import torch
from torch import Tensor

from icrl_ros.models.policy import head_inputs
from icrl_ros.runtime.bundle import Bundle
from icrl_ros.runtime.engine import Engine, register_backend
from icrl_ros.runtime.graphs import build_graphs, graph_modules


class _Graphed:
    """A module replayed from a CUDA graph. ``static`` arguments are read in place (their
    addresses are fixed: memory buffers); the others are copied into owned buffers."""

    def __init__(self, module, args: tuple[Tensor, ...], copied: tuple[int, ...]) -> None:
        self.copied = copied
        self.args = tuple(a.clone() if i in copied else a for i, a in enumerate(args))
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side), torch.no_grad():
            for _ in range(3):  # warm-up outside capture (allocator, cuBLAS handles)
                module(*self.args)
        torch.cuda.current_stream().wait_stream(side)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph), torch.no_grad():
            self.out = module(*self.args)

    def __call__(self, *args: Tensor):
        for i in self.copied:
            self.args[i].copy_(args[i])
        self.graph.replay()
        return self.out


@register_backend("torch")
class TorchEngine(Engine):
    def __init__(self, bundle: Bundle, device: str = "cpu", threads: int | None = None,
                 cuda_graphs: bool = True) -> None:
        super().__init__(bundle, device)
        if threads:
            torch.set_num_threads(threads)  # process-wide: torch has no per-module setting
        policy = copy.deepcopy(bundle.load_policy())  # the bundle's copy stays on the CPU for other users
        self.graphs = {k: g.to(self.device) for k, g in build_graphs(policy, self.precision, self.kv_dtype).items()}
        self.n_layers = bundle.args.n_layers
        self.use_cuda_graphs = cuda_graphs and self.device.type == "cuda" and torch.cuda.is_available()
        self._captured: dict[str, tuple[tuple, _Graphed]] = {}

    def _graphed(self, name: str, args: tuple[Tensor, ...], copied: tuple[int, ...]):
        key = tuple((a.data_ptr(), tuple(a.shape), a.dtype) for i, a in enumerate(args) if i not in copied)
        key += tuple((tuple(args[i].shape), args[i].dtype) for i in copied)
        hit = self._captured.get(name)
        if hit is None or hit[0] != key:
            hit = (key, _Graphed(self.graphs[name], args, copied))
            self._captured[name] = hit
        return hit[1](*args)

    @torch.no_grad()
    def encode(self, inputs: dict[str, Tensor]) -> Tensor:
        return self.graphs["encoder"](*(inputs[n] for n in self.input_names))

    @torch.no_grad()
    def core(self, x, position, mask, past_k, past_v, *extra):
        args = (x, position, mask, *past_k.unbind(0), *past_v.unbind(0), *extra)  # per-layer views, no copy
        out = self._graphed("core", args, copied=(0, 1)) if self.use_cuda_graphs else self.graphs["core"](*args)
        return out[:len(out) - self.aliased]  # the buffers written in place (int8_gqa) are the memory's own

    @torch.no_grad()
    def heads(self, hidden, *skill):
        args = (hidden, *skill)
        if self.use_cuda_graphs:
            return self._graphed("heads", args, copied=tuple(range(len(args))))
        return self.graphs["heads"](*args)

    @torch.no_grad()
    def policy(self, *inputs):
        if "policy" not in self.graphs:
            return super().policy(*inputs)
        return self.graphs["policy"](*inputs)  # one small graph per step: eager, no CUDA graph

    @torch.no_grad()
    def summarize(self, mem_k, mem_v, mem_valid, sum_valid, pos_base, seg_len, new_base):
        if "summarize" not in self.graphs:
            return super().summarize(mem_k, mem_v, mem_valid, sum_valid, pos_base, seg_len, new_base)
        # once per segment: eager (a graph per segment length is not worth the memory)
        return self.graphs["summarize"](mem_k, mem_v, mem_valid, sum_valid, pos_base, seg_len, new_base)


class LiveEngine(Engine):
    """A live torch policy (training, evaluation, export checks) behind the graph modules a
    bundle is exported from, so :class:`~icrl_ros.runtime.control.ControlStep` steps it the way
    it steps a bundle. Shares the policy's weights (an update is seen by the next step) and
    leaves its train / eval mode to the caller; fp32, eager, under ``torch.no_grad``.

    ``encode`` takes the policy's rollout inputs as they are (a frozen encoder's cached
    ``rgb_feat`` instead of ``rgb``), so training never re-encodes images."""

    backend = "live"

    def __init__(self, policy) -> None:  # noqa: super().__init__ reads a bundle; a live policy has none
        self.policy, self.bundle, self.precision, self.kv_dtype = policy, None, "fp32", "fp32"
        self.device = next(policy.parameters()).device
        self.input_names = list(policy.input_spec())
        self.head_inputs = head_inputs(policy.args)
        self.graphs = graph_modules(policy)

    @torch.no_grad()
    def encode(self, inputs: dict[str, Tensor]) -> Tensor:
        return self.policy.encode({n: t[:, None] for n, t in inputs.items()})[:, 0]

    @torch.no_grad()
    def core(self, x, position, mask, past_k, past_v, *extra):
        return self.graphs["core"](x, position, mask, *past_k.unbind(0), *past_v.unbind(0), *extra)

    @torch.no_grad()
    def heads(self, hidden, *skill):
        return self.graphs["heads"](hidden, *skill)

    @torch.no_grad()
    def summarize(self, mem_k, mem_v, mem_valid, sum_valid, pos_base, seg_len, new_base):
        if "summarize" not in self.graphs:
            return super().summarize(mem_k, mem_v, mem_valid, sum_valid, pos_base, seg_len, new_base)
        return self.graphs["summarize"](mem_k, mem_v, mem_valid, sum_valid, pos_base, seg_len, new_base)
