"""HCAM's model arguments: :class:`~icrl_ros.models.config.ModelArgs` plus its chunk memory."""

from __future__ import annotations

from dataclasses import dataclass

from icrl_ros.models.config import ModelArgs, check_positive

HCAM_WEIGHTS = ("softmax", "continuous")


@dataclass
class HCAMArgs(ModelArgs):
    """An HCAM model: local attention over the last ``hcam_chunk`` steps, older steps read through a
    store of chunks (the top ``hcam_top_k`` by summary relevance, in detail)."""

    kind: str = "hcam"
    hcam_chunk: int = 16
    """steps per memory chunk (C); also the local attention window (each token attends
    directly to the C previous steps, older ones only through the chunk memory)."""
    hcam_top_k: int = 4
    """chunks read in detail per query (top-k of the summary relevance)."""
    hcam_weights: str = "softmax"
    """the selected chunks' weights. ``softmax``: a softmax over the k selected relevances
    (the paper's). ``continuous``: each selected chunk weighs exp(R_i) - exp(R_(k+1)), normalised,
    where R_(k+1) is the best relevance left out; a chunk enters or leaves the top k at weight 0,
    so the policy is continuous in the weights (with ``softmax`` a chunk swapping in at the k-th
    place brings its whole weight at once). The same as ``softmax`` while at most k chunks exist."""
    hcam_layers: tuple[int, ...] = ()
    """indices of the layers that get a chunk-memory block; empty = every layer."""
    hcam_recon_weight: float = 0.3
    """weight of the input-reconstruction auxiliary loss (paper: 0.3 or 1)."""
    hcam_episode_rope: bool = False
    """the chunk read knows which episode each stored step came from: RoPE on episode indices
    (as the local attention's) rotates the read's queries by the current episode and the stored steps'
    keys by theirs, and the relevance query and each chunk's summary key likewise (a chunk by its last
    step's episode). Without it a chunk's content cannot say whether it is from this episode or an
    earlier one (on Dark-Key-To-Door: whether the key was picked up in this episode). The memory then
    stores each step's episode index beside its inputs (``chunk_episode``). Measured there: no better
    than without it, after imitation (0.083 of the oracle) or a PPO round (0.223)."""


    def __post_init__(self) -> None:
        if isinstance(self.hcam_layers, list):  # from YAML / JSON
            self.hcam_layers = tuple(self.hcam_layers)
        super().__post_init__()

    def validate(self) -> None:
        super().validate()
        check_positive("model.hcam_chunk", self.hcam_chunk)
        check_positive("model.hcam_top_k", self.hcam_top_k)
        check_positive("model.hcam_recon_weight", self.hcam_recon_weight, allow_zero=True)
        if self.hcam_weights not in HCAM_WEIGHTS:
            raise ValueError(f"model.hcam_weights: {self.hcam_weights!r} is not one of {list(HCAM_WEIGHTS)}")
        if not isinstance(self.hcam_layers, tuple) or len(set(self.hcam_layers)) != len(self.hcam_layers) or any(
                not isinstance(i, int) or not 0 <= i < self.n_layers for i in self.hcam_layers):
            raise ValueError(f"model.hcam_layers: {self.hcam_layers!r} must be distinct layer indices in "
                             f"[0, {self.n_layers}) (empty = every layer)")
        if not self.iea:
            raise ValueError("model.iea: hcam's chunk memory spans episodes; iea must be true")
        if self.sink == "token":
            raise ValueError("model.sink: hcam supports ['kv', 'kv0', 'k0v0', 'none'], got 'token'")

    @property
    def memory_layers(self) -> tuple[int, ...]:
        """The layers with a chunk-memory block, in order."""
        return tuple(sorted(self.hcam_layers)) or tuple(range(self.n_layers))

    def describe(self) -> str:
        return (f"{super().describe()}, chunks of {self.hcam_chunk}, top {self.hcam_top_k} ({self.hcam_weights}), "
                f"memory layers {list(self.memory_layers)}")

    def memory_fields(self) -> dict:
        return dict(n_mem_layers=len(self.memory_layers), chunk=self.hcam_chunk, top_k=self.hcam_top_k,
                    episode_rope=bool(self.hcam_episode_rope))
