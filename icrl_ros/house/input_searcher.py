"""A scripted searcher that acts on what a house student is handed, with no learning; with ``teacher=inputs`` the
house env's teacher (its labels are then a rule on a student's own inputs).

The student reads, per step, the frozen encoder's features of the image, the route memory's way back to
its goal (:mod:`icrl_ros.memory.route`), the frontier memory's way to the nearest unlooked floor
(:mod:`icrl_ros.house.frontier`) and the free headings around it (``scan``). :class:`InputSearcher` keeps
the same two memories, fed the same way (the token entries the step encoder writes, from the same frozen
heads), and acts on them by rule:

1. stop when the heads give the goal P >= ``stop_p`` at an expected distance <= ``stop_m``;
2. with the goal in view (P >= ``present``) within ``CLOSE_IN_M``: head for where the heads put it (forward
   while it lies within a turn of straight ahead);
3. with a way to the remembered goal: head for its waypoint (until within ``ARRIVED_M`` of the remembered
   place, with the goal not in view: then the memory is wrong here, and it searches on); the route memory's way
   over the floor stood on, or with ``approach="looked"`` a way over the floor the camera looked at
   (:func:`~icrl_ros.house.frontier.way_over_looked`);
4. with a frontier: head for the frontier way's waypoint (at the frontier, with the waypoint under a step
   away: turn on the spot);
5. else turn on the spot.

Heading for a point takes the free heading closest to its bearing (:func:`~icrl_ros.sim.house_oracle.steer`:
what the ``scan`` input says). Its success beside a student on the same encoder is what the learnt policy
adds to (or loses from) its inputs.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from icrl_ros.geometry import relative_pose
from icrl_ros.house.frontier import (APPROACH_M, FrontierMemory, at_frontier, frontier_struct,
                                     way_over_looked)
from icrl_ros.memory.route import RouteMemory
from icrl_ros.models.encoders import OBJECT_SCALE_M
from icrl_ros.models.object_memory import object_struct
from icrl_ros.sim.house_oracle import FORWARD, TURN_LEFT, robot_frame_to_world, steer
from icrl_ros.sim.house_teacher import CLOSE_IN_M, STOP

ARRIVED_M = 0.75
"""Within this of the remembered goal with the goal not in view, the way back is dropped for this episode."""


class InputSearcher:
    """One trial of one :class:`~icrl_ros.sim.house.HouseEnv`. ``perceive(rgb, pose)`` -> (P per category (C,),
    implied positions (C, 2), expected distances (C,), floor distance per band (FREE_BANDS,)), ``pose`` and
    positions in the trial's house frame (the odometry of ``pose_frame: house``). Call :meth:`see`
    with every image before :meth:`act`; :meth:`episode_start` at every episode start (with ``memory=False``
    it wipes both memories)."""

    def __init__(self, env, perceive, memory: bool = True, present: float = 0.8, stop_p: float = 0.5,
                 stop_m: float = 1.0, approach: str = "route", stop_frames: int = 1) -> None:
        """``approach``: how rule 3 heads for the remembered goal: ``route``, the route memory's way (over the floor
        the robot stood on); ``looked``, a way over the frontier memory's looked-at floor to within
        ``APPROACH_M`` of it (the route memory's where none joins). ``stop_frames``: it stops once the heads have
        given the goal within reach (``stop_p``, ``stop_m``) in this many images in a row; before that it closes in
        on where they put it (a new view)."""
        if approach not in ("route", "looked"):
            raise ValueError(f"approach must be 'route' or 'looked', got {approach!r}")
        if int(stop_frames) < 1:
            raise ValueError(f"stop_frames must be >= 1, got {stop_frames!r}")
        self.stop_frames = int(stop_frames)
        self._stop_run = 0
        self.approach = approach
        self.env, self.perceive, self.memory = env, perceive, bool(memory)
        self.present, self.stop_p, self.stop_m = float(present), float(stop_p), float(stop_m)
        n_cat = int(env.observation_space["goal"].n)
        self.route = RouteMemory(1, n_cat, OBJECT_SCALE_M)
        # its own rule 2 handles a goal in view (within CLOSE_IN_M; farther it explores on): the frontier ungated
        self.front = FrontierMemory(1, OBJECT_SCALE_M, goal_gate=False)
        self.episode = -1
        self._seen = None
        self._known = False

    def _pose(self) -> np.ndarray:
        """The robot's pose in the trial's house frame (the odometry of ``pose_frame: house``)."""
        return np.array(self.env.pose_in("house"), dtype=np.float64)

    def _close_in(self, xy: np.ndarray, pose: np.ndarray) -> int:
        """Head for a house-frame point the heads put the goal at: forward while it lies within a turn of straight
        ahead and the step is free (turning for every wobble of the estimate dithers), else steer for it."""
        env = self.env
        fwd, left = (float(v) for v in relative_pose(tuple(pose), (float(xy[0]), float(xy[1]), 0.0))[:2])
        ahead = env.x + env.forward_step * math.cos(env.yaw), env.z - env.forward_step * math.sin(env.yaw)
        if abs(math.atan2(left, fwd)) <= env.turn_step and not env.nav.collides(*ahead):
            return FORWARD
        return steer(env, *robot_frame_to_world(env, fwd, left))

    def see(self, rgb: np.ndarray) -> None:
        """The heads' reading of the image the robot now faces."""
        self._seen = tuple(np.asarray(a, np.float64) for a in self.perceive(rgb, tuple(self._pose())))

    def heads_p(self, category: int) -> float:
        """The heads' P(in view) of ``category`` in the image last seen."""
        return float(self._seen[0][category])

    def episode_start(self) -> None:
        if not self.memory:
            self.route.reset()
            self.front.reset()
        self.episode += 1
        self.dropped = False
        self._stop_run = 0

    def goal_known(self) -> bool:
        """Whether the last :meth:`act` headed for the goal (in view, or by the route to where it was seen)."""
        return self._known

    def observe(self) -> None:
        """(The memories take the step's reading in :meth:`act`, after acting, as the runtime does.)"""

    def _token_tail(self) -> torch.Tensor:
        p, xy, _, free = self._seen
        pose = torch.tensor(self._pose(), dtype=torch.float64)[None]
        s = object_struct(torch.tensor(p)[None], torch.tensor(xy)[None], pose, torch.tensor([self.env.goal]),
                          OBJECT_SCALE_M)
        return torch.cat([frontier_struct(torch.tensor(free)[None], OBJECT_SCALE_M), s], -1)

    def act(self) -> int:
        g = int(self.env.goal)
        if self._seen is None:
            raise RuntimeError("InputSearcher: call see(rgb) before act()")
        pose = self._pose()
        inputs = {"odom": torch.tensor(pose, dtype=torch.float32)[None], "goal": torch.tensor([g])}
        episode = torch.tensor([self.episode])
        route = self.route.fill(inputs, episode)[0].numpy().astype(np.float64)
        front = self.front.fill(inputs, episode)[0].numpy().astype(np.float64)
        a = self._decide(g, route, front, pose)
        tail = self._token_tail()  # this step's reading enters the memories after the step, as in the runtime
        self.route.observe(tail)
        self.front.observe(tail)
        return a

    def _decide(self, g: int, route: np.ndarray, front: np.ndarray, pose: np.ndarray) -> int:
        env = self.env
        p, xy, dist, _ = self._seen
        self._known = True
        if p[g] >= self.stop_p and dist[g] <= self.stop_m:
            self._stop_run += 1
            if self._stop_run >= self.stop_frames:
                return STOP
            return self._close_in(xy[g], pose)
        self._stop_run = 0
        if p[g] >= self.present and dist[g] <= CLOSE_IN_M:
            return self._close_in(xy[g], pose)
        if route[0] > 0 and not self.dropped:
            goal_xy, _ = self.route.remembered(0, g)
            if math.hypot(*(goal_xy - pose[:2])) <= ARRIVED_M and p[g] < self.present:
                self.dropped = True  # where it was remembered, and not in view: search on
            else:
                way = route
                if self.approach == "looked":
                    looked = way_over_looked(self.front, 0, pose, goal_xy, APPROACH_M)
                    way = looked if looked[0] > 0 else route
                return steer(env, *robot_frame_to_world(env, way[1] * OBJECT_SCALE_M, way[2] * OBJECT_SCALE_M))
        self._known = False
        if front[0] > 0:
            if at_frontier(front, OBJECT_SCALE_M):
                return TURN_LEFT  # look round
            return steer(env, *robot_frame_to_world(env, front[1] * OBJECT_SCALE_M, front[2] * OBJECT_SCALE_M))
        return TURN_LEFT


__all__ = ["ARRIVED_M", "InputSearcher"]
