"""Frontier memory: a bounded map of the floor the camera has looked at, and the way to the nearest edge of it.

Without memory of a house (its first episode) a searcher finds what it is asked for by looking at every part
of the floor once. The in-context teacher walks to the nearest frontier of the floor its camera swept; a
student without that map wanders, and half of the default's first episodes end without the goal ever in
view. The runtime keeps the map beside the KV cache, from what the frozen encoder's heads say of each image,
and hands the policy the way to the nearest frontier as an input (what to do with it is learnt):

* **looked**: a ``CELLS`` x ``CELLS`` grid of ``CELL_M`` cells in the odometry frame (the route memory's
  grid, :mod:`icrl_ros.memory.route`). The heads give, per column band of the image
  (:data:`~icrl_ros.models.encoders.FREE_BANDS` across the camera's field of view), the floor distance to the
  first wall or object; every step marks the floor of each band's wedge out to that distance, or to
  ``LOOK_M`` (objects farther away are too small to recognise), as looked at; the robot's own footprint too;
* **blocked**: where a band ends within ``WALL_SURE_M`` (a wall or an object), the cell just beyond gains
  evidence of an obstacle, and rays that pass over a cell take evidence away (``BLOCKED_HIT``);
* **frontier**: looked-at cells with at least ``MIN_UNKNOWN`` unknown cells (neither looked at nor within a
  cell of a blocked one) in their 5x5 neighbourhood and no blocked cell next to them;
* **given up**: a target frontier whose way has not got ``PROGRESS_M`` shorter in ``STALL_STEPS`` steps (a cell
  the robot's body cannot reach beside an obstacle the map does not hold, a frontier that a look round does not
  clear) is given up for the rest of the episode, with the frontier cells round it, and the way leads to the next;
* **goal in view**: while the heads' most confident category at the last step is the goal at P >= ``GOAL_IN_VIEW_P``,
  there is no way (nothing to explore for);
* **way**: a distance field over the looked-at floor (clear of blocked cells) from the frontier gives the
  nearest frontier's path length and a waypoint down it, picked as the route memory picks its waypoints (the
  farthest point within ``LOOKAHEAD_M`` of path in a straight line over the floor); at a frontier, the
  waypoint points into the unknown cells round it.

The policy reads :data:`~icrl_ros.models.object_memory.ROUTE_DIM` numbers per step (``frontier`` encoder
input, robot frame, in units of ``scale_m``): found, the waypoint's (forward, left), its unit direction, the
path length. The heads' band distances enter the map after the step whose image they describe (they are
token entries the step encoder writes, :func:`frontier_struct`), the pose before it.

Bounded: ``3 CELLS^2`` bytes of grids per env, whatever the trial length. ``per_episode`` (models without
inter-episode attention) clears an env's map when its episode index changes, as their KV mask does.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import Tensor

from icrl_ros.geometry import band_edges, bands_from_scan, box5, grid_distances
from icrl_ros.memory.route import CELL_M, CELLS, GridWays
from icrl_ros.models.encoders import FREE_BANDS
from icrl_ros.models.object_memory import ROUTE_DIM, SIGHTING_P, STRUCT_DIM

LOOK_M = 3.5
"""Floor farther than this along a band does not count as looked at: an object there covers too few pixels
for the frozen encoder (its recall is below 0.3 under 20 px, the size of a small object at about 3.5 m)."""
WALL_SURE_M = 2.8
"""A band that ends nearer than this marks the cell beyond it blocked. Farther, its end may be a doorway's
lintel (the house camera, 0.9 m up and pitched 15 degrees down, sees the 2.2 m lintel of a door from about 2.85 m
away, and a band's distance is that of the nearest obstacle pixel in it): the floor beyond stays unknown, a
frontier, until the robot comes close enough to tell a wall from a door."""
BLOCKED_HIT, BLOCKED_MAX = 2, 6
"""A band's end adds BLOCKED_HIT to its cell's evidence (up to BLOCKED_MAX), a ray passing over it takes one
away; a cell with at least BLOCKED_HIT is blocked. (Clearing a cell at the first ray over it let two views of
one spot disagree for ever: the way flipped with every turn.)"""
FOOTPRINT_M = 0.5
"""Floor within this of the pose counts as looked at (the robot stands on it; the camera misses what is
under it)."""
TARGET_CELLS = 2
"""The way leads to the frontier cells within this many cells of the env's target frontier cell while any is
left; then to the nearest frontier, which becomes the target (a way that jumped to whichever frontier is
nearest after every step would turn the robot back and forth between two)."""
GOAL_IN_VIEW_P = SIGHTING_P
"""While the heads gave the goal at least this P at the last step, the frontier input says no way: the policy closes
in on what it sees (a frontier head that fired there, with nothing in its inputs to tell, pulled away from it)."""
REPLAN = 4
"""Steps a frontier way's waypoint is held before the way is planned again."""
ARRIVED_M = 0.3
"""A held waypoint this close is reached: the way is planned again. A way this short to a waypoint this close: the
robot stands at the frontier (:func:`at_frontier`)."""
MIN_UNKNOWN = 4
"""A frontier cell has at least this many unknown cells in its 5x5 neighbourhood (as the teacher's)."""
STALL_STEPS = 16
"""Steps a way to one target frontier may go without getting ``PROGRESS_M`` shorter before that frontier is given up
(more than a look round on the spot: 12 turns). Without it a frontier the robot cannot reach or clear held it for
the rest of the episode, turning or stepping back and forth."""
PROGRESS_M = 0.25
"""A way to the target frontier this much shorter than its shortest so far is progress."""
APPROACH_M = 1.0
"""A way to a sighting over looked-at floor (:func:`way_over_looked`) ends within this of its position."""
FRONTIER_DIM = ROUTE_DIM
FREE_STRUCT = FREE_BANDS
"""Token entries before the object memory's that carry the band distances (:func:`frontier_struct`)."""
_RANGE_STEP = CELL_M / 2
_BEARINGS_PER_BAND = 3


def frontier_struct(free_m: Tensor, scale_m: float) -> Tensor:
    """The token entries the frontier memory reads: the heads' floor distance per band (..., FREE_BANDS) in
    metres, clipped to [0, ``LOOK_M``] + a cell (so a band that ends beyond the look range says so), in units
    of ``scale_m``."""
    return free_m.clamp(0.0, LOOK_M + CELL_M) / scale_m


def _grow(mask: np.ndarray) -> np.ndarray:
    """``mask`` grown by one cell (8-neighbourhood)."""
    p = np.pad(mask, 1)
    out = np.zeros_like(mask)
    for di in range(3):
        for dj in range(3):
            out |= p[di:di + mask.shape[0], dj:dj + mask.shape[1]]
    return out


class FrontierMemory(GridWays):
    """Per-env frontier memory for a batch of ``batch`` envs."""

    def __init__(self, batch: int, scale_m: float, per_episode: bool = False, goal_gate: bool = True) -> None:
        """``goal_gate``: no way while the goal was in view at the last step (``GOAL_IN_VIEW_P``; the control step's
        state always gates; a scripted searcher with a rule of its own for a goal in view may not)."""
        self.batch, self.scale_m, self.per_episode, self.goal_gate = batch, float(scale_m), per_episode, goal_gate
        self.looked = np.zeros((batch, CELLS, CELLS), dtype=bool)
        self.blocked = np.zeros((batch, CELLS, CELLS), dtype=np.uint8)  # evidence: ends add, rays passing over subtract
        self.episode = np.full(batch, -1, dtype=np.int64)
        self.target = np.full((batch, 2), -1, dtype=np.int64)  # the frontier cell each env's way leads to
        # each env's last plan: waypoint (x, y), the way's length beyond it, steps it has been held (-1: none)
        self.plan = np.zeros((batch, 3), dtype=np.float64)
        self.plan_age = np.full(batch, -1, dtype=np.int64)
        self.goal_p = np.zeros(batch, dtype=np.float64)  # the heads' P(goal in view) at each env's last step
        self.given_up = np.zeros((batch, CELLS, CELLS), dtype=bool)  # frontier cells given up this episode
        # per env: the target the stall count is for (cell), its way's shortest length so far, steps since it shrank
        self.stall_target = np.full((batch, 2), -1, dtype=np.int64)
        self.best = np.full(batch, np.inf, dtype=np.float64)
        self.stall = np.zeros(batch, dtype=np.int64)
        edges = band_edges()
        # per band: bearings across its wedge (robot frame) and the ranges sampled along each
        frac = (np.arange(_BEARINGS_PER_BAND) + 0.5) / _BEARINGS_PER_BAND
        self._bearings = edges[:-1, None] + (edges[1:] - edges[:-1])[:, None] * frac  # (bands, k)
        self._centres = (edges[:-1] + edges[1:]) / 2
        self._ranges = np.arange(0.0, LOOK_M + 1e-9, _RANGE_STEP)
        ii, jj = np.mgrid[-2:3, -2:3]
        self._foot = np.stack([ii, jj], -1).reshape(-1, 2)[(ii.ravel() ** 2 + jj.ravel() ** 2) * CELL_M ** 2
                                                            <= FOOTPRINT_M ** 2]

    # -- state ------------------------------------------------------------------------------
    def reset(self, envs=None) -> None:
        """Forget everything (a new trial), or only ``envs`` (indices / bool mask)."""
        idx = slice(None) if envs is None else envs
        self.looked[idx] = False
        self.blocked[idx] = 0
        self.episode[idx] = -1
        self.target[idx] = -1
        self.plan_age[idx] = -1
        self.goal_p[idx] = 0.0
        self._forget_stalls(idx)

    def _forget_stalls(self, idx) -> None:
        self.given_up[idx] = False
        self.stall_target[idx] = -1
        self.best[idx] = np.inf
        self.stall[idx] = 0

    def tensors(self) -> dict[str, Tensor]:
        """The state as tensors sharing its arrays (snapshots write them and load into them in place)."""
        return {"frontier_looked": torch.from_numpy(self.looked), "frontier_blocked": torch.from_numpy(self.blocked),
                "frontier_episode": torch.from_numpy(self.episode), "frontier_target": torch.from_numpy(self.target),
                "frontier_plan": torch.from_numpy(self.plan), "frontier_plan_age": torch.from_numpy(self.plan_age),
                "frontier_goal_p": torch.from_numpy(self.goal_p), "frontier_given_up": torch.from_numpy(self.given_up),
                "frontier_stall_target": torch.from_numpy(self.stall_target),
                "frontier_best": torch.from_numpy(self.best), "frontier_stall": torch.from_numpy(self.stall)}

    def restored(self) -> None:
        """The arrays were loaded from a snapshot (nothing is cached)."""

    @property
    def nbytes(self) -> int:
        return (self.looked.nbytes + self.blocked.nbytes + self.episode.nbytes + self.target.nbytes + self.plan.nbytes
                + self.plan_age.nbytes + self.goal_p.nbytes + self.given_up.nbytes + self.stall_target.nbytes
                + self.best.nbytes + self.stall.nbytes)

    # -- per step ---------------------------------------------------------------------------
    def mark(self, b: int, pose: np.ndarray, bands_m: np.ndarray) -> None:
        """Env b looked from ``pose`` (x, y, yaw; odometry frame) and its heads put the first obstacle of each
        band at ``bands_m`` (FREE_BANDS,) metres."""
        x, y, yaw = (float(v) for v in pose[:3])
        here = self._cells(np.array([x, y]))
        foot = here + self._foot
        foot = foot[self._inside(foot)]
        self.looked[b, foot[:, 0], foot[:, 1]] = True
        reach = np.minimum(bands_m, LOOK_M)
        ang = yaw + self._bearings  # (bands, k)
        r = self._ranges[None, None, :]
        shape = (*ang.shape, len(self._ranges))
        px = x + r * np.cos(ang)[..., None]
        py = y + r * np.sin(ang)[..., None]
        for keep, looked in ((np.broadcast_to(r <= reach[:, None, None], shape), True),
                             (np.broadcast_to(r < reach[:, None, None] - CELL_M, shape), False)):
            ij = np.unique(self._cells(np.stack([px[keep], py[keep]], -1)), axis=0)
            ij = ij[self._inside(ij)]
            if looked:
                self.looked[b, ij[:, 0], ij[:, 1]] = True
            else:  # floor a ray passed over: less evidence of an obstacle there
                cells = self.blocked[b, ij[:, 0], ij[:, 1]]
                self.blocked[b, ij[:, 0], ij[:, 1]] = np.where(cells > 0, cells - 1, 0)
        short = np.flatnonzero(bands_m < WALL_SURE_M)
        if len(short):
            a = yaw + self._centres[short]
            d = bands_m[short] + CELL_M / 2
            ij = np.unique(self._cells(np.stack([x + d * np.cos(a), y + d * np.sin(a)], -1)), axis=0)
            ij = ij[self._inside(ij)]
            cells = self.blocked[b, ij[:, 0], ij[:, 1]].astype(np.int64)
            self.blocked[b, ij[:, 0], ij[:, 1]] = np.minimum(cells + BLOCKED_HIT, BLOCKED_MAX)

    def observe(self, x: Tensor) -> None:
        """Take in what this step's tokens (B, D) say: the pose and the band distances the step encoder wrote."""
        tail = x[..., -(STRUCT_DIM + FREE_STRUCT):].detach().cpu().double().numpy()
        bands = tail[:, :FREE_STRUCT] * self.scale_m
        s = tail[:, FREE_STRUCT:]
        pose = np.stack([s[:, 5] * self.scale_m, s[:, 6] * self.scale_m, np.arctan2(s[:, 8], s[:, 7])], 1)
        # the struct names the heads' most confident category (/ C) and its P; the goal is entry 0 (/ C)
        self.goal_p[:] = np.where(np.abs(s[:, 1] - s[:, 0]) < 1e-6, s[:, 2], 0.0)
        for b in range(self.batch):
            self.mark(b, pose[b], bands[b])

    def _episodes(self, episode: Tensor) -> None:
        """As the route memory's; a new episode also forgets the frontiers given up in the last one."""
        changed = episode.detach().cpu().numpy().astype(np.int64) != self.episode
        if changed.any():
            self._forget_stalls(changed)
        super()._episodes(episode)

    def fill(self, inputs: dict[str, Tensor], episode: Tensor) -> Tensor:
        """Write each env's way to its nearest frontier into ``inputs["frontier"]`` (in place when the key holds
        a (B, FRONTIER_DIM) tensor: the runner's bound buffer)."""
        odom = inputs["odom"].detach().cpu().double().numpy()
        self._episodes(episode)
        return self._write(inputs, "frontier", np.stack([self.way_input(b, odom[b]) for b in range(self.batch)]))

    # -- the way ------------------------------------------------------------------------------
    def floor(self, b: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
        """Env b's looked-at cells, cells next to a blocked one and passable floor over a crop round what it looked
        at, and the crop's origin cell; None before it looked at anything."""
        looked = self.looked[b]
        rows, cols = np.flatnonzero(looked.any(1)), np.flatnonzero(looked.any(0))
        if not len(rows):
            return None
        r0, c0 = max(rows[0] - 3, 0), max(cols[0] - 3, 0)
        r1, c1 = min(rows[-1] + 4, CELLS), min(cols[-1] + 4, CELLS)
        seen, blocked = looked[r0:r1, c0:c1], self.blocked[b, r0:r1, c0:c1] >= BLOCKED_HIT
        return seen, _grow(blocked), seen & ~blocked, np.array([r0, c0])

    def frontier(self, b: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
        """Env b's frontier cells, passable floor and unknown cells over :meth:`floor`'s crop, and the crop's
        origin cell; None before it looked at anything."""
        crop = self.floor(b)
        if crop is None:
            return None
        seen, near_block, passable, origin = crop
        unknown = ~seen & ~near_block
        front = passable & ~near_block & (box5(unknown) >= MIN_UNKNOWN)
        front &= ~self.given_up[b, origin[0]:origin[0] + front.shape[0], origin[1]:origin[1] + front.shape[1]]
        return front, passable, unknown, origin

    def _waypoint(self, start, D: np.ndarray, D0: np.ndarray, passable: np.ndarray, origin: np.ndarray,
                  odom: np.ndarray, at_seed) -> np.ndarray:
        """The waypoint of a way leaving from :meth:`_start`'s ``start`` down the field ``D`` over the crop's
        ``passable`` floor: the cell it joins at when off that floor, ``at_seed(i, j)`` when it stands at a seed,
        else the farthest point down the field a straight line over that floor reaches."""
        (i, j), _, joining = start
        if joining:  # off the floor it looked at: to the cell it joins at
            return self._centre(np.array([i, j]) + origin)
        if D[i, j] <= 0.0:
            return at_seed(i, j)
        grid = np.zeros((CELLS, CELLS), dtype=bool)
        grid[origin[0]:origin[0] + D.shape[0], origin[1]:origin[1] + D.shape[1]] = passable
        return self._pursuit(grid, D, D0, origin, i, j, odom)

    def _field(self, seeds: np.ndarray, passable: np.ndarray, origin: np.ndarray, odom: np.ndarray):
        D0 = np.where(seeds, 0.0, np.inf).astype(np.float32)
        D = grid_distances(D0, passable, CELL_M)
        return self._start(D, origin, odom[:2]), D, D0

    @classmethod
    def _around(cls, front: np.ndarray, cell: np.ndarray) -> np.ndarray:
        """The frontier cells of the crop within ``TARGET_CELLS`` (rows and columns) of its cell ``cell``; none when
        ``cell`` lies off the crop."""
        near = np.zeros_like(front)
        i, j = (int(v) for v in cell)
        if 0 <= i < front.shape[0] and 0 <= j < front.shape[1]:
            box = cls._target_box(cell)
            near[box] = front[box]
        return near

    @staticmethod
    def _target_box(cell: np.ndarray) -> tuple[slice, slice]:
        """The map's cells within ``TARGET_CELLS`` (rows and columns) of map cell ``cell``."""
        i, j = (int(v) for v in cell)
        t = TARGET_CELLS
        return slice(max(i - t, 0), i + t + 1), slice(max(j - t, 0), j + t + 1)

    def _towards(self, b: int, front: np.ndarray, passable: np.ndarray, origin: np.ndarray, odom: np.ndarray):
        """(way start, field, seeds' costs) towards env b's target frontier: the frontier cells within
        ``TARGET_CELLS`` of the target while any is left, else (a new target) the nearest frontier cell by way."""
        if self.target[b, 0] >= 0:
            near = self._around(front, self.target[b] - origin)
            if near.any():
                start, D, D0 = self._field(near, passable, origin, odom)
                if start is not None:
                    return start, D, D0
        start, D, D0 = self._field(front, passable, origin, odom)
        if start is None:
            self.target[b] = -1
            return None, D, D0
        down = list(self._downhill(D, D0, *start[0]))  # down the field to the frontier cell the way ends at
        i, j = down[-1] if down else start[0]
        self.target[b] = (i + origin[0], j + origin[1])
        return self._field(self._around(front, np.array([i, j])), passable, origin, odom)

    def way_input(self, b: int, odom: np.ndarray) -> np.ndarray:
        """The ``frontier`` input of env b at pose ``odom``: zeros when no frontier is left, none was looked at, or
        (gated) the goal was in view at the last step.
        A plan is held ``REPLAN`` steps while its waypoint is farther than ``ARRIVED_M`` and its target frontier
        is left (a plan redone at every step follows every change the last view made to the map, and a robot
        turning to it turns back and forth)."""
        feats, length = self._way_input(b, odom)
        if feats[0] > 0 and self._stalled(b, length):  # give the target up: the way to the next frontier
            self.given_up[(b, *self._target_box(self.target[b]))] = True
            self.target[b], self.plan_age[b] = -1, -1
            feats, length = self._way_input(b, odom)
            self._stalled(b, length)
        return feats

    def _stalled(self, b: int, length: float) -> bool:
        """Count env b's steps without progress on its way to its target frontier; whether it is to be given up."""
        if (self.stall_target[b] != self.target[b]).any():
            self.stall_target[b], self.best[b], self.stall[b] = self.target[b], length, 0
        elif length < self.best[b] - PROGRESS_M:
            self.best[b], self.stall[b] = length, 0
        else:
            self.stall[b] += 1
        return self.target[b, 0] >= 0 and self.stall[b] >= STALL_STEPS

    def _way_input(self, b: int, odom: np.ndarray) -> tuple[np.ndarray, float]:
        crop = self.frontier(b)
        feats = np.zeros(FRONTIER_DIM, dtype=np.float32)
        goal_in_view = self.goal_gate and self.goal_p[b] >= GOAL_IN_VIEW_P
        if crop is None or goal_in_view:  # the goal in view: no way (the plan is kept)
            return feats, math.inf
        front, passable, unknown, origin = crop
        if not front.any():
            self.target[b], self.plan_age[b] = -1, -1
            return feats, math.inf
        if 0 <= self.plan_age[b] < REPLAN - 1 and self.target[b, 0] >= 0:
            gap = math.hypot(*(self.plan[b, :2] - odom[:2]))
            if gap > ARRIVED_M and self._around(front, self.target[b] - origin).any():
                self.plan_age[b] += 1
                length = gap + self.plan[b, 2]
                return self._features(odom, self.plan[b, :2], length), length
        return self._plan(b, front, passable, unknown, origin, odom)

    def _plan(self, b: int, front: np.ndarray, passable: np.ndarray, unknown: np.ndarray, origin: np.ndarray,
              odom: np.ndarray) -> tuple[np.ndarray, float]:
        feats = np.zeros(FRONTIER_DIM, dtype=np.float32)
        start, D, D0 = self._towards(b, front, passable, origin, odom)
        if start is None:
            return feats, math.inf
        def into_unknown(i: int, j: int) -> np.ndarray:  # at a frontier: into the unknown round it
            ii, jj = np.nonzero(unknown[max(i - 2, 0):i + 3, max(j - 2, 0):j + 3])
            return self._centre(np.stack([ii + max(i - 2, 0), jj + max(j - 2, 0)], 1).mean(0) + origin)

        length = start[1]
        waypoint = self._waypoint(start, D, D0, passable, origin, odom, into_unknown)
        gap = math.hypot(*(waypoint - odom[:2]))
        self.plan[b] = (*waypoint, max(length - gap, 0.0))
        self.plan_age[b] = 0
        return self._features(odom, waypoint, length), length


def way_over_looked(memory: FrontierMemory, b: int, odom: np.ndarray, xy: np.ndarray, radius_m: float) -> np.ndarray:
    """The way (:data:`FRONTIER_DIM` entries, as the ``frontier`` input's) from pose ``odom`` over env b's looked-at
    floor to within ``radius_m`` of the point ``xy`` (odometry frame, metres): zeros when no looked-at floor lies
    there or none joins it. A sighting's way over the floor the camera swept, where the route memory's runs over
    the floor the robot stood on."""
    feats = np.zeros(FRONTIER_DIM, dtype=np.float32)
    crop = memory.floor(b)
    if crop is None:
        return feats
    _seen, _near_block, passable, origin = crop
    ii, jj = np.mgrid[0:passable.shape[0], 0:passable.shape[1]]
    centre = memory._centre(np.stack([ii, jj], -1) + origin)
    seeds = passable & (np.hypot(*(centre - np.asarray(xy, np.float64)).transpose(2, 0, 1)) <= radius_m)
    if not seeds.any():
        return feats
    start, D, D0 = memory._field(seeds, passable, origin, odom)
    if start is None:
        return feats
    there = lambda i, j: np.asarray(xy, np.float64)  # noqa: E731 - within reach of it: straight on to the point
    return memory._features(odom, memory._waypoint(start, D, D0, passable, origin, odom, there), start[1])


def at_frontier(way: np.ndarray, scale_m: float) -> np.ndarray:
    """Whether ``frontier`` inputs (..., FRONTIER_DIM) say the robot stands at the frontier: a way shorter than
    ``ARRIVED_M`` to a waypoint within ``ARRIVED_M`` (there a follower turns on the spot to look)."""
    way = np.asarray(way)
    near = np.hypot(way[..., 1], way[..., 2]) * scale_m < ARRIVED_M
    return (way[..., 0] > 0) & (way[..., 5] * scale_m < ARRIVED_M) & near


class FrontierState(FrontierMemory):
    """:class:`FrontierMemory` fed by the control step (:class:`~icrl_ros.extensions.StepState`): it writes the
    ``frontier`` input before the encoder and takes in each committed token's band distances."""

    def before_encode(self, inputs: dict[str, Tensor], episode: Tensor) -> None:
        self.fill(inputs, episode)

    def after_encode(self, token: Tensor) -> None:
        self.observe(token)


__all__ = ["APPROACH_M", "ARRIVED_M", "FOOTPRINT_M", "FREE_STRUCT", "FRONTIER_DIM", "FrontierMemory", "FrontierState",
           "GOAL_IN_VIEW_P", "LOOK_M", "MIN_UNKNOWN", "WALL_SURE_M", "at_frontier", "band_edges", "bands_from_scan",
           "frontier_struct", "way_over_looked"]
