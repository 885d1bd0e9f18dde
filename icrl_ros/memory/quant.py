"""Storage dtypes of a memory's keys and values, and the 8-bit quantiser.

=========  ==========================================================================================
kv_dtype   what a slot stores per layer, head and token
=========  ==========================================================================================
``fp32``   K and V in the memory's float dtype (float32; float16 in an fp16 bundle): the default
``fp16``   K and V in float16 (half the bytes); the core graph casts them to float32 where it reads
``int8``   K and V as symmetric 8-bit integers, one float32 scale per head and token for each:
           ``x ~= (q - 128) * scale`` with ``q`` uint8 (zero point 128, codes 1 .. 255) and
           ``scale = max |x| / 127`` over the head dimension. The core graph never dequantises the
           cache: it quantises the query (and the attention weights) per head and multiplies integers
           (``MatMulInteger``), then applies the per-token scales to the (H x P) scores / weights
=========  ==========================================================================================

The zero point 128 makes both operands of the integer matmuls uint8, the combination ONNX Runtime's
CPU kernels compute without 16-bit saturation on AVX2 (uint8 x int8 saturates there).
"""

from __future__ import annotations

import torch
from torch import Tensor

KV_DTYPES = ("fp32", "fp16", "int8")
ZERO_POINT = 128
QMAX = 127


def check_kv_dtype(value: str) -> str:
    if value not in KV_DTYPES:
        raise ValueError(f"kv_dtype: {value!r} is not one of {list(KV_DTYPES)}")
    return value


def storage_dtype(kv_dtype: str, dtype: torch.dtype = torch.float32) -> torch.dtype:
    """The dtype of the K / V buffers of a memory whose float dtype is ``dtype``."""
    return {"fp32": dtype, "fp16": torch.float16, "int8": torch.uint8}[check_kv_dtype(kv_dtype)]


def kv_bytes(kv_dtype: str, head_dim: int, dtype: torch.dtype = torch.float32) -> int:
    """Bytes one head of one token costs for K (or V): the stored values plus, for int8, its float32 scale."""
    itemsize = torch.empty((), dtype=storage_dtype(kv_dtype, dtype)).element_size()
    return head_dim * itemsize + (4 if kv_dtype == "int8" else 0)


def quantize(x: Tensor) -> tuple[Tensor, Tensor]:
    """x (..., hd) float -> codes (..., hd) uint8 and scales (...) float32 (symmetric, per row).

    The error is at most ``scale / 2`` per element (round to nearest), i.e. ``max |x| / 254`` of
    its row; an all-zero row gets scale 0 and decodes to zeros."""
    x = x.float()
    scale = x.abs().amax(-1) / QMAX
    safe = torch.where(scale > 0, scale, torch.ones_like(scale))
    q = torch.clamp(torch.round(x / safe[..., None]), -QMAX, QMAX) + ZERO_POINT
    return q.to(torch.uint8), scale


def zero_code(kv_dtype: str) -> int:
    """What a buffer stored as ``kv_dtype`` holds for 0.0 (int8: the zero point)."""
    return ZERO_POINT if check_kv_dtype(kv_dtype) == "int8" else 0


def dequantize(q: Tensor, scale: Tensor) -> Tensor:
    """The float32 values ``(q - 128) * scale`` of :func:`quantize`'s codes."""
    return (q.float() - ZERO_POINT) * scale[..., None]


__all__ = ["KV_DTYPES", "ZERO_POINT", "QMAX", "check_kv_dtype", "storage_dtype", "kv_bytes", "quantize",
           "zero_code", "dequantize"]
