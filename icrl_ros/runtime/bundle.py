"""Deploy bundles: a directory with ``manifest.yaml`` plus the files it lists.

The manifest is a :class:`~icrl_ros.runtime.manifest.Manifest` (typed, versioned, its fields
documented there); :attr:`Bundle.manifest` is that object.

``load_bundle(path)`` validates everything the runtime relies on before anything runs,
and every refusal is a :class:`BundleError` whose message starts with the file and
names the field: ``core.onnx: field 'inputs' ...``, ``manifest.yaml: field 'dims.n_heads' ...``.

Checked: the manifest parses and has a known format/version; ``model.args`` builds a
valid model; ``dims`` agree with it; every listed file exists with its SHA-256; every
ONNX graph has the manifest's opset and exactly the input / output names, dtypes and
static dims the model implies (:func:`~icrl_ros.runtime.graphs.graph_specs`); the
sink-token cache and the recorded sample have the right arrays. A bundle may hold core graphs for
more than one K / V storage dtype (``core`` for the manifest's ``memory.kv_dtype``, ``core.int8``
... for the others): each is checked the same way, and :meth:`Bundle.with_kv_dtype` picks one. Weights for the torch
backend are loaded strictly and checked against ``model.hash`` when first used.

A family without the cached control step (``Family.deploy``, e.g. RA-DT) says which graphs, sample
arrays and extra ``.npz`` files its bundle holds (``deploy.bundle_layout``); they are checked the same way.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from icrl_ros.families import family_of
from icrl_ros.models.checkpoint import model_args_from_dict
from icrl_ros.memory.quant import STATIC_KV_DTYPES
from icrl_ros.models.config import ModelArgs, sink_slots
from icrl_ros.models.policy import ICLPolicy
from icrl_ros.runtime.manifest import FORMAT, MANIFEST, VERSION, Manifest, ManifestError

WEIGHTS = "weights.pt"
SINK_CACHE = "sink_cache.npz"
KV_STATIC = "kv_static.npz"
"""A bundle with an ``int8_gqa`` core: the static per-channel scales ``k_scale`` / ``v_scale`` (L, H, hd) its
memory stores keys and values with, and the Sink-KV rows ``sink_k`` / ``sink_v`` (L, H, n_sink, hd) that
memory pins first (float32; calibrated by ``training/export.py``)."""
SAMPLE = "sample.npz"

_ONNX_DTYPES = {1: "float32", 10: "float16", 7: "int64", 9: "bool", 2: "uint8", 6: "int32", 3: "int8"}


class BundleError(ManifestError):
    """A bundle cannot be used; the message names the file and the field (a ``ValueError``)."""


def sha256_file(path: str | Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def model_hash(policy: torch.nn.Module) -> str:
    """SHA-256 over the state dict (names, dtypes, shapes, bytes), in key order."""
    h = hashlib.sha256()
    for name, t in sorted(policy.state_dict().items()):
        t = t.detach().cpu().contiguous()
        h.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
        h.update((t.view(torch.int16) if t.dtype == torch.bfloat16 else t).numpy().tobytes())
    return h.hexdigest()


@dataclass
class Bundle:
    """A validated bundle: its directory, manifest and the model it describes."""

    path: Path
    manifest: Manifest
    args: ModelArgs | Any
    """The model's arguments: its family's config class (``Family.config``; RA-DT's ``RADTArgs``)."""
    specs: dict = field(repr=False)
    _policy: ICLPolicy | None = field(default=None, repr=False)
    kv_dtype: str = "fp32"
    """How the memory stores K / V and the core reads them (:mod:`icrl_ros.memory.quant`): the
    manifest's ``memory.kv_dtype`` unless :meth:`with_kv_dtype` chose another."""

    @property
    def default_kv_dtype(self) -> str:
        return self.manifest.memory.kv_dtype or "fp32"

    def kv_dtypes(self) -> list[str]:
        """The K / V storage dtypes this bundle has a core graph for (the default first)."""
        graphs = self.manifest.onnx.graphs
        return [self.default_kv_dtype] + [n.split(".", 1)[1] for n in graphs if n.startswith("core.")]

    def graph_key(self, graph: str) -> str:
        """The manifest's name of ``graph`` for this bundle's :attr:`kv_dtype` (``core.int8`` ...)."""
        return f"core.{self.kv_dtype}" if graph == "core" and self.kv_dtype != self.default_kv_dtype else graph

    def with_kv_dtype(self, kv_dtype: str | None) -> Bundle:
        """This bundle with its memory stored and read as ``kv_dtype`` (None: the manifest's): a
        copy whose ``core`` is the matching graph; a BundleError if the bundle has none."""
        from icrl_ros.memory.quant import KV_DTYPES

        kv = kv_dtype or self.default_kv_dtype
        if kv not in KV_DTYPES:
            raise BundleError(f"kv_dtype: {kv!r} is not one of {list(KV_DTYPES)}")
        if kv not in self.kv_dtypes():
            raise BundleError(f"{MANIFEST}: field 'onnx.graphs.core.{kv}' is missing: {self.path} has a core for "
                              f"{self.kv_dtypes()} only; add one with: python training/export.py {self.path} "
                              f"--add-kv-dtypes {kv} --out NEW_BUNDLE")
        if kv == self.kv_dtype:
            return self
        from icrl_ros.runtime.graphs import graph_specs

        core = graph_specs(_shape_only_policy(self.args), self.precision, kv)["core"]
        return replace(self, specs={**self.specs, "core": core}, kv_dtype=kv)

    @property
    def kind(self) -> str:
        return self.args.kind

    @property
    def precision(self) -> str:
        return self.manifest.precision

    @property
    def model_hash(self) -> str:
        return self.manifest.model.hash

    @property
    def n_prefix(self) -> int:
        return 1 if getattr(self.args, "sink", None) == "token" else 0

    def file(self, name: str) -> Path:
        return self.path / name

    def graph_path(self, graph: str) -> Path:
        return self.path / self.manifest.onnx.graphs[self.graph_key(graph)].file

    def load_policy(self) -> ICLPolicy:
        """The torch policy (fp32, eval) from ``weights.pt``, checked against ``model.hash``."""
        if self._policy is None:
            from icrl_ros.models.stepping import build_policy

            path = self.file(WEIGHTS)
            try:
                state = torch.load(path, map_location="cpu", weights_only=True)
            except Exception as e:  # noqa: BLE001 - any unpickling failure means a bad file
                raise BundleError(f"{WEIGHTS}: not a readable state dict ({e})") from e
            policy = build_policy(self.args)
            try:
                policy.load_state_dict(state)
            except RuntimeError as e:
                raise BundleError(f"{WEIGHTS}: field 'state_dict' does not fit model.args ({e})") from e
            if model_hash(policy) != self.model_hash:
                raise BundleError(f"{WEIGHTS}: weights do not match {MANIFEST} field 'model.hash'")
            self._policy = policy.eval()
        return self._policy

    def sink_cache(self) -> tuple[torch.Tensor, torch.Tensor] | None:
        """The StreamingLLM sink token's keys/values (L, 1, H, 1, hd), or None."""
        if not self.n_prefix:
            return None
        with np.load(self.file(SINK_CACHE), allow_pickle=False) as z:
            return torch.from_numpy(z["k"].copy()), torch.from_numpy(z["v"].copy())

    def kv_static(self) -> dict[str, torch.Tensor]:
        """:data:`KV_STATIC`'s arrays (an ``int8_gqa`` core's scales and sink rows)."""
        with np.load(self.file(KV_STATIC), allow_pickle=False) as z:
            return {k: torch.from_numpy(z[k].copy()) for k in ("k_scale", "v_scale", "sink_k", "sink_v")}

    def sample(self) -> dict[str, np.ndarray]:
        with np.load(self.file(self.manifest.sample.file), allow_pickle=False) as z:
            return {k: z[k].copy() for k in z.files}


def load_bundle(path: str | Path, check_hashes: bool = True) -> Bundle:
    """Open and validate a bundle directory (see the module docstring for what is checked)."""
    path = Path(path)
    if not path.is_dir():
        raise BundleError(f"{path}: not a bundle directory")
    mpath = path / MANIFEST
    if not mpath.is_file():
        raise BundleError(f"{MANIFEST}: missing in {path}")
    try:
        manifest = Manifest.load(mpath)
    except ManifestError as e:
        raise BundleError(str(e)) from e
    m = manifest
    try:
        args = model_args_from_dict(dict(m.model.args), m.model.kind)
    except (TypeError, ValueError) as e:
        raise BundleError(f"{MANIFEST}: field 'model.args' is invalid ({e})") from e
    if m.model.kind != args.kind:
        raise BundleError(f"{MANIFEST}: field 'model.kind' is {m.model.kind!r}, model.args says {args.kind!r}")
    deploy = family_of(args).deploy_module()  # a family with its own bundle layout (RA-DT)
    dims = {"n_layers": args.n_layers, "n_heads": args.n_heads, "head_dim": args.head_dim, "d_model": args.d_model,
            "n_actions": args.n_actions}
    for key, want in dims.items():
        got = getattr(m.dims, key)
        if got != want:
            raise BundleError(f"{MANIFEST}: field 'dims.{key}' is {got}, model.args gives {want}")
    precision = m.precision
    from icrl_ros.runtime.graphs import PRECISIONS, graph_specs

    if precision not in PRECISIONS:
        raise BundleError(f"{MANIFEST}: field 'precision' is {precision!r}, expected one of {list(PRECISIONS)}")
    goals = m.observation.goal_names
    if args.n_goals and len(goals) != args.n_goals:
        raise BundleError(f"{MANIFEST}: field 'observation.goal_names' has {len(goals)} names, the model has "
                          f"{args.n_goals} goals")

    # files and hashes
    files = m.files
    for name, rec in files.items():
        fpath = path / name
        if not fpath.is_file():
            raise BundleError(f"{name}: listed in {MANIFEST} field 'files' but missing from {path}")
        if check_hashes and sha256_file(fpath) != rec.sha256:
            raise BundleError(f"{name}: SHA-256 does not match {MANIFEST} field 'files.{name}.sha256' "
                              "(file changed or corrupt)")
    sink_token = getattr(args, "sink", None) == "token"
    npz: dict[str, dict] = {}
    if deploy is not None:  # its graphs, the sample's arrays and its extra files: the args say what a step reads
        specs, sample_keys, npz = deploy.bundle_layout(args, precision)
    if sink_token:
        npz[SINK_CACHE] = {"k": (args.n_layers, 1, args.n_heads, 1, args.head_dim),
                           "v": (args.n_layers, 1, args.n_heads, 1, args.head_dim)}
    for needed in [WEIGHTS, m.sample.file, *npz]:
        if needed not in files:
            raise BundleError(f"{MANIFEST}: field 'files' does not list {needed}")

    # graphs against the model
    if deploy is None:
        policy = _shape_only_policy(args)
        try:
            specs = graph_specs(policy, precision, m.memory.kv_dtype or "fp32")
        except ValueError as e:
            raise BundleError(f"{MANIFEST}: field 'memory.kv_dtype' {e}") from e
        sample_keys = ("logits", "values", "episode_index", *policy.input_spec())
    opset, graphs = m.onnx.opset, m.onnx.graphs
    for gname, spec in specs.items():
        if gname not in graphs:
            raise BundleError(f"{MANIFEST}: field 'onnx.graphs.{gname}' is missing")
        rec = graphs[gname]
        for part in ("inputs", "outputs"):
            if getattr(rec, part) != spec[part]:
                raise BundleError(f"{MANIFEST}: field 'onnx.graphs.{gname}.{part}' does not match model.args "
                                  f"(expected {[io['name'] for io in spec[part]]})")
        fname = rec.file
        if fname not in files:
            raise BundleError(f"{MANIFEST}: field 'onnx.graphs.{gname}.file' ({fname!r}) is not listed in 'files'")
        _check_onnx(path / fname, fname, spec, opset)
    kv_default = m.memory.kv_dtype or "fp32"
    for gname, rec in graphs.items():  # the core graphs for other K / V storage dtypes
        if gname in specs or not gname.startswith("core."):
            continue
        kv = gname.split(".", 1)[1]
        try:
            if deploy is not None:
                raise ValueError(f"is not a graph of a {args.kind} bundle (its memory reads no K / V cache)")
            if kv == kv_default:
                raise ValueError("is not a graph of this model")
            spec = graph_specs(policy, precision, kv)["core"]
        except ValueError as e:
            raise BundleError(f"{MANIFEST}: field 'onnx.graphs.{gname}' {e}") from e
        for part in ("inputs", "outputs"):
            if getattr(rec, part) != spec[part]:
                raise BundleError(f"{MANIFEST}: field 'onnx.graphs.{gname}.{part}' does not match model.args")
        if rec.file not in files:
            raise BundleError(f"{MANIFEST}: field 'onnx.graphs.{gname}.file' ({rec.file!r}) is not listed in 'files'")
        _check_onnx(path / rec.file, rec.file, spec, opset)

    if any(kv in STATIC_KV_DTYPES for kv in [m.memory.kv_dtype] + [g.split(".", 1)[1] for g in graphs if "." in g]):
        L, H, hd = args.n_layers, args.n_heads, args.head_dim
        n_sink = sink_slots(args.sink, args.n_sink)
        npz[KV_STATIC] = {"k_scale": (L, H, hd), "v_scale": (L, H, hd), "sink_k": (L, H, n_sink, hd),
                          "sink_v": (L, H, n_sink, hd)}
        if KV_STATIC not in files:
            raise BundleError(f"{MANIFEST}: field 'files' does not list {KV_STATIC} (the int8_gqa core's scales)")
    for name, arrays in npz.items():
        _check_npz(path / name, name, arrays)
    _check_npz(path / m.sample.file, m.sample.file, dict.fromkeys(sample_keys))
    return Bundle(path, manifest, args, specs, kv_dtype=m.memory.kv_dtype or "fp32")


def _shape_only_policy(args: ModelArgs) -> ICLPolicy:
    """A policy object for its specs (input names, dims); weights are irrelevant."""
    from icrl_ros.models.stepping import build_policy

    with torch.device("meta"):
        return build_policy(args)


def _check_npz(path: Path, name: str, want: dict[str, tuple | None]) -> None:
    try:
        with np.load(path, allow_pickle=False) as z:
            for key, shape in want.items():
                if key not in z.files:
                    raise BundleError(f"{name}: field '{key}' is missing")
                if shape is not None and tuple(z[key].shape) != shape:
                    raise BundleError(f"{name}: field '{key}' has shape {tuple(z[key].shape)}, expected {shape}")
    except BundleError:
        raise
    except Exception as e:  # noqa: BLE001 - zip / format errors
        raise BundleError(f"{name}: not a readable .npz ({e})") from e


def _check_onnx(path: Path, name: str, spec: dict, opset: int) -> None:
    import onnx

    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception as e:  # noqa: BLE001 - protobuf decode errors
        raise BundleError(f"{name}: not a readable ONNX model ({e})") from e
    got_opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), None)
    if got_opset != opset:
        raise BundleError(f"{name}: field 'opset_import' is {got_opset}, {MANIFEST} field 'onnx.opset' says {opset}")
    for part, values in (("inputs", model.graph.input), ("outputs", model.graph.output)):
        got = [v.name for v in values]
        want = [io["name"] for io in spec[part]]
        if got != want:
            raise BundleError(f"{name}: field '{part}' names are {got}, expected {want}")
        for v, io in zip(values, spec[part]):
            tt = v.type.tensor_type
            dt = _ONNX_DTYPES.get(tt.elem_type, f"onnx type {tt.elem_type}")
            if dt != io["dtype"]:
                raise BundleError(f"{name}: field '{part}.{v.name}.dtype' is {dt}, expected {io['dtype']}")
            dims = [d.dim_value if d.HasField("dim_value") else d.dim_param for d in tt.shape.dim]
            # outputs: the exporter's shape inference may leave a static dim symbolic; rank must match
            strict = part == "inputs"
            if len(dims) != len(io["shape"]) or any(isinstance(w, int) and d != w and (strict or isinstance(d, int))
                                                    for d, w in zip(dims, io["shape"])):
                raise BundleError(f"{name}: field '{part}.{v.name}.shape' is {dims}, expected {io['shape']}")
