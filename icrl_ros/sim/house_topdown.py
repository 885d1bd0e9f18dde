"""Top-down map of a house layout drawn with numpy (no OpenGL, no matplotlib).

x runs to the right and z downwards, as in MiniWorld's own top view; trajectories are
(N, 2) arrays of world (x, z), the first two entries of ``info["agent_pose"]``.
"""

from __future__ import annotations

import math

import numpy as np

from icrl_ros.sim.house_layout import WALL_THICKNESS, HouseLayout

_FLOOR = np.array([236, 230, 216], np.uint8)
_OUTSIDE = np.array([60, 60, 66], np.uint8)
_WALL = np.array([30, 30, 34], np.uint8)
_TRAJ_COLORS = [(31, 119, 180), (255, 127, 14), (44, 160, 44), (214, 39, 40), (148, 103, 189),
                (140, 86, 75), (227, 119, 194), (23, 190, 207), (188, 189, 34), (127, 127, 127)]
# Episode colours of :func:`draw_episodes`: objects there are drawn in greys, so no episode
# colour is confused with an object category's colour.
EPISODE_COLORS = [(31, 119, 180), (230, 85, 13), (49, 163, 84), (214, 39, 40), (117, 107, 177),
                  (0, 170, 170), (206, 18, 150), (140, 86, 45), (120, 160, 0), (0, 60, 140), (255, 170, 0),
                  (150, 0, 60)]
_OBJECT_GREY = (150, 150, 150)
_OBJECT_EDGE = (60, 60, 60)


class Canvas:
    """An RGB image with world->pixel mapping and a few primitives."""

    def __init__(self, bounds: tuple[float, float, float, float], px_per_m: float, pad_m: float = 0.6) -> None:
        min_x, max_x, min_z, max_z = bounds
        self.s = px_per_m
        self.ox, self.oz = min_x - pad_m, min_z - pad_m
        w = int(math.ceil((max_x - min_x + 2 * pad_m) * px_per_m))
        h = int(math.ceil((max_z - min_z + 2 * pad_m) * px_per_m))
        self.img = np.empty((h, w, 3), np.uint8)
        self.img[:] = _OUTSIDE
        self.cols, self.rows = np.meshgrid(np.arange(w) + 0.5, np.arange(h) + 0.5)

    def px(self, x: np.ndarray | float, z: np.ndarray | float) -> tuple:
        return (np.asarray(x) - self.ox) * self.s, (np.asarray(z) - self.oz) * self.s

    def rect(self, x0: float, x1: float, z0: float, z1: float, color) -> None:
        (c0, r0), (c1, r1) = self.px(x0, z0), self.px(x1, z1)
        self.img[max(int(round(r0)), 0): int(round(r1)), max(int(round(c0)), 0): int(round(c1))] = color

    def disc(self, x: float, z: float, r_m: float, color, ring_m: float = 0.0) -> None:
        c, r = self.px(x, z)
        rp = r_m * self.s
        k = int(rp + 2)
        r0, c0 = max(int(r) - k, 0), max(int(c) - k, 0)
        win = (slice(r0, int(r) + k + 1), slice(c0, int(c) + k + 1))
        sub_r, sub_c = self.rows[win], self.cols[win]
        d = np.hypot(sub_r - r, sub_c - c)
        m = d <= rp if ring_m <= 0 else (d <= rp) & (d >= rp - ring_m * self.s)
        self.img[r0: r0 + m.shape[0], c0: c0 + m.shape[1]][m] = color

    def square(self, x: float, z: float, side_m: float, yaw: float, color, inset_m: float = 0.0) -> None:
        """A filled square of ``side_m`` centred at (x, z), its sides along heading ``yaw``."""
        c, r = self.px(x, z)
        half = (side_m / 2 - inset_m) * self.s
        if half <= 0:
            return
        k = int(half * 1.5 + 2)
        r0, c0 = max(int(r) - k, 0), max(int(c) - k, 0)
        win = (slice(r0, int(r) + k + 1), slice(c0, int(c) + k + 1))
        dc, dr = self.cols[win] - c, self.rows[win] - r
        u = dc * math.cos(yaw) - dr * math.sin(yaw)  # along the heading (cos, -sin) in (x, z)
        v = dc * math.sin(yaw) + dr * math.cos(yaw)
        m = (np.abs(u) <= half) & (np.abs(v) <= half)
        self.img[r0: r0 + m.shape[0], c0: c0 + m.shape[1]][m] = color

    def scale_bar(self, metres: float = 1.0) -> None:
        """A black-and-white bar of ``metres`` in the bottom-left margin, with ticks."""
        h = self.img.shape[0]
        n = max(int(round(metres * self.s)), 4)
        r1, c0 = h - 6, 8
        self.img[r1 - 5: r1, c0: c0 + n] = 255
        self.img[r1 - 5: r1, c0: c0 + n // 2] = 0
        self.img[r1 - 9: r1, c0: c0 + 2] = 255
        self.img[r1 - 9: r1, c0 + n - 2: c0 + n] = 255

    def polyline(self, pts: np.ndarray, color, width_px: float = 2.0) -> None:
        """Thick line through (N, 2) world points."""
        if len(pts) < 2:
            return
        c, r = self.px(pts[:, 0], pts[:, 1])
        seg_len = np.hypot(np.diff(c), np.diff(r))
        n = np.maximum(np.ceil(seg_len * 2).astype(int), 1)
        t = np.concatenate([np.linspace(0, 1, k, endpoint=False) for k in n] + [[1.0]])
        idx = np.concatenate([np.full(k, i) for i, k in enumerate(n)] + [[len(n) - 1]])
        cc = c[idx] + t * (c[idx + 1] - c[idx])
        rr = r[idx] + t * (r[idx + 1] - r[idx])
        h, w = self.img.shape[:2]
        half = width_px / 2
        for dr in np.arange(-half, half + 1e-9, 1.0):
            for dc in np.arange(-half, half + 1e-9, 1.0):
                if dr * dr + dc * dc <= half * half + 0.25:
                    ri, ci = np.round(rr + dr - 0.5).astype(int), np.round(cc + dc - 0.5).astype(int)
                    ok = (ri >= 0) & (ri < h) & (ci >= 0) & (ci < w)
                    self.img[ri[ok], ci[ok]] = color


def _paths(cv: Canvas, trajectories: list, colors: list) -> None:
    """Each (N, 2) world trajectory as a line in ``colors[k]``, a dot at its start, a ring at its end."""
    for k, traj in enumerate(trajectories):
        pts = np.asarray(traj, dtype=np.float64).reshape(-1, 2)
        if len(pts) == 0:
            continue
        color = colors[k % len(colors)]
        cv.polyline(pts, color, 2.5)
        cv.disc(pts[0, 0], pts[0, 1], 0.14, color)
        cv.disc(pts[-1, 0], pts[-1, 1], 0.18, color, ring_m=0.07)


def draw_top_down(
    layout: HouseLayout,
    targets: list[int] | None = None,
    trajectories: list[np.ndarray] | None = None,
    agent_pose: tuple[float, float, float] | None = None,
    px_per_m: float = 24.0,
) -> np.ndarray:
    """RGB uint8 map: floors, walls, objects coloured by category, target instances
    ringed (black and white), trajectories (start dot, end ring), the agent as an arrow."""
    cv = Canvas(layout.bounds, px_per_m)
    for r in layout.rooms:
        cv.rect(r.min_x - WALL_THICKNESS / 2, r.max_x + WALL_THICKNESS / 2,
                r.min_z - WALL_THICKNESS / 2, r.max_z + WALL_THICKNESS / 2, _WALL)
    tints = [(0, 0, 0), (-12, -6, 4), (6, -4, -14), (-8, 4, -8), (4, 8, 10), (-14, -10, -2)]
    for k, r in enumerate(layout.rooms):
        cv.rect(r.min_x, r.max_x, r.min_z, r.max_z, np.clip(_FLOOR.astype(int) + tints[k % len(tints)], 0, 255))
    for d in layout.doors:
        cv.rect(*d.rect(layout.rooms), _FLOOR)
    for p in layout.pictures:  # a short dark-red bar on the wall
        dx, dz = -math.sin(p.yaw), -math.cos(p.yaw)  # along the wall
        half = p.width / 2
        ends = np.array([[p.x - dx * half, p.z - dz * half], [p.x + dx * half, p.z + dz * half]])
        cv.polyline(ends, (150, 40, 40), 3)
    targets = set(targets or ())
    for o in layout.objects:
        if o.category in targets:
            cv.disc(o.x, o.z, o.cat.radius + 0.28, (0, 0, 0), ring_m=0.1)
            cv.disc(o.x, o.z, o.cat.radius + 0.18, (255, 255, 255), ring_m=0.08)
        cv.disc(o.x, o.z, o.cat.radius, (20, 20, 20))
        cv.disc(o.x, o.z, max(o.cat.radius - 1.5 / px_per_m, 0.04), o.cat.rgb)
    _paths(cv, trajectories or [], _TRAJ_COLORS)
    if agent_pose is not None:
        x, z, yaw = agent_pose
        fx, fz = math.cos(yaw), -math.sin(yaw)
        tip = np.array([[x, z], [x + 0.45 * fx, z + 0.45 * fz]])
        cv.disc(x, z, 0.25, (200, 30, 30))
        cv.polyline(tip, (200, 30, 30), 4)
    return cv.img


def draw_episodes(
    layout: HouseLayout,
    episodes: list[tuple[np.ndarray, int]],
    px_per_m: float = 28.0,
    scale_m: float = 2.0,
) -> np.ndarray:
    """RGB uint8 map of one trial: floors and walls, every object in greys (boxes as squares,
    everything else as its footprint disc), and per episode ``(trajectory (N, 2) world x, z,
    goal category)`` its path and rings around *its own* goal's instances, both in
    ``EPISODE_COLORS[k]`` (rings of later episodes on the same instance sit further out); a
    ``scale_m`` scale bar in the bottom-left corner (its left half black)."""
    cv = Canvas(layout.bounds, px_per_m)
    for r in layout.rooms:
        cv.rect(r.min_x - WALL_THICKNESS / 2, r.max_x + WALL_THICKNESS / 2,
                r.min_z - WALL_THICKNESS / 2, r.max_z + WALL_THICKNESS / 2, _WALL)
    for r in layout.rooms:
        cv.rect(r.min_x, r.max_x, r.min_z, r.max_z, _FLOOR)
    for d in layout.doors:
        cv.rect(*d.rect(layout.rooms), _FLOOR)
    rings: dict[int, int] = {}
    for k, (_, goal) in enumerate(episodes):
        color = EPISODE_COLORS[k % len(EPISODE_COLORS)]
        for i, o in enumerate(layout.objects):
            if o.category == goal:
                n = rings.get(i, 0)
                rings[i] = n + 1
                cv.disc(o.x, o.z, o.cat.radius + 0.16 + 0.12 * n, color, ring_m=0.09)
    for o in layout.objects:
        if o.cat.shape == "box":
            cv.square(o.x, o.z, o.cat.height, o.yaw, _OBJECT_EDGE)
            cv.square(o.x, o.z, o.cat.height, o.yaw, _OBJECT_GREY, inset_m=1.5 / px_per_m)
        else:
            cv.disc(o.x, o.z, o.cat.radius, _OBJECT_EDGE)
            cv.disc(o.x, o.z, max(o.cat.radius - 1.5 / px_per_m, 0.04), _OBJECT_GREY)
    _paths(cv, [traj for traj, _ in episodes], EPISODE_COLORS)
    cv.scale_bar(scale_m)
    return cv.img
