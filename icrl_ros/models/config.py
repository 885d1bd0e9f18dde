"""Model arguments: one typed dataclass, validated loudly, saved inside every checkpoint."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields

SINKS = ("kv", "kv0", "k0v0", "none", "token")
KINDS = ("relic", "memo", "hcam")
MEMO_VARIANTS = ("memo", "rmt")
OBS_TYPES = ("discrete", "image")
VISUAL_ENCODERS = ("cnn", "features")
GRID_ENCODINGS = ("cell", "xy")
HCAM_WEIGHTS = ("softmax", "continuous")


def check_choice(name: str, value: object, allowed: tuple) -> None:
    if value not in allowed:
        raise ValueError(f"{name}: {value!r} is not one of {list(allowed)}")


def check_positive(name: str, value: float, allow_zero: bool = False) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{name}: must be a number, got {value!r}")
    if value < 0 or (value == 0 and not allow_zero):
        bound = ">= 0" if allow_zero else "> 0"
        raise ValueError(f"{name}: must be {bound}, got {value!r}")


def from_known_fields(cls, d: dict, section: str):
    """``cls(**d)`` for a dataclass, refusing unknown fields by name with the allowed ones."""
    known = {f.name for f in fields(cls)}
    unknown = set(d) - known
    if unknown:
        raise ValueError(f"{section}: unknown fields {sorted(unknown)}; allowed: {sorted(known)}")
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
    """Sequence model: ``relic`` (full causal context), ``memo`` (summary tokens) or ``hcam``
    (local window attention + hierarchical chunk memory)."""
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
    odom_fourier: int = 0
    """Fourier scales (1, 2, 4, ... m) of odometry x and y added to the odometry input (0: none)."""
    goal_readout: bool = False
    """``visual_encoder: features``: also feed the frozen encoder's own label heads for the goal
    category (in view, bearing bins, distance bins) and the free space ahead, read from
    ``pretrained_encoder``'s ``heads.*`` weights: "is my goal in view, where, how far" is then an
    input rather than a product of the goal and 128 features the policy must learn."""
    object_readout: bool = False
    """``visual_encoder: features``: also feed, for every category, the heads' P(in view) and the
    house-frame position it implies (odometry + expected bearing and distance). A token then
    says "a cone was about there", whatever the goal of its episode was, so a later episode can
    find a remembered object by attention (the product's memory) instead of search."""
    object_memory: bool = False
    """ReLIC with the frozen heads: head 0 of layer 0 becomes a fixed "where did I see my goal"
    lookup over the KV cache (:mod:`icrl_ros.models.object_memory`); the block adds the goal's
    remembered offset in the robot frame. The token's last few entries carry what it reads."""
    place_memory: bool = False
    """With ``object_memory``: heads 1 and 2 of layer 0 become fixed lookups of how much floor
    around the robot and 2 m ahead of it the camera already looked at, and where that floor
    lies (:mod:`icrl_ros.models.place_memory`); the block adds them in the robot frame."""
    route_memory: bool = False
    """With ``object_memory``: the runtime keeps a bounded map of the floor the robot stood on and
    hands the policy, as the ``route`` input, the way back over it to where the goal was seen
    (:mod:`icrl_ros.memory.route`); needs ``pose_frame: house`` odometry to mean anything."""
    route_skill: int = 0
    """``route_memory``: > 0 adds a route-following head, an MLP with this many hidden units from the ``route``
    input (and the ``scan`` with ``scan_input``) to action logits that add to the actor's, gated by the route's
    "found" entry: where the route memory has no way to the goal the policy acts exactly as without it. 0: none."""
    frontier_memory: bool = False
    """With ``object_memory``: the step encoder also writes the frozen heads' floor distance per column band into
    the token, the runtime keeps a bounded map of the floor the camera looked at and hands the policy, as the
    ``frontier`` input, the way to the nearest edge of it (:mod:`icrl_ros.house.frontier`): search without
    memory of the house walks to floor it has not looked at."""
    frontier_skill: int = 0
    """``frontier_memory``: > 0 adds a frontier-following head, an MLP with this many hidden units from the
    ``frontier`` input (and the ``scan`` with ``scan_input``) to action logits that add to the actor's, gated by
    the frontier's "found" entry and, with ``route_memory``, off where the route has a way to the goal. 0: none."""
    scan_input: bool = False
    """With ``route_skill``: the head also reads the ``scan`` input, which of the 12 headings around the robot a
    forward step can take (:data:`~icrl_ros.geometry.SCAN_BINS`; the env's ``scan`` option, a laser scan on a
    robot): following a route round walls needs what is free nearby."""
    stop_gate: float = 0.0
    """House models with ``object_memory``: when acting, the stop may not be chosen while the frozen
    heads give P(goal in view) below this (0: no gate; :mod:`icrl_ros.models.stop_rule`)."""
    stop_sure: float = 0.0
    """Like ``stop_gate``: when acting, stop as soon as the heads give P(goal in view) at least this
    with an expected goal distance within ``stop_sure_m`` (0: never forced)."""
    stop_sure_m: float = 0.6
    """``stop_sure``: the heads' expected distance to the goal, in metres, within which it stops."""
    memory_aux: bool = False
    """A training-only head that predicts, at every step, whether the goal category was seen
    earlier in the trial and where it is relative to the robot (``training/imitate.py
    --aux-coef``); deployment ignores it."""
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
    l_seg: int = 64
    """Memo: steps per segment (randomised in [0.8, 1.2] x l_seg during training)."""
    l_sum: int = 8
    """Memo: summary tokens written at each segment end."""
    memo_variant: str = "memo"
    """Memo: ``memo`` accumulates every summary; ``rmt`` keeps only the newest set."""
    seg_jitter: float = 0.2
    """Memo: training segment lengths are drawn in [1 - j, 1 + j] x l_seg."""
    hcam_chunk: int = 16
    """HCAM: steps per memory chunk (C); also the local attention window (each token attends
    directly to the C previous steps, older ones only through the chunk memory)."""
    hcam_top_k: int = 4
    """HCAM: chunks read in detail per query (top-k of the summary relevance)."""
    hcam_weights: str = "softmax"
    """HCAM: the selected chunks' weights. ``softmax``: a softmax over the k selected relevances
    (the paper's). ``continuous``: each selected chunk weighs exp(R_i) - exp(R_(k+1)), normalised,
    where R_(k+1) is the best relevance left out; a chunk enters or leaves the top k at weight 0,
    so the policy is continuous in the weights (with ``softmax`` a chunk swapping in at the k-th
    place brings its whole weight at once). The same as ``softmax`` while at most k chunks exist."""
    hcam_layers: tuple[int, ...] = ()
    """HCAM: indices of the layers that get a chunk-memory block; empty = every layer."""
    hcam_recon_weight: float = 0.3
    """HCAM: weight of the input-reconstruction auxiliary loss (paper: 0.3 or 1)."""
    hcam_episode_rope: bool = False
    """HCAM: the chunk read knows which episode each stored step came from: RoPE on episode indices
    (as the local attention's) rotates the read's queries by the current episode and the stored steps'
    keys by theirs, and the relevance query and each chunk's summary key likewise (a chunk by its last
    step's episode). Without it a chunk's content cannot say whether it is from this episode or an
    earlier one (on Dark-Key-To-Door: whether the key was picked up in this episode). The memory then
    stores each step's episode index beside its inputs (``chunk_episode``). Measured there: no better
    than without it, after imitation (0.083 of the oracle) or a PPO round (0.223)."""

    def __post_init__(self) -> None:
        if isinstance(self.hcam_layers, list):  # from YAML / JSON
            self.hcam_layers = tuple(self.hcam_layers)
        self.validate()

    def validate(self) -> None:
        check_choice("model.kind", self.kind, KINDS)
        check_choice("model.sink", self.sink, SINKS)
        for name in ("n_obs", "n_actions", "max_episode_steps", "d_model", "n_layers", "n_heads", "d_mlp", "n_sink"):
            check_positive(f"model.{name}", getattr(self, name))
        check_positive("model.n_goals", self.n_goals, allow_zero=True)
        check_positive("model.grid_size", self.grid_size, allow_zero=True)
        if self.d_model % self.n_heads or (self.d_model // self.n_heads) % 2:
            raise ValueError(
                f"model.d_model: {self.d_model} must split into n_heads={self.n_heads} heads of even size"
            )
        check_choice("model.memo_variant", self.memo_variant, MEMO_VARIANTS)
        check_choice("model.obs_type", self.obs_type, OBS_TYPES)
        check_choice("model.visual_encoder", self.visual_encoder, VISUAL_ENCODERS)
        check_choice("model.grid_encoding", self.grid_encoding, GRID_ENCODINGS)
        check_positive("model.image_size", self.image_size)
        check_positive("model.feature_dim", self.feature_dim)
        if not 0 <= self.feature_pooled < self.feature_dim:
            raise ValueError(f"model.feature_pooled: must be in [0, feature_dim={self.feature_dim}), "
                             f"got {self.feature_pooled}")
        check_positive("model.odom_fourier", self.odom_fourier, allow_zero=True)
        if self.last_obs and self.obs_type != "discrete":
            raise ValueError("model.last_obs: only for discrete (grid-world) observations")
        if self.obs_type == "image" and self.image_size < 16:
            raise ValueError(f"model.image_size: must be >= 16 for the CNN, got {self.image_size}")
        check_positive("model.l_seg", self.l_seg)
        check_positive("model.l_sum", self.l_sum)
        if not 0.0 <= self.seg_jitter < 1.0:
            raise ValueError(f"model.seg_jitter: must be in [0, 1), got {self.seg_jitter}")
        if self.kind == "memo" and not self.iea:
            raise ValueError("model.iea: memo attends across episodes through its summaries; iea must be true")
        if self.kind == "memo" and self.sink == "token":
            raise ValueError(f"model.sink: memo supports {[s for s in SINKS if s != 'token']}, got 'token'")
        check_positive("model.hcam_chunk", self.hcam_chunk)
        check_positive("model.hcam_top_k", self.hcam_top_k)
        check_positive("model.hcam_recon_weight", self.hcam_recon_weight, allow_zero=True)
        if self.hcam_weights not in HCAM_WEIGHTS:
            raise ValueError(f"model.hcam_weights: {self.hcam_weights!r} is not one of {list(HCAM_WEIGHTS)}")
        if not isinstance(self.hcam_layers, tuple) or len(set(self.hcam_layers)) != len(self.hcam_layers) or any(
                not isinstance(i, int) or not 0 <= i < self.n_layers for i in self.hcam_layers):
            raise ValueError(f"model.hcam_layers: {self.hcam_layers!r} must be distinct layer indices in "
                             f"[0, {self.n_layers}) (empty = every layer)")
        if self.kind == "hcam" and not self.iea:
            raise ValueError("model.iea: hcam's chunk memory spans episodes; iea must be true")
        if self.kind == "hcam" and self.sink == "token":
            raise ValueError(f"model.sink: hcam supports {[s for s in SINKS if s != 'token']}, got 'token'")
        if self.object_memory and (self.kind not in ("relic", "memo") or self.sink not in ("kv", "kv0", "k0v0")):
            raise ValueError(f"model.object_memory: only for kind relic or memo with a sink slot (kv, kv0, k0v0), "
                             f"got kind {self.kind!r}, sink {self.sink!r}")
        if self.place_memory and not self.object_memory:
            raise ValueError("model.place_memory: needs model.object_memory (it reads the pose entries that writes)")
        if self.route_memory and not self.object_memory:
            raise ValueError("model.route_memory: needs model.object_memory (it reads the sightings that writes)")
        if self.route_skill < 0 or (self.route_skill and not self.route_memory):
            raise ValueError(f"model.route_skill: a hidden width >= 0 for the route-following head, used with "
                             f"model.route_memory, got {self.route_skill} (route_memory {self.route_memory})")
        if self.frontier_memory and not self.object_memory:
            raise ValueError("model.frontier_memory: needs model.object_memory (it reads the pose entries that writes)")
        if self.frontier_skill < 0 or (self.frontier_skill and not self.frontier_memory):
            raise ValueError(f"model.frontier_skill: a hidden width >= 0 for the frontier-following head, used with "
                             f"model.frontier_memory, got {self.frontier_skill} (frontier_memory {self.frontier_memory})")
        if self.scan_input and not (self.route_skill or self.frontier_skill):
            raise ValueError("model.scan_input: the scan is read by the route- or frontier-following head; set "
                             "model.route_skill or model.frontier_skill > 0")
        if self.place_memory and self.n_heads < 4:
            raise ValueError(f"model.place_memory: heads 0-2 of layer 0 become fixed; n_heads must be at least 4 "
                             f"(one learnt head left), got {self.n_heads}")
        for name in ("stop_gate", "stop_sure"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"model.{name}: a probability in [0, 1] (0 = off), got {getattr(self, name)}")
        check_positive("model.stop_sure_m", self.stop_sure_m)
        if (self.stop_gate or self.stop_sure) and not self.object_memory:
            raise ValueError("model.stop_gate / stop_sure: need model.object_memory (the rule reads the entries it "
                             "writes into each token)")
        if self.memory_aux and self.kind != "relic":
            raise ValueError(f"model.memory_aux: only for kind relic, got {self.kind!r}")
        if not 0.0 <= self.depth_dropout < 1.0:
            raise ValueError(f"model.depth_dropout: must be in [0, 1), got {self.depth_dropout}")

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    @property
    def memory_layers(self) -> tuple[int, ...]:
        """HCAM: the layers with a chunk-memory block, in order."""
        return tuple(sorted(self.hcam_layers)) or tuple(range(self.n_layers))

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> ModelArgs:
        return from_known_fields(cls, d, "model")
