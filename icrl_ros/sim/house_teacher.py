"""The in-context house teacher: object search that knows only what the robot could know.

A :class:`HouseTeacher` belongs to one :class:`~icrl_ros.sim.house.HouseEnv` trial and uses
only what the robot could have learnt in it so far:

* its own pose (the ``house`` pose frame: one frame for the trial);
* the floor its camera has swept (rays of :func:`~icrl_ros.sim.house_view.cast_view` that
  land on the floor) plus the floor it stood on;
* the object instances that showed in its images at a size the camera resolves (at least
  ``MIN_PIXELS`` of a 64x64 frame, or a larger ``min_pixels``), with their categories and
  positions.

Behaviour: if an instance of the goal category has been seen, take the shortest path over
known free floor to where stopping succeeds (within reach, line of sight), face it and
stop; otherwise explore: walk to the nearest frontier of unseen floor. With ``memory=False``
everything is wiped at every episode start (the floor of the curves); the privileged
shortest-path oracle (:func:`~icrl_ros.sim.house_oracle.oracle_action`) is the ceiling.

Planning runs on every other cell of the env's navigation grid (0.2 m) and is redone every
``REPLAN`` steps or when the plan's target changes, so labelling costs a few milliseconds
per step.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from icrl_ros.sim.house_nav import grid_distances
from icrl_ros.sim.house_oracle import LOOKAHEAD, TURN_LEFT, approach, pursue
from icrl_ros.sim.house_render import CAMERA_HEIGHT, CAMERA_PITCH_DEG, FOV_Y_DEG
from icrl_ros.sim.house_view import MIN_PIXELS, cast_view

if TYPE_CHECKING:
    from icrl_ros.sim.house import HouseEnv

STOP = 0
STRIDE = 2  # planning grid: every STRIDE-th cell of the navigation grid
REPLAN = 4  # steps a plan is followed before it is recomputed
RECOGNITION_SIZE = 64  # the recognition rule is stated for a 64x64 image
FOOTPRINT_M = 0.5  # floor around the robot it knows by standing there
NEAR_M = 2.0  # second-stage exploration: floor within this of where it has been
MIN_UNSEEN = 4  # a frontier needs this many unseen free cells in its 5x5 neighbourhood


def _box5(mask: np.ndarray) -> np.ndarray:
    """Count of True cells in each cell's 5x5 neighbourhood."""
    p = np.pad(mask.astype(np.int32), 2)
    c = p.cumsum(0).cumsum(1)
    c = np.pad(c, ((1, 0), (1, 0)))
    return c[5:, 5:] - c[:-5, 5:] - c[5:, :-5] + c[:-5, :-5]


class HouseTeacher:
    def __init__(self, env: HouseEnv, memory: bool = True, min_pixels: float = MIN_PIXELS) -> None:
        """``min_pixels``: the size, in pixels of a 64x64 image, at which it recognises an instance.
        Above the recognition rule's ``MIN_PIXELS`` it knows only what a student's frozen encoder
        sees reliably (its P(in view) > 0.5 in 13% of frames at 10-20 pixels, 66% at 80-160:
        BENCHMARKS.md), so imitation does not teach a student to act on sightings it missed."""
        if min_pixels < MIN_PIXELS:
            raise ValueError(f"min_pixels must be >= the recognition rule's {MIN_PIXELS}, got {min_pixels!r}")
        self.env, self.memory, self.min_pixels = env, memory, float(min_pixels)
        nav = env.nav
        self.free = nav.free[::STRIDE, ::STRIDE]
        self.xs, self.zs = nav.xs[::STRIDE], nav.zs[::STRIDE]
        self.cell = nav.cell * STRIDE
        self.X, self.Z = nav.X[::STRIDE, ::STRIDE], nav.Z[::STRIDE, ::STRIDE]
        self._inst_masks: dict[int, np.ndarray] = {}
        self.view = None  # the last observe()'s cast
        self.wipe()

    # -- what it knows ------------------------------------------------------------------------
    def wipe(self) -> None:
        """Forget the trial: swept floor, places stood on, seen instances, the current plan."""
        self.seen = np.zeros(self.free.shape, dtype=bool)
        self.near = np.zeros(self.free.shape, dtype=bool)
        self.known = np.zeros(len(self.env.layout.objects), dtype=bool)
        self._plan: tuple | None = None

    def episode_start(self) -> None:
        if not self.memory:
            self.wipe()
        self._plan = None
        self.observe()

    def _index(self, x: np.ndarray, z: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        i = np.clip(np.rint((np.asarray(z) - self.zs[0]) / self.cell), 0, len(self.zs) - 1).astype(np.int64)
        j = np.clip(np.rint((np.asarray(x) - self.xs[0]) / self.cell), 0, len(self.xs) - 1).astype(np.int64)
        return i, j

    def observe(self) -> None:
        """Take in the current camera view and pose (after every step and episode start)."""
        env = self.env
        view = cast_view(env.layout, env.nav.walls, env.x, env.z, env.yaw, RECOGNITION_SIZE,
                         CAMERA_HEIGHT, CAMERA_PITCH_DEG, FOV_Y_DEG)
        self.view = view  # the current image's cast (for diagnostics: house_label_noise --encoder)
        self.known |= view.resolved(self.min_pixels)
        if len(view.floor_xz):
            i, j = self._index(view.floor_xz[:, 0], view.floor_xz[:, 1])
            self.seen[i, j] = True
        d2 = (self.X - env.x) ** 2 + (self.Z - env.z) ** 2
        self.seen |= d2 <= FOOTPRINT_M ** 2
        self.near |= d2 <= NEAR_M ** 2

    def goal_known(self) -> bool:
        """Whether an instance of the current goal category has been seen (this trial, or this
        episode when wiped): the teacher then heads straight for it instead of exploring."""
        env = self.env
        return any(self.known[k] and o.category == env.goal for k, o in enumerate(env.layout.objects))

    # -- acting ---------------------------------------------------------------------------------
    def _instance_mask(self, k: int) -> np.ndarray:
        if k not in self._inst_masks:
            o = self.env.layout.objects[k]
            self._inst_masks[k] = self.env.nav.goal_mask([o], self.env.success_distance)[::STRIDE, ::STRIDE]
        return self._inst_masks[k]

    def _frontier(self, known_floor: np.ndarray) -> np.ndarray:
        unseen = self.free & ~known_floor
        return self.free & known_floor & (_box5(unseen) >= MIN_UNSEEN)

    def _target(self) -> tuple[tuple, np.ndarray | None, bool]:
        """(plan key, zero cells of the distance field, whether to plan over the whole map)."""
        env = self.env
        goal_known = [k for k, o in enumerate(env.layout.objects) if self.known[k] and o.category == env.goal]
        if goal_known:
            target = np.zeros(self.free.shape, dtype=bool)
            for k in goal_known:
                target |= self._instance_mask(k)
            return ("goal", env.goal, tuple(goal_known)), target, False
        for stage, floor in (("explore", self.seen), ("revisit", self.near)):
            front = self._frontier(floor)
            if front.any():
                return (stage,), front, False
        return ("lost",), None, False

    def _distances(self, target: np.ndarray, whole_map: bool) -> np.ndarray:
        passable = self.free if whole_map else self.free & (self.seen | target)
        return grid_distances(np.where(target, 0.0, np.inf), passable, self.cell)

    def _start_cell(self, D: np.ndarray) -> tuple[int, int] | None:
        """The planning cell to leave from: min over cells within a short straight hop."""
        env = self.env
        i, j = self._index(env.x, env.z)
        w = 3
        sl = (slice(max(int(i) - w, 0), int(i) + w + 1), slice(max(int(j) - w, 0), int(j) + w + 1))
        hop = np.hypot(self.X[sl] - env.x, self.Z[sl] - env.z)
        cost = np.where(hop <= 0.5, hop + D[sl], np.inf)
        k = int(np.argmin(cost))
        if not math.isfinite(float(cost.flat[k])):
            return None
        return sl[0].start + k // cost.shape[1], sl[1].start + k % cost.shape[1]

    def act(self) -> int:
        """The teacher's action for the env's current state."""
        env = self.env
        if env.target_visible_in_reach():
            return STOP
        key, target, _ = self._target()
        objects = env.layout.objects
        if key[0] == "goal":
            nearest = min(key[2], key=lambda k: math.hypot(objects[k].x - env.x, objects[k].z - env.z))
            near = approach(env, objects[nearest])
            if near is not None:
                return near
        if target is None:
            return TURN_LEFT  # nothing left to search: look around
        plan = self._plan
        if plan is None or plan[0] != key or plan[2] >= REPLAN:
            D = self._distances(target, False)
            start = self._start_cell(D)
            if start is None and key[0] == "goal":  # no known way there: trust the whole map
                D = self._distances(target, True)
                start = self._start_cell(D)
            self._plan = plan = [key, D, 0]
        else:
            start = self._start_cell(plan[1])
        plan[2] += 1
        if start is None:
            self._plan = None
            return TURN_LEFT
        D = plan[1]
        if D[start] == 0.0:  # at the frontier (or the goal region): look again next step
            self._plan = None
            return TURN_LEFT if key[0] != "goal" else pursue(env, [(float(self.xs[start[1]]), float(self.zs[start[0]]))])
        path = self.env.nav.descend(D, start, max_steps=int(LOOKAHEAD / self.cell) + 3)
        return pursue(env, [(float(self.xs[j]), float(self.zs[i])) for i, j in path])
