"""Retrieval-Augmented Decision Transformer (RA-DT, Schmied et al. 2024) for grid worlds and images.

A Decision Transformer over the recent context of the *current episode* only (C steps),
with a cross-attention layer after every self-attention layer that reads k retrieved
sub-trajectories (2C steps each: the C steps of the key and their continuation):

    current window  (B, C)      one token per step: s_t + a_{t-1} + r_{t-1} + RTG_t + step t
    retrieved       (B, k, 2C)  one token per step: s_j + a_j + r_j + RTG_j + step j
                                 (separate embedding layers, as the paper), plus one learnt
                                 "null" slot so an empty memory still gives every row a key
    block x n_layers:  x += SelfAttn(x, causal, valid)  x += CrossAttn(x, retrieved)  x += MLP(x)
    head:              action logits (B, C, A); the last position acts.

Windows are left-padded (``valid`` False), so the acting position is always the last one.

**Retrieval keys** (``trajectory_keys``): RA-DT embeds sub-trajectories with a frozen
pretrained model (a DT of the domain, or BERT behind a FrozenHopfield random projection)
and mean-pools the *state* tokens (their best aggregation, App. E.4). No hub weights are
available here, so the key is the FrozenHopfield projection alone: a fixed Gaussian matrix
P (n_obs, key_dim) from ``key_seed`` (orthonormal rows when key_dim >= n_obs, see
:func:`key_projection`), applied to one-hot states and mean-pooled, i.e. a random rotation
of the sub-trajectory's state-visitation histogram (cosine of two keys = cosine of the
histograms). It needs no pretraining, never changes while
the DT trains (so the index built before training stays valid; keys from the DT's own
encoder would go stale and need re-indexing), and is deterministic (P is saved as a
buffer in every checkpoint).

**Image observations** (``obs_type: image``, the house task: rgb + odometry + goal): a step's
observation is first turned into a *feature vector* by :class:`ObsFeatures` (the ReLIC
:class:`~icrl_ros.models.encoders.ImageEncoder` CNN + odometry + goal embedding, D values,
followed by the step's raw key inputs), and the DT's ``obs`` inputs are those vectors
((B, C, F) and (B, k, 2C, F), F = D + key inputs). One CNN serves the window and the
retrieved steps, so a deployed memory stores each step's features once (the weights never
change at inference) instead of its image, and the policy graph never re-encodes a
retrieved image. The key inputs are fixed, not learnt: the image average-pooled to
``key_pool`` x ``key_pool`` x 3 and centred (pixel / 255 - 0.5), beside (x, y) / ``key_odom_scale``,
cos(yaw), sin(yaw) of the odometry from the episode start. The key of a sub-trajectory is the
mean of its steps' key inputs times the fixed random projection P (key inputs, key_dim),
saved like the grid one: "where was I and what did it look like", with no pretrained weights.
``use_reward: false`` (robots get no reward) drops the reward and return-to-go embeddings;
the re-ranking's utility then comes from the episode returns a runner is told
(:meth:`~icrl_ros.families.radt.runner.RADTRunner.end_episode`), else relevance alone ranks.
``use_rtg: false`` keeps the rewards and drops only the return-to-go (no target return).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from icrl_ros.families.radt.memory import feature_keys, projected_keys
from icrl_ros.models.attention import MASK_NEG, RMSNorm
from icrl_ros.models.config import check_positive, from_known_fields
from icrl_ros.models.encoders import ImageEncoder

KIND = "radt"
WINDOW_KEYS = ("obs", "prev_action", "prev_reward", "rtg", "episode_step", "valid")
"""Current-window inputs, each (B, C): the step's cell (image models: its features, (B, C, F)),
previous action (``n_actions`` = none) and reward, return-to-go, within-episode step, and
validity (False = left padding)."""
RETRIEVED_KEYS = ("obs", "action", "reward", "rtg", "episode_step", "valid")
"""Retrieved inputs, each (B, k, 2C) (image ``obs``: (B, k, 2C, F))."""
REWARD_KEYS = ("prev_reward", "reward", "rtg")
"""Inputs a ``use_reward: false`` model does not read (``use_rtg: false``: ``rtg`` only; :meth:`RADTArgs.reads`)."""
OBS_TYPES = ("grid", "image")
OBS_EMBEDS = ("table", "xy")


@dataclass
class RADTArgs:
    """Shape and options of an RA-DT policy (saved in its checkpoints)."""

    n_obs: int
    """Number of discrete observations (grid cells; unused by image models)."""
    n_actions: int
    max_episode_steps: int
    """Size of the within-episode step table."""
    grid_size: int = 0
    """Side of the square grid: adds (x, y) features to the cell embedding (0 = none)."""
    obs_embed: str = "table"
    """Grid models: ``table`` (one learnt vector per cell) or ``xy`` (a vector per row plus one per
    column: a cell is known only by its coordinates, so what is learnt of training goals' cells
    carries over to the cells between them, and per-cell answers cannot be memorised)."""
    obs_type: str = "grid"
    """``grid`` (a cell index) or ``image`` (rgb + odometry + goal, the house task)."""
    image_size: int = 64
    """Image models: side of the square uint8 RGB input."""
    n_goals: int = 0
    """Image models: goal categories (an embedding added to every step's features)."""
    use_reward: bool = True
    """Embed rewards and returns-to-go (False: the robot gets no reward; RTG conditioning off)."""
    use_rtg: bool = True
    """With ``use_reward``: embed the return-to-go too (False: rewards only, no target return to
    condition on, for data whose returns say where the goal was rather than how good the play was)."""
    key_pool: int = 4
    """Image models: the retrieval key reads the image average-pooled to key_pool x key_pool."""
    key_odom_scale: float = 5.0
    """Image models: metres that count as 1 in the key's odometry (x, y)."""
    kind: str = KIND
    """Always ``radt`` (lets one checkpoint loader tell model families apart)."""
    context: int = 20
    """C: steps of the current episode in the window; keys cover C steps, values 2C (RA-DT
    uses 50; 20 covers Darkroom's longest shortest path of 18 steps at a sixth of the cost)."""
    top_k: int = 1
    """k: retrieved sub-trajectories per query (RA-DT: 1 on grid worlds)."""
    d_model: int = 64
    n_layers: int = 3
    n_heads: int = 4
    d_mlp: int = 256
    dropout: float = 0.1
    """Residual dropout (attention weights are not dropped: that doubles the CPU cost)."""
    return_scale: float = 100.0
    """Returns and returns-to-go are divided by this before their linear embedding."""
    key_dim: int = 128
    """Size of the retrieval keys (the random projection's output); >= n_obs makes the
    projection orthogonal, so key cosines equal state-histogram cosines."""
    key_seed: int = 0
    """Seed of the fixed random projection P."""

    def __post_init__(self) -> None:
        if self.kind != KIND:
            raise ValueError(f"model.kind: RADTArgs is for kind {KIND!r}, got {self.kind!r}")
        for name in ("n_obs", "n_actions", "max_episode_steps", "context", "top_k", "d_model", "n_layers",
                     "n_heads", "d_mlp", "key_dim", "return_scale"):
            check_positive(f"model.{name}", getattr(self, name))
        check_positive("model.grid_size", self.grid_size, allow_zero=True)
        check_positive("model.n_goals", self.n_goals, allow_zero=True)
        if self.obs_embed not in OBS_EMBEDS:
            raise ValueError(f"model.obs_embed: {self.obs_embed!r} is not one of {list(OBS_EMBEDS)}")
        if self.obs_embed == "xy" and (self.obs_type != "grid" or not self.grid_size):
            raise ValueError("model.obs_embed: xy embeds a grid cell's row and column; it needs obs_type grid and a "
                             "grid_size (the env gives it)")
        if self.obs_type not in OBS_TYPES:
            raise ValueError(f"model.obs_type: {self.obs_type!r} is not one of {list(OBS_TYPES)}")
        if self.obs_type == "image":
            for name in ("image_size", "key_pool", "key_odom_scale"):
                check_positive(f"model.{name}", getattr(self, name))
            if self.image_size % self.key_pool:
                raise ValueError(f"model.key_pool: {self.key_pool} does not divide image_size={self.image_size}")
        elif self.n_goals:
            raise ValueError(f"model.n_goals: grid RA-DT models take no goal, got {self.n_goals}")
        if self.d_model % self.n_heads:
            raise ValueError(f"model.d_model: {self.d_model} does not split into n_heads={self.n_heads} heads")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"model.dropout: must be in [0, 1), got {self.dropout}")

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    def reads(self, name: str) -> bool:
        """Whether the policy reads this window / retrieved input (``rtg``, ``prev_reward``, ...)."""
        if name == "rtg":
            return self.use_reward and self.use_rtg
        return self.use_reward or name not in REWARD_KEYS

    @property
    def key_inputs(self) -> int:
        """Rows of the key projection: grid cells, or an image step's fixed key inputs."""
        return 3 * self.key_pool ** 2 + 4 if self.obs_type == "image" else self.n_obs

    @property
    def obs_features(self) -> int:
        """F: length of an image step's feature vector (D + key inputs); 0 for grid models."""
        return self.d_model + self.key_inputs if self.obs_type == "image" else 0

    def to_dict(self) -> dict:
        return asdict(self)

    def input_spec(self) -> dict[str, tuple[tuple[int, ...], torch.dtype]]:
        """What a deployed runner reads from each observation (:func:`input_spec`)."""
        return input_spec(self)

    def describe(self) -> str:
        """The family's options in a few words (``bundle_tool.py inspect``)."""
        return (f"window {self.context}, top-{self.top_k} retrieved sub-trajectories of {2 * self.context} steps, "
                f"keys {self.key_dim}")

    @classmethod
    def from_dict(cls, d: dict) -> RADTArgs:
        return from_known_fields(cls, d, "model")


def input_spec(a: RADTArgs) -> dict[str, tuple[tuple[int, ...], torch.dtype]]:
    """What a deployed runner reads from each observation: the cell index, or rgb + odom +
    goal (the window, rewards and returns-to-go are tracked by the runner and its memory)."""
    if a.obs_type == "image":
        return {"rgb": ((a.image_size, a.image_size, 3), torch.uint8), "odom": ((3,), torch.float32),
                "goal": ((), torch.int64)}
    return {"obs": ((), torch.int64)}


def key_projection(n_obs: int, key_dim: int, seed: int) -> Tensor:
    """Fixed random projection of one-hot states (n_obs, key_dim), never trained.

    FrozenHopfield draws P ~ N(0, 1 / key_dim), which distorts cosines by about
    1 / sqrt(key_dim): at 64 dims that noise is as large as the similarity between the
    one-step query of an episode start and the key that begins at the start cell, so the
    re-ranking picked segments at random. With ``key_dim >= n_obs`` P has orthonormal rows
    (a random rotation of the one-hot basis), so cosines of visitation histograms are exact.
    """
    g = torch.Generator().manual_seed(seed)
    p = torch.randn(max(n_obs, key_dim), key_dim, generator=g)
    if key_dim < n_obs:
        return p / key_dim ** 0.5
    q, _ = torch.linalg.qr(p)  # (key_dim, key_dim) orthogonal
    return q[:n_obs].contiguous()


class ObsFeatures(nn.Module):
    """Image models: rgb (..., S, S, 3) uint8, odom (..., 3) float, goal (...) int -> features
    (..., D + key inputs) float32: the learnt embedding (CNN + odometry + goal), then the
    step's fixed key inputs (pooled centred pixels, scaled x / y, cos / sin yaw)."""

    def __init__(self, a: RADTArgs) -> None:
        super().__init__()
        self.args = a
        self.image = ImageEncoder(a.d_model, a.image_size)
        self.odom = nn.Linear(4, a.d_model)  # x, y, cos(yaw), sin(yaw), as the ReLIC StepEncoder
        self.goal = nn.Embedding(a.n_goals, a.d_model) if a.n_goals else None

    def forward(self, rgb: Tensor, odom: Tensor, goal: Tensor) -> Tensor:
        a = self.args
        odom = odom.float()
        yaw = odom[..., 2:3]
        pose = torch.cat([odom[..., :2], yaw.cos(), yaw.sin()], -1)  # (..., 4)
        x = self.image(rgb) + self.odom(pose)
        if self.goal is not None:
            x = x + self.goal(goal)
        lead = rgb.shape[:-3]
        img = rgb.reshape(-1, *rgb.shape[-3:]).permute(0, 3, 1, 2).float() / 255.0 - 0.5  # (N, 3, S, S)
        pooled = F.avg_pool2d(img, a.image_size // a.key_pool).reshape(*lead, -1)  # (..., 3 * key_pool^2)
        key_pose = torch.cat([pose[..., :2] / a.key_odom_scale, pose[..., 2:]], -1)
        return torch.cat([x, pooled, key_pose], -1)


class Attention(nn.Module):
    """Multi-head attention of queries x (B, T, D) over a memory m (B, S, D) with an additive
    mask (B, 1, T, S); self-attention is ``m = x``."""

    def __init__(self, d: int, n_heads: int) -> None:
        super().__init__()
        self.h = n_heads
        self.q, self.kv, self.proj = nn.Linear(d, d, bias=False), nn.Linear(d, 2 * d, bias=False), nn.Linear(d, d)

    def forward(self, x: Tensor, m: Tensor, mask_add: Tensor) -> Tensor:
        B, T, D = x.shape
        S, hd = m.shape[1], D // self.h
        q = self.q(x).view(B, T, self.h, hd).transpose(1, 2)  # (B, H, T, hd)
        k, v = self.kv(m).view(B, S, 2, self.h, hd).permute(2, 0, 3, 1, 4)  # each (B, H, S, hd)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask_add.to(q.dtype))  # (B, H, T, hd)
        return self.proj(y.transpose(1, 2).reshape(B, T, D))


class RADTBlock(nn.Module):
    """Pre-norm self-attention -> cross-attention to the retrieved tokens -> MLP."""

    def __init__(self, a: RADTArgs) -> None:
        super().__init__()
        self.n1, self.n2, self.n3 = RMSNorm(a.d_model), RMSNorm(a.d_model), RMSNorm(a.d_model)
        self.self_attn = Attention(a.d_model, a.n_heads)
        self.cross_attn = Attention(a.d_model, a.n_heads)
        self.mlp = nn.Sequential(nn.Linear(a.d_model, a.d_mlp), nn.GELU(), nn.Linear(a.d_mlp, a.d_model))
        self.drop = nn.Dropout(a.dropout)

    def forward(self, x: Tensor, r: Tensor, self_mask: Tensor, cross_mask: Tensor) -> Tensor:
        h = self.n1(x)
        x = x + self.drop(self.self_attn(h, h, self_mask))
        x = x + self.drop(self.cross_attn(self.n2(x), r, cross_mask))
        return x + self.drop(self.mlp(self.n3(x)))


class TokenEmbedding(nn.Module):
    """Sum of per-field embeddings -> one token per step. ``action_slots`` is n_actions + 1
    for the current window (the extra index = no previous action)."""

    def __init__(self, a: RADTArgs, action_slots: int) -> None:
        super().__init__()
        self.args = a
        self.image = a.obs_type == "image"  # obs = ObsFeatures vectors: their first D values
        self.obs = None if self.image or a.obs_embed == "xy" else nn.Embedding(a.n_obs, a.d_model)
        self.row = nn.Embedding(a.grid_size, a.d_model) if a.obs_embed == "xy" else None
        self.col = nn.Embedding(a.grid_size, a.d_model) if a.obs_embed == "xy" else None
        self.coords = nn.Linear(2, a.d_model) if a.grid_size and not self.image else None
        self.action = nn.Embedding(action_slots, a.d_model)
        self.reward = nn.Linear(1, a.d_model) if a.use_reward else None
        self.rtg = nn.Linear(1, a.d_model) if a.reads("rtg") else None
        self.step = nn.Embedding(a.max_episode_steps, a.d_model)

    def forward(self, obs: Tensor, action: Tensor, reward: Tensor | None, rtg: Tensor | None, step: Tensor) -> Tensor:
        a = self.args
        if self.image:
            x = obs[..., :a.d_model].float()
        else:
            row, col = (obs // a.grid_size, obs % a.grid_size) if a.grid_size else (None, None)
            x = self.obs(obs) if self.obs is not None else self.row(row) + self.col(col)
            if self.coords is not None:
                x = x + self.coords(torch.stack([row, col], -1).float() / max(a.grid_size - 1, 1))
        x = x + self.action(action)
        if self.reward is not None:
            x = x + self.reward(reward.unsqueeze(-1).float())
        if self.rtg is not None:
            x = x + self.rtg(rtg.unsqueeze(-1).float() / a.return_scale)
        return x + self.step(step.clamp(0, a.max_episode_steps - 1))


class RADTPolicy(nn.Module):
    def __init__(self, args: RADTArgs) -> None:
        super().__init__()
        self.args = args
        self.features = ObsFeatures(args) if args.obs_type == "image" else None
        self.embed = TokenEmbedding(args, args.n_actions + 1)
        self.embed_retrieved = TokenEmbedding(args, args.n_actions)
        self.null = nn.Parameter(torch.randn(args.d_model) * 0.02)
        self.blocks = nn.ModuleList(RADTBlock(args) for _ in range(args.n_layers))
        self.norm = RMSNorm(args.d_model)
        self.actor = nn.Linear(args.d_model, args.n_actions)
        self.register_buffer("key_proj", key_projection(args.key_inputs, args.key_dim, args.key_seed))
        self.apply(self._init)

    @staticmethod
    def _init(m: nn.Module) -> None:
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, std=0.02)
            if getattr(m, "bias", None) is not None:
                nn.init.zeros_(m.bias)

    def input_spec(self) -> dict[str, tuple[tuple[int, ...], torch.dtype]]:
        return input_spec(self.args)

    def step_features(self, rgb: Tensor, odom: Tensor, goal: Tensor) -> Tensor:
        """Image models: the ``obs`` the DT reads for these steps, (..., F) float32."""
        return self.features(rgb, odom, goal)

    # -- retrieval keys ---------------------------------------------------------------
    def trajectory_keys(self, obs: np.ndarray, valid: np.ndarray) -> np.ndarray:
        """Keys / queries (N, key_dim) float32 of sub-trajectories obs (N, T) (image: features
        (N, T, F)) with validity (N, T): the mean of the valid steps' projected one-hot states
        (image: projected key inputs), zeros if none."""
        proj = self.key_proj.cpu().numpy()
        if self.args.obs_type == "image":
            return feature_keys(proj, self.args.d_model, obs, valid)
        return projected_keys(proj, obs, valid)

    # -- forward ------------------------------------------------------------------
    def forward(self, window: dict[str, Tensor], retrieved: dict[str, Tensor]) -> Tensor:
        """Action logits (B, C, A) for every window position. ``window``: WINDOW_KEYS each
        (B, C); ``retrieved``: RETRIEVED_KEYS each (B, k, 2C) (k may be 0)."""
        w, r = window, retrieved
        x = self.embed(w["obs"], w["prev_action"], w.get("prev_reward"), w.get("rtg"), w["episode_step"])  # (B, C, D)
        B, C, D = x.shape
        k2c = r["valid"].shape[1] * r["valid"].shape[2]
        flat = {n: t.reshape(B, k2c, *t.shape[3:]) for n, t in r.items()}  # (B, k * 2C[, F])
        mem = self.embed_retrieved(flat["obs"], flat["action"], flat.get("reward"), flat.get("rtg"),
                                   flat["episode_step"])
        mem = torch.cat([self.null.view(1, 1, D).expand(B, 1, D), mem], 1)  # (B, 1 + k * 2C, D)
        mem_valid = F.pad(flat["valid"], (1, 0), value=True)
        pos = torch.arange(C, device=x.device)  # (comparisons, not bool tril / eye: ONNX Runtime has no bool EyeLike)
        self_ok = (pos[None, :] <= pos[:, None])[None] & w["valid"][:, None, :]  # (B, C, C): past, non-padding keys
        self_ok = self_ok | (pos[None, :] == pos[:, None])  # a row always sees itself
        self_mask = torch.where(self_ok, 0.0, MASK_NEG)[:, None]  # (B, 1, C, C)
        cross_mask = torch.where(mem_valid, 0.0, MASK_NEG)[:, None, None, :]  # (B, 1, 1, S)
        for blk in self.blocks:
            x = blk(x, mem, self_mask, cross_mask)
        return self.actor(self.norm(x))


def episode_windows(obs: np.ndarray, action: np.ndarray, reward: np.ndarray, rtg: np.ndarray, end: np.ndarray,
                    context: int, n_actions: int) -> dict[str, np.ndarray]:
    """Left-padded windows (B, C) of WINDOW_KEYS ending at step ``end`` (B,) (inclusive) of
    episodes (B, H): the same inputs in offline training and online evaluation. The token
    of step j carries the action and reward of step j - 1 (none at j = 0)."""
    j = np.asarray(end)[:, None] - context + 1 + np.arange(context)  # (B, C)
    b = np.arange(len(j))[:, None]
    valid = j >= 0
    jj, prev = j.clip(min=0), (j - 1).clip(min=0)
    has_prev = j >= 1
    step_obs = obs[b, jj]  # (B, C[, F])
    return {"obs": np.where(valid.reshape(valid.shape + (1,) * (step_obs.ndim - 2)), step_obs, 0), "prev_action": np.where(has_prev, action[b, prev], n_actions),
            "prev_reward": np.where(has_prev, reward[b, prev], 0.0), "rtg": np.where(valid, rtg[b, jj], 0.0),
            "episode_step": jj, "valid": valid}


def as_tensors(arrays: dict[str, np.ndarray], device=None) -> dict[str, Tensor]:
    """numpy inputs -> tensors: validity bool, rewards / returns float32, the rest int64."""
    def conv(name: str, x: np.ndarray) -> Tensor:
        floating = name in REWARD_KEYS or np.issubdtype(np.asarray(x).dtype, np.floating)  # image obs: features
        dtype = torch.bool if name == "valid" else torch.float32 if floating else torch.long
        return torch.as_tensor(np.asarray(x), device=device).to(dtype)

    return {n: conv(n, x) for n, x in arrays.items() if n in WINDOW_KEYS or n in RETRIEVED_KEYS}
