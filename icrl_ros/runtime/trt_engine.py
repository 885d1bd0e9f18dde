"""TensorRT backend (CUDA only), built from the bundle's ONNX graphs on the target.

* One engine per graph, with an optimisation profile over the dynamic axes: batch
  ``1 .. max_batch`` and the cache length fixed at ``cache`` (the memory's size, the
  only length a runner ever uses: its buffers are static; a range down to 1 would also
  ask HCAM's TopK for more chunks than the store has).
* ``fp16``: the builder's FP16 flag (on top of an fp16 bundle's fp16 graphs, or to run
  an fp32 bundle's graphs in fp16 with ``fp16=True``).
* A timing cache per TensorRT version + GPU speeds up rebuilds.
* Engines are cached on disk under ``<bundle>/engines`` (or ``$ICRL_ROS_ENGINE_CACHE`` /
  ``~/.cache/icrl_ros/tensorrt`` when the bundle is read-only), keyed by TensorRT
  version + GPU name + the ONNX file's SHA-256 + profile + precision. A cached engine
  whose recorded key does not match, or that fails to deserialise, is rebuilt.

Written against the TensorRT 10 Python API (``execute_async_v3``, named tensors).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
from pathlib import Path

import torch
from torch import Tensor

from icrl_ros.runtime.bundle import Bundle, BundleError
from icrl_ros.runtime.engine import Engine, register_backend
from icrl_ros.runtime.graphs import TORCH_DTYPES


def engine_key(trt_version: str, gpu: str, onnx_sha: str, profile: dict, fp16: bool) -> str:
    blob = json.dumps({"trt": trt_version, "gpu": gpu, "onnx": onnx_sha, "profile": profile, "fp16": fp16},
                      sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()


def cache_dir_for(bundle: Bundle) -> Path:
    env = os.environ.get("ICRL_ROS_ENGINE_CACHE")
    if env:
        return Path(env)
    d = bundle.path / "engines"
    try:
        d.mkdir(exist_ok=True)
        if os.access(d, os.W_OK):
            return d
    except OSError:
        pass
    return Path.home() / ".cache" / "icrl_ros" / "tensorrt"


def profile_shapes(spec: dict, max_batch: int, cache: int) -> dict[str, tuple[list, list, list]]:
    """(min, opt, max) shape per input with a dynamic axis."""
    out = {}
    for io in spec["inputs"]:
        if not any(isinstance(d, str) for d in io["shape"]):
            continue
        lo = [1 if d == "batch" else cache if d == "cache" else d for d in io["shape"]]
        hi = [max_batch if d == "batch" else cache if d == "cache" else d for d in io["shape"]]
        out[io["name"]] = (lo, hi, hi)
    return out


def build_engine(onnx_path: Path, shapes: dict, fp16: bool, timing_cache: Path, workspace_gb: float = 4.0) -> bytes:
    """Serialized engine for one ONNX graph (TensorRT builder with one profile)."""
    import tensorrt as trt

    logger = trt.Logger(trt.Logger.WARNING)
    builder = trt.Builder(logger)
    network = builder.create_network(0)  # explicit batch is the only mode in TensorRT 10
    parser = trt.OnnxParser(network, logger)
    if not parser.parse(onnx_path.read_bytes()):
        errs = "; ".join(str(parser.get_error(i)) for i in range(parser.num_errors))
        raise BundleError(f"{onnx_path.name}: TensorRT cannot parse it ({errs})")
    config = builder.create_builder_config()
    config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, int(workspace_gb * (1 << 30)))
    if fp16:
        config.set_flag(trt.BuilderFlag.FP16)
    cache = config.create_timing_cache(timing_cache.read_bytes() if timing_cache.is_file() else b"")
    config.set_timing_cache(cache, ignore_mismatch=False)
    profile = builder.create_optimization_profile()
    for name, (lo, opt, hi) in shapes.items():
        profile.set_shape(name, lo, opt, hi)
    config.add_optimization_profile(profile)
    serialized = builder.build_serialized_network(network, config)
    if serialized is None:
        raise BundleError(f"{onnx_path.name}: TensorRT engine build failed (see the TensorRT log above)")
    tmp = timing_cache.with_suffix(".tmp")
    tmp.write_bytes(memoryview(config.get_timing_cache().serialize()))
    os.replace(tmp, timing_cache)
    return bytes(serialized)


def load_or_build(bundle: Bundle, graph: str, max_batch: int, cache: int, fp16: bool, cache_dir: Path | None = None):
    """(engine path, rebuilt?) for one graph; reuses a cached engine only if its key matches."""
    import tensorrt as trt

    cache_dir = cache_dir or cache_dir_for(bundle)
    cache_dir.mkdir(parents=True, exist_ok=True)
    gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else "unknown-gpu"
    onnx_file = bundle.graph_path(graph)
    onnx_sha = bundle.manifest.files[onnx_file.name].sha256
    shapes = profile_shapes(bundle.specs[graph], max_batch, cache)
    key = engine_key(trt.__version__, gpu, onnx_sha, {k: v[2] for k, v in shapes.items()}, fp16)
    path = cache_dir / f"{graph}-{key[:16]}.engine"
    meta_path = path.with_suffix(".json")
    meta = {"key": key, "tensorrt": trt.__version__, "gpu": gpu, "onnx_sha256": onnx_sha, "fp16": fp16,
            "max_batch": max_batch, "cache": cache}
    if path.is_file() and meta_path.is_file():
        try:
            if json.loads(meta_path.read_text()).get("key") == key:
                return path, False
        except (OSError, json.JSONDecodeError):
            pass
    safe_gpu = "".join(c if c.isalnum() else "_" for c in gpu)
    data = build_engine(onnx_file, shapes, fp16, cache_dir / f"timing-{trt.__version__}-{safe_gpu}.cache")
    tmp = path.with_suffix(".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)
    meta_path.write_text(json.dumps(meta, indent=1))
    return path, True


@register_backend("tensorrt")
class TensorRTEngine(Engine):
    @staticmethod
    def available() -> bool:
        return importlib.util.find_spec("tensorrt") is not None and torch.cuda.is_available()

    def __init__(self, bundle: Bundle, device: str = "cuda", profile: tuple[int, int] = (1, 8192),
                 fp16: bool | None = None, cache_dir: str | None = None, threads: int | None = None) -> None:
        """``threads`` (the CPU engines' thread count) is accepted and unused: the graphs run on the GPU."""
        super().__init__(bundle, device)
        if self.aliased:
            raise ValueError(f"kv_dtype: {self.kv_dtype!r} is read by ONNX Runtime's GroupQueryAttention kernel, which "
                             "TensorRT does not have; use kv_dtype 'int8' (standard ONNX ops) with tensorrt")
        if self.device.type != "cuda" or not torch.cuda.is_available():
            raise ValueError("device: the tensorrt backend needs device='cuda' and a visible GPU")
        try:
            import tensorrt as trt
        except ImportError as e:
            raise ValueError(f"backend: tensorrt is not installed ({e}); use 'onnxruntime' or 'torch'") from e
        self.max_batch, self.cache = profile
        fp16 = self.precision == "fp16" if fp16 is None else fp16
        self.runtime = trt.Runtime(trt.Logger(trt.Logger.WARNING))
        self.engines, self.contexts, self.rebuilt = {}, {}, {}
        cdir = Path(cache_dir) if cache_dir else None
        for name in bundle.specs:
            path, rebuilt = load_or_build(bundle, name, self.max_batch, self.cache, fp16, cdir)
            engine = self.runtime.deserialize_cuda_engine(path.read_bytes())
            if engine is None:  # stale or foreign engine file: rebuild once
                path.with_suffix(".json").unlink(missing_ok=True)
                path, rebuilt = load_or_build(bundle, name, self.max_batch, self.cache, fp16, cdir)
                engine = self.runtime.deserialize_cuda_engine(path.read_bytes())
            if engine is None:
                raise BundleError(f"{path.name}: TensorRT cannot deserialize the engine it just built")
            self.engines[name], self.contexts[name], self.rebuilt[name] = engine, engine.create_execution_context(), rebuilt
        self._outs: dict[str, tuple] = {}

    def _run(self, graph: str, inputs: tuple[Tensor, ...]) -> list[Tensor]:
        spec, ctx = self.bundle.specs[graph], self.contexts[graph]
        shapes = tuple(tuple(t.shape) for t in inputs)
        for s, t in zip(spec["inputs"], inputs):
            if not t.is_contiguous() or t.device != self.device:
                raise ValueError(f"{graph}.{s['name']}: expected a contiguous tensor on {self.device}")
            ctx.set_input_shape(s["name"], tuple(t.shape))
            ctx.set_tensor_address(s["name"], t.data_ptr())
        hit = self._outs.get(graph)
        if hit is None or hit[0] != shapes:
            outs = [torch.empty(tuple(ctx.get_tensor_shape(s["name"])), dtype=TORCH_DTYPES[s["dtype"]],
                                device=self.device) for s in spec["outputs"]]
            hit = (shapes, outs)
            self._outs[graph] = hit
        for s, t in zip(spec["outputs"], hit[1]):
            ctx.set_tensor_address(s["name"], t.data_ptr())
        if not ctx.execute_async_v3(torch.cuda.current_stream(self.device).cuda_stream):
            raise RuntimeError(f"tensorrt: {graph} execution failed")
        return hit[1]

    def encode(self, inputs):
        return self._run("encoder", tuple(inputs[n] for n in self.input_names))[0]

    def core(self, x, position, mask, past_k, past_v, *extra):
        return tuple(self._run("core", (x, position, mask, *past_k.unbind(0), *past_v.unbind(0), *extra)))

    def heads(self, hidden, *skill):
        logits, value = self._run("heads", (hidden, *skill))
        return logits, value

    def policy(self, *inputs):
        if "policy" not in self.contexts:
            return super().policy(*inputs)
        return self._run("policy", inputs)[0]

    def summarize(self, mem_k, mem_v, mem_valid, sum_valid, pos_base, seg_len, new_base):
        if "summarize" not in self.contexts:
            return super().summarize(mem_k, mem_v, mem_valid, sum_valid, pos_base, seg_len, new_base)
        k, v = self._run("summarize", (mem_k, mem_v, mem_valid, sum_valid, pos_base, seg_len, new_base))
        return k, v
