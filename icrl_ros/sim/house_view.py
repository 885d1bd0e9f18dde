"""What the camera resolves, by ray casting the layout (pure numpy, no OpenGL).

:func:`cast_view` shoots one ray per pixel of the agent's square camera image (the same
pose, pitch and field of view as the MiniWorld render) against the layout's walls, floor and
objects (balls as spheres, every other category as its footprint cylinder of its height)
and returns, per pixel, the index of the object it hits (-1: none), the distance along
the ray, and where rays hit the floor. That gives, for free:

* **how many pixels an instance covers** (:attr:`View.pixels`): the recognition rule of the
  in-context teacher and the "seen" labels (an instance counts as seen only when it covers
  at least ``MIN_PIXELS`` of a 64x64 image, as Memo's success rule uses 10 pixels);
* **the floor the camera swept** (:attr:`View.floor_xz`): the teacher's known free space;
* labels for pretraining the visual encoder (categories in view, their bearing and
  distance, free space ahead).

It is a model of the render, not the render: meshes (duckie, chairs, desks) are their
bounding cylinders and door lintels are left out.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from icrl_ros.sim.house_layout import HouseLayout

MIN_PIXELS = 10  # of a 64x64 image; scaled by area for other sizes
# Share of its bounding shape's silhouette a category's mesh fills (cones are triangles, keys
# are thin, chairs and desks are legs and planks); pixel counts are scaled by it.
FILL = {"cone": 0.5, "duckie": 0.7, "potion": 0.6, "office_chair": 0.6, "office_desk": 0.6, "key": 0.35}
_FAR = 1e6


WALL_BINS = 720  # azimuth samples for the wall test (about 0.15 degree apart)


@lru_cache(maxsize=8)
def _camera_rays(size: int, fov_y_deg: float, pitch_deg: float) -> tuple[np.ndarray, ...]:
    """Unit rays of every pixel (row 0 at the top) for a camera at yaw 0, split into what a
    yaw rotates (the azimuth ``phi`` of the horizontal part, counter-clockwise from the
    heading, and its length ``hn``) and what it does not (the vertical part ``dy``)."""
    t = math.tan(math.radians(fov_y_deg) / 2)
    c = (np.arange(size) + 0.5) / size * 2 - 1
    xn, yn = np.meshgrid(c * t, -c * t)  # square image: same tangent both ways
    p = math.radians(pitch_deg)
    f = np.array([math.cos(p), math.sin(p), 0.0])  # yaw 0: heading +x
    r = np.array([0.0, 0.0, 1.0])
    u = np.cross(r, f)
    d = f[None] + xn.ravel()[:, None] * r[None] + yn.ravel()[:, None] * u[None]
    d /= np.linalg.norm(d, axis=1, keepdims=True)
    hn = np.hypot(d[:, 0], d[:, 2])
    phi = np.arctan2(-d[:, 2], d[:, 0])
    return phi, hn, d[:, 1]


@dataclass
class View:
    """Per-pixel results of one cast, arrays flattened row-major (size * size,)."""

    size: int
    instance: np.ndarray
    """Object index into ``layout.objects`` hit by each pixel's ray, -1 for wall / floor / ceiling."""
    depth: np.ndarray
    """Distance along the ray to the first hit (m)."""
    floor_xz: np.ndarray
    """(K, 2) world points where rays first hit the floor."""
    fill: np.ndarray
    """Per object of the layout, the share of its cast silhouette its mesh covers (``FILL``)."""

    @property
    def pixels(self) -> np.ndarray:
        """Pixels each object of the layout covers, estimated: cast pixels x ``FILL`` (n_objects,)."""
        hit = self.instance[self.instance >= 0]
        return np.bincount(hit, minlength=len(self.fill)) * self.fill

    def resolved(self, min_pixels: float | None = None) -> np.ndarray:
        """Objects covering at least ``min_pixels`` (default ``MIN_PIXELS`` scaled to the image
        area of a 64x64 frame), as a bool mask over ``layout.objects``."""
        k = MIN_PIXELS * (self.size / 64) ** 2 if min_pixels is None else min_pixels
        return self.pixels >= k


def obstacle_bands(view: View, bands: int, camera_height: float, pitch_deg: float, fov_y_deg: float,
                   cap_m: float = 12.0) -> np.ndarray:
    """Per column band of the image (left first), the floor distance (m) to the nearest wall or object pixel in
    it, capped at ``cap_m`` (bands,): what a depth camera says of the free floor ahead (the encoder's free-space
    labels)."""
    size = view.size
    _, hn, dy = _camera_rays(size, fov_y_deg, pitch_deg)
    horiz = (view.depth * hn).reshape(size, size)
    # walls and floor both hit no instance; floor hits end at height 0
    on_floor = (view.instance < 0) & (np.abs(camera_height + view.depth * dy) < 1e-3)
    col = np.where((~on_floor).reshape(size, size), horiz, np.inf).min(axis=0)
    return np.minimum(col.reshape(bands, -1).min(axis=1), cap_m)


def _segment_hits(ox: float, oz: float, dx: np.ndarray, dz: np.ndarray, walls: np.ndarray) -> np.ndarray:
    """Horizontal ray parameter t (along (dx, dz), not normalised) of the nearest wall crossing per ray."""
    if len(walls) == 0:
        return np.full(dx.shape, _FAR)
    a, b = walls[:, 0], walls[:, 1]  # (S, 2)
    ex, ez = (b - a)[:, 0], (b - a)[:, 1]
    wx, wz = a[:, 0] - ox, a[:, 1] - oz
    den = dx[:, None] * ez[None] - dz[:, None] * ex[None]  # (R, S)
    with np.errstate(divide="ignore", invalid="ignore"):
        t = (wx[None] * ez[None] - wz[None] * ex[None]) / den
        s = (wx[None] * dz[:, None] - wz[None] * dx[:, None]) / den
    ok = (np.abs(den) > 1e-12) & (t > 1e-6) & (s >= 0) & (s <= 1)
    return np.where(ok, t, _FAR).min(axis=1)


def cast_view(layout: HouseLayout, walls: np.ndarray, x: float, z: float, yaw: float, size: int,
              camera_height: float, pitch_deg: float, fov_y_deg: float) -> View:
    """Cast the camera at world (x, z) with heading ``yaw``; ``walls`` (S, 2, 2) as in ``NavGrid.walls``."""
    phi, hn, dy = _camera_rays(size, fov_y_deg, pitch_deg)
    az = yaw + phi
    dx, dz = hn * np.cos(az), -hn * np.sin(az)
    cy = camera_height

    # Walls span floor to ceiling, so a wall hit depends on the azimuth only: cast WALL_BINS
    # horizontal rays across the field of view and give each pixel its nearest bin.
    lo, hi = float(phi.min()), float(phi.max())
    bins = np.linspace(lo, hi, WALL_BINS)
    horiz = _segment_hits(x, z, np.cos(yaw + bins), -np.sin(yaw + bins), walls)
    k = np.rint((phi - lo) / max(hi - lo, 1e-12) * (WALL_BINS - 1)).astype(np.int64)
    best = horiz[k] / np.maximum(hn, 1e-12)
    with np.errstate(divide="ignore", invalid="ignore"):
        t_floor = np.where(dy < -1e-9, -cy / dy, _FAR)
    inst = np.full(dx.shape, -1, np.int64)
    half = max(abs(lo), abs(hi))
    for k, o in enumerate(layout.objects):
        rad, h = o.cat.radius, o.cat.height
        px, pz = x - o.x, z - o.z
        dist = math.hypot(px, pz)
        if dist > rad + 1e-6:  # outside the field of view: no ray can reach it
            bearing = math.atan2(pz, -px) - yaw  # world bearing (CCW) of the object, relative to the heading
            off = abs((bearing + math.pi) % (2 * math.pi) - math.pi)
            if off > half + math.asin(min(1.0, rad / dist)) + 0.02:
                continue
        if o.cat.shape == "ball":  # a sphere resting on the floor
            py = cy - rad
            b = dx * px + dy * py + dz * pz
            c = px * px + py * py + pz * pz - rad * rad
            disc = b * b - c
            t = np.where(disc >= 0, -b - np.sqrt(np.maximum(disc, 0)), _FAR)
            t = np.where(t > 1e-6, t, _FAR)
        else:  # vertical cylinder: side wall between 0 and h, plus the top cap
            a2 = dx * dx + dz * dz
            b = dx * px + dz * pz
            c = px * px + pz * pz - rad * rad
            disc = b * b - a2 * c
            with np.errstate(divide="ignore", invalid="ignore"):
                t = (-b - np.sqrt(np.maximum(disc, 0))) / a2
            y_at = cy + t * dy
            t = np.where((disc >= 0) & (a2 > 1e-12) & (t > 1e-6) & (y_at >= 0) & (y_at <= h), t, _FAR)
            if h < cy:
                with np.errstate(divide="ignore", invalid="ignore"):
                    tc = np.where(dy < -1e-9, (h - cy) / dy, _FAR)
                on_cap = (px + tc * dx) ** 2 + (pz + tc * dz) ** 2 <= rad * rad
                t = np.minimum(t, np.where(on_cap, tc, _FAR))
        closer = t < best
        inst[closer] = k
        best = np.minimum(best, t)
    on_floor = (t_floor < best)
    depth = np.minimum(best, t_floor)
    inst[on_floor] = -1
    floor = np.stack([x + t_floor[on_floor] * dx[on_floor], z + t_floor[on_floor] * dz[on_floor]], axis=1)
    fill = np.array([FILL.get(o.cat.shape, 1.0) for o in layout.objects])
    return View(size, inst, depth, floor, fill)
