"""The ``Engine`` interface and the backend registry.

An engine runs a bundle's graphs; it holds no memory state (the memory does). All
arguments and results are torch tensors on the engine's device (the memory's buffers
are passed in place; engines never copy the cache). Results may be engine-owned
buffers that the next call overwrites: consume them (or copy) before calling again.

=============  ===============================================================
method         shapes
=============  ===============================================================
encode         {input: (B, *shape)} -> x (B, D)
core           x (B, D), position (B,), mask (B, P) bool, past_k / past_v
               (L, B, H, P, hd), *extra -> hidden (B, D), new_k / new_v
               (L, B, H, 1, hd), *more. ``extra`` = ``memory.core_inputs()`` (HCAM:
               the chunk store), ``more`` = what ``memory.commit`` takes after the
               episode (HCAM: x_mem (Lm, B, 1, D)); both empty otherwise
heads          hidden (B, D) -> logits (B, A) float32, value (B,) float32
summarize      (Memo) mem_k, mem_v (L, B, H, P, hd), mem_valid, sum_valid (B, P),
               pos_base, seg_len, new_base (B,) -> sum_k, sum_v (L, B, H, l_sum, hd)
policy         (RA-DT, its only graph) window (B, C) x 6 then retrieved (B, k, 2C)
               x 6, in ``icrl_ros.families.radt.graphs.graph_specs`` order -> logits (B, A) float32
=============  ===============================================================

Engines build from ``bundle.specs``, so an RA-DT bundle (one ``policy`` graph) has no
encoder / core / heads to call; its runner calls :meth:`Engine.policy` only.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable

import torch
from torch import Tensor

from icrl_ros.runtime.bundle import Bundle

BACKENDS: dict[str, Callable[..., Engine]] = {}


def register_backend(name: str):
    """Class decorator: add an engine class to :data:`BACKENDS` (duplicates raise)."""
    def deco(cls):
        if name in BACKENDS:
            raise ValueError(f"backend {name!r} is already registered ({BACKENDS[name]})")
        BACKENDS[name] = cls
        cls.backend = name
        return cls
    return deco


class Engine(ABC):
    backend: str = ""
    aliased: int = 0

    def __init__(self, bundle: Bundle, device: str = "cpu") -> None:
        dev = torch.device(device)
        if dev.type == "cuda" and dev.index is None and torch.cuda.is_available():
            dev = torch.device("cuda", torch.cuda.current_device())  # "cuda" -> "cuda:N", as tensors report it
        self.bundle, self.device = bundle, dev
        self.precision = bundle.precision
        self.kv_dtype = bundle.kv_dtype
        """How the memory this engine reads stores K / V (the core graph it runs reads that)."""
        enc = bundle.specs.get("encoder")
        self.input_names: list[str] = [io["name"] for io in enc["inputs"]] if enc else []
        """The encoder's inputs in order (none without an encoder graph: RA-DT)."""
        core = bundle.specs.get("core")
        self.aliased = sum("alias" in o for o in core["outputs"]) if core else 0
        """The core's trailing outputs that are its own inputs written in place (``int8_gqa``): not returned."""
        heads = bundle.specs.get("heads")
        self.head_inputs: list[str] = [io["name"] for io in heads["inputs"][1:]] if heads else []
        """The heads graph's inputs after ``hidden`` (a fixed head's whose logits add to the actor's)."""

    @property
    def cache_dtype(self) -> torch.dtype:
        return torch.float16 if self.precision == "fp16" else torch.float32

    @abstractmethod
    def encode(self, inputs: dict[str, Tensor]) -> Tensor: ...

    @abstractmethod
    def core(self, x: Tensor, position: Tensor, mask: Tensor, past_k: Tensor, past_v: Tensor, *extra: Tensor
             ) -> tuple[Tensor, ...]: ...

    @abstractmethod
    def heads(self, hidden: Tensor, *extra: Tensor) -> tuple[Tensor, Tensor]:
        """hidden (B, D) and the heads graph's extra inputs (:attr:`head_inputs`) -> logits (B, A), value (B,)."""

    def summarize(self, mem_k: Tensor, mem_v: Tensor, mem_valid: Tensor, sum_valid: Tensor, pos_base: Tensor,
                  seg_len: Tensor, new_base: Tensor) -> tuple[Tensor, Tensor]:
        raise NotImplementedError(f"{self.backend}: summarize is only defined for Memo bundles")

    def policy(self, *inputs: Tensor) -> Tensor:
        raise NotImplementedError(f"{self.backend}: policy is only defined for RA-DT bundles")

    def describe(self) -> str:
        return f"{self.backend} on {self.device} ({self.precision})"


def available_backends() -> list[str]:
    """Backends whose libraries import here (tensorrt only where it is installed)."""
    _load_backends()
    out = []
    for name, cls in BACKENDS.items():
        if getattr(cls, "available", lambda: True)():
            out.append(name)
    return out


def _load_backends() -> None:
    # Importing the modules registers them; each imports its library lazily.
    from icrl_ros.runtime import ort_engine, torch_engine, trt_engine  # noqa: F401


def check_backend(backend: str, device: str) -> None:
    """Refuse an unknown backend, a malformed device, or one this machine cannot run."""
    _load_backends()
    if backend not in BACKENDS:
        raise ValueError(f"backend: unknown {backend!r}; known: {sorted(BACKENDS)}")
    try:
        dev = torch.device(device)
    except RuntimeError as e:
        raise ValueError(f"device: {device!r} is not a device ({e})") from e
    if dev.type not in ("cpu", "cuda"):
        raise ValueError(f"device: {device!r} is not 'cpu' or 'cuda'")
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError("device: 'cuda' requested but torch.cuda.is_available() is False (the cache lives in "
                         "torch CUDA tensors for every backend)")
    cls = BACKENDS[backend]
    if not getattr(cls, "available", lambda: True)():
        raise ValueError(f"backend: {backend!r} is not usable here (library missing or no GPU); "
                         f"available: {available_backends()}")


def make_engine(bundle: Bundle, backend: str = "onnxruntime", device: str = "cpu", **options) -> Engine:
    """Build the engine for ``backend`` on ``device`` ("cpu" | "cuda" | "cuda:N")."""
    check_backend(backend, device)
    return BACKENDS[backend](bundle, device, **options)
