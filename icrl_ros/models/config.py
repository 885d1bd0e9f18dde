"""Model arguments: typed dataclasses, validated loudly, saved inside every checkpoint.

:class:`ModelArgs` holds what every cached-step policy has (observation encoder, transformer
core, heads). A family adds its own fields in a subclass registered with the family
(``Family.config``: Memo's :class:`~icrl_ros.families.memo.config.MemoArgs`, HCAM's
:class:`~icrl_ros.families.hcam.config.HCAMArgs`); :meth:`ModelArgs.from_dict` builds the class of
the dict's ``kind``. An extension of the control step may add a nested config section
(:func:`register_section`; the house task's ``house:``), read as an attribute of the arguments
(``args.house.route_memory``) and present with its defaults on every model.
"""

from __future__ import annotations

from dataclasses import MISSING, asdict, dataclass, field, fields, replace
from typing import Any

from icrl_ros.registry import Registry

SINKS = ("kv", "kv0", "k0v0", "none", "token")
SLOT_SINKS = ("kv", "kv0", "k0v0")
"""The sinks that are Sink-KV slots of every attention layer (``token`` is a prefix token, ``none`` nothing)."""


def sink_slots(sink: str, n_sink: int) -> int:
    """How many Sink-KV slots an attention layer of a model with this ``sink`` has."""
    return n_sink if sink in SLOT_SINKS else 0


OBS_TYPES = ("discrete", "image")
VISUAL_ENCODERS = ("cnn", "features")
FEATURE_STEMS = ("strided", "patch")  # the frozen image encoder's first layers (icrl_ros.models.encoders)
GRID_ENCODINGS = ("cell", "xy")


def check_choice(name: str, value: object, allowed: tuple) -> None:
    if value not in allowed:
        raise ValueError(f"{name}: {value!r} is not one of {list(allowed)}")


def check_positive(name: str, value: float, allow_zero: bool = False) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{name}: must be a number, got {value!r}")
    if value < 0 or (value == 0 and not allow_zero):
        bound = ">= 0" if allow_zero else "> 0"
        raise ValueError(f"{name}: must be {bound}, got {value!r}")


def from_known_fields(cls, d: dict, section: str, hidden: tuple[str, ...] = ()):
    """``cls(**d)`` for a dataclass, refusing unknown fields by name with the allowed ones (``hidden``:
    fields the message leaves out)."""
    known = {f.name for f in fields(cls)}
    unknown = set(d) - known
    if unknown:
        raise ValueError(f"{section}: unknown fields {sorted(unknown)}; allowed: {sorted(known - set(hidden))}")
    return cls(**d)


@dataclass
class ModelArgs:
    """Shape and options of an in-context policy (encoder -> causal core -> heads)."""

    n_obs: int
    """Number of discrete observations (grid cells)."""
    n_actions: int
    """Number of discrete actions."""
    max_episode_steps: int
    """Size of the learnable within-episode position table."""
    kind: str = "relic"
    """The family (:mod:`icrl_ros.families`): ``relic`` (full causal context, these arguments as they
    are), ``memo`` (summary tokens) or ``hcam`` (local window attention + hierarchical chunk memory),
    each with its own subclass of these arguments."""
    n_goals: int = 0
    """Number of goal categories fed to the encoder (0 = no goal input)."""
    grid_size: int = 0
    """Grid worlds: side of the square grid; adds (x, y) coordinate features to the cell
    embedding so navigation to a remembered cell generalises to held-out goals."""
    grid_encoding: str = "cell"
    """Grid worlds: ``cell`` (one learnt embedding per cell, plus the coordinate features) or
    ``xy`` (learnt row + column embeddings, plus the coordinate features; no per-cell table,
    so a cell never rewarded in training still reads as its row and column). Without a
    ``grid_size`` (not a square grid) both mean the per-cell table."""
    last_obs: bool = False
    """Grid worlds: also embed ``last_obs``, the cell the previous step arrived in before any
    episode reset (the env's final observation). It differs from ``obs`` only on the first
    token after an episode ends; without it a goal that ends the episode on arrival (the
    Dark-Key-To-Door door) is never observed, only inferable from the token before plus the
    action taken."""
    obs_type: str = "discrete"
    """``discrete`` (a cell index ``obs``) or ``image`` (``rgb`` uint8 HxWx3 + ``odom`` x, y, yaw)."""
    image_size: int = 64
    """Square RGB input size for ``obs_type: image``."""
    visual_encoder: str = "cnn"
    """Image encoder: ``cnn`` (small CNN trained with the policy) or ``features`` (a CNN
    pretrained on simulator labels by ``training/house_encoder.py`` and frozen; load it with
    ``pretrained_encoder``; training caches its features per frame)."""
    feature_dim: int = 128
    """``visual_encoder: features``: size of the frozen encoder's feature vector."""
    feature_pooled: int = 0
    """``visual_encoder: features``: how many of those features the frozen encoder reads as the maximum of a
    per-cell head over its conv map (``training/house_encoder.py --pooled``; 0 for the shipped encoder)."""
    feature_stem: str = "strided"
    """``visual_encoder: features``: the frozen encoder's first layers (``training/house_encoder.py --stem``):
    ``strided`` (the shipped encoder's) or ``patch`` (image_size / 32 pixel patches, for 96 / 128 px cameras)."""
    odom_fourier: int = 0
    """Fourier scales (1, 2, 4, ... m) of odometry x and y added to the odometry input (0: none)."""
    use_reward: bool = True
    """Feed the previous reward to the encoder (False for robots, which get no reward)."""
    pretrained_encoder: str = ""
    """Optional local weights file (torch state dict) for the image encoder; frozen when given."""
    d_model: int = 64
    n_layers: int = 2
    n_heads: int = 8
    d_mlp: int = 256
    sink: str = "k0v0"
    """Attention sink: kv, kv0 (key learnt, value 0), k0v0 (softmax-one), none, token."""
    n_sink: int = 1
    """Number of sink key/value slots per layer (kv / kv0 / k0v0)."""
    iea: bool = True
    """Inter-episode attention; False masks attention to the current episode."""
    depth_dropout: float = 0.1
    """Probability of skipping a whole layer per sample during training."""
    rope_base: float = 10000.0
    sections: dict[str, Any] = field(default_factory=dict, repr=False)
    """Nested config sections of extensions (:func:`register_section`) by name; a section not given
    reads as its defaults. Written and read as top-level keys (``house: {...}``)."""

    def __post_init__(self) -> None:
        self.sections = _build_sections(self.sections)
        self.validate()

    def __getattr__(self, name: str) -> Any:
        # only reached when normal lookup fails: a registered section, its (frozen) defaults when not given
        sections = self.__dict__.get("sections")
        cls = _SECTIONS.get(name)
        if sections is None or cls is None:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        return sections[name] if name in sections else _default_section(name)

    def replace_section(self, name: str, **changes) -> ModelArgs:
        """A copy with fields of section ``name`` changed (``args.replace_section("house", route_memory=True)``)."""
        return replace(self, sections={**self.sections, name: replace(getattr(self, name), **changes)})

    def validate(self) -> None:
        cls = _config_class(self.kind)
        if type(self) is not cls:
            raise ValueError(f"model.kind: a {self.kind} model's arguments are {cls.__name__}, not "
                             f"{type(self).__name__} (build them with ModelArgs.from_dict)")
        check_choice("model.sink", self.sink, SINKS)
        for name in ("n_obs", "n_actions", "max_episode_steps", "d_model", "n_layers", "n_heads", "d_mlp", "n_sink"):
            check_positive(f"model.{name}", getattr(self, name))
        check_positive("model.n_goals", self.n_goals, allow_zero=True)
        check_positive("model.grid_size", self.grid_size, allow_zero=True)
        if self.d_model % self.n_heads or (self.d_model // self.n_heads) % 2:
            raise ValueError(
                f"model.d_model: {self.d_model} must split into n_heads={self.n_heads} heads of even size"
            )
        check_choice("model.obs_type", self.obs_type, OBS_TYPES)
        check_choice("model.visual_encoder", self.visual_encoder, VISUAL_ENCODERS)
        check_choice("model.grid_encoding", self.grid_encoding, GRID_ENCODINGS)
        check_positive("model.image_size", self.image_size)
        check_positive("model.feature_dim", self.feature_dim)
        if not 0 <= self.feature_pooled < self.feature_dim:
            raise ValueError(f"model.feature_pooled: must be in [0, feature_dim={self.feature_dim}), "
                             f"got {self.feature_pooled}")
        check_choice("model.feature_stem", self.feature_stem, FEATURE_STEMS)
        if self.feature_stem == "patch" and self.image_size % 32:
            raise ValueError(f"model.feature_stem: patch needs model.image_size a multiple of 32, got {self.image_size}")
        check_positive("model.odom_fourier", self.odom_fourier, allow_zero=True)
        if self.last_obs and self.obs_type != "discrete":
            raise ValueError("model.last_obs: only for discrete (grid-world) observations")
        if self.obs_type == "image" and self.image_size < 16:
            raise ValueError(f"model.image_size: must be >= 16 for the CNN, got {self.image_size}")
        if not 0.0 <= self.depth_dropout < 1.0:
            raise ValueError(f"model.depth_dropout: must be in [0, 1), got {self.depth_dropout}")
        for name, section in self.sections.items():
            section.validate(self)

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    def describe(self) -> str:
        """The family's options in a few words (``bundle_tool.py inspect``)."""
        return f"sink {self.sink}, iea {self.iea}"

    def memory_fields(self) -> dict:
        """What this family's memory needs from the model beyond the KV dims (:func:`icrl_ros.memory.create_memory`)."""
        return {}

    def to_dict(self) -> dict:
        d = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "sections"}
        for name, section in self.sections.items():
            d[name] = asdict(section)
        return d

    @classmethod
    def from_dict(cls, d: dict) -> ModelArgs:
        """The arguments of ``d``'s family (``d["kind"]``, default relic), refusing unknown fields by name.
        Fields of a registered section may also come flat (checkpoints written before sections
        existed): they move into their section."""
        d = normalise_model_dict(d)
        target = _config_class(d.get("kind", "relic"))
        sections = {name: d.pop(name) for name in list(d) if name in _section_classes()}
        _drop_other_families_defaults(d, target)
        if "sections" in d:
            raise ValueError("model: unknown field 'sections' (write each section as its own key)")
        return from_known_fields(target, {**d, "sections": sections}, "model", hidden=("sections",))


def _drop_other_families_defaults(d: dict, target: type) -> None:
    """Drop, in place, fields of another family's arguments left at their defaults (checkpoints written when
    every family's fields sat in one class carry them all); a changed one stays, to be refused by name."""
    from icrl_ros.families import FAMILIES

    own = {f.name for f in fields(target)}
    for fam in FAMILIES.values():
        if not fam.cached_step:
            continue
        for f in fields(fam.config_class()):
            if f.name in d and f.name not in own:
                default = f.default if f.default is not MISSING else f.default_factory()
                if d[f.name] == default or (isinstance(default, tuple) and list(default) == d[f.name]):
                    del d[f.name]
                else:
                    raise ValueError(f"model.{f.name}: a field of {fam.kind} models, not of a {d.get('kind', 'relic')} "
                                     f"model; drop it or set model.kind: {fam.kind}")


def normalise_model_dict(d: dict) -> dict:
    """A copy of a ``model`` dict with registered sections' flat fields moved into their sections
    (``object_memory: true`` -> ``house: {object_memory: true}``); a field both flat and nested is refused."""
    d = dict(d)
    for name, cls in _section_classes().items():
        flat = {f.name for f in fields(cls)} & set(d)
        if not flat:
            continue
        nested = dict(d.get(name) or {})
        both = flat & set(nested)
        if both:
            raise ValueError(f"model: {sorted(both)} given both flat and in model.{name}; give them once, in "
                             f"model.{name}")
        nested.update({k: d.pop(k) for k in sorted(flat)})
        d[name] = nested
    return d


_SECTIONS: Registry[type] = Registry("config section", ("icrl_ros.house.config",))  # built-in: the house's


def register_section(name: str, cls: type) -> type:
    """Add config section ``name`` (a dataclass with ``validate(model_args)``) to every model's arguments."""
    if name in {f.name for f in fields(ModelArgs)}:
        raise ValueError(f"config section {name!r}: a field of ModelArgs has that name")
    return _SECTIONS.add(name, cls)


def unregister_section(name: str) -> None:
    """Remove a registered section (tests that register their own)."""
    _SECTIONS.remove(name)


def _section_classes() -> dict[str, type]:
    return _SECTIONS.entries()


def _default_section(name: str):
    cls = _SECTIONS.get(name)
    if cls not in _DEFAULTS:  # by class: a name registered again with another class gets its own defaults
        _DEFAULTS[cls] = cls()
    return _DEFAULTS[cls]


_DEFAULTS: dict[type, Any] = {}


def _build_sections(given: dict) -> dict:
    """Sections by name, built from dicts where given so; a section at its defaults is left out (it reads
    the same), so equal arguments compare and save equal whether or not it was written."""
    classes = _section_classes()
    out = {}
    for name, value in dict(given or {}).items():
        if name not in classes:
            raise ValueError(f"model: unknown section {name!r}; known: {sorted(classes)}")
        value = from_known_fields(classes[name], value, f"model.{name}") if isinstance(value, dict) else value
        if not isinstance(value, classes[name]):
            raise ValueError(f"model.{name}: expected a mapping of fields, got {value!r}")
        if value != _default_section(name):
            out[name] = value
    return out


def _config_class(kind: str) -> type:
    """The arguments class of ``kind``, one of the families whose arguments are ModelArgs (RA-DT keeps its own)."""
    from icrl_ros.families import FAMILIES

    kinds = {k for k, f in FAMILIES.items() if f.cached_step}
    if kind not in kinds:
        raise ValueError(f"model.kind: {kind!r} is not one of {sorted(kinds)}")
    return FAMILIES[kind].config_class()
