"""Navigation geometry of a house layout (pure numpy): free space, geodesic distances,
collisions and visibility.

The agent is a disc of ``agent_radius`` on the floor. ``NavGrid`` rasterises where its
centre may be (cells of ``cell`` metres, walls and objects inflated by the radius plus a
margin so that a free cell is really collision-free), keeps the largest connected free
region (starts are drawn there), and computes geodesic distance fields to goal regions
with a vectorised 16-neighbour Bellman-Ford (exact grid shortest paths; the 16-neighbour
stencil keeps the error against Euclidean length under ~3%).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from icrl_ros.geometry import MOVES, grid_distances

if TYPE_CHECKING:
    from icrl_ros.sim.house_layout import HouseLayout, ObjectInstance

def segments_cross(p0: np.ndarray, p1: np.ndarray, walls: np.ndarray) -> np.ndarray:
    """Whether each segment p0[k]->p1[k] (K, 2) properly crosses any wall (S, 2, 2): (K,)."""
    if len(walls) == 0 or len(p0) == 0:
        return np.zeros(len(p0), dtype=bool)
    a, b = p0[:, None, :], p1[:, None, :]  # (K, 1, 2)
    c, d = walls[None, :, 0, :], walls[None, :, 1, :]  # (1, S, 2)

    def orient(u, v, w):  # sign of the cross product (v - u) x (w - u)
        return (v[..., 0] - u[..., 0]) * (w[..., 1] - u[..., 1]) - (v[..., 1] - u[..., 1]) * (w[..., 0] - u[..., 0])

    o1, o2, o3, o4 = orient(a, b, c), orient(a, b, d), orient(c, d, a), orient(c, d, b)
    eps = 1e-9
    straddle_ab = ((o1 > eps) & (o2 < -eps)) | ((o1 < -eps) & (o2 > eps))  # c, d on both sides of ab
    straddle_cd = ((o3 > eps) & (o4 < -eps)) | ((o3 < -eps) & (o4 > eps))
    hit = straddle_ab & straddle_cd
    return hit.any(axis=1)


def circle_hits_walls(x: float, z: float, r: float, walls: np.ndarray) -> bool:
    """Whether a disc at (x, z) overlaps any wall segment."""
    if len(walls) == 0:
        return False
    p = np.array([x, z])
    a, b = walls[:, 0], walls[:, 1]
    ab = b - a
    t = np.clip(((p - a) * ab).sum(1) / np.maximum((ab * ab).sum(1), 1e-12), 0.0, 1.0)
    closest = a + t[:, None] * ab
    return bool((((closest - p) ** 2).sum(1) < r * r).any())


class NavGrid:
    """Free-space grid of a layout for an agent disc; geodesic distance fields on it."""

    def __init__(
        self, layout: HouseLayout, agent_radius: float = 0.25, cell: float = 0.1, margin: float = 0.05
    ) -> None:
        self.layout = layout
        self.agent_radius, self.cell = agent_radius, cell
        self.walls = layout.wall_segments()  # (S, 2, 2): collisions
        # Sight lines: walls stretched 2 cm at both ends, so that a line through the exact
        # corner where two walls meet (grid cell centres hit corners) counts as blocked.
        d = self.walls[:, 1] - self.walls[:, 0]
        d = d / np.maximum(np.linalg.norm(d, axis=1, keepdims=True), 1e-12)
        self.sight_walls = np.stack([self.walls[:, 0] - 0.02 * d, self.walls[:, 1] + 0.02 * d], axis=1)
        min_x, max_x, min_z, max_z = layout.bounds
        self.x0, self.z0 = min_x - 2 * cell, min_z - 2 * cell
        nx = int(math.ceil((max_x - self.x0) / cell)) + 2
        nz = int(math.ceil((max_z - self.z0) / cell)) + 2
        self.xs = self.x0 + (np.arange(nx) + 0.5) * cell  # cell centres (nx,)
        self.zs = self.z0 + (np.arange(nz) + 0.5) * cell  # (nz,)
        X, Z = np.meshgrid(self.xs, self.zs)  # (nz, nx): rows are z, columns x
        self.X, self.Z = X, Z

        walkable = np.zeros(X.shape, dtype=bool)
        for x0, x1, z0, z1 in layout.walkable_rects():
            walkable |= (X > x0) & (X < x1) & (Z > z0) & (Z < z1)
        # Erode by the clearance: a centre is free if no non-walkable centre lies within
        # clearance + cell / 2 (the true clearance is then > clearance - 0.21 cell).
        clearance = agent_radius + margin
        k = int(math.ceil((clearance + cell / 2) / cell))
        free = walkable.copy()
        padded = np.pad(walkable, k, constant_values=False)
        for di in range(-k, k + 1):
            for dj in range(-k, k + 1):
                if math.hypot(di, dj) * cell <= clearance + cell / 2:
                    free &= padded[k + di: k + di + X.shape[0], k + dj: k + dj + X.shape[1]]
        for o in layout.objects:
            free &= (X - o.x) ** 2 + (Z - o.z) ** 2 >= (o.cat.radius + clearance) ** 2
        self.free_all = free
        # Keep the largest connected region (the house proper; pockets behind furniture go).
        self.free = self._largest_component(free)

    # -- grid helpers ------------------------------------------------------------------
    def index(self, x: float, z: float) -> tuple[int, int]:
        """(row, col) of the cell containing (x, z), clipped to the grid."""
        i = int(min(max((z - self.z0) // self.cell, 0), len(self.zs) - 1))  # scalars: no numpy call
        j = int(min(max((x - self.x0) // self.cell, 0), len(self.xs) - 1))
        return i, j

    def _relax(self, D: np.ndarray, free: np.ndarray) -> np.ndarray:
        return grid_distances(D, free, self.cell)

    def _largest_component(self, free: np.ndarray) -> np.ndarray:
        remaining, best = free.copy(), np.zeros_like(free)
        while remaining.sum() > best.sum():
            seed = np.zeros_like(free)
            seed[tuple(np.argwhere(remaining)[0])] = True
            D = self._relax(np.where(seed, 0.0, np.inf), free)
            comp = np.isfinite(D)
            if comp.sum() > best.sum():
                best = comp
            remaining &= ~comp
        return best

    # -- queries ---------------------------------------------------------------------------
    def doors_connected(self) -> bool:
        """Every room and every door passage has free cells in the main region."""
        for x0, x1, z0, z1 in self.layout.walkable_rects():
            inside = (self.X > x0) & (self.X < x1) & (self.Z > z0) & (self.Z < z1)
            if not (inside & self.free).any():
                return False
        return True

    def goal_mask(self, instances: list[ObjectInstance], success_distance: float = 1.0) -> np.ndarray:
        """Free cells within ``success_distance`` of an instance's surface with a clear line
        of sight (no wall) to its centre: where stopping can succeed."""
        mask = np.zeros(self.free.shape, dtype=bool)
        for o in instances:
            near = self.free & ((self.X - o.x) ** 2 + (self.Z - o.z) ** 2 <= (o.cat.radius + success_distance) ** 2)
            ij = np.argwhere(near)
            if len(ij) == 0:
                continue
            p0 = np.stack([self.xs[ij[:, 1]], self.zs[ij[:, 0]]], axis=1)
            blocked = segments_cross(p0, np.broadcast_to(np.array([o.x, o.z]), p0.shape), self.sight_walls)
            mask[ij[~blocked, 0], ij[~blocked, 1]] = True
        return mask

    def distance_field(self, goal: np.ndarray) -> np.ndarray:
        """Geodesic distance (m) from every free cell to the goal cells; inf elsewhere."""
        return self._relax(np.where(goal & self.free, 0.0, np.inf), self.free)

    def geodesic(self, D: np.ndarray, x: float, z: float) -> float:
        """Geodesic distance of a continuous point: min over nearby free cells of the straight
        hop to the cell plus the cell's distance. Hops stay shorter than a wall's inflated
        thickness, so they never pass through walls."""
        return self.nearest_on_path(D, x, z)[0]

    def nearest_on_path(self, D: np.ndarray, x: float, z: float) -> tuple[float, tuple[int, int] | None]:
        """(geodesic distance, the free cell that realises it) for a continuous point."""
        i, j = self.index(x, z)
        for w, reach in ((4, 0.45), (10, 1.05)):
            sl = (slice(max(i - w, 0), i + w + 1), slice(max(j - w, 0), j + w + 1))
            hop = np.hypot(self.X[sl] - x, self.Z[sl] - z)
            d = np.where(hop <= reach, hop + D[sl], np.inf)
            k = int(np.argmin(d))
            best = float(d.flat[k])
            if math.isfinite(best):
                return best, (sl[0].start + k // d.shape[1], sl[1].start + k % d.shape[1])
        return math.inf, None

    def descend(self, D: np.ndarray, cell: tuple[int, int], max_steps: int = 40) -> list[tuple[int, int]]:
        """Cells of a shortest path from ``cell`` down the distance field towards D == 0."""
        path = [cell]
        H, W = D.shape
        while len(path) <= max_steps:
            i, j = path[-1]
            if D[i, j] == 0.0:
                break
            best, nxt = D[i, j], None
            for di, dj in MOVES:
                a, b = i + di, j + dj
                if 0 <= a < H and 0 <= b < W and D[a, b] < best:
                    best, nxt = D[a, b], (a, b)
            if nxt is None:
                break
            path.append(nxt)
        return path

    def segment_free(self, x0: float, z0: float, x1: float, z1: float) -> bool:
        """Whether the straight move between two points stays on free cells (the start
        itself may be off the grid's free cells: the agent can stand closer to obstacles
        than the grid's safety margin)."""
        length = math.hypot(x1 - x0, z1 - z0)
        n = max(int(length / (self.cell / 2)), 1)
        start = min(self.cell / max(length, 1e-9), 1.0)
        for t in np.linspace(start, 1.0, n + 1):
            if not self.free[self.index(x0 + t * (x1 - x0), z0 + t * (z1 - z0))]:
                return False
        return True

    def collides(self, x: float, z: float, radius: float | None = None) -> bool:
        """Whether the agent disc at (x, z) overlaps a wall or an object."""
        r = self.agent_radius if radius is None else radius
        if circle_hits_walls(x, z, r, self.walls):
            return True
        # Outside every walkable rect (possible only through a numerical slip) counts as a hit.
        if not any(x0 < x < x1 and z0 < z < z1 for x0, x1, z0, z1 in self.layout.walkable_rects()):
            return True
        return any((x - o.x) ** 2 + (z - o.z) ** 2 < (o.cat.radius + r) ** 2 for o in self.layout.objects)


    def laser(self, x: float, z: float, yaw: float, angles: np.ndarray, range_max: float) -> np.ndarray:
        """A planar laser at (x, z) facing ``yaw``: the range of beam i (at ``yaw + angles[i]``, counter-clockwise)
        to the nearest wall or object, ``inf`` where nothing lies within ``range_max``. (len(angles),) float64."""
        h = yaw + np.asarray(angles, np.float64)
        d = np.stack([np.cos(h), -np.sin(h)], 1)  # world (x, z) directions: z points the other way from left
        best = np.full(len(h), np.inf)
        if len(self.walls):  # o + t d = a + u e, 0 <= u <= 1, t > 0
            a, e = self.walls[:, 0] - np.array([x, z]), self.walls[:, 1] - self.walls[:, 0]
            den = d[:, None, 0] * e[None, :, 1] - d[:, None, 1] * e[None, :, 0]
            safe = np.where(np.abs(den) > 1e-12, den, np.nan)
            t = (a[None, :, 0] * e[None, :, 1] - a[None, :, 1] * e[None, :, 0]) / safe
            u = (a[None, :, 0] * d[:, None, 1] - a[None, :, 1] * d[:, None, 0]) / safe
            best = np.where((t > 0) & (u >= 0) & (u <= 1), t, np.inf).min(1)
        if self.layout.objects:
            c = np.array([[o.x - x, o.z - z] for o in self.layout.objects])
            r2 = np.array([o.cat.radius ** 2 for o in self.layout.objects])
            proj = d @ c.T  # (N, O)
            gap = r2[None] - ((c * c).sum(1)[None] - proj ** 2)
            t = proj - np.sqrt(np.maximum(gap, 0.0))
            best = np.minimum(best, np.where((gap > 0) & (t > 0), t, np.inf).min(1))
        best[best > range_max] = np.inf
        return best


def visible(
    instances: list[ObjectInstance],
    cam: tuple[float, float, float],
    yaw: float,
    pitch_deg: float,
    fov_y_deg: float,
    aspect: float,
    walls: np.ndarray,
    occluders: list[ObjectInstance] = (),
) -> np.ndarray:
    """Which instances show in the camera image: some sample point on the object (centre
    line and sides, three heights) projects inside the frustum, its line of sight crosses
    no wall, and no taller object stands in the way. Returns (len(instances),) bool."""
    if not instances:
        return np.zeros(0, dtype=bool)
    cx, cy, cz = cam
    p = math.radians(pitch_deg)
    # Camera basis in world (x, y, z): forward, right, up (MiniWorld conventions).
    f = np.array([math.cos(p) * math.cos(yaw), math.sin(p), -math.cos(p) * math.sin(yaw)])
    r = np.array([math.sin(yaw), 0.0, math.cos(yaw)])
    u = np.cross(r, f)
    ty = math.tan(math.radians(fov_y_deg) / 2)
    tx = ty * aspect
    pts, owner = [], []
    for k, o in enumerate(instances):
        rad, h = o.cat.radius, o.cat.height
        view = np.array([o.x - cx, o.z - cz])
        view = view / max(np.linalg.norm(view), 1e-6)
        side = np.array([-view[1], view[0]])
        # A 5 x 3 grid across the silhouette facing the camera, plus the nearest point.
        for lat in (-0.85, -0.45, 0.0, 0.45, 0.85):
            for frac in (0.1, 0.5, 0.9):
                pts.append((o.x + lat * rad * side[0], h * frac, o.z + lat * rad * side[1]))
                owner.append(k)
        pts.append((o.x - 0.8 * rad * view[0], h * 0.5, o.z - 0.8 * rad * view[1]))
        owner.append(k)
    P = np.array(pts)  # (M, 3)
    owner = np.array(owner)
    v = P - np.array(cam)
    zc, xc, yc = v @ f, v @ r, v @ u
    in_frustum = (zc > 0.05) & (np.abs(xc) <= 0.98 * tx * zc) & (np.abs(yc) <= 0.98 * ty * zc)
    p0 = np.broadcast_to(np.array([cx, cz]), (len(P), 2))
    ok = in_frustum & ~segments_cross(p0, P[:, [0, 2]], walls)
    # Occlusion by other objects: the sight line passes over an occluder's (shrunk) disc
    # below its top.
    for o in occluders:
        d = P[:, [0, 2]] - p0
        L2 = np.maximum((d * d).sum(1), 1e-12)
        t = np.clip(((np.array([o.x, o.z]) - p0) * d).sum(1) / L2, 0.0, 1.0)
        dist = np.hypot(p0[:, 0] + t * d[:, 0] - o.x, p0[:, 1] + t * d[:, 1] - o.z)
        height_at = cy + t * (P[:, 1] - cy)
        own = np.array([instances[k] is o for k in owner])
        ok &= ~((dist < 0.7 * o.cat.radius) & (height_at < o.cat.height) & (t < 0.98) & ~own)
    out = np.zeros(len(instances), dtype=bool)
    np.logical_or.at(out, owner, ok)
    return out
