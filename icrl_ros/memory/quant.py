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
``int8_gqa`` K and V as signed 8-bit integers with *static* per-channel scales (one per layer, head and
           channel, calibrated at export: :func:`calibrate_static`), ``x ~= q * scale``, codes
           -128 .. 127. Read in place by ONNX Runtime's ``com.microsoft.GroupQueryAttention``
           kernel, which quantises the step's own key / value into a scratch row and attends the
           whole buffer without copying or dequantising it: ONNX Runtime only (no TensorRT)
=========  ==========================================================================================

The zero point 128 makes both operands of the integer matmuls uint8, the combination ONNX Runtime's
CPU kernels compute without 16-bit saturation on AVX2 (uint8 x int8 saturates there).
"""

from __future__ import annotations

import torch
from torch import Tensor

KV_DTYPES = ("fp32", "fp16", "int8", "int8_gqa")
STATIC_KV_DTYPES = ("int8_gqa",)
"""Storage dtypes whose scales are fixed per layer, head and channel (the bundle's ``kv_static.npz``)."""
ZERO_POINT = 128
QMAX = 127
CALIBRATION_MARGIN = 2.0
"""Static scales cover this many times the largest magnitude the calibration trial showed: a key or value
beyond it is clipped, one within it keeps a step of ``2 * max / 127``: twice the observed range, since a
trial unlike the calibration one reaches past it; a wider margin costs resolution instead."""


def check_kv_dtype(value: str) -> str:
    if value not in KV_DTYPES:
        raise ValueError(f"kv_dtype: {value!r} is not one of {list(KV_DTYPES)}")
    return value


def storage_dtype(kv_dtype: str, dtype: torch.dtype = torch.float32) -> torch.dtype:
    """The dtype of the K / V buffers of a memory whose float dtype is ``dtype``."""
    return {"fp32": dtype, "fp16": torch.float16, "int8": torch.uint8, "int8_gqa": torch.int8}[check_kv_dtype(kv_dtype)]


def kv_bytes(kv_dtype: str, head_dim: int, dtype: torch.dtype = torch.float32) -> int:
    """Bytes one head of one token costs for K (or V): the stored values plus, for int8, its float32 scale
    (``int8_gqa``'s scales are per channel, not per token: a few hundred bytes per memory, not per step)."""
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


def quantize_static(x: Tensor, scale: Tensor) -> Tensor:
    """x (..., hd) float with static scales broadcasting against it -> int8 codes, rounded half to even and
    clipped to -128 .. 127, exactly as ONNX Runtime's GroupQueryAttention quantises the rows it writes."""
    safe = torch.where(scale > 0, scale, torch.ones_like(scale))
    return torch.clamp(torch.round(x.float() / safe), -128, 127).to(torch.int8)


def calibrate_static(k: Tensor, v: Tensor, sink_k: Tensor, sink_v: Tensor,
                     margin: float = CALIBRATION_MARGIN) -> tuple[Tensor, Tensor]:
    """Static per-channel scales (L, H, hd) from a calibration trial's keys / values (L, B, H, T, hd) and the
    sink rows (L, H, n, hd). Keys are stored after RoPE, which rotates channel i with channel i + hd / 2 by
    the step's position: a pair's norm bounds both channels at every position, so both get its scale.
    Values are not rotated: each channel its own maximum. A channel that never moved gets a tiny scale
    (its zeros stay exact)."""
    sink_k = sink_k.float()[:, None].expand(-1, k.shape[1], -1, -1, -1)
    k = torch.cat([k.float(), sink_k], dim=3)  # (L, B, H, T + n, hd): the sink rows as steps
    v = torch.cat([v.float(), sink_v.float()[:, None].expand(-1, v.shape[1], -1, -1, -1)], dim=3)
    k1, k2 = k.chunk(2, dim=-1)
    pair = (k1.square() + k2.square()).sqrt().amax(dim=(1, 3))  # (L, H, hd / 2)
    k_peak = torch.cat([pair, pair], dim=-1)
    v_peak = v.abs().amax(dim=(1, 3))
    floor = torch.finfo(torch.float32).tiny
    return (torch.clamp(k_peak * margin / QMAX, min=floor), torch.clamp(v_peak * margin / QMAX, min=floor))


__all__ = ["KV_DTYPES", "STATIC_KV_DTYPES", "ZERO_POINT", "QMAX", "CALIBRATION_MARGIN", "check_kv_dtype",
           "storage_dtype", "kv_bytes", "quantize", "zero_code", "dequantize", "quantize_static", "calibrate_static"]
