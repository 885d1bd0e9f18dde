"""The graphs a deploy bundle holds, as torch modules over a trained policy.

One control step is ``encoder -> core -> heads`` (plus ``summarize`` at a Memo segment
end); RA-DT's is one ``policy`` graph (window + retrieved sub-trajectories -> logits,
:class:`RADTGraph`), the retrieval itself runs outside it (faiss). HCAM's core also reads the chunk store and returns the token's memory-layer
inputs (what the store keeps); top-k and gather run inside it. Every graph is a pure
function of plain tensors, so the same module serves the torch engine, ONNX export
(and, through the ONNX, TensorRT). Shapes, names and dtypes are fixed by
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
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from icrl_ros.families import family_of
from icrl_ros.models.hcam import HCAMPolicy
from icrl_ros.models.memo import MemoPolicy
from icrl_ros.models.policy import ICLPolicy
from icrl_ros.models.radt import REWARD_KEYS, RETRIEVED_KEYS, WINDOW_KEYS, RADTArgs, RADTPolicy
from icrl_ros.models.radt import input_spec as radt_input_spec

PRECISIONS = ("fp32", "fp16")
TORCH_DTYPES = {"float32": torch.float32, "float16": torch.float16, "int64": torch.int64, "bool": torch.bool,
                "uint8": torch.uint8, "int32": torch.int32}
# Runner-tracked encoder inputs; every other encoder input comes from the observation.
TRACKED_INPUTS = ("prev_action", "prev_reward", "episode_step")


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


def cache_dtype(precision: str) -> torch.dtype:
    return torch.float16 if precision == "fp16" else torch.float32


def graph_specs(policy: ICLPolicy, precision: str = "fp32") -> dict[str, dict[str, list[dict]]]:
    """Inputs and outputs of every graph: ``{graph: {"inputs": [{name, dtype, shape}], "outputs": [...]}}``.

    Shapes use ``"batch"`` and ``"cache"`` for the dynamic axes, integers elsewhere.
    HCAM: the window is static (``hcam_chunk`` slots); ``cache`` is the chunk store's slots.
    """
    a = policy.args
    fam = family_of(policy)
    if not fam.cached_step:
        return radt_graph_specs(a)
    L, H, hd, D = a.n_layers, a.n_heads, a.head_dim, a.d_model
    f = dtype_name(cache_dtype(precision))  # the cache (and the new keys / values)
    io = _io
    enc_in = [io(n, dtype_name(dt), ["batch", *shape]) for n, (shape, dt) in policy.input_spec().items()]
    hcam = fam.chunk_store
    win = a.hcam_chunk if hcam else "cache"
    specs = {
        "encoder": {"inputs": enc_in, "outputs": [io("x", "float32", ["batch", D])]},
        "core": {
            "inputs": [io("x", "float32", ["batch", D]), io("position", "int64", ["batch"]),
                       io("mask", "bool", ["batch", win])]
            + [io(f"past_k_{i}", f, ["batch", H, win, hd]) for i in range(L)]
            + [io(f"past_v_{i}", f, ["batch", H, win, hd]) for i in range(L)],
            "outputs": [io("hidden", "float32", ["batch", D]), io("new_k", f, [L, "batch", H, 1, hd]),
                        io("new_v", f, [L, "batch", H, 1, hd])],
        },
        "heads": {"inputs": [io("hidden", "float32", ["batch", D])],
                  "outputs": [io("logits", "float32", ["batch", a.n_actions]), io("value", "float32", ["batch"])]},
    }
    if hcam:  # the chunk store as HCAMMemory.core_inputs() hands it over
        Lm, C = len(a.memory_layers), a.hcam_chunk
        specs["core"]["inputs"] += ([io(f"chunk_x_{j}", f, ["batch", "cache", C, D]) for j in range(Lm)]
                                    + [io(f"chunk_key_{j}", f, ["batch", "cache", D]) for j in range(Lm)]
                                    + [io("chunk_valid", "bool", ["batch", "cache"])])
        specs["core"]["outputs"].append(io("x_mem", f, [Lm, "batch", 1, D]))
    if fam.segments:
        kv = lambda n: io(n, f, [L, "batch", H, "cache", hd])  # noqa: E731
        specs["summarize"] = {
            "inputs": [kv("mem_k"), kv("mem_v"), io("mem_valid", "bool", ["batch", "cache"]),
                       io("sum_valid", "bool", ["batch", "cache"]), io("pos_base", "int64", ["batch"]),
                       io("seg_len", "int64", ["batch"]), io("new_base", "int64", ["batch"])],
            "outputs": [io("sum_k", f, [L, "batch", H, a.l_sum, hd]), io("sum_v", f, [L, "batch", H, a.l_sum, hd])],
        }
    return specs


def _io(name: str, dtype: str, shape) -> dict:
    return {"name": name, "dtype": dtype, "shape": list(shape)}


RADT_DTYPES = {"obs": "int64", "prev_action": "int64", "action": "int64", "prev_reward": "float32",
               "reward": "float32", "rtg": "float32", "episode_step": "int64", "valid": "bool"}
RETRIEVED_PREFIX = "retrieved_"


def radt_graph_specs(a: RADTArgs) -> dict[str, dict[str, list[dict]]]:
    """RA-DT's graphs, static but for the batch. ``policy``: the window (WINDOW_KEYS, each
    (batch, C)), the retrieved sub-trajectories (``retrieved_`` + RETRIEVED_KEYS, each
    (batch, k, 2C); the learnt null slot is inside the graph) -> the last position's
    logits (batch, A). Every precision: inputs and logits are float32 / int64 / bool.

    Image models: ``obs`` inputs are step features (..., F) float32, and an ``encoder``
    graph (rgb, odom, goal, each (batch, ...)) -> x (batch, F) makes them; ``use_reward:
    false`` drops the reward and return-to-go inputs."""
    C, k, F = a.context, a.top_k, a.obs_features

    def io(name: str, lead: list) -> dict:
        if name == "obs" and F:
            return _io(name, "float32", lead + [F])
        return _io(name, RADT_DTYPES[name], lead)

    keep = lambda names: [n for n in names if a.use_reward or n not in REWARD_KEYS]  # noqa: E731
    window = [io(n, ["batch", C]) for n in keep(WINDOW_KEYS)]
    retrieved = [io(n, ["batch", k, 2 * C]) for n in keep(RETRIEVED_KEYS)]
    for r in retrieved:
        r["name"] = RETRIEVED_PREFIX + r["name"]
    specs = {"policy": {"inputs": window + retrieved, "outputs": [_io("logits", "float32", ["batch", a.n_actions])]}}
    if F:
        enc = radt_input_spec(a)
        specs = {"encoder": {"inputs": [_io(n, dtype_name(dt), ["batch", *shape]) for n, (shape, dt) in enc.items()],
                             "outputs": [_io("x", "float32", ["batch", F])]}, **specs}
    return specs


class RADTGraph(nn.Module):
    """``RADTPolicy.forward`` at the acting (last) window position, inputs in
    :func:`radt_graph_specs` order -> logits (B, A) float32."""

    def __init__(self, policy: RADTPolicy) -> None:
        super().__init__()
        self.policy = policy
        self.names = [io["name"] for io in radt_graph_specs(policy.args)["policy"]["inputs"]]

    def forward(self, *inputs: Tensor) -> Tensor:
        named = dict(zip(self.names, inputs))
        window = {n: named[n] for n in WINDOW_KEYS if n in named}
        retrieved = {n: named[RETRIEVED_PREFIX + n] for n in RETRIEVED_KEYS if RETRIEVED_PREFIX + n in named}
        return self.policy(window, retrieved)[:, -1].float()


class RADTEncoderGraph(nn.Module):
    """Image RA-DT: rgb (B, S, S, 3), odom (B, 3), goal (B,) -> step features x (B, F) float32."""

    def __init__(self, policy: RADTPolicy) -> None:
        super().__init__()
        self.policy = policy

    def forward(self, rgb: Tensor, odom: Tensor, goal: Tensor) -> Tensor:
        return self.policy.step_features(rgb, odom, goal).float()


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
    the slot; kv: L past_k (B, H, P, hd) then L past_v. Returns hidden (B, D) and the
    token's rotated keys / values (L, B, H, 1, hd) for the memory to commit.
    """

    def __init__(self, policy: ICLPolicy) -> None:
        super().__init__()
        self.core, self.n_layers = policy.core, policy.args.n_layers

    def forward(self, x: Tensor, position: Tensor, mask: Tensor, *kv: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        L = self.n_layers
        full = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=1)[:, None]  # (B, 1, P + 1): + the token itself
        # TransformerCore indexes past_k[i] per layer, so per-layer lists go straight through.
        h, k, v = self.core(x[:, None], position[:, None], full, list(kv[:L]), list(kv[L:]))
        return h[:, 0], k, v


class HCAMCoreGraph(CoreGraph):
    """HCAM's core: as :class:`CoreGraph` over the local window (P = C slots), then the
    chunk store: Lm ``chunk_x`` (B, N, C, D), Lm ``chunk_key`` (B, N, D), ``chunk_valid``
    (B, N). Also returns the token's memory-layer inputs ``x_mem`` (Lm, B, 1, D), which
    :meth:`HCAMMemory.commit` writes into the current chunk.
    """

    def __init__(self, policy: HCAMPolicy) -> None:
        super().__init__(policy)
        self.n_mem = len(policy.args.memory_layers)

    def forward(self, x: Tensor, position: Tensor, mask: Tensor, *rest: Tensor
                ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        L, Lm = self.n_layers, self.n_mem
        kv, chunk_x, chunk_key, chunk_valid = rest[:2 * L], rest[2 * L:2 * L + Lm], rest[2 * L + Lm:-1], rest[-1]
        full = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=1)[:, None]  # (B, 1, C + 1)
        h, k, v, x_mem = self.core(x[:, None], position[:, None], full, list(kv[:L]), list(kv[L:]), list(chunk_x),
                                   list(chunk_key), chunk_valid[:, None, :])
        return h[:, 0], k, v, x_mem.to(chunk_x[0].dtype)


class HeadsGraph(nn.Module):
    """hidden (B, D) -> logits (B, A), value (B,), both float32."""

    def __init__(self, policy: ICLPolicy) -> None:
        super().__init__()
        self.norm, self.actor, self.critic = policy.norm, policy.actor, policy.critic

    def forward(self, hidden: Tensor) -> tuple[Tensor, Tensor]:
        h = self.norm(hidden)
        return self.actor(h).float(), self.critic(h).squeeze(-1).float()


class SummarizeGraph(nn.Module):
    """``MemoPolicy.summarize`` as a graph (arguments as in :meth:`MemoMemory.summary_inputs`)."""

    def __init__(self, policy: MemoPolicy) -> None:
        super().__init__()
        self.policy = policy

    def forward(self, mem_k, mem_v, mem_valid, sum_valid, pos_base, seg_len, new_base) -> tuple[Tensor, Tensor]:
        return self.policy.summarize(mem_k, mem_v, mem_valid, sum_valid, pos_base, seg_len, new_base)


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


def graph_modules(policy: ICLPolicy) -> dict[str, nn.Module]:
    """encoder, core (HCAM's reads the chunk store), heads and (Memo) summarize over ``policy``'s
    own submodules: no copy, the policy's mode untouched."""
    fam = family_of(policy)
    core = HCAMCoreGraph(policy) if fam.chunk_store else CoreGraph(policy)
    graphs: dict[str, nn.Module] = {"encoder": EncoderGraph(policy), "core": core, "heads": HeadsGraph(policy)}
    if fam.segments:
        graphs["summarize"] = SummarizeGraph(policy)
    return graphs


def build_graphs(policy: ICLPolicy, precision: str = "fp32") -> dict[str, nn.Module]:
    """The graph modules for ``policy`` in ``precision`` (weights stay float32; fp16 runs
    the core, heads and summarize under float16 autocast)."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision: {precision!r} is not one of {list(PRECISIONS)}")
    policy = policy.eval()
    if not family_of(policy).cached_step:
        if precision != "fp32":
            raise ValueError(f"precision: RA-DT bundles are fp32 only, got {precision!r}")
        graphs = {"policy": RADTGraph(policy).eval()}
        if policy.args.obs_type == "image":
            graphs = {"encoder": RADTEncoderGraph(policy).eval(), **graphs}
        return graphs
    graphs = graph_modules(policy)
    if precision == "fp16":
        graphs = {k: g if k == "encoder" else Autocast(g) for k, g in graphs.items()}
    return {k: g.eval() for k, g in graphs.items()}


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
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # tracer warnings about Python bools on shapes: the cache is never empty
        torch.onnx.export(module, args, str(path), input_names=[i["name"] for i in spec["inputs"]],
                          output_names=[o["name"] for o in spec["outputs"]], opset_version=opset,
                          dynamic_axes=dyn, dynamo=False, do_constant_folding=True)
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
                  "int32": TensorProto.INT32, "bool": TensorProto.BOOL, "uint8": TensorProto.UINT8}
    inputs = [have.get(io["name"]) or helper.make_tensor_value_info(io["name"], onnx_types[io["dtype"]], io["shape"])
              for io in spec["inputs"]]
    del model.graph.input[:]
    model.graph.input.extend(inputs)
    onnx.save(model, str(path))
