"""Per-step token encoders: one embedding per environment step.

Grid worlds feed a discrete cell index; the house task feeds an RGB image, odometry and the
goal category. The image goes through a small CNN trained with the policy
(``visual_encoder: cnn``) or through :class:`FeatureEncoder` (``visual_encoder: features``),
a CNN pretrained on simulator labels (``training/house_encoder.py``) and frozen, whose
feature vector a trainable linear layer projects. A frozen encoder is a fixed function of
the image, so training computes each frame's features once when it is observed and the
sequence model trains on those (``rgb_feat``), never on pixels; the exported graph still
takes the image. Odometry is (x, y, cos yaw, sin yaw), optionally with Fourier features of
x and y (``odom_fourier``) so that attention can match places by position. Every step also
carries the previous action and reward and its within-episode step (a learnable position).
"""

from __future__ import annotations

import math

from pathlib import Path

import torch
from torch import Tensor, nn

from icrl_ros.models.config import FEATURE_STEMS, ModelArgs
from icrl_ros.models.object_memory import ROUTE_DIM, object_struct


def strided_convs(channels: tuple[int, ...]) -> nn.Sequential:
    """RGB -> stride-2 convs with GELUs (5x5 first, then 3x3), one per entry of ``channels``."""
    layers, c_in = [], 3
    for k, c in enumerate(channels):
        layers += [nn.Conv2d(c_in, c, 5 if k == 0 else 3, stride=2, padding=2 if k == 0 else 1), nn.GELU()]
        c_in = c
    return nn.Sequential(*layers)


def conv_side(image_size: int, n_strided: int) -> int:
    for _ in range(n_strided):
        image_size = (image_size + 1) // 2
    return image_size


def as_images(rgb: Tensor) -> tuple[Tensor, tuple[int, ...]]:
    """uint8 (..., H, W, 3) -> float (N, 3, H, W) in [0, 1] and the leading shape."""
    lead = rgb.shape[:-3]
    return rgb.reshape(-1, *rgb.shape[-3:]).permute(0, 3, 1, 2).float() / 255.0, lead


class ImageEncoder(nn.Module):
    """Small CNN: uint8 (B, H, W, 3) -> (B, D). Four strided convs + a linear layer."""

    def __init__(self, d_out: int, image_size: int) -> None:
        super().__init__()
        self.net = strided_convs((32, 64, 64, 32))
        self.fc = nn.Linear(32 * conv_side(image_size, 4) ** 2, d_out)

    def forward(self, rgb: Tensor) -> Tensor:
        x, lead = as_images(rgb)
        return self.fc(self.net(x).flatten(1)).reshape(*lead, -1)


def feature_trunk_channels(image_size: int) -> tuple[int, ...]:
    """Channels of :class:`FeatureEncoder`'s strided convs. Up to 64 px: three convs to an
    (H/8 x W/8) map. A larger image gets one more conv per doubling, so the map stays 8x8
    cells of the same field of view (the linear layer keeps its size) while each cell sees
    the object at a higher resolution: 128 px = (32, 32, 64, 64)."""
    extra = max(0, math.ceil(math.log2(image_size / 64))) if image_size > 64 else 0
    return (32,) * (1 + extra) + (64, 64) if extra else (32, 64, 64)


PATCH_MAP = 32  # the patch stem's map side: the strided stem's at 64 px
PATCH_CHANNELS = 48


def patch_stem(image_size: int) -> nn.Sequential:
    """RGB -> non-overlapping (image_size / 32)-pixel patches, each embedded by one conv, then the
    strided stem's two 3x3 stride-2 convs: an 8x8 map of 64 channels at any size that is a multiple
    of 32. Its cost does not grow with the resolution past the first layer, which sees every pixel."""
    if image_size % PATCH_MAP:
        raise ValueError(f"patch stem: the image size must be a multiple of {PATCH_MAP}, got {image_size}")
    p = image_size // PATCH_MAP
    return nn.Sequential(nn.Conv2d(3, PATCH_CHANNELS, p, stride=p), nn.GELU(),
                         nn.Conv2d(PATCH_CHANNELS, 64, 3, stride=2, padding=1), nn.GELU(),
                         nn.Conv2d(64, 64, 3, stride=2, padding=1), nn.GELU())


class FeatureEncoder(nn.Module):
    """uint8 (B, H, W, 3) -> (B, F) features: strided convs to a map of 64 channels (H/8 x W/8
    up to 64 px, 8x8 above; small objects keep a cell of their own), a hidden layer, then F
    features.

    ``pooled`` > 0 gives the last ``pooled`` features a path of their own: a per-cell 1x1 conv
    head whose maximum over the map is the feature, so evidence of an object counts wherever in
    the view it is (a linear layer on the flattened map must learn it once per cell).

    ``stem``: ``strided`` (5x5 then 3x3 stride-2 convs, one more per doubling past 64 px) or
    ``patch`` (:func:`patch_stem`: a higher resolution at the 64 px trunk's cost)."""

    def __init__(self, d_feat: int, image_size: int, d_hidden: int = 256, pooled: int = 0,
                 stem: str = "strided") -> None:
        super().__init__()
        if not 0 <= pooled < d_feat:
            raise ValueError(f"pooled features: expected 0 <= pooled < d_feat ({d_feat}), got {pooled}")
        if stem not in FEATURE_STEMS:
            raise ValueError(f"stem: {stem!r} is not one of {list(FEATURE_STEMS)}")
        if stem == "patch":
            self.net, side = patch_stem(image_size), PATCH_MAP // 4
        else:
            channels = feature_trunk_channels(image_size)
            self.net, side = strided_convs(channels), conv_side(image_size, len(channels))
        self.out = nn.Sequential(nn.Linear(64 * side ** 2, d_hidden), nn.GELU(),
                                 nn.Linear(d_hidden, d_feat - pooled), nn.GELU())
        self.cells = (nn.Sequential(nn.Conv2d(64, 64, 1), nn.GELU(), nn.Conv2d(64, pooled, 1)) if pooled
                      else None)

    def forward(self, rgb: Tensor) -> Tensor:
        x, lead = as_images(rgb)
        m = self.net(x)  # (N, 64, h, w)
        f = self.out(m.flatten(1))
        if self.cells is not None:
            f = torch.cat([f, self.cells(m).amax(dim=(2, 3))], -1)  # (N, F - pooled) + (N, pooled)
        return f.reshape(*lead, -1)


def feature_encoder_for(state: dict, image_size: int) -> FeatureEncoder:
    """An unloaded :class:`FeatureEncoder` shaped like the weights in ``state`` (an encoder file's
    state dict): its feature size and pooled path are read from the tensors' shapes."""
    pooled = state["cells.2.weight"].shape[0] if "cells.2.weight" in state else 0
    d_feat = state["out.2.weight"].shape[0] + pooled
    return FeatureEncoder(d_feat, image_size, d_hidden=state["out.0.weight"].shape[0], pooled=pooled,
                          stem=stem_of(state))


def stem_of(state: dict) -> str:
    """Which stem an encoder file's weights are for: the patch stem's first conv is square with as many
    outputs as :data:`PATCH_CHANNELS` and no 5x5 kernel."""
    w = state["net.0.weight"]
    return "patch" if w.shape[0] == PATCH_CHANNELS and w.shape[-1] != 5 else "strided"


BEARING_BINS = 5  # left to right across the view
DIST_BINS = 5  # < 1, 1-2, 2-3.5, 3.5-6, >= 6 m to the object's surface
# FREE_BANDS: column bands of the image (free distance ahead, log metres); VIEW_FOV_DEG: the house camera's
# horizontal field of view (house_render.FOV_Y_DEG; a test ties them). Numbers of the robot's geometry.
from icrl_ros.geometry import FREE_BANDS, VIEW_FOV_DEG  # noqa: E402
BEARING_CENTRES = tuple(math.radians(VIEW_FOV_DEG) * (0.5 - (k + 0.5) / BEARING_BINS) for k in range(BEARING_BINS))
"""Each bearing bin's centre (radians, counter-clockwise from straight ahead; bin 0 = left)."""
DIST_CENTRES = (0.5, 1.5, 2.75, 4.75, 7.0)
"""A representative distance (m) per distance bin."""
OBJECT_SCALE_M = 5.0  # house-frame positions enter the network in units of 5 m


class FeatureHeads(nn.Module):
    """Linear label heads on the frozen encoder's features (trained with it by
    ``training/house_encoder.py``): per category in view (>= 10 px), its bearing and distance
    bins; free distance per column band; whether a forward step is blocked."""

    def __init__(self, d_feat: int, n_cat: int) -> None:
        super().__init__()
        self.n_cat = n_cat
        self.present = nn.Linear(d_feat, n_cat)
        self.bearing = nn.Linear(d_feat, n_cat * BEARING_BINS)
        self.dist = nn.Linear(d_feat, n_cat * DIST_BINS)
        self.free = nn.Linear(d_feat, FREE_BANDS)
        self.blocked = nn.Linear(d_feat, 1)

    def forward(self, f: Tensor) -> dict[str, Tensor]:
        lead = f.shape[:-1]
        return {"present": self.present(f), "bearing": self.bearing(f).reshape(*lead, self.n_cat, BEARING_BINS),
                "dist": self.dist(f).reshape(*lead, self.n_cat, DIST_BINS), "free": self.free(f),
                "blocked": self.blocked(f).squeeze(-1)}

    def goal_view(self, f: Tensor, goal: Tensor) -> Tensor:
        """(..., F) features and (...) goal categories -> (..., GOAL_VIEW_DIM): P(goal in view),
        its bearing and distance distributions, the free-space bands and P(blocked)."""
        out = self.forward(f)
        g = goal.long().unsqueeze(-1)
        present = out["present"].gather(-1, g).sigmoid()
        idx = g.unsqueeze(-1)
        bearing = out["bearing"].gather(-2, idx.expand(*idx.shape[:-1], BEARING_BINS)).squeeze(-2).softmax(-1)
        dist = out["dist"].gather(-2, idx.expand(*idx.shape[:-1], DIST_BINS)).squeeze(-2).softmax(-1)
        return torch.cat([present, bearing, dist, out["free"], out["blocked"].unsqueeze(-1).sigmoid()], -1)


    def free_metres(self, f: Tensor) -> Tensor:
        """Features (..., F) -> the floor distance to the first wall or object per column band (..., FREE_BANDS),
        metres, left band first (the head predicts log1p metres; exp - 1 rather than expm1, which ONNX lacks)."""
        return (torch.exp(self.free(f)) - 1.0).clamp(min=0.0)

    def object_estimates(self, f: Tensor, odom: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Features (..., F) and odometry (..., 3) -> per category P(in view) (..., C), the
        position it implies in the odometry frame (..., C, 2; expected bearing and distance
        from the robot's pose) and the expected distance (..., C)."""
        out = self.forward(f)
        bearing = (out["bearing"].softmax(-1) * f.new_tensor(BEARING_CENTRES)).sum(-1)
        dist = (out["dist"].softmax(-1) * f.new_tensor(DIST_CENTRES)).sum(-1)
        ang = odom[..., 2:3] + bearing
        xy = odom[..., None, :2] + dist[..., None] * torch.stack([ang.cos(), ang.sin()], -1)
        return out["present"].sigmoid(), xy, dist

    def object_view(self, f: Tensor, odom: Tensor) -> Tensor:
        """(..., F) features and (..., 3) odometry -> (..., 3 C): per category P(in view) and
        that probability times the implied position (in units of ``OBJECT_SCALE_M``)."""
        p, xy, _ = self.object_estimates(f, odom)
        return torch.cat([p, (p[..., None] * xy / OBJECT_SCALE_M).flatten(-2)], -1)


GOAL_VIEW_DIM = 1 + BEARING_BINS + DIST_BINS + FREE_BANDS + 1


def odom_features(odom: Tensor, n_fourier: int) -> Tensor:
    """(..., 3) x, y, yaw -> (x, y, cos yaw, sin yaw[, sin/cos(2 pi x / L), sin/cos(2 pi y / L)
    for L = 1, 2, 4, ... m (``n_fourier`` scales)])."""
    odom = odom.float()
    yaw = odom[..., 2:3]
    parts = [odom[..., :2], yaw.cos(), yaw.sin()]
    if n_fourier:
        scales = 2.0 ** torch.arange(n_fourier, device=odom.device, dtype=odom.dtype)
        ang = 2 * math.pi * odom[..., :2, None] / scales  # (..., 2, F)
        parts += [ang.sin().flatten(-2), ang.cos().flatten(-2)]
    return torch.cat(parts, -1)


def read_encoder_file(path: str) -> dict:
    """The state dict of an encoder file (``training/house_encoder.py``: the encoder and its ``heads.*``)."""
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"model.pretrained_encoder: {p} does not exist")
    return torch.load(p, map_location="cpu", weights_only=True)


def load_frozen(module: nn.Module, path: str, prefix: str = "", state: dict | None = None) -> None:
    """Load a local state dict (its ``prefix``ed entries) into ``module`` and freeze it; ``state``: the
    file's contents already read (several modules from one file read it once), ``path`` then names it."""
    p = Path(path)
    if state is None:
        state = read_encoder_file(path)
    if prefix:
        state = {k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)}
    missing, unexpected = module.load_state_dict(state, strict=False)
    if missing:
        raise ValueError(f"model.pretrained_encoder: {p} lacks weights {[prefix + k for k in missing[:5]]} "
                         f"(an encoder file from training/house_encoder.py carries the encoder and its heads.*)")
    for q in module.parameters():
        q.requires_grad_(False)


class CellEncoder(nn.Module):
    """A grid cell index -> embedding: a per-cell table, or row + column tables
    (``grid_encoding: xy``), plus normalised (row, col) coordinate features on a square grid."""

    def __init__(self, a: ModelArgs) -> None:
        super().__init__()
        self.args = a
        self.build(self, a)

    @staticmethod
    def build(m: nn.Module, a: ModelArgs) -> None:
        m.xy = a.grid_encoding == "xy" and a.grid_size > 0
        if m.xy:  # row + column tables: nothing specific to one cell
            m.rows = nn.Embedding(a.grid_size, a.d_model)
            m.cols = nn.Embedding(a.grid_size, a.d_model)
        else:
            m.obs = nn.Embedding(a.n_obs, a.d_model)
        m.coords = nn.Linear(2, a.d_model) if a.grid_size else None

    @staticmethod
    def encode(m: nn.Module, a: ModelArgs, cell: Tensor) -> Tensor:
        if m.coords is None:
            return m.obs(cell)
        g = a.grid_size
        row, col = cell // g, cell % g
        x = m.coords(torch.stack([row, col], dim=-1).float() / max(g - 1, 1))
        return x + (m.rows(row) + m.cols(col) if m.xy else m.obs(cell))

    def forward(self, cell: Tensor) -> Tensor:
        return self.encode(self, self.args, cell)


class StepEncoder(nn.Module):
    """(obs [+ last_obs] | rgb + odom) + previous action + previous reward + goal + within-episode step -> token.

    ``prev_action == n_actions`` means "no previous action" (start of a trial). The
    within-episode step is a learnable position; the episode index goes to RoPE instead.
    """

    def __init__(self, a: ModelArgs) -> None:
        super().__init__()
        self.args = a
        for flag in ("goal_readout", "object_readout", "object_memory"):
            if getattr(a.house, flag) and (a.obs_type != "image" or a.visual_encoder != "features"):
                raise ValueError(f"model.house.{flag}: needs an image env and model.visual_encoder: features")
        if a.obs_type == "image":
            if a.visual_encoder == "features":
                self.image = FeatureEncoder(a.feature_dim, a.image_size, pooled=a.feature_pooled,
                                            stem=a.feature_stem)
                self.image.requires_grad_(False)  # frozen: pretrained on simulator labels
                self.image_proj = nn.Linear(a.feature_dim, a.d_model)
                if self.readout:
                    if not a.n_goals:
                        raise ValueError("model.house.goal_readout / object_readout / object_memory: the env has no "
                                         "goal categories (n_goals 0)")
                    self.heads = FeatureHeads(a.feature_dim, a.n_goals)
                    self.heads.requires_grad_(False)  # frozen with the encoder it was trained with
                if a.house.goal_readout:
                    self.goal_view_proj = nn.Linear(GOAL_VIEW_DIM, a.d_model)
                if a.house.object_readout:
                    self.object_view_proj = nn.Linear(3 * a.n_goals, a.d_model)
            else:
                self.image = ImageEncoder(a.d_model, a.image_size)
            self.odom = nn.Linear(4 + 4 * a.odom_fourier, a.d_model)  # x, y, cos(yaw), sin(yaw)[, Fourier]
        else:
            # The cell tables sit on the step encoder itself (checkpoint names predate
            # CellEncoder); last_obs gets its own CellEncoder.
            CellEncoder.build(self, a)
            self.last = CellEncoder(a) if a.last_obs else None
        self.prev_action = nn.Embedding(a.n_actions + 1, a.d_model)
        self.prev_reward = nn.Linear(1, a.d_model) if a.use_reward else None
        self.step = nn.Embedding(a.max_episode_steps, a.d_model)
        self.goal = nn.Embedding(a.n_goals, a.d_model) if a.n_goals else None
        # the route memory's way back to the goal (icrl_ros/memory/route.py); zeroed by ICLPolicy
        self.route = nn.Linear(ROUTE_DIM, a.d_model) if a.house.route_memory else None
        # the frontier memory's way to unlooked floor (icrl_ros/house/frontier.py); zeroed by ICLPolicy
        self.frontier = nn.Linear(ROUTE_DIM, a.d_model) if a.house.frontier_memory else None

    def load_pretrained(self) -> None:
        """Load and freeze ``model.pretrained_encoder`` (training start only: checkpoints
        carry the weights, so deployment never needs the file)."""
        if self.args.obs_type == "image" and self.args.pretrained_encoder:
            path = self.args.pretrained_encoder
            state = read_encoder_file(path)  # one read for both modules
            load_frozen(self.image, path, state=state)
            if self.readout:
                load_frozen(self.heads, path, prefix="heads.", state=state)

    @property
    def readout(self) -> bool:
        """Whether the frozen encoder's label heads are policy inputs."""
        return self.args.house.goal_readout or self.args.house.object_readout or self.args.house.object_memory

    @property
    def frozen_features(self) -> bool:
        """Whether images enter through a frozen feature encoder (training caches ``rgb_feat``)."""
        return self.args.obs_type == "image" and self.args.visual_encoder == "features"

    def features(self, rgb: Tensor) -> Tensor:
        """The frozen encoder's features of images (B, ..., H, W, 3) -> (B, ..., F)."""
        with torch.no_grad():
            return self.image(rgb)

    def forward(self, inp: dict[str, Tensor]) -> Tensor:
        a = self.args
        if a.obs_type == "image":
            if a.visual_encoder == "features":
                feat = inp["rgb_feat"] if "rgb_feat" in inp else self.image(inp["rgb"])
                img = self.image_proj(feat.float())
                if a.house.goal_readout:
                    img = img + self.goal_view_proj(self.heads.goal_view(feat.float(), inp["goal"]))
                if a.house.object_readout:
                    img = img + self.object_view_proj(self.heads.object_view(feat.float(), inp["odom"].float()))
            else:
                img = self.image(inp["rgb"])
            x = img + self.odom(odom_features(inp["odom"], a.odom_fourier))
        else:
            x = CellEncoder.encode(self, a, inp["obs"])
            if self.last is not None:
                x = x + self.last(inp["last_obs"])
        x = x + self.prev_action(inp["prev_action"])
        if self.prev_reward is not None:
            x = x + self.prev_reward(inp["prev_reward"].unsqueeze(-1).float())
        x = x + self.step(inp["episode_step"].clamp(max=a.max_episode_steps - 1))
        if self.goal is not None:
            x = x + self.goal(inp["goal"])
        if self.route is not None:
            x = x + self.route(inp["route"].float())
        if self.frontier is not None:
            x = x + self.frontier(inp["frontier"].float())
        if a.house.object_memory:  # the last entries carry what the object memory head reads
            p, xy, _ = self.heads.object_estimates(feat.float(), inp["odom"].float())
            s = object_struct(p, xy, inp["odom"].float(), inp["goal"], OBJECT_SCALE_M)
            if a.house.frontier_memory:  # and before them, what the frontier memory reads
                from icrl_ros.house.frontier import frontier_struct

                free = inp["scan_bands"].float() if a.house.frontier_from_scan else self.heads.free_metres(feat.float())
                s = torch.cat([frontier_struct(free, OBJECT_SCALE_M), s], -1)
            x = torch.cat([x[..., :-s.shape[-1]], s.to(x.dtype)], -1)
        return x
