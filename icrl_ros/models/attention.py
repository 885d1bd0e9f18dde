"""Attention building blocks: RMSNorm, RoPE on episode indices, Sink-KV attention.

Everything here is a pure function of its tensor inputs (no cache state), so the same
code serves the full-sequence training pass, one-token cached steps and ONNX export.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from icrl_ros.models.config import sink_slots

# Large finite negative for masked scores: fp16-safe, and an all-masked row stays finite.
MASK_NEG = -1.0e4


class RMSNorm(nn.Module):
    def __init__(self, d: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x: Tensor) -> Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rope_angles(pos: Tensor, head_dim: int, base: float) -> tuple[Tensor, Tensor]:
    """cos / sin for integer positions ``pos`` [B, T] -> each [B, 1, T, head_dim / 2]."""
    inv = 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.float32, device=pos.device) / head_dim))
    ang = pos.to(torch.float32)[..., None] * inv  # (B, T, hd/2)
    return ang.cos()[:, None], ang.sin()[:, None]


def apply_rope(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotate pairs (x1, x2) of the two halves of the head dimension. x: (B, H, T, hd)."""
    x1, x2 = x.chunk(2, dim=-1)
    cos, sin = cos.to(x.dtype), sin.to(x.dtype)
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)


class QuantizedKV:
    """8-bit rows as a memory stores them (:mod:`icrl_ros.memory.quant`): ``codes`` (..., n) uint8 with zero
    point 128 and ``scale`` (...) float32, value = (code - 128) * scale. One layer's cached keys or values
    ((B, H, P, hd) codes), or HCAM's chunk store ((B, N, C, D) codes)."""

    def __init__(self, codes: Tensor, scale: Tensor) -> None:
        self.codes, self.scale = codes, scale

    @property
    def shape(self) -> torch.Size:
        return self.codes.shape


class StaticInt8KV:
    """One layer's cache stored as ``int8_gqa`` (:mod:`icrl_ros.memory.quant`): ``codes`` (B, H, R, hd) int8
    whose rows are [sink | steps | scratch], ``scale`` (1, H, 1, hd) float32 per channel, value = code *
    scale. The attention writes the step's own quantised key / value into the last (scratch) row and
    attends every row the mask lets it (the sink and scratch rows always); the memory commits the
    step to its own slot afterwards. ``present`` is the buffer the attention wrote (the codes tensor
    itself), which the core graph returns so that ONNX Runtime writes in place."""

    def __init__(self, codes: Tensor, scale: Tensor) -> None:
        self.codes, self.scale = codes, scale
        self.present: Tensor | None = None

    @property
    def shape(self) -> torch.Size:
        return self.codes.shape


def _empty_input(g):
    """An omitted optional input of a node being exported (ONNX: the empty name)."""
    n = g.op("prim::Constant")
    n.setType(torch._C.OptionalType.ofTensor())
    return n


class _GroupQueryAttentionInt8(torch.autograd.Function):
    """Attention of one query row per env over an ``int8_gqa`` cache, exported as ONNX Runtime's
    ``com.microsoft.GroupQueryAttention`` (8-bit cache, static per-channel scales, past and present in one
    buffer). q / k / v (B, 1, H * hd) float32, past (B, H, R, hd) int8, bias (B, 1, 1, R) additive,
    seqlens (B,) int32 = R - 1 (the scratch row), total () int32 = R, scales (1, H, 1, hd). The torch
    forward does what the kernel does: writes the quantised k / v into row R - 1 of the past buffers
    (in place) and attends rows 0 .. R - 1 over the decoded cache. Returns y (B, 1, H * hd) and the
    two buffers."""

    @staticmethod
    def forward(ctx, q, k, v, past_k, past_v, seqlens, total, bias, k_scale, v_scale, scale: float):  # noqa: ARG004
        from icrl_ros.memory.quant import quantize_static

        B, H, R, hd = past_k.shape
        for buf, x, sc in ((past_k, k, k_scale), (past_v, v, v_scale)):
            buf[:, :, R - 1:] = quantize_static(x.view(B, 1, H, hd).transpose(1, 2), sc)
        keys, vals = past_k.float() * k_scale, past_v.float() * v_scale
        qh = q.view(B, 1, H, hd).transpose(1, 2)
        p = torch.softmax(torch.matmul(qh, keys.transpose(-1, -2)) * scale + bias, dim=-1)
        y = torch.matmul(p, vals).transpose(1, 2).reshape(B, 1, H * hd)
        return y, past_k.view_as(past_k), past_v.view_as(past_v)

    @staticmethod
    def symbolic(g, q, k, v, past_k, past_v, seqlens, total, bias, k_scale, v_scale, scale):
        H = k_scale.type().sizes()[1]
        none = _empty_input(g)
        out = g.op("com.microsoft::GroupQueryAttention", q, k, v, past_k, past_v, seqlens, total, none, none, none,
                   bias, none, k_scale, v_scale, num_heads_i=H, kv_num_heads_i=H, scale_f=scale,
                   k_quant_type_s="PER_CHANNEL", v_quant_type_s="PER_CHANNEL", kv_cache_bit_width_i=8, outputs=3)
        for o, like in zip(out, (q, past_k, past_v)):  # the output types ONNX cannot infer for a contrib op
            o.setType(like.type())
        return out


class _MatMulInteger(torch.autograd.Function):
    """(a - a_zero) @ (b - b_zero) of uint8 tensors, exact in int32: ONNX ``MatMulInteger`` on export,
    float64 in torch (exact while |sum| < 2**53)."""

    @staticmethod
    def forward(ctx, a: Tensor, b: Tensor, a_zero: Tensor, b_zero: Tensor) -> Tensor:  # noqa: ARG004
        return torch.matmul(a.double() - a_zero.double(), b.double() - b_zero.double()).to(torch.int32)

    @staticmethod
    def symbolic(g, a, b, a_zero, b_zero):
        return g.op("MatMulInteger", a, b, a_zero, b_zero)


def _matmul_integer(a: Tensor, b: Tensor, a_zero: int, b_zero: int) -> Tensor:
    zero = (torch.tensor(a_zero, dtype=torch.uint8), torch.tensor(b_zero, dtype=torch.uint8))
    return _MatMulInteger.apply(a, b, *zero)


def _quantize_rows(x: Tensor, levels: int) -> tuple[Tensor, Tensor]:
    """x (..., n) -> uint8 codes and per-row scales (..., 1): symmetric around 128 when
    ``levels`` is 127 (signed x), from 0 when it is 255 (x >= 0)."""
    m = (x.abs() if levels == 127 else x).amax(-1, keepdim=True) / levels
    safe = torch.where(m > 0, m, torch.ones_like(m))
    q = torch.round(x / safe)
    q = torch.clamp(q, -127.0, 127.0) + 128.0 if levels == 127 else torch.clamp(q, 0.0, 255.0)
    return q.to(torch.uint8), m


def int8_scores(qs: Tensor, past_k: QuantizedKV) -> Tensor:
    """qs (B, H, T, hd) float against 8-bit keys -> scores (B, H, T, P).

    The query is quantised per head (8 bits, symmetric), multiplied with the key codes in integers
    (K @ q^T: the cache is read once, as bytes, never dequantised), and the integer scores are scaled
    by the query's scale and each key's own: q . (s_k k) = s_k (q . k)."""
    q8, sq = _quantize_rows(qs, 127)  # (B, H, T, hd), (B, H, T, 1)
    si = _matmul_integer(past_k.codes, q8.transpose(-1, -2), 128, 128)  # (B, H, P, T) int32
    return si.float().transpose(-1, -2) * past_k.scale.unsqueeze(2) * sq


def int8_weighted_sum(p: Tensor, past_v: QuantizedKV) -> Tensor:
    """Attention weights p (B, H, T, P) over 8-bit values -> (B, H, T, hd).

    Each value's scale folds into its weight (sum_t p_t s_t v_t), the folded weights are quantised
    per head to 8 bits from 0, and the sum is an integer matmul with the value codes."""
    w8, sw = _quantize_rows(p * past_v.scale.unsqueeze(2), 255)
    return _matmul_integer(w8, past_v.codes, 0, 128).float() * sw


class SinkAttention(nn.Module):
    """Causal multi-head attention whose keys/values are prefixed with Sink-KV slots.

    Variants (ReLIC): ``kv`` learnt key and value; ``kv0`` learnt key, zero value;
    ``k0v0`` zero key and value (= softmax-one); ``none`` / ``token`` no slots. The
    query gets no sink row and sink keys are not rotated. A sink slot guarantees every
    row has one valid key.
    """

    def __init__(self, d_model: int, n_heads: int, sink: str, n_sink: int) -> None:
        super().__init__()
        self.n_heads, self.head_dim = n_heads, d_model // n_heads
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=False)
        self.proj = nn.Linear(d_model, d_model, bias=False)
        self.n_sink = sink_slots(sink, n_sink)
        shape = (n_heads, self.n_sink, self.head_dim)
        if sink in ("kv", "kv0"):
            self.sink_k = nn.Parameter(torch.randn(shape) * 0.02)
        else:
            self.register_buffer("sink_k", torch.zeros(shape), persistent=False)
        if sink == "kv":
            self.sink_v = nn.Parameter(torch.randn(shape) * 0.02)
        else:
            self.register_buffer("sink_v", torch.zeros(shape), persistent=False)

    def forward(
        self, x: Tensor, cos: Tensor, sin: Tensor, mask_add: Tensor, past_k: Tensor, past_v: Tensor,
        fixed: list[tuple[Tensor, Tensor, Tensor, Tensor]] | None = None,
    ):
        """x (B, T, D); mask_add (B, 1, T, P + T) additive; past_k/v (B, H, P, hd).

        Returns the attention output (B, T, D) and this step's rotated keys and values
        (B, H, T, hd), which the caller appends to its cache. ``fixed``, a list of (query, key,
        value (B, T, hd), sink key (hd,)), replaces heads 0 .. len(fixed) - 1's own (unrotated,
        sink value 0; the object and place memories); their outputs (B, len(fixed), T, hd) are
        then returned fourth.
        """
        B, T, D = x.shape
        q, k, v = self.qkv(x).view(B, T, 3, self.n_heads, self.head_dim).permute(2, 0, 3, 1, 4)  # (B, H, T, hd)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        n_fixed = len(fixed) if fixed else 0
        if n_fixed:
            q, k, v = (torch.cat([torch.stack([f[i] for f in fixed], dim=1), t[:, n_fixed:]], dim=1)
                       for i, t in ((0, q), (1, k), (2, v)))
        if isinstance(past_k, StaticInt8KV):  # the sink is the cache's first row, the step its last
            y = self._attend_static(q, k, v, mask_add, past_k, past_v)
        elif past_k.shape[2] == 0:  # full-sequence pass: fused attention over [sink | new]
            sink_k, sink_v = self.sinks(fixed)
            keys, vals = k, v
            if self.n_sink:
                sk = sink_k.to(k.dtype).unsqueeze(0).expand(B, -1, -1, -1)
                sv = sink_v.to(v.dtype).unsqueeze(0).expand(B, -1, -1, -1)
                keys, vals = torch.cat([sk, k], dim=2), torch.cat([sv, v], dim=2)
                mask_add = F.pad(mask_add, (self.n_sink, 0), value=0.0)
            y = F.scaled_dot_product_attention(q, keys, vals, attn_mask=mask_add.to(q.dtype))  # (B, H, T, hd)
        else:
            y = self._attend_split(q, k, v, mask_add, past_k, past_v, *self.sinks(fixed))
        out = self.proj(y.transpose(1, 2).reshape(B, T, D))
        return (out, k, v) if not n_fixed else (out, k, v, y[:, :n_fixed])

    def sinks(self, fixed: list | None = None) -> tuple[Tensor, Tensor]:
        """The Sink-KV slots' keys and values (H, n_sink, hd): the layer's own, with the fixed heads' sink keys
        (value 0) in heads 0 .. len(fixed) - 1."""
        sink_k, sink_v = self.sink_k, self.sink_v
        n_fixed = len(fixed) if fixed else 0
        if n_fixed and self.n_sink:
            fixed_sinks = torch.stack([f[3].to(sink_k.dtype) for f in fixed])[:, None].expand(-1, self.n_sink, -1)
            sink_k = torch.cat([fixed_sinks, sink_k[n_fixed:]], dim=0)
            sink_v = torch.cat([torch.zeros_like(sink_v[:n_fixed]), sink_v[n_fixed:]], dim=0)
        return sink_k, sink_v

    def _attend_static(self, q: Tensor, k: Tensor, v: Tensor, mask_add: Tensor, past_k: StaticInt8KV,
                       past_v: StaticInt8KV) -> Tensor:
        """One step over an ``int8_gqa`` cache (:class:`StaticInt8KV`): (B, H, 1, hd) in, (B, H, 1, hd) out.
        ``mask_add`` (B, 1, 1, R + 1) covers the cache's rows (then the token's own column, unused: the
        token is the scratch row)."""
        B, H, T, hd = q.shape
        R = past_k.shape[2]
        flat = [t.transpose(1, 2).reshape(B, T, H * hd) for t in (q, k, v)]
        ones = torch.ones_like(mask_add[:, 0, 0, :R], dtype=torch.int32)
        seqlens = ones.sum(1).to(torch.int32) - 1  # (B,): the scratch row, R - 1 (traced, not a constant)
        y, past_k.present, past_v.present = _GroupQueryAttentionInt8.apply(
            *flat, past_k.codes, past_v.codes, seqlens, seqlens[0] + 1, mask_add[..., :R].to(torch.float32),
            past_k.scale, past_v.scale, self.head_dim ** -0.5)
        return y.view(B, T, H, hd).transpose(1, 2)

    def _attend_split(self, q: Tensor, k: Tensor, v: Tensor, mask_add: Tensor, past_k: Tensor, past_v: Tensor,
                      sink_k: Tensor, sink_v: Tensor) -> Tensor:
        """Softmax over [sink | past | new] keys without concatenating the cache.

        A cached step reads the (possibly 64k-slot) cache once instead of copying it into a
        new tensor; only the (B, H, T, S) scores are concatenated. ``past_k`` / ``past_v`` may be
        :class:`QuantizedKV` (an int8 memory): integer matmuls over the codes, scales on the scores
        and weights (the sink and the new token stay float).
        """
        P = past_k.shape[2]
        qs = q * self.head_dim ** -0.5  # scale the (T-row) query, not the (P-column) scores
        mask_add = mask_add.to(q.dtype)
        quantized = isinstance(past_k, QuantizedKV)
        past_scores = int8_scores(qs, past_k) if quantized else torch.matmul(qs, past_k.to(q.dtype).transpose(-1, -2))
        parts = [past_scores + mask_add[..., :P],
                 torch.matmul(qs, k.transpose(-1, -2)) + mask_add[..., P:]]
        if self.n_sink:
            parts.insert(0, torch.matmul(qs, sink_k.to(q.dtype).unsqueeze(0).transpose(-1, -2)))
        p = torch.softmax(torch.cat(parts, dim=-1), dim=-1)
        n = self.n_sink
        y_past = int8_weighted_sum(p[..., n:n + P], past_v) if quantized else torch.matmul(p[..., n:n + P],
                                                                                          past_v.to(q.dtype))
        y = y_past + torch.matmul(p[..., n + P:], v)
        if n:
            y = y + torch.matmul(p[..., :n], sink_v.to(q.dtype).unsqueeze(0))
        return y
