"""ONNX Runtime backend: CPU execution provider, or CUDA with the cache left on the device.

Every call goes through IO binding by address: inputs (the memory's buffers included)
are bound where they already live, outputs into engine-owned tensors, so ORT never
copies the cache in or out. A binding is kept per graph and reused while the caller's
buffer addresses and shapes are unchanged (static memory buffers: every step), so a
step costs ``run_with_iobinding`` and nothing else. On CUDA, ORT runs on torch's current
stream (``user_compute_stream``), so torch's cache writes and ORT's reads stay ordered.
"""

from __future__ import annotations

import importlib.util
import os

import numpy as np
import torch
from torch import Tensor

from icrl_ros.runtime.bundle import Bundle, BundleError
from icrl_ros.runtime.engine import Engine, register_backend
from icrl_ros.runtime.graphs import TORCH_DTYPES

# MatMulScaleFusion folds the 1/sqrt(hd) score scale into FusedMatMul(alpha); on the CPU EP
# that kernel is ~3x slower than FusedMatMul without alpha for q (1 x hd) @ K^T (hd x P),
# the cache read that dominates a step (profiled: 32k context, 4 layers, 1 thread:
# 19.0 ms -> 9.1 ms per step). The scale stays a separate Mul on the (H x P) scores.
DISABLED_OPTIMIZERS = ["MatMulScaleFusion"]

_NP = {"float32": np.float32, "float16": np.float16, "int64": np.int64, "bool": np.bool_, "uint8": np.uint8,
       "int32": np.int32, "int8": np.int8}


def omp_threads() -> int | None:
    """``OMP_NUM_THREADS`` when it is a positive integer, else None. ONNX Runtime does not read it by itself:
    its default is a spinning thread per core, which on a machine shared with other jobs (two test workers, an
    evaluation beside training) slows both."""
    value = os.environ.get("OMP_NUM_THREADS", "")
    return int(value) if value.isdigit() and int(value) > 0 else None


@register_backend("onnxruntime")
class OrtEngine(Engine):
    @staticmethod
    def available() -> bool:
        return importlib.util.find_spec("onnxruntime") is not None

    def __init__(self, bundle: Bundle, device: str = "cpu", threads: int | None = None,
                 optimized_dir: str | None = None) -> None:
        """``threads``: ONNX Runtime's intra-op threads (default ``OMP_NUM_THREADS`` where set, as torch
        reads it, else ORT's own default)."""
        super().__init__(bundle, device)
        import onnxruntime as ort

        so = ort.SessionOptions()
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        so.inter_op_num_threads = 1
        threads = threads or omp_threads()
        if threads:
            so.intra_op_num_threads = threads
        so.log_severity_level = 3
        if self.device.type == "cuda":
            have = ort.get_available_providers()
            if "CUDAExecutionProvider" not in have:
                raise ValueError(f"device: 'cuda' needs onnxruntime-gpu; this onnxruntime has {have}")
            opts = {"device_id": self.device.index or 0}
            if torch.cuda.is_available():
                opts["user_compute_stream"] = str(torch.cuda.current_stream(self.device).cuda_stream)
            providers = [("CUDAExecutionProvider", opts), "CPUExecutionProvider"]
            self._dev = ("cuda", self.device.index or 0)
        else:
            providers = ["CPUExecutionProvider"]
            self._dev = ("cpu", 0)
        self.sessions = {}
        for name in bundle.specs:
            if optimized_dir:  # debugging: the graph after ORT's fusions
                so.optimized_model_filepath = f"{optimized_dir}/{name}.opt.onnx"
            try:
                self.sessions[name] = ort.InferenceSession(str(bundle.graph_path(name)), so, providers=providers,
                                                           disabled_optimizers=DISABLED_OPTIMIZERS)
            except Exception as e:  # noqa: BLE001 - ORT raises its own exception types
                raise BundleError(f"{bundle.graph_path(name).name}: ONNX Runtime cannot load it ({e})") from e
        self._bound: dict[str, tuple] = {}
        a = bundle.args
        self._dims = {"L": a.n_layers, "H": a.n_heads, "hd": a.head_dim}

    def _run(self, graph: str, inputs: tuple[Tensor, ...], batch: int, cache: int = 0) -> list[Tensor]:
        key = tuple((t.data_ptr(), tuple(t.shape), t.dtype) for t in inputs)
        hit = self._bound.get(graph)
        if hit is None or hit[0] != key:
            hit = self._bind(graph, inputs, key, batch, cache)
            self._bound[graph] = hit
        self.sessions[graph].run_with_iobinding(hit[1])
        return hit[2]

    def _bind(self, graph: str, inputs: tuple[Tensor, ...], key, batch: int, cache: int):
        spec = self.bundle.specs[graph]
        io = self.sessions[graph].io_binding()
        for s, t in zip(spec["inputs"], inputs):
            want = TORCH_DTYPES[s["dtype"]]
            if t.dtype != want or t.device != self.device or not t.is_contiguous():
                raise ValueError(f"{graph}.{s['name']}: expected a contiguous {want} tensor on {self.device}, got "
                                 f"{t.dtype} on {t.device}{'' if t.is_contiguous() else ' (not contiguous)'}")
            io.bind_input(s["name"], self._dev[0], self._dev[1], _NP[s["dtype"]], list(t.shape), t.data_ptr())
        outs = []
        named = {s["name"]: t for s, t in zip(spec["inputs"], inputs)}
        for s in spec["outputs"]:
            if "alias" in s:  # written in place: the output is the input's own memory (int8_gqa's cache)
                t = named[s["alias"]]
                io.bind_output(s["name"], self._dev[0], self._dev[1], _NP[s["dtype"]], list(t.shape), t.data_ptr())
                continue
            shape = [batch if d == "batch" else cache if d == "cache" else d for d in s["shape"]]
            t = torch.empty(shape, dtype=TORCH_DTYPES[s["dtype"]], device=self.device)
            io.bind_output(s["name"], self._dev[0], self._dev[1], _NP[s["dtype"]], shape, t.data_ptr())
            outs.append(t)
        return key, io, outs, inputs  # inputs kept alive while bound

    def encode(self, inputs: dict[str, Tensor]) -> Tensor:
        args = tuple(inputs[n] for n in self.input_names)
        return self._run("encoder", args, args[0].shape[0])[0]

    def core(self, x, position, mask, past_k, past_v, *extra):
        args = (x, position, mask, *past_k.unbind(0), *past_v.unbind(0), *extra)  # per-layer views of the memory
        return tuple(self._run("core", args, x.shape[0], mask.shape[1]))

    def heads(self, hidden, *skill):
        logits, value = self._run("heads", (hidden, *skill), hidden.shape[0])
        return logits, value

    def policy(self, *inputs):
        if "policy" not in self.sessions:
            return super().policy(*inputs)
        return self._run("policy", inputs, inputs[0].shape[0])[0]

    def summarize(self, mem_k, mem_v, mem_valid, sum_valid, pos_base, seg_len, new_base):
        if "summarize" not in self.sessions:
            return super().summarize(mem_k, mem_v, mem_valid, sum_valid, pos_base, seg_len, new_base)
        args = (mem_k, mem_v, mem_valid, sum_valid, pos_base, seg_len, new_base)
        k, v = self._run("summarize", args, mem_k.shape[1], mem_k.shape[3])
        return k, v
