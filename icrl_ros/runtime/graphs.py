"""The graphs a deploy bundle holds, as torch modules over a trained policy.

One control step is ``encoder -> core -> heads``: the shared graphs here, ReLIC's whole set.
Each family's ``graphs`` module (:mod:`icrl_ros.families`) says what it adds or replaces:
Memo a ``summarize`` graph at segment ends (:mod:`icrl_ros.families.memo.graphs`), HCAM a core
that also reads the chunk store (:mod:`icrl_ros.families.hcam.graphs`), RA-DT one ``policy``
graph over its window and retrieved sub-trajectories (:mod:`icrl_ros.families.radt.graphs`).
Every graph is a pure function of plain tensors, so the same module serves the torch engine,
ONNX export (and, through the ONNX, TensorRT). Shapes, names and dtypes are fixed by
:func:`graph_specs`, which the exporter writes into the manifest and the bundle loader
checks the ONNX files against.

Static shapes: the core takes the memory's whole preallocated buffer plus a validity
mask, one input per layer (``past_k_0 ...``), so ONNX Runtime / TensorRT read the
caller's buffers in place (IO binding) instead of gathering a layer out of one stacked
tensor each step. The cache length is a named dynamic axis ``cache`` in the ONNX (one
file serves every memory size; TensorRT builds a profile per size), but at run time it
is fixed by the memory: the buffers never grow. (HCAM: ``cache`` is the number of chunk
slots; its local window is a static C.)

Precision: ``fp32`` everything in float32. ``fp16`` is mixed precision as in autocast:
the cache and every matmul / linear in float16, while the residual stream, RMSNorm,
softmax and the heads' outputs stay float32 (graph inputs / outputs other than the cache
are float32). Pure-fp16 graphs lose ~1e-2 in the logits over long Memo rollouts (the
error compounds through summaries of summaries); this keeps fp16 within tolerance.

K/V storage (``kv_dtype``, :mod:`icrl_ros.memory.quant`; the shared core of ReLIC and Memo, HCAM's chunk store): ``fp32`` the cache in the
precision's dtype (today's graphs, unchanged); ``fp16`` float16 cache inputs cast where read; ``int8``
uint8 codes plus per-layer ``past_k_scale_i`` / ``past_v_scale_i`` (batch, H, cache) float32 inputs,
read through integer matmuls (:func:`icrl_ros.models.attention.int8_scores`). The core's new K/V stay
float32 either way: the memory quantises them on commit. Only standard ONNX ops (``MatMulInteger``,
``Round``, ``Clip``, ``Cast``), so ONNX Runtime runs the graph on any execution provider.
``int8_gqa``: int8 codes whose rows are [sink | steps | scratch] and per-layer static scales
``past_k_scale_i`` / ``past_v_scale_i`` (1, H, 1, hd), read by ONNX Runtime's
``com.microsoft.GroupQueryAttention`` (:class:`icrl_ros.models.attention.StaticInt8KV`). The kernel
writes the step into the scratch row, so the core also returns the buffers it wrote, ``present_k_i`` /
``present_v_i``, whose specs say which input each one is (``"alias"``): an engine binds them to that
input's memory and ONNX Runtime reads and writes the cache in place.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from icrl_ros.families import family_of
from icrl_ros.memory.quant import check_kv_dtype, storage_dtype
from icrl_ros.models.attention import QuantizedKV, StaticInt8KV
from icrl_ros.models.policy import ICLPolicy, head_inputs

PRECISIONS = ("fp32", "fp16")
TORCH_DTYPES = {"float32": torch.float32, "float16": torch.float16, "int64": torch.int64, "bool": torch.bool,
                "uint8": torch.uint8, "int32": torch.int32, "int8": torch.int8}
# Runner-tracked encoder inputs; every other encoder input comes from the observation or is written by
# an extension's state (icrl_ros.extensions.owned_inputs).
TRACKED_INPUTS = ("prev_action", "prev_reward", "episode_step")


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


def cache_dtype(precision: str) -> torch.dtype:
    return torch.float16 if precision == "fp16" else torch.float32


def check_kv_support(policy, precision: str, kv_dtype: str) -> str:
    """``kv_dtype`` if ``policy``'s graphs can read a cache stored that way (fp32 always; fp16 / int8: the
    families that say so, ``Family.kv_dtypes``, in an fp32 bundle), else a ValueError."""
    check_kv_dtype(kv_dtype)
    if kv_dtype == "fp32":
        return kv_dtype
    fam = family_of(policy)
    if kv_dtype not in fam.kv_dtypes:
        raise ValueError(f"kv_dtype: {kv_dtype!r} is not read by a {fam.kind} core; it reads {list(fam.kv_dtypes)}")
    if precision != "fp32":
        raise ValueError(f"kv_dtype: {kv_dtype!r} needs an fp32 bundle (precision {precision!r} stores float16)")
    return kv_dtype


def graph_specs(policy: nn.Module, precision: str = "fp32", kv_dtype: str = "fp32") -> dict[str, dict[str, list[dict]]]:
    """Inputs and outputs of every graph of ``policy``'s family (its ``graphs`` module):
    ``{graph: {"inputs": [{name, dtype, shape}], "outputs": [...]}}``. Shapes use ``"batch"`` and
    ``"cache"`` for the dynamic axes, integers elsewhere. ``kv_dtype``: how the core's cache is
    stored (:func:`check_kv_support`)."""
    module = family_of(policy).graph_module()
    if check_kv_support(policy, precision, kv_dtype) != "fp32":
        return module.graph_specs(policy, precision, kv_dtype=kv_dtype)
    return module.graph_specs(policy, precision)


def shared_graph_specs(policy: ICLPolicy, precision: str = "fp32", window: int | str = "cache",
                       kv_dtype: str = "fp32") -> dict[str, dict[str, list[dict]]]:
    """The encoder / core / heads every cached-step family has (ReLIC's whole set). ``window``:
    the core's cache slots (a dynamic ``"cache"``, or a static size); ``kv_dtype``: the cache's storage."""
    a = policy.args
    L, H, hd, D = a.n_layers, a.n_heads, a.head_dim, a.d_model
    f = dtype_name(cache_dtype(precision))  # the new keys / values (and an fp32 cache)
    store = dtype_name(storage_dtype(kv_dtype, cache_dtype(precision)))
    scales = {"int8": [io_spec(f"past_{x}_scale_{i}", "float32", ["batch", H, window]) for x in "kv" for i in range(L)],
              "int8_gqa": [io_spec(f"past_{x}_scale_{i}", "float32", [1, H, 1, hd]) for x in "kv" for i in range(L)]
              }.get(kv_dtype, [])
    present = [{**io_spec(f"present_{x}_{i}", store, ["batch", H, window, hd]), "alias": f"past_{x}_{i}"}
               for x in "kv" for i in range(L)] if kv_dtype == "int8_gqa" else []
    enc_in = [io_spec(n, dtype_name(dt), ["batch", *shape]) for n, (shape, dt) in policy.input_spec().items()]
    return {
        "encoder": {"inputs": enc_in, "outputs": [io_spec("x", "float32", ["batch", D])]},
        "core": {
            "inputs": [io_spec("x", "float32", ["batch", D]), io_spec("position", "int64", ["batch"]),
                       io_spec("mask", "bool", ["batch", window])]
            + [io_spec(f"past_k_{i}", store, ["batch", H, window, hd]) for i in range(L)]
            + [io_spec(f"past_v_{i}", store, ["batch", H, window, hd]) for i in range(L)] + scales,
            "outputs": [io_spec("hidden", "float32", ["batch", D]), io_spec("new_k", f, [L, "batch", H, 1, hd]),
                        io_spec("new_v", f, [L, "batch", H, 1, hd])] + present,
        },
        "heads": {"inputs": [io_spec("hidden", "float32", ["batch", D])]
                  + [io_spec(n, "float32", ["batch", *policy.input_spec()[n][0]]) for n in head_inputs(a)],
                  "outputs": [io_spec("logits", "float32", ["batch", a.n_actions]),
                              io_spec("value", "float32", ["batch"])]},
    }


def io_spec(name: str, dtype: str, shape) -> dict:
    return {"name": name, "dtype": dtype, "shape": list(shape)}


class EncoderGraph(nn.Module):
    """Encoder inputs, each (B, *shape) in ``input_spec`` order -> token x (B, D) float32."""

    def __init__(self, policy: ICLPolicy) -> None:
        super().__init__()
        self.encoder, self.names = policy.encoder, list(policy.input_spec())

    def forward(self, *inputs: Tensor) -> Tensor:
        one = {n: t[:, None] for n, t in zip(self.names, inputs)}  # (B, 1, ...): the encoder's (B, T, ...)
        return self.encoder(one)[:, 0].float()


class CoreGraph(nn.Module):
    """One token per env against a static cache.

    x (B, D); position (B,) RoPE index; mask (B, P) bool, True = this token may attend
    the slot; kv: L past_k (B, H, P, hd) then L past_v (``int8``: uint8 codes, then L key scales
    and L value scales (B, H, P); ``int8_gqa``: int8 codes, then L key and L value static scales
    (1, H, 1, hd)). Returns hidden (B, D) and the token's rotated keys / values (L, B, H, 1, hd) for the
    memory to commit (``int8_gqa``: then the L key and L value buffers the kernel wrote in place).
    """

    def __init__(self, policy: ICLPolicy, kv_dtype: str = "fp32") -> None:
        super().__init__()
        self.core, self.n_layers, self.kv_dtype = policy.core, policy.args.n_layers, kv_dtype

    def forward(self, x: Tensor, position: Tensor, mask: Tensor, *kv: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        L = self.n_layers
        full = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=1)[:, None]  # (B, 1, P + 1): + the token itself
        # TransformerCore indexes past_k[i] per layer, so per-layer lists go straight through.
        past_k, past_v = list(kv[:L]), list(kv[L:2 * L])
        wrap = {"int8": QuantizedKV, "int8_gqa": StaticInt8KV}.get(self.kv_dtype)
        if wrap is not None:
            past_k = [wrap(c, s) for c, s in zip(past_k, kv[2 * L:3 * L])]
            past_v = [wrap(c, s) for c, s in zip(past_v, kv[3 * L:4 * L])]
        h, k, v = self.core(x[:, None], position[:, None], full, past_k, past_v)
        if wrap is StaticInt8KV:
            return (h[:, 0], k, v, *(p.present for p in past_k), *(p.present for p in past_v))
        return h[:, 0], k, v


@torch.no_grad()
def sink_rows(policy: ICLPolicy) -> tuple[Tensor, Tensor]:
    """Every layer's Sink-KV keys and values (L, H, n_sink, hd) as its attention uses them (a block's fixed
    heads put their own sink keys in their heads): the rows an ``int8_gqa`` memory pins first."""
    ks, vs = [], []
    for blk in policy.core.blocks:
        token = torch.zeros(1, 1, policy.args.d_model)
        fixed = blk.fixed_heads.fixed(token) if blk.fixed_heads is not None else None
        k, v = blk.attn.sinks(fixed)
        ks.append(k.float())
        vs.append(v.float())
    return torch.stack(ks), torch.stack(vs)


@torch.no_grad()
def static_kv_calibration(policy: ICLPolicy, inp: dict[str, Tensor]) -> dict[str, Tensor]:
    """An ``int8_gqa`` memory's constants from a recorded trial ``inp`` (B, T, ...): the per-channel scales its
    keys and values are stored with (:func:`icrl_ros.memory.quant.calibrate_static`, over the trial's
    keys / values and the sink rows) and the sink rows (:func:`sink_rows`): the bundle's ``kv_static.npz``."""
    k, v = policy.forward_sequence(inp)[2:4]
    return static_kv_from(policy, k, v)


def static_kv_from(policy: ICLPolicy, k: Tensor, v: Tensor) -> dict[str, Tensor]:
    """:func:`static_kv_calibration` from keys / values (L, B, H, T, hd) already at hand (the steps of an fp32
    memory: a snapshot of the runner on real trials)."""
    from icrl_ros.memory.quant import calibrate_static

    sink_k, sink_v = sink_rows(policy)
    k_scale, v_scale = calibrate_static(k, v, sink_k, sink_v)
    return {"k_scale": k_scale, "v_scale": v_scale, "sink_k": sink_k, "sink_v": sink_v}


def snapshot_kv(path, policy: ICLPolicy) -> tuple[Tensor, Tensor]:
    """The stored steps' keys and values (L, 1, H, N, hd) of an fp32 memory snapshot (``PolicyRunner.snapshot``,
    the agent node's ``save_memory``) of ``policy``'s full or window memory, every env's valid slots side by
    side; a ValueError saying what is wrong otherwise."""
    from icrl_ros.memory.snapshot import read_snapshot

    arrays, meta = read_snapshot(path)
    mem = meta.get("memory", {})
    a = policy.args
    if mem.get("policy") not in ("full", "window") or mem.get("kv_dtype", "fp32") != "fp32":
        raise ValueError(f"{path}: not an fp32 full / window memory snapshot (memory {mem.get('policy')!r}, "
                         f"kv_dtype {mem.get('kv_dtype', 'fp32')!r})")
    k, v, valid = (torch.from_numpy(arrays[n]) for n in ("k", "v", "valid"))
    if tuple(k.shape[i] for i in (0, 2, 4)) != (a.n_layers, a.n_heads, a.head_dim) or k.dtype != torch.float32:
        raise ValueError(f"{path}: keys {tuple(k.shape)} {k.dtype} are not this model's (L, B, H, P, hd) = "
                         f"({a.n_layers}, B, {a.n_heads}, P, {a.head_dim}) float32")
    steps = valid & (torch.from_numpy(arrays["episode"]) >= 0)  # not the pinned prefix
    if not bool(steps.any()):
        raise ValueError(f"{path}: the memory holds no step")
    k, v = (torch.cat([x[:, b][:, :, steps[b]] for b in range(x.shape[1])], dim=2)[:, None] for x in (k, v))
    return k, v


class HeadsGraph(nn.Module):
    """hidden (B, D) [, the inputs of a fixed head whose logits add to the actor's (``head_inputs``)] ->
    logits (B, A), value (B,), both float32."""

    def __init__(self, policy: ICLPolicy) -> None:
        super().__init__()
        self.norm, self.actor, self.critic = policy.norm, policy.actor, policy.critic
        self.extra = policy.extra_head() if head_inputs(policy.args) else None

    def forward(self, hidden: Tensor, *extra: Tensor) -> tuple[Tensor, Tensor]:
        h = self.norm(hidden)
        logits = self.actor(h).float()
        if self.extra is not None:
            logits = logits + self.extra(*extra).float()
        return logits, self.critic(h).squeeze(-1).float()


class Autocast(nn.Module):
    """Runs a graph under float16 autocast (traced into explicit casts on export)."""

    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, *args: Tensor):
        dev = next((a.device.type for a in args if isinstance(a, Tensor)), "cpu")
        with torch.autocast(dev, dtype=torch.float16, cache_enabled=False):
            out = self.inner(*args)
        return out


def graph_modules(policy: nn.Module, kv_dtype: str = "fp32") -> dict[str, nn.Module]:
    """The graph modules of ``policy``'s family over the policy's own submodules: no copy, the
    policy's mode untouched; the core reading a memory stored as ``kv_dtype`` (a family that lists it in
    ``Family.kv_dtypes`` takes it in its ``graph_modules``)."""
    module = family_of(policy).graph_module()
    return module.graph_modules(policy) if kv_dtype == "fp32" else module.graph_modules(policy, kv_dtype=kv_dtype)


def shared_graph_modules(policy: ICLPolicy, core: nn.Module | None = None, kv_dtype: str = "fp32") -> dict[str, nn.Module]:
    """encoder, core (``core`` if given, else :class:`CoreGraph` reading a ``kv_dtype`` cache) and heads."""
    return {"encoder": EncoderGraph(policy), "core": core or CoreGraph(policy, kv_dtype), "heads": HeadsGraph(policy)}


def build_graphs(policy: nn.Module, precision: str = "fp32", kv_dtype: str = "fp32") -> dict[str, nn.Module]:
    """The graph modules for ``policy`` in ``precision`` (weights stay float32; fp16 runs every
    graph but the encoder under float16 autocast), its core reading a cache stored as ``kv_dtype``.
    A family's graphs module may define its own ``build_graphs`` (RA-DT: fp32 only)."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision: {precision!r} is not one of {list(PRECISIONS)}")
    policy = policy.eval()
    if check_kv_support(policy, precision, kv_dtype) != "fp32":  # the family's graphs, the core reading that cache
        return {k: g.eval() for k, g in graph_modules(policy, kv_dtype).items()}
    own = getattr(family_of(policy).graph_module(), "build_graphs", None)
    if own is not None:
        return own(policy, precision)
    graphs = graph_modules(policy)
    if precision == "fp16":
        graphs = {k: g if k == "encoder" else Autocast(g) for k, g in graphs.items()}
    return {k: g.eval() for k, g in graphs.items()}


def input_buffers(spec: dict, batch: int, device) -> dict[str, Tensor]:
    """Zeroed per-step input buffers of a graph spec (batch axis first, the rest fixed), by name in
    the spec's order: runners copy each step's inputs into them, as ORT / TensorRT bind them by
    address and CUDA graphs read them."""
    return {io["name"]: torch.zeros([batch, *io["shape"][1:]], dtype=TORCH_DTYPES[io["dtype"]], device=device)
            for io in spec["inputs"]}


def example_inputs(spec: dict, batch: int = 1, cache: int = 4) -> tuple[Tensor, ...]:
    """Small tensors matching a graph spec (for tracing): zeros, masks all True."""
    out = []
    for io in spec["inputs"]:
        shape = [batch if d == "batch" else cache if d == "cache" else d for d in io["shape"]]
        dt = TORCH_DTYPES[io["dtype"]]
        out.append(torch.ones(shape, dtype=dt) if dt == torch.bool else torch.zeros(shape, dtype=dt))
    return tuple(out)


def export_onnx(module: nn.Module, spec: dict, path, opset: int, cache: int = 4) -> None:
    """Trace ``module`` to ONNX with the spec's names and dynamic axes (batch, cache);
    ``cache``: the traced length (HCAM: at least top_k chunks)."""
    import warnings

    dyn = {}
    for io in spec["inputs"] + spec["outputs"]:
        axes = {i: d for i, d in enumerate(io["shape"]) if isinstance(d, str)}
        if axes:
            dyn[io["name"]] = axes
    args = example_inputs(spec, cache=cache)
    # a graph that writes a cache in place (an output with an "alias") runs ONNX Runtime's contrib kernel
    contrib = {"com.microsoft": 1} if any("alias" in o for o in spec["outputs"]) else None
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # tracer warnings about Python bools on shapes: the cache is never empty
        torch.onnx.export(module, args, str(path), input_names=[i["name"] for i in spec["inputs"]],
                          output_names=[o["name"] for o in spec["outputs"]], opset_version=opset,
                          dynamic_axes=dyn, dynamo=False, do_constant_folding=True, custom_opsets=contrib)
    _restore_unused_inputs(path, spec)


def _restore_unused_inputs(path, spec: dict) -> None:
    """The tracer drops inputs the computation does not read (a one-layer Memo's summarize never reads
    ``sum_valid``: the last layer's keys and values do not depend on its mask). Put them back, in the
    spec's order, so every graph has the signature its spec (and the runtime's binding) names."""
    import onnx
    from onnx import TensorProto, helper

    model = onnx.load(str(path))
    have = {i.name: i for i in model.graph.input}
    if all(io["name"] in have for io in spec["inputs"]):
        return
    onnx_types = {"float32": TensorProto.FLOAT, "float16": TensorProto.FLOAT16, "int64": TensorProto.INT64,
                  "int32": TensorProto.INT32, "bool": TensorProto.BOOL, "uint8": TensorProto.UINT8,
                  "int8": TensorProto.INT8}
    inputs = [have.get(io["name"]) or helper.make_tensor_value_info(io["name"], onnx_types[io["dtype"]], io["shape"])
              for io in spec["inputs"]]
    del model.graph.input[:]
    model.graph.input.extend(inputs)
    onnx.save(model, str(path))
