"""Planar poses, one copy for the simulators, the bridge and the agent node.

A pose is (x, y, yaw) in a fixed frame with REP 103 axes: x forward, y left, yaw counter-clockwise.
The policies observe odometry as :func:`relative_pose` of the current pose in a start pose's frame
(the episode start or the house origin), so the simulators that make training data and the node
that feeds a robot's odometry to the policy must compute it the same way: both call this module.
The MiniWorld house keeps world poses as (x, z, yaw) with the floor's planar frame X = x, Y = -z;
:func:`planar` maps them. Numpy only at import, scipy for :func:`grid_distances` (the Habitat chroot imports
it without torch).

Also the grid arithmetic of floor maps, shared by the simulators' navigation grids and the house
memories' maps (:data:`MOVES`, :func:`grid_distances`, :func:`box5`).
"""

from __future__ import annotations

import math

import numpy as np

Pose = tuple[float, float, float]


def wrap_angle(a: float) -> float:
    """Angle in radians wrapped to [-pi, pi)."""
    return (a + math.pi) % (2 * math.pi) - math.pi


def planar(world_pose: tuple[float, float, float]) -> tuple[float, float, float]:
    """A MiniWorld / house world pose (x, z, yaw) -> planar (x, y, yaw) with y = -z."""
    x, z, yaw = world_pose
    return (x, -z, yaw)


def relative_pose(origin: tuple[float, float, float], pose: tuple[float, float, float]) -> np.ndarray:
    """``pose`` in the frame of ``origin`` (both planar, one fixed frame): float32
    [x forward, y left, yaw CCW], the odometry the policies observe."""
    x0, y0, t0 = origin
    x, y, t = pose
    dx, dy = x - x0, y - y0
    c, s = math.cos(t0), math.sin(t0)
    return np.array([c * dx + s * dy, -s * dx + c * dy, wrap_angle(t - t0)], dtype=np.float32)


def compose_pose(base: tuple[float, float, float], delta: tuple[float, float, float]) -> tuple[float, float, float]:
    """Apply ``delta`` (in ``base``'s frame) to ``base``; the inverse of :func:`relative_pose`."""
    x0, y0, t0 = base
    dx, dy, dt = delta
    c, s = math.cos(t0), math.sin(t0)
    return (x0 + c * dx - s * dy, y0 + s * dx + c * dy, wrap_angle(t0 + dt))


def map_to_odom(map_pose: tuple[float, float, float], odom_pose: tuple[float, float, float]) -> tuple[float, float, float]:
    """The map -> odom transform (x, y, yaw) given the base's pose in both frames: the map pose
    composed with the inverse of the odometry pose (what a localisation node publishes on TF)."""
    return compose_pose(map_pose, tuple(float(v) for v in relative_pose(odom_pose, (0.0, 0.0, 0.0))))


def between(a: Pose, b: Pose) -> Pose:
    """``b`` in ``a``'s frame, in float64 (:func:`relative_pose` is the float32 the policies observe; poses
    integrated over thousands of increments keep full precision here)."""
    c, s = math.cos(a[2]), math.sin(a[2])
    dx, dy = b[0] - a[0], b[1] - a[1]
    return (c * dx + s * dy, -s * dx + c * dy, wrap_angle(b[2] - a[2]))


def fused_pose(fix_map: Pose, fix_odom: Pose, odom_now: Pose) -> Pose:
    """The map-frame pose now from a localiser fix and odometry: the fix (``fix_map``, taken when odometry
    read ``fix_odom``) composed with the odometry travelled since (``odom_now`` in ``fix_odom``'s frame).
    This is the map -> odom correction (``map_to_odom(fix_map, fix_odom)``) applied to ``odom_now``."""
    return compose_pose(fix_map, between(fix_odom, odom_now))


def episode_odometry(start: tuple[float, float, float], pose: tuple[float, float, float]) -> np.ndarray:
    """Odometry of house world ``pose`` (x, z, yaw) relative to world ``start``: what the house
    envs put in ``obs["odom"]``."""
    return relative_pose(planar(start), planar(pose))


FREE_BANDS = 8
"""Column bands of the house camera's image a floor distance is given for (the frozen heads' estimate, or a laser's
nearest return per band: :func:`bands_from_scan`)."""
VIEW_FOV_DEG = 79.0
"""The house camera's horizontal field of view (``house_render.FOV_Y_DEG``; square images)."""


def band_edges(fov_deg: float = VIEW_FOV_DEG, bands: int = FREE_BANDS) -> np.ndarray:
    """Bearings (radians, counter-clockwise from straight ahead) of the band edges of a pinhole camera's
    image, left edge first: (bands + 1,). Band k covers columns [k, k + 1) / bands of the image."""
    t = math.tan(math.radians(fov_deg) / 2)
    return np.arctan((1.0 - 2.0 * np.arange(bands + 1) / bands) * t)


def bands_from_scan(ranges: np.ndarray, angles: np.ndarray, cap_m: float, fov_deg: float = VIEW_FOV_DEG,
                    bands: int = FREE_BANDS) -> np.ndarray:
    """A planar laser's reading as the floor distance per column band of the camera image (bands,), left first: the
    nearest return among the beams whose bearing (radians, counter-clockwise from straight ahead) falls in the band;
    no return (``inf``, NaN or past ``cap_m``) counts as ``cap_m``. What the heads' ``free_metres`` estimate from the
    image, measured (objects below the laser's plane excepted)."""
    edges = band_edges(fov_deg, bands)
    r = np.where(np.isfinite(ranges), np.minimum(ranges, cap_m), cap_m)
    inside = (angles[None, :] <= edges[:-1, None]) & (angles[None, :] >= edges[1:, None])  # (bands, beams)
    return np.where(inside, r[None, :], cap_m).min(axis=1)


SCAN_BINS = 12
"""Headings a free-space scan reports, 30 degrees apart from straight ahead, counter-clockwise (bin k at
k x 30 degrees left): the headings a house robot can face by turning (``turn_step`` 30 degrees)."""


def scan_headings(yaw: float) -> np.ndarray:
    """World yaws of the :data:`SCAN_BINS` scan bins of a robot facing ``yaw`` (bin 0 = ahead)."""
    return yaw + np.arange(SCAN_BINS) * (2 * np.pi / SCAN_BINS)


def free_headings_from_scan(ranges: np.ndarray, angles: np.ndarray, step_m: float, radius_m: float) -> np.ndarray:
    """The house env's ``scan`` observation from a planar laser scan in the robot frame (``angles`` counter-clockwise
    from straight ahead, as ``sensor_msgs/LaserScan``; non-finite or non-positive ranges are no return):
    (SCAN_BINS,) float32, bin k free (1) when no scan point lies within ``radius_m`` of the point ``step_m`` ahead
    along heading k x 30 degrees (the robot's disc after a forward step that way). A heading the scan does not cover
    (no beam within half a bin of it: a laser narrower than 360 degrees) reads blocked."""
    r, a = np.asarray(ranges, np.float64).reshape(-1), np.asarray(angles, np.float64).reshape(-1)
    if r.shape != a.shape:
        raise ValueError(f"scan: {r.size} ranges but {a.size} angles")
    ok = np.isfinite(r) & (r > 0)
    pts = np.stack([r[ok] * np.cos(a[ok]), r[ok] * np.sin(a[ok])], 1)  # (P, 2): forward, left
    h = scan_headings(0.0)
    ends = step_m * np.stack([np.cos(h), np.sin(h)], 1)  # (K, 2)
    hit = (((pts[None] - ends[:, None]) ** 2).sum(-1) < radius_m ** 2).any(1)
    off = np.abs((a[None] - h[:, None] + np.pi) % (2 * np.pi) - np.pi)  # (K, N) angle from bin k to beam i
    covered = (off <= np.pi / SCAN_BINS + 1e-9).any(1) if a.size else np.zeros(SCAN_BINS, bool)
    return (covered & ~hit).astype(np.float32)


# 16-neighbour stencil (di, dj): king moves plus knight moves.
MOVES = [(di, dj) for di in range(-2, 3) for dj in range(-2, 3)
         if (di, dj) != (0, 0) and math.gcd(abs(di), abs(dj)) == 1]


def grid_distances(D: np.ndarray, free: np.ndarray, cell: float) -> np.ndarray:
    """Grid shortest-path distances over ``free`` cells (inf elsewhere) on the 16-neighbour
    stencil :data:`MOVES`, from every free cell with a finite start value in ``D`` (the start value
    is added: a seed of 2.0 is 2 m away before it moves). Dijkstra from one virtual source joined
    to the seeds by edges of their start values, on a sparse graph of the free cells."""
    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import dijkstra

    H, W = D.shape
    free = np.asarray(free, bool)
    start = np.where(free, D, np.inf)
    seeds = np.flatnonzero(np.isfinite(start))
    out = np.full(H * W, np.inf, np.float32)
    if seeds.size == 0:
        return out.reshape(H, W)
    cells = np.arange(H * W).reshape(H, W)
    rows, cols, weights = [np.full(seeds.size, H * W)], [seeds], [start.ravel()[seeds]]
    for di, dj in MOVES:
        if (di, dj) < (0, 0):  # the graph is undirected: each pair of moves once
            continue
        a = (slice(0, H - di), slice(max(-dj, 0), W - max(dj, 0)))
        b = (slice(di, H), slice(max(dj, 0), W - max(-dj, 0)))
        both = free[a] & free[b]
        rows.append(cells[a][both])
        cols.append(cells[b][both])
        weights.append(np.full(cols[-1].size, math.hypot(di, dj) * cell))
    graph = csr_matrix((np.concatenate(weights), (np.concatenate(rows), np.concatenate(cols))),
                       shape=(H * W + 1, H * W + 1))
    out[:] = dijkstra(graph, directed=False, indices=H * W)[:-1]
    return out.reshape(H, W)


def box5(mask: np.ndarray) -> np.ndarray:
    """Count of True cells in each cell's 5x5 neighbourhood (cells off the grid count as False)."""
    p = np.pad(mask.astype(np.int32), 2)
    c = np.pad(p.cumsum(0).cumsum(1), ((1, 0), (1, 0)))
    return c[5:, 5:] - c[:-5, 5:] - c[5:, :-5] + c[:-5, :-5]
