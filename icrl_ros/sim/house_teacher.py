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

With ``noise`` > 0 what it remembers from earlier episodes is coarse: at every episode start
each instance seen before is placed at its true position plus Gaussian noise of ``noise``
metres per axis (0.8 is a student's: its estimates are within 1.5 m for 84% of sightings);
a sighting in this episode makes it exact again. It walks to where stopping
would succeed round the remembered position; once there with the goal not sighted it turns
on the spot to look; after a full turn without a sighting it tries the next unlooked place
within ``SEARCH_M`` of the memory, and only then drops the instance and searches on. Its data
show a student what to do when its memory of a place is a metre off, which exact positions
never do.

Planning runs on every other cell of the env's navigation grid (0.2 m) and is redone every
``REPLAN`` steps or when the plan's target changes, so labelling costs a few milliseconds
per step.
"""

from __future__ import annotations

import dataclasses
import math
from typing import TYPE_CHECKING

import numpy as np

from icrl_ros.geometry import box5, grid_distances, planar, wrap_angle
from icrl_ros.sim.house_oracle import FORWARD, LOOKAHEAD, TURN_LEFT, TURN_RIGHT, approach, pursue, steer
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
SCAN_TURNS = 12  # turns on the spot (30 degrees each) before a remembered goal counts as not there
LOOKED_M = 1.0  # a full turn without a sighting: the floor this close counts as looked at
SEARCH_M = 2.5  # how far round a coarse memory it searches before it drops it
CLOSE_IN_M = 2.5  # PerceivingTeacher: a goal in view this close is headed for straight
REGROUP_M = 1.5  # PerceivingTeacher: a sighting this far from the running average starts a new one


class HouseTeacher:
    def __init__(self, env: HouseEnv, memory: bool = True, min_pixels: float = MIN_PIXELS, noise: float = 0.0,
                 rng: np.random.Generator | None = None, floor: str = "seen", whole_map: bool = True) -> None:
        """``min_pixels``: the size, in pixels of a 64x64 image, at which it recognises an instance.
        Above the recognition rule's ``MIN_PIXELS`` it knows only what a student's frozen encoder
        sees reliably (its P(in view) > 0.5 in 13% of frames at 10-20 pixels, 66% at 80-160;
        ``training/encoder_recall.py`` measures it), so imitation does not teach a student to act on sightings it missed.
        ``noise``: the error (metres per axis) of positions remembered from earlier episodes
        (module docstring); ``rng`` draws it (required when ``noise`` > 0).

        ``floor``: the floor it plans and explores over, ``"seen"`` (what its camera swept and where it
        stood) or ``"stood"`` (only within ``FOOTPRINT_M`` of where it stood: the map a memory of its
        own poses holds). ``whole_map``: when no known floor leads to a remembered goal, plan over the
        whole (privileged) map; :attr:`whole_map_plans` counts those plans. Diagnostics only
        (``experiments/house_route_probe.py``); the env's teacher keeps the defaults."""
        if min_pixels < MIN_PIXELS:
            raise ValueError(f"min_pixels must be >= the recognition rule's {MIN_PIXELS}, got {min_pixels!r}")
        if not noise >= 0:
            raise ValueError(f"noise must be >= 0 (metres per axis), got {noise!r}")
        if noise > 0 and rng is None:
            raise ValueError("noise > 0 needs an rng to draw the remembered positions' errors")
        self.env, self.memory, self.min_pixels = env, memory, float(min_pixels)
        self.noise, self.rng = float(noise), rng
        if floor not in ("seen", "stood"):
            raise ValueError(f"floor must be 'seen' or 'stood', got {floor!r}")
        self.floor, self.whole_map = floor, bool(whole_map)
        self.whole_map_plans = 0
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
        n = len(self.env.layout.objects)
        self.known = np.zeros(n, dtype=bool)
        self.guess = list(self.env.layout.objects)  # each instance where it is believed to be
        self.fresh = np.zeros(n, dtype=bool)  # sighted in this episode: its position is exact
        self.scan = 0  # turns taken on the spot looking for a remembered goal
        self.checked = np.zeros(self.free.shape, dtype=bool)  # floor looked around from, this episode
        self.looks = 0
        self._plan: tuple | None = None

    def episode_start(self) -> None:
        if not self.memory:
            self.wipe()
        elif self.noise > 0:  # memories from earlier episodes: coarse, as a student's
            objects = self.env.layout.objects
            for k in np.flatnonzero(self.known):
                ex, ez = self.rng.normal(0.0, self.noise, 2)
                self.guess[k] = dataclasses.replace(objects[k], x=objects[k].x + float(ex), z=objects[k].z + float(ez))
            self.fresh[:] = False
        self._plan, self.scan, self.looks = None, 0, 0
        self.checked[:] = False
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
        self.recognise(view)
        if len(view.floor_xz) and self.floor == "seen":
            i, j = self._index(view.floor_xz[:, 0], view.floor_xz[:, 1])
            self.seen[i, j] = True
        d2 = (self.X - env.x) ** 2 + (self.Z - env.z) ** 2
        self.seen |= d2 <= FOOTPRINT_M ** 2
        self.near |= d2 <= NEAR_M ** 2

    def recognise(self, view) -> None:
        """Take in the instances the current view shows: those of at least ``min_pixels``, at their
        true positions (exact for the rest of this episode)."""
        resolved = view.resolved(self.min_pixels)
        self.known |= resolved
        for k in np.flatnonzero(resolved & ~self.fresh):
            self.guess[k], self.fresh[k] = self.env.layout.objects[k], True

    def stop_now(self) -> bool:
        """Whether to stop here: an instance of the goal is in reach and in view."""
        return self.env.target_visible_in_reach()

    def goal_known(self) -> bool:
        """Whether an instance of the current goal category has been seen (this trial, or this
        episode when wiped): the teacher then heads straight for it instead of exploring."""
        env = self.env
        return any(self.known[k] and o.category == env.goal for k, o in enumerate(env.layout.objects))

    # -- acting ---------------------------------------------------------------------------------
    def _instance_mask(self, k: int) -> np.ndarray | None:
        """Where to go for instance k: where stopping would succeed round its believed position
        (for a remembered position whose sight lines are all blocked, e.g. one that fell inside
        a wall: a disc of free cells round it). For a coarse memory, the places already looked
        around from are left out, then the free floor within ``SEARCH_M`` of it; None once all
        of that has been looked at."""
        o = self.guess[k]
        key = (k, o.x, o.z)
        if key not in self._inst_masks:
            nav = self.env.nav
            d2 = (nav.X - o.x) ** 2 + (nav.Z - o.z) ** 2
            stop = nav.goal_mask([o], self.env.success_distance)
            if not stop.any() and o != self.env.layout.objects[k]:
                stop = nav.free & (d2 <= (o.cat.radius + self.env.success_distance) ** 2)
            self._inst_masks[key] = stop[::STRIDE, ::STRIDE], (nav.free & (d2 <= SEARCH_M ** 2))[::STRIDE, ::STRIDE]
        stop, around = self._inst_masks[key]
        if self.fresh[k]:
            return stop
        for mask in (stop & ~self.checked, around & ~self.checked):
            if mask.any():
                return mask
        return None

    def _look_for(self, k: int) -> int:
        """Turn on the spot where instance k may be; after a full turn without a sighting, mark
        the floor round here as looked at and go on to the next place it may be (or drop it when
        none is left: a sighting brings it back)."""
        self.scan += 1
        if self.scan <= SCAN_TURNS:
            return TURN_LEFT
        env = self.env
        self.checked |= (self.X - env.x) ** 2 + (self.Z - env.z) ** 2 <= LOOKED_M ** 2
        self.looks += 1
        self.scan, self._plan = 0, None
        return self.act()

    def _frontier(self, known_floor: np.ndarray) -> np.ndarray:
        unseen = self.free & ~known_floor
        return self.free & known_floor & (box5(unseen) >= MIN_UNSEEN)

    def _target(self) -> tuple[tuple, np.ndarray | None, bool]:
        """(plan key, zero cells of the distance field, whether to plan over the whole map)."""
        env = self.env
        goal_known = [k for k, o in enumerate(env.layout.objects) if self.known[k] and o.category == env.goal]
        masks = {k: self._instance_mask(k) for k in goal_known}
        for k in [k for k in goal_known if masks[k] is None]:  # looked everywhere near where it was
            self.known[k] = False
            goal_known.remove(k)
        if goal_known:
            target = np.zeros(self.free.shape, dtype=bool)
            for k in goal_known:
                target |= masks[k]
            return ("goal", env.goal, tuple(goal_known), tuple(self.fresh[goal_known]), self.looks), target, False
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
        if self.stop_now():
            return STOP
        key, target, _ = self._target()
        nearest, looking = None, False  # looking: the goal is remembered from an earlier episode, coarse
        if key[0] == "goal":
            guess = self.guess
            nearest = min(key[2], key=lambda k: math.hypot(guess[k].x - env.x, guess[k].z - env.z))
            looking = not self.fresh[nearest]
            if looking and self.scan > 0:  # looking around for it: finish the turn
                return self._look_for(nearest)
            # (not where it already looked around: it goes on to the next place it may be)
            near = None if looking and self.checked[self._index(env.x, env.z)] else approach(env, guess[nearest])
            if near is not None and looking and near not in (TURN_LEFT, TURN_RIGHT):
                return self._look_for(nearest)  # facing the remembered position, the goal not in sight
            if near is not None:
                return near
        if target is None:
            return TURN_LEFT  # nothing left to search: look around
        plan = self._plan
        if plan is None or plan[0] != key or plan[2] >= REPLAN:
            D = self._distances(target, False)
            start = self._start_cell(D)
            if start is None and key[0] == "goal" and self.whole_map:  # no known way there: trust the whole map
                D = self._distances(target, True)
                start = self._start_cell(D)
                self.whole_map_plans += 1
            self._plan = plan = [key, D, 0]
        else:
            start = self._start_cell(plan[1])
        plan[2] += 1
        if start is None:
            self._plan = None
            if key[0] == "goal" and looking:  # no way to where it is remembered
                return self._look_for(nearest)
            return TURN_LEFT
        D = plan[1]
        if D[start] == 0.0:  # at the frontier (or the goal region): look again next step
            self._plan = None
            if key[0] != "goal":
                return TURN_LEFT
            if looking:  # where it is remembered, not sighted yet
                return self._look_for(nearest)
            return pursue(env, [(float(self.xs[start[1]]), float(self.zs[start[0]]))])
        path = self.env.nav.descend(D, start, max_steps=int(LOOKAHEAD / self.cell) + 3)
        return pursue(env, [(float(self.xs[j]), float(self.zs[i])) for i, j in path])


class PerceivingTeacher(HouseTeacher):
    """The teacher's search on a student's perception: a scripted searcher with no learning.

    It plans and explores as :class:`HouseTeacher` does (the floor its camera swept, the nearest
    frontier, the look-around where a coarse memory puts the goal), but what it recognises, where it
    believes a sighting lies and when it stops come from ``perceive``, a frozen detector run on the
    camera image (e.g. a student's encoder and its label heads):

    * a category whose P(in view) is at least ``present`` is a sighting, at the position the detector
      implies (robot pose + expected bearing and distance). Sightings of a category are averaged
      (weighted by P) into as many places as the category has instances (their count, not their
      positions): a sighting joins the nearest place within ``REGROUP_M``, else a free one, else
      replaces the one with the least evidence. Every place is coarse: there the searcher looks
      around, and drops the place when a full turn shows nothing;
    * it stops when the detector gives the goal P >= ``stop_p`` at an expected distance <= ``stop_m``.

    ``perceive(rgb, pose)`` -> (P per category (C,), implied positions (C, 2), expected distances (C,), ...),
    with ``pose`` and the positions in the planar world frame (x, y = -z, yaw) of
    :func:`~icrl_ros.geometry.planar`. Call :meth:`see` with
    every image the robot acts on, before :meth:`observe` (the env does not call this teacher).
    """

    def __init__(self, env: HouseEnv, perceive, memory: bool = True, present: float = 0.5, stop_p: float = 0.5,
                 stop_m: float = 1.0, whole_map: bool = True) -> None:
        self.perceive, self.present, self.stop_p, self.stop_m = perceive, float(present), float(stop_p), float(stop_m)
        self._p = self._xy = self._dist = None
        super().__init__(env, memory=memory, whole_map=whole_map)
        self.slots: dict[int, list[int]] = {}  # per category: the instance slots its sightings fill
        for k, o in enumerate(env.layout.objects):
            self.slots.setdefault(o.category, []).append(k)
        self.sightings = 0

    def wipe(self) -> None:
        super().wipe()
        self._sums: dict[int, tuple[float, float, float]] = {}  # per instance: P-weighted sums of its sightings

    def see(self, rgb: np.ndarray) -> None:
        """The detector's reading of the image the robot now faces."""
        pose = planar((self.env.x, self.env.z, self.env.yaw))
        self._p, self._xy, self._dist = (np.asarray(a, np.float64) for a in self.perceive(rgb, pose)[:3])

    def heads_p(self, category: int) -> float:
        """The detector's P(in view) of ``category`` in the image last seen."""
        return float(self._p[category])

    def recognise(self, view) -> None:
        if self._p is None:
            raise RuntimeError("PerceivingTeacher: call see(rgb) before observe()")
        objects = self.env.layout.objects
        for c in np.flatnonzero(self._p >= self.present):
            slots = self.slots.get(int(c))
            if not slots:
                continue
            x, z, w = float(self._xy[c, 0]), -float(self._xy[c, 1]), float(self._p[c])
            k = self._slot(slots, x, z)
            sx, sz, sw = self._sums.get(k, (0.0, 0.0, 0.0)) if self.known[k] else (0.0, 0.0, 0.0)
            sx, sz, sw = sx + w * x, sz + w * z, sw + w
            self._sums[k] = (sx, sz, sw)
            self.guess[k] = dataclasses.replace(objects[k], x=sx / sw, z=sz / sw)
            self.known[k] = True
            self.sightings += 1
            if objects[k].category == self.env.goal:  # sighted again: look where it now puts it
                self.scan, self.looks, self._plan = 0, 0, None
                self.checked[:] = False
        if len(self._inst_masks) > 512:
            self._inst_masks.clear()

    def _slot(self, slots: list[int], x: float, z: float) -> int:
        """The slot a sighting at (x, z) updates: the nearest held one within ``REGROUP_M``, else a free
        one, else the one with the least evidence (started again)."""
        held = [k for k in slots if self.known[k]]
        if held:
            d = [math.hypot(self.guess[k].x - x, self.guess[k].z - z) for k in held]
            if min(d) <= REGROUP_M:
                return held[int(np.argmin(d))]
        free = [k for k in slots if not self.known[k]]
        if free:
            return free[0]
        k = min(held, key=lambda k: self._sums.get(k, (0.0, 0.0, 0.0))[2])
        self.known[k] = False
        return k

    def stop_now(self) -> bool:
        g = int(self.env.goal)
        return bool(self._p[g] >= self.stop_p and self._dist[g] <= self.stop_m)

    def act(self) -> int:
        """As the teacher, except with the goal in view but not yet near enough to stop: turn to it
        or, within ``CLOSE_IN_M``, head straight for where the detector puts it (the teacher would
        stop sooner: its sightings are exact)."""
        env = self.env
        g, o = int(env.goal), None
        if not self.stop_now() and self._p[g] >= self.present:
            x, z = float(self._xy[g, 0]), -float(self._xy[g, 1])
            held = [k for k in self.slots[g] if self.known[k]]  # observe() took this sighting into one of them
            o = min((self.guess[k] for k in held), key=lambda o: math.hypot(o.x - x, o.z - z)) if held else None
        if o is not None:
            bearing = wrap_angle(math.atan2(-(o.z - env.z), o.x - env.x) - env.yaw)
            ahead = env.x + env.forward_step * math.cos(env.yaw), env.z - env.forward_step * math.sin(env.yaw)
            if abs(bearing) <= env.turn_step and not env.nav.collides(*ahead):
                return FORWARD  # roughly ahead: close in (turning for every wobble of the estimate would dither)
            near = approach(env, o)
            if near is None and self._dist[g] <= CLOSE_IN_M:  # short of reach: close in on it
                near = steer(env, o.x, o.z)
            if near is not None:
                return near
        return super().act()


def encoder_searcher(mode: str, env: HouseEnv, perceive, **opts):
    """The scripted searcher of an encoder teacher mode (:data:`~icrl_ros.sim.house.SEEING_TEACHERS`) on ``perceive``:
    ``seeing*`` a :class:`PerceivingTeacher`, ``inputs*`` the input searcher
    (:class:`~icrl_ros.house.input_searcher.InputSearcher`); ``*_wiped`` without memory across episodes. ``opts``
    go to its constructor."""
    if mode.startswith("inputs"):
        from icrl_ros.house.input_searcher import InputSearcher as searcher
    else:
        searcher = PerceivingTeacher
    return searcher(env, perceive, memory=not mode.endswith("_wiped"), **opts)
