"""The bundle manifest (``manifest.yaml``): one typed owner for what a bundle says about itself.

``training/export.py`` builds a :class:`Manifest` and writes it with :meth:`Manifest.save`;
:func:`~icrl_ros.runtime.bundle.load_bundle`, the runners and the agent node read it with
:meth:`Manifest.load` / :meth:`Manifest.from_dict` and use its attributes, never string keys.
The YAML layout is :meth:`Manifest.to_dict` (the same sections, in the same order, as the
dicts version 1 bundles were written with).

:meth:`Manifest.from_dict` checks every field's presence and type and refuses unknown fields
and versions with a :class:`ManifestError` (a ``ValueError``) whose message starts with the
file and names the field: ``bundles/x/manifest.yaml: field 'action.temperature' is 'hot',
expected float``. The checks against the model (dims, graph specs, file hashes) stay in
:func:`~icrl_ros.runtime.bundle.load_bundle`, which needs ``model.args`` built.

Versions
--------
1. The first format.
2. ``action.selection`` (``sample`` | ``greedy``) and ``action.temperature``: how the bundle's
   policy chooses actions, the way it was evaluated; the runners use them unless told otherwise.
   A version 1 manifest is read as version 2 with :data:`V1_DEFAULTS` (sampling at temperature 1,
   what ``training/evaluate.py`` and the agent node did when those bundles were made), and says
   so in a warning on the ``icrl_ros.runtime.manifest`` logger; its files are not rewritten.

The memory a bundle runs with by default, and was evaluated with, is the ``memory`` section:
``memory.policy`` and that policy's sizes (``memory.full.capacity``, ``memory.window.window``...).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from icrl_ros.families import FAMILIES

MANIFEST = "manifest.yaml"
FORMAT = "icrl_ros.bundle/1"
"""The format's name (its family); :data:`VERSION` is what changes between layouts."""
VERSION = 2
"""The newest manifest version this runtime reads and the exporter writes."""
ACTION_SELECTIONS = ("sample", "greedy")
V1_DEFAULTS = {"action.selection": "sample", "action.temperature": 1.0}
"""What a version 1 manifest (no ``action.selection`` / ``action.temperature``) is read with."""

log = logging.getLogger(__name__)


class ManifestError(ValueError):
    """A manifest cannot be used; the message starts with the file and names the field."""


def _meta(doc: str, *, since: int = 1, omit_none: bool = False) -> dict:
    """Field metadata: its documentation, the version that introduced it (required from then
    on, absent before: its default) and whether ``None`` is left out of the YAML."""
    return {"doc": doc, "since": since, "omit_none": omit_none}


def _f(doc: str, default: Any = dataclasses.MISSING, *, factory: Any = dataclasses.MISSING, since: int = 1,
       omit_none: bool = False) -> Any:
    return field(default=default, default_factory=factory, metadata=_meta(doc, since=since, omit_none=omit_none))


# -- sections -----------------------------------------------------------------------------------
@dataclass(kw_only=True)
class ModelInfo:
    kind: str = _f("Model family: relic | memo | hcam | radt (agrees with args.kind).")
    args: dict[str, Any] = _f("The model's arguments (ModelArgs / RADTArgs as a dict); builds the model.")
    hash: str = _f("SHA-256 of the state dict (icrl_ros.runtime.bundle.model_hash); weights.pt must match it.")
    n_prefix: int = _f("Prefix tokens before the first step (1 for a StreamingLLM sink token).", 0)
    trained_context: int | None = _f("PPO rollout length the model was trained on (None when unknown).", None)


@dataclass(kw_only=True)
class Dims:
    n_layers: int = _f("Transformer layers (KV cache axis 0).")
    n_heads: int = _f("Attention heads.")
    head_dim: int = _f("Per-head width.")
    d_model: int = _f("Token width.")
    n_actions: int = _f("Discrete actions.")


@dataclass(kw_only=True)
class Observation:
    inputs: dict[str, dict[str, Any]] = _f("Encoder inputs: name -> {dtype, shape (per step, no batch)}.")
    from_observation: list[str] = _f("The inputs read from the observation (the rest the runner tracks).")
    goal_names: list[str] = _f("Goal names by index (empty for goal-free models).", factory=list)
    image_size: list[int] | None = _f("Image models: [height, width] of the rgb input.", None, omit_none=True)
    pose_frame: str | None = _f("Image models: odometry frame the policy was trained with: episode (restarts "
                                "at every episode start) | house (one frame per trial).", None, omit_none=True)

    @property
    def frame(self) -> str:
        """The odometry frame, ``episode`` when the manifest does not say."""
        return self.pose_frame or "episode"


@dataclass(kw_only=True)
class Action:
    names: list[str] = _f("Action names by index.")
    forward_m: float | None = _f("Metres of a forward action (robot envs).", None, omit_none=True)
    turn_deg: float | None = _f("Degrees of a turn action (robot envs).", None, omit_none=True)
    selection: str = _f("How actions are chosen by default, as the bundle was evaluated: sample (from "
                        "softmax(logits / temperature)) | greedy (argmax).", "sample", since=2)
    temperature: float = _f("Sampling temperature used with selection sample.", 1.0, since=2)


@dataclass(kw_only=True)
class Memory:
    policy: str = _f("The default memory policy (full | window | memo | hcam | retrieval): the one the "
                     "runner builds unless told otherwise, and the bundle was evaluated with.")
    budget_bytes: int | None = _f("Default byte budget; sizes derive from it when set.", None)
    kv_dtype: str | None = _f("How the full / window / memo memories store keys and values by default: fp32 (when "
                              "absent) | fp16 | int8 (per head and token scales); the 'core' graph reads that "
                              "cache, graphs 'core.<kv_dtype>' read the others the bundle was exported with.",
                              None, omit_none=True)
    sizes: dict[str, dict[str, Any]] = _f("Per policy, its default sizes ({'full': {'capacity': 8192, "
                                          "'on_full': 'evict_oldest'}, 'window': {'window': 4096}}); written "
                                          "as sections of 'memory' beside 'policy'.", factory=dict)

    def config(self, policy: str | None = None) -> dict[str, Any]:
        """The sizes of ``policy`` (default: :attr:`policy`), a copy."""
        return dict(self.sizes.get(policy or self.policy) or {})


@dataclass(kw_only=True)
class Retrieval:
    key_projection: str = _f("File with the fixed random projection of the retrieval keys.")
    key_dim: int = _f("Retrieval key width.")
    key_seed: int = _f("Seed of the key projection.")
    l: int = _f("Candidates retrieved by cosine similarity before re-ranking.")  # noqa: E741
    relevance_weight: float = _f("Re-ranking weight of the cosine relevance.")
    utility_weight: float = _f("Re-ranking weight of the episode's utility.")
    target_return: float = _f("Return-to-go conditioning at an episode start.")
    utility: str = _f("What an episode's utility is (episode_return).")


@dataclass(kw_only=True)
class Graph:
    file: str = _f("The ONNX file (listed in 'files').")
    inputs: list[dict[str, Any]] = _f("Inputs in order: {name, dtype, shape} (batch / cache axes named).")
    outputs: list[dict[str, Any]] = _f("Outputs in order: {name, dtype, shape}.")


@dataclass(kw_only=True)
class Onnx:
    opset: int = _f("ONNX opset of every graph.")
    graphs: dict[str, Graph] = _f("Graph name (encoder, core, heads, summarize, policy) -> its file and I/O.",
                                  factory=dict)


@dataclass(kw_only=True)
class Sample:
    file: str = _f("The recorded rollout (inputs and torch outputs).", "sample.npz")
    steps: int = _f("Steps of the recorded rollout.")
    tolerance: float = _f("Max |logit diff| a backend may show replaying it.")


@dataclass(kw_only=True)
class FileRecord:
    sha256: str = _f("SHA-256 of the file.")
    bytes: int = _f("Its size.")


@dataclass(kw_only=True)
class Manifest:
    """Everything a bundle says about itself. Field documentation: each field's ``doc``."""

    format: str = _f(f"Always {FORMAT!r}.")
    version: int = _f(f"Layout version (<= {VERSION}); see the module docstring.")
    created: dict[str, Any] = _f("Provenance: date, torch / onnx versions, env_id (free-form).")
    model: ModelInfo = _f("What model this is.")
    dims: Dims = _f("Cache dimensions (must agree with model.args).")
    observation: Observation = _f("What the policy reads.")
    action: Action = _f("What it outputs and how actions are chosen by default.")
    memory: Memory = _f("Default memory policy and sizes.")
    positions: dict[str, Any] = _f("Position scheme (RoPE on the episode index, Memo slots, windows); "
                                   "descriptive, kind-specific.")
    retrieval: Retrieval | None = _f("RA-DT only: retrieval settings.", None, omit_none=True)
    precision: str = _f("fp32 | fp16 (core, heads and cache).")
    onnx: Onnx = _f("Opset and graphs.")
    sample: Sample = _f("The recorded rollout for self-checks.")
    files: dict[str, FileRecord] = _f("Every file of the bundle: name -> SHA-256 and size.", factory=dict)
    migrated_from: int | None = field(default=None, compare=False, metadata={"internal": True})
    """The version the file was written in when it was read as a newer one (not written back)."""

    # -- reading ----------------------------------------------------------------------------------
    @classmethod
    def from_dict(cls, data: Any, source: str | Path = MANIFEST) -> "Manifest":
        """Validate ``data`` (a parsed manifest) and build the manifest; older versions are
        migrated (see the module docstring). Raises :class:`ManifestError` naming ``source`` and the field."""
        source = str(source)
        if not isinstance(data, dict):
            raise ManifestError(f"{source}: field '<root>' is not a mapping")
        fmt = data.get("format")
        if fmt != FORMAT:
            raise ManifestError(f"{source}: field 'format' is {fmt!r}, expected {FORMAT!r}")
        version = data.get("version")
        if "version" not in data:
            raise ManifestError(f"{source}: field 'version' is missing")
        if not isinstance(version, int) or isinstance(version, bool) or version < 1:
            raise ManifestError(f"{source}: field 'version' is {version!r}, expected an integer >= 1")
        if version > VERSION:
            raise ManifestError(f"{source}: field 'version' is {version}, this runtime reads <= {VERSION}")
        m = _build(cls, data, "", source, version)
        if version < VERSION:
            m.migrated_from = version
            m.version = VERSION
            log.warning("%s: version %d manifest read as version %d: %s (the defaults of version %d; re-export to "
                        "record what the bundle was evaluated with)", source, version, VERSION,
                        ", ".join(f"{k} = {v!r}" for k, v in V1_DEFAULTS.items()), version)
        m.validate(source)
        return m

    @classmethod
    def from_yaml(cls, text: str, source: str | Path = MANIFEST) -> "Manifest":
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as e:
            raise ManifestError(f"{source}: not valid YAML ({e})") from e
        return cls.from_dict(data, source)

    @classmethod
    def from_json(cls, text: str, source: str | Path = MANIFEST) -> "Manifest":
        try:
            data = json.loads(text)
        except ValueError as e:
            raise ManifestError(f"{source}: not valid JSON ({e})") from e
        return cls.from_dict(data, source)

    @classmethod
    def load(cls, path: str | Path) -> "Manifest":
        """Read ``path`` (a ``manifest.yaml``, or a bundle directory holding one)."""
        path = Path(path)
        if path.is_dir():
            path = path / MANIFEST
        try:
            text = path.read_text()
        except OSError as e:
            raise ManifestError(f"{path}: cannot read the manifest ({e.strerror or e})") from e
        return cls.from_yaml(text, path)

    def validate(self, source: str | Path = MANIFEST) -> "Manifest":
        """Cross-field checks that need no model: values in their sets, names that must agree."""
        def bad(name: str, why: str) -> ManifestError:
            return ManifestError(f"{source}: field '{name}' {why}")

        if self.action.selection not in ACTION_SELECTIONS:
            raise bad("action.selection", f"is {self.action.selection!r}, expected one of {list(ACTION_SELECTIONS)}")
        if not self.action.temperature > 0:
            raise bad("action.temperature", f"is {self.action.temperature!r}, expected > 0")
        if self.model.kind != self.model.args.get("kind", self.model.kind):
            raise bad("model.kind", f"is {self.model.kind!r}, model.args says {self.model.args.get('kind')!r}")
        if self.dims.n_actions != len(self.action.names):
            raise bad("action.names", f"has {len(self.action.names)} names, the model has {self.dims.n_actions} actions")
        if self.model.kind in FAMILIES and not FAMILIES[self.model.kind].cached_step and self.retrieval is None:
            raise bad("retrieval", "is missing (an RA-DT bundle needs it)")
        for name, g in self.onnx.graphs.items():
            if g.file not in self.files:
                raise bad(f"onnx.graphs.{name}.file", f"({g.file!r}) is not listed in 'files'")
        return self

    # -- writing ----------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """The YAML layout (plain dicts and lists; ``memory`` sizes flattened beside ``policy``)."""
        return _dump(self)

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.to_dict(), sort_keys=False)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=1)

    def save(self, path: str | Path) -> Path:
        """Write ``path`` (a file, or a directory to write ``manifest.yaml`` in)."""
        path = Path(path)
        if path.is_dir():
            path = path / MANIFEST
        path.write_text(self.to_yaml())
        return path


# -- typed (de)serialisation ----------------------------------------------------------------------
_HINTS: dict[type, dict[str, Any]] = {}


def _hints(cls: type) -> dict[str, Any]:
    if cls not in _HINTS:
        _HINTS[cls] = typing.get_type_hints(cls)
    return _HINTS[cls]


def _type_name(tp: Any) -> str:
    if tp is type(None):
        return "null"
    if isinstance(tp, type) and not typing.get_args(tp):
        return "mapping" if dataclasses.is_dataclass(tp) or tp is dict else tp.__name__
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_type_name(a) for a in args)
    if origin is list:
        return f"list of {_type_name(args[0])}"
    if origin is dict:
        return "mapping"
    return str(tp)


def _convert(tp: Any, value: Any, name: str, source: str, version: int) -> Any:
    """``value`` checked against (and built as) type ``tp``; ``name`` is its dotted field path."""
    def wrong() -> ManifestError:
        return ManifestError(f"{source}: field '{name}' is {value!r}, expected {_type_name(tp)}")

    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        if len(inner) == 1:
            try:
                return _convert(inner[0], value, name, source, version)
            except ManifestError:
                raise wrong() from None
        raise TypeError(f"unsupported union {tp}")
    if dataclasses.is_dataclass(tp):
        if not isinstance(value, dict):
            raise wrong()
        return _build(tp, value, name + ".", source, version)
    if origin is list:
        if not isinstance(value, list):
            raise wrong()
        return [_convert(args[0], v, f"{name}[{i}]", source, version) for i, v in enumerate(value)]
    if origin is dict or tp is dict:
        if not isinstance(value, dict):
            raise wrong()
        if not args:
            return dict(value)
        return {k: _convert(args[1], v, f"{name}.{k}", source, version) for k, v in value.items()}
    if tp is bool:
        if not isinstance(value, bool):
            raise wrong()
        return value
    if tp is int:
        if not isinstance(value, int) or isinstance(value, bool):
            raise wrong()
        return value
    if tp is float:
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            raise wrong()
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise wrong()
        return value
    raise TypeError(f"unsupported field type {tp}")


def _build(cls: type, data: dict, prefix: str, source: str, version: int) -> Any:
    hints = _hints(cls)
    data = dict(data)
    if cls is Memory:  # per-policy sizes sit beside 'policy' in the YAML
        data = {"policy": data.pop("policy", dataclasses.MISSING), "budget_bytes": data.pop("budget_bytes", None),
                "kv_dtype": data.pop("kv_dtype", None), "sizes": data}
        if data["policy"] is dataclasses.MISSING:
            del data["policy"]
    kwargs = {}
    for f in dataclasses.fields(cls):
        if f.metadata.get("internal"):
            continue
        name = prefix + f.name
        if f.name not in data:
            has_default = f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
            if f.metadata.get("since", 1) <= version and not has_default:
                raise ManifestError(f"{source}: field '{name}' is missing")
            if f.metadata.get("since", 1) <= version and f.metadata.get("since", 1) > 1:
                raise ManifestError(f"{source}: field '{name}' is missing (required from version {f.metadata['since']})")
            continue
        value = data.pop(f.name)
        if cls is Memory and f.name == "sizes":
            for pol, sizes in value.items():
                if not isinstance(sizes, dict):
                    raise ManifestError(f"{source}: field '{prefix}{pol}' is {sizes!r}, expected mapping")
        kwargs[f.name] = _convert(hints[f.name], value, name, source, version)
    if data:
        raise ManifestError(f"{source}: field '{prefix}{sorted(data)[0]}' is unknown (known: "
                            f"{[f.name for f in dataclasses.fields(cls) if not f.metadata.get('internal')]})")
    return cls(**kwargs)


def _dump(obj: Any) -> Any:
    if dataclasses.is_dataclass(obj):
        out: dict[str, Any] = {}
        for f in dataclasses.fields(obj):
            if f.metadata.get("internal"):
                continue
            value = getattr(obj, f.name)
            if value is None and f.metadata.get("omit_none"):
                continue
            if isinstance(obj, Memory) and f.name == "sizes":
                out.update(_dump(value))
            else:
                out[f.name] = _dump(value)
        return out
    if isinstance(obj, dict):
        return {k: _dump(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_dump(v) for v in obj]
    return obj


def field_docs(cls: type = Manifest, prefix: str = "") -> dict[str, str]:
    """Dotted field name -> documentation, every section (for docs and ``bundle_tool``)."""
    out = {}
    hints = _hints(cls)
    for f in dataclasses.fields(cls):
        if f.metadata.get("internal"):
            continue
        out[prefix + f.name] = f.metadata.get("doc", "")
        tp = hints[f.name]
        inner = [a for a in typing.get_args(tp) if dataclasses.is_dataclass(a)] or ([tp] if dataclasses.is_dataclass(tp) else [])
        for sub in inner:
            out.update(field_docs(sub, prefix + f.name + "."))
    return out


__all__ = ["Manifest", "ManifestError", "ModelInfo", "Dims", "Observation", "Action", "Memory", "Retrieval", "Graph",
           "Onnx", "Sample", "FileRecord", "FORMAT", "VERSION", "MANIFEST", "ACTION_SELECTIONS", "V1_DEFAULTS",
           "field_docs"]
