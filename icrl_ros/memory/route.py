"""Route memory: a bounded map of the floor the robot stood on, and the way back to a remembered goal.

The house students remember *where* their goal was (the object memory head reads the goal's
position out of the KV cache) but not *how to get there*: scripted navigators given the goal's
position and local free-space sensing reach it in a third of late episodes, one that plans
over the floor it stood on in 0.81 (``experiments/house_route_probe.py``). A
shortest path over a grid is not something one attention read computes, so the runtime keeps
the grid itself, beside the KV cache, and hands the policy the result as an input:

* **stood**: a ``CELLS`` x ``CELLS`` grid of ``CELL_M`` cells in the odometry frame (the house
  frame: ``pose_frame: house``), centred on its origin; every step marks the cell its pose lies in
  (the robot's track: floor its centre crossed, so a way along it keeps the clearance the robot had
  there; a band round the track lets shortest paths hug its edge, into what the robot walked round: with
  the 3-cell band of 0.35 m, a scripted follower of the route with the goal's position right, within 1 m,
  reached it in 0.61-0.65 of late episodes, on the track in 0.87);
* **sightings**: per goal category, the same weighted sum of sighted positions the object
  memory head's attention forms (weights ``exp(BETA (P - 1))`` of the frozen heads' confidence,
  the sink's ``exp(BETA (SIGHTING_P - 1))``), read from the token entries the step encoder writes
  (:func:`~icrl_ros.models.object_memory.object_struct`), and where the robot stood when it made
  a confident sighting (``SEEN_FROM_P``): places with a line of sight to an instance;
* **route**: when the goal's sighting mass exceeds one half (the head's gate), a distance field
  over the stood cells from those places (each seeded with its straight distance to the
  remembered position, times ``STRAIGHT_COST``) gives the route length from the robot and a waypoint: the
  farthest point down the field, within ``LOOKAHEAD_M`` of path, that a straight line over stood floor
  reaches (pure pursuit over the known floor: a waypoint round a corner would steer the robot into it),
  or the goal itself once the robot stands where it saw it from. The way leaves from the track cell
  within ``HOP_M`` of the pose that minimises hop + field (as the house teacher's plans do: the cell the
  pose lies in can be a step off the descent, which then leads back where the robot came from); a robot
  off the track (a new episode starts anywhere) heads for the track cell that minimises
  ``STRAIGHT_COST`` x its straight distance + field (a straight line over floor it does not know).

The policy reads :data:`ROUTE_DIM` numbers per step (``route`` encoder input, robot frame,
positions in units of ``scale_m``): found, the waypoint's (forward, left), its unit direction,
the route's cost (metres, its straight last part weighted by ``STRAIGHT_COST``). What to do with them is learnt. Sightings enter after the step that made
them (their token is encoded in the step that reads the route), the pose before it.

Bounded: ``CELLS^2 (1 + n_cat)`` bytes of grids and ``3 n_cat`` floats per env, whatever the
trial length. ``per_episode`` (models without inter-episode attention) clears an env's map when
its episode index changes, as their KV mask does."""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import Tensor

from icrl_ros.geometry import MOVES, grid_distances, relative_pose
from icrl_ros.models.object_memory import BETA, ROUTE_DIM, SIGHTING_P, STRUCT_DIM

CELL_M = 0.25
CELLS = 128
"""Grid side in cells: 32 m at ``CELL_M``, centred on the odometry frame's origin; poses
outside mark nothing."""
HOP_M = 0.5
"""The way leaves from the track cell within this of the pose that minimises hop + field."""
SEEN_FROM_P = 0.7
"""Heads' confidence at which the robot's cell is kept as a place the category was seen from."""
LOOKAHEAD_M = 1.0
"""The waypoint lies this far down the distance field (along the moves taken)."""
STRAIGHT_COST = 3.0
"""A metre of the straight line from a place the goal was seen from to the goal counts as this many
metres of floor stood on: the line may cross furniture (a line of sight is not a way), so routes
end at the place the robot saw the goal from closest unless it is far out of the way."""
MAX_LENGTH_M = 15.0
"""Route lengths are clipped here (they enter the network in units of ``scale_m``)."""


class GridWays:
    """Ways over a per-env ``CELLS`` x ``CELLS`` grid of ``CELL_M`` cells centred on the odometry frame's
    origin: cell arithmetic, where a way over a distance field leaves from, and the pure-pursuit waypoint
    down it (the route memory's and the frontier memory's, :mod:`icrl_ros.house.frontier`)."""

    scale_m: float
    batch: int
    per_episode: bool
    episode: np.ndarray

    @staticmethod
    def _cells(xy: np.ndarray) -> np.ndarray:
        """Odometry-frame positions (..., 2) in metres -> grid (row, col) (..., 2), may fall outside."""
        return np.floor(np.asarray(xy) / CELL_M).astype(np.int64) + CELLS // 2

    @staticmethod
    def _centre(ij: np.ndarray) -> np.ndarray:
        """Grid (row, col) (..., 2) -> the cells' centres in the odometry frame (metres): :meth:`_cells`' inverse."""
        return (np.asarray(ij) - CELLS // 2 + 0.5) * CELL_M

    @staticmethod
    def _inside(ij: np.ndarray) -> np.ndarray:
        return np.all((ij >= 0) & (ij < CELLS), axis=-1)

    def _clear_on(self, grid: np.ndarray, a: np.ndarray, z: np.ndarray) -> bool:
        """Whether the straight line a -> z (metres) stays on the True cells of ``grid`` (CELLS, CELLS)."""
        n = max(int(math.hypot(*(z - a)) / (CELL_M / 2)), 1)
        ij = self._cells(a + np.linspace(0.0, 1.0, n + 1)[:, None] * (z - a))
        return bool(self._inside(ij).all() and grid[ij[:, 0], ij[:, 1]].all())

    def _start(self, D: np.ndarray, origin: np.ndarray, xy: np.ndarray) -> tuple[tuple[int, int], float, bool] | None:
        """Where the way leaves from: (cell of the field's crop, route length from ``xy``, whether the robot
        first joins the track from off it); None when the field has no finite cell."""
        H, W = D.shape
        i, j = (int(v) for v in self._cells(xy) - origin)
        w = int(math.ceil(HOP_M / CELL_M))
        i0, j0 = min(max(i - w, 0), H), min(max(j - w, 0), W)  # (empty when the pose lies off the crop)
        ii, jj = np.mgrid[i0:max(min(i + w + 1, H), i0), j0:max(min(j + w + 1, W), j0)]
        for cells, weight, limit in (((ii, jj), 1.0, HOP_M), (np.nonzero(np.isfinite(D)), STRAIGHT_COST, math.inf)):
            ci, cj = (np.ravel(c) for c in cells)
            if not len(ci):
                continue
            centre = self._centre(np.stack([ci, cj], 1) + origin)
            hop = np.hypot(*(centre - xy).T)
            cost = np.where(hop <= limit, weight * hop + D[ci, cj], np.inf)
            k = int(np.argmin(cost))
            if math.isfinite(float(cost[k])):
                return (int(ci[k]), int(cj[k])), float(cost[k]), limit == math.inf
        return None

    @staticmethod
    def _down(D: np.ndarray, i: int, j: int) -> tuple[int, int] | None:
        """The next cell down the field from (i, j) by the moves it was relaxed over (a knight's move can be the
        only way down), or None at a minimum."""
        H, W = D.shape
        best = min(((i + di, j + dj) for di, dj in MOVES if 0 <= i + di < H and 0 <= j + dj < W), key=lambda c: D[c])
        return best if D[best] < D[i, j] else None

    @classmethod
    def _downhill(cls, D: np.ndarray, D0: np.ndarray, i: int, j: int):
        """The cells down the field from (i, j), one per move, until a seed (``D`` no longer below ``D0``) or a
        minimum."""
        while D[i, j] < D0[i, j]:
            best = cls._down(D, i, j)
            if best is None:
                return
            i, j = best
            yield best

    def _pursuit(self, grid: np.ndarray, D: np.ndarray, D0: np.ndarray, origin: np.ndarray, i: int, j: int,
                 odom: np.ndarray) -> np.ndarray:
        """From the way's start cell (i, j) of the field's crop: the farthest point down the field (within
        ``LOOKAHEAD_M``, stopping at a seed) that a straight line over ``grid``'s True cells reaches from the pose."""
        chain, went = [self._centre(np.array([i, j]) + origin)], 0.0
        for ni, nj in self._downhill(D, D0, i, j):
            went += math.hypot(ni - i, nj - j) * CELL_M
            i, j = ni, nj
            chain.append(self._centre(np.array([i, j]) + origin))
            if went >= LOOKAHEAD_M:
                break
        return next((p for p in reversed(chain[1:]) if self._clear_on(grid, odom[:2], p)),
                    chain[1] if len(chain) > 1 and np.hypot(*(chain[0] - odom[:2])) < CELL_M else chain[0])

    def _episodes(self, episode: Tensor) -> None:
        """Record each env's episode index; with ``per_episode``, forget the envs whose index changed first."""
        ep = episode.detach().cpu().numpy().astype(np.int64)
        if self.per_episode:
            changed = ep != self.episode
            if changed.any():
                self.reset(changed)
        self.episode[:] = ep

    @staticmethod
    def _write(inputs: dict[str, Tensor], name: str, out: np.ndarray) -> Tensor:
        """``out`` (B, ROUTE_DIM) into ``inputs[name]``: in place when that holds a tensor of its shape (the runner's
        bound buffer), else as a new entry."""
        value = torch.from_numpy(out)
        dst = inputs.get(name)
        if isinstance(dst, Tensor) and dst.shape == value.shape:
            dst.copy_(value)
        else:
            inputs[name] = value
        return inputs[name]

    def _features(self, odom: np.ndarray, waypoint: np.ndarray, length: float) -> np.ndarray:
        """The :data:`ROUTE_DIM` input entries of a way: found, the waypoint (forward, left) in units of
        ``scale_m``, its unit direction, the way's length (clipped at ``MAX_LENGTH_M``, units of ``scale_m``)."""
        fwd, left = (float(v) for v in relative_pose(tuple(odom), (*waypoint, 0.0))[:2])
        n = math.hypot(fwd, left) + 1e-6
        return np.array([1.0, fwd / self.scale_m, left / self.scale_m, fwd / n, left / n,
                         min(length, MAX_LENGTH_M) / self.scale_m], dtype=np.float32)


class RouteMemory(GridWays):
    """Per-env route memory for a batch of ``batch`` envs and ``n_cat`` goal categories."""

    def __init__(self, batch: int, n_cat: int, scale_m: float, per_episode: bool = False) -> None:
        self.batch, self.n_cat, self.scale_m, self.per_episode = batch, n_cat, float(scale_m), per_episode
        self.stood = np.zeros((batch, CELLS, CELLS), dtype=bool)
        self.seen_from = np.zeros((batch, n_cat, CELLS, CELLS), dtype=bool)
        self.sums = np.zeros((batch, n_cat, 3), dtype=np.float64)
        self.episode = np.full(batch, -1, dtype=np.int64)
        self._version = np.zeros(batch, dtype=np.int64)  # bumps when an env's grids change
        self._fields: list[tuple | None] = [None] * batch  # per env: (key, (field, crop origin, seed costs))
        self._sink = math.exp(BETA * (SIGHTING_P - 1.0))

    # -- state ------------------------------------------------------------------------------
    def reset(self, envs=None) -> None:
        """Forget everything (a new trial), or only ``envs`` (indices / bool mask)."""
        idx = slice(None) if envs is None else envs
        self.stood[idx] = False
        self.seen_from[idx] = False
        self.sums[idx] = 0.0
        self.episode[idx] = -1
        self._version[idx] += 1
        for b in np.arange(self.batch)[idx]:
            self._fields[b] = None

    def tensors(self) -> dict[str, Tensor]:
        """The state as tensors sharing its arrays (snapshots write them and load into them in
        place; call :meth:`restored` after loading)."""
        return {"route_stood": torch.from_numpy(self.stood), "route_seen_from": torch.from_numpy(self.seen_from),
                "route_sums": torch.from_numpy(self.sums), "route_episode": torch.from_numpy(self.episode)}

    def restored(self) -> None:
        """The arrays were loaded from a snapshot: drop cached routes."""
        self._version += 1
        self._fields = [None] * self.batch

    @property
    def nbytes(self) -> int:
        return self.stood.nbytes + self.seen_from.nbytes + self.sums.nbytes + self.episode.nbytes

    # -- per step ---------------------------------------------------------------------------
    def fill(self, inputs: dict[str, Tensor], episode: Tensor) -> Tensor:
        """Mark each env's current pose and write the route for its goal into ``inputs["route"]``
        (in place when the key holds a (B, ROUTE_DIM) tensor: the runner's bound buffer)."""
        odom = inputs["odom"].detach().cpu().double().numpy()
        goal = inputs["goal"].detach().cpu().numpy().astype(np.int64)
        self._episodes(episode)
        out = np.zeros((self.batch, ROUTE_DIM), dtype=np.float32)
        for b in range(self.batch):
            i, j = self._cells(odom[b, :2])
            if self._inside(np.array([i, j])) and not self.stood[b, i, j]:
                self.stood[b, i, j] = True
                self._version[b] += 1
            out[b] = self._route(b, odom[b], int(goal[b]))
        return self._write(inputs, "route", out)

    def observe(self, x: Tensor) -> None:
        """Take in this step's sightings from the tokens (B, D) the step encoder wrote."""
        s = x[..., -STRUCT_DIM:].detach().cpu().double().numpy()
        cat = np.rint(s[:, 1] * self.n_cat).astype(np.int64).clip(0, self.n_cat - 1)
        conf = s[:, 2]
        at = s[:, 3:5] * self.scale_m
        w = np.exp(BETA * (conf - 1.0))
        b = np.arange(self.batch)
        self.sums[b, cat, :2] += w[:, None] * at
        self.sums[b, cat, 2] += w
        sure = conf > SEEN_FROM_P
        if sure.any():
            cells = self._cells(s[:, 5:7] * self.scale_m)
            for k in np.flatnonzero(sure & self._inside(cells)):
                i, j = cells[k]
                if not self.seen_from[k, cat[k], i, j]:
                    self.seen_from[k, cat[k], i, j] = True
                    self._version[k] += 1

    # -- the route ----------------------------------------------------------------------------
    def remembered(self, b: int, cat: int) -> tuple[np.ndarray, float]:
        """Env b's remembered position of category ``cat`` (metres) and its sighting mass (the
        object memory head's gate reads the same number)."""
        sx, sy, sw = self.sums[b, cat]
        mass = sw / (sw + self._sink)
        if sw <= 0:
            return np.zeros(2), 0.0
        return np.array([sx / sw, sy / sw]), float(mass)

    def _field(self, b: int, cat: int, goal_xy: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """(distance field over a crop of the stood grid, the crop's origin cell, the seed costs);
        cached until env b's grids or the goal's cell change."""
        gcell = tuple(self._cells(goal_xy))
        key = (int(self._version[b]), cat, gcell)
        cached = self._fields[b]
        if cached is not None and cached[0] == key:
            return cached[1]
        stood = self.stood[b]
        rows, cols = np.flatnonzero(stood.any(1)), np.flatnonzero(stood.any(0))
        if not len(rows):
            return None
        r0, r1, c0, c1 = rows[0], rows[-1] + 1, cols[0], cols[-1] + 1
        free = stood[r0:r1, c0:c1]
        seeds = self.seen_from[b, cat, r0:r1, c0:c1] & free
        if not seeds.any():  # only sightings below SEEN_FROM_P: any stood cell, straight on from there
            seeds = free
        ii, jj = np.mgrid[r0:r1, c0:c1]
        centre = self._centre(np.stack([ii, jj], -1))
        straight = np.hypot(*(centre - goal_xy).transpose(2, 0, 1)).astype(np.float32)
        D0 = np.where(seeds, STRAIGHT_COST * straight, np.inf).astype(np.float32)
        D = grid_distances(D0, free, CELL_M)
        result = (D, np.array([r0, c0]), D0)
        self._fields[b] = (key, result)
        return result

    def _way(self, b: int, odom: np.ndarray, cat: int) -> tuple | None:
        """Where a way to category ``cat``'s remembered position starts from pose ``odom``: (the remembered
        position, the distance field, its crop origin, its seed costs, :meth:`_start`'s answer), or None (goal
        not remembered with mass above one half, or no stood floor joins a place it was seen from yet)."""
        if not 0 <= cat < self.n_cat:
            return None
        goal_xy, mass = self.remembered(b, cat)
        if mass <= 0.5:
            return None
        field = self._field(b, cat, goal_xy)
        if field is None:
            return None
        start = self._start(field[0], field[1], odom[:2])
        return None if start is None else (goal_xy, *field, start)

    def _route(self, b: int, odom: np.ndarray, cat: int) -> np.ndarray:
        feats = np.zeros(ROUTE_DIM, dtype=np.float32)
        way = self._way(b, odom, cat)
        if way is None:
            return feats
        goal_xy, D, origin, D0, ((i, j), length, joining) = way
        if joining:  # off the track: to the cell it joins at, straight over floor it does not know
            waypoint = self._centre(np.array([i, j]) + origin)
        elif D[i, j] >= D0[i, j]:  # seen from here: straight on to the goal
            waypoint = goal_xy
        else:  # the farthest point down the field (within LOOKAHEAD_M) in a straight line over stood floor
            waypoint = self._pursuit(self.stood[b], D, D0, origin, i, j, odom)
        return self._features(odom, waypoint, length)


__all__ = ["CELLS", "CELL_M", "GridWays", "ROUTE_DIM", "RouteMemory"]
