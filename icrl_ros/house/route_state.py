"""The route memory as the control step's extension state (:class:`~icrl_ros.extensions.StepState`)."""

from __future__ import annotations

import math

import numpy as np
from torch import Tensor

from icrl_ros.memory.route import RouteMemory


class RouteState(RouteMemory):
    """:class:`~icrl_ros.memory.route.RouteMemory` fed by the control step: it writes the ``route``
    input before the encoder and takes in each committed token's sightings. What a viewer shows of the
    last step is kept (None after a reset or load): ``last_route``, the ``route`` input it wrote (B,
    ROUTE_DIM) (the way the policy was handed); ``last_pose`` (B, 3) and ``last_goal`` (B,), the
    step's odometry and goal (the fixed heads' queries, :mod:`icrl_ros.house.memory_view`)."""

    last_route: Tensor | None = None
    _last: tuple[Tensor, Tensor] | None = None  # the step's odom and goal inputs, read only when shown

    def before_encode(self, inputs: dict[str, Tensor], episode: Tensor) -> None:
        self.last_route = self.fill(inputs, episode)
        # references, no copy: a step pays nothing for a viewer (the runner's bound input buffers keep the
        # step's values until its next step, and viewers read between steps)
        self._last = (inputs["odom"], inputs["goal"])

    @property
    def last_pose(self) -> np.ndarray | None:
        return None if self._last is None else self._last[0].detach().cpu().double().numpy().reshape(self.batch, -1)

    @property
    def last_goal(self) -> np.ndarray | None:
        return None if self._last is None else self._last[1].detach().cpu().numpy().astype(np.int64).reshape(-1)

    def after_encode(self, token: Tensor) -> None:
        self.observe(token)

    def reset(self, envs=None) -> None:
        super().reset(envs)
        if envs is None:
            self.last_route, self._last = None, None

    def restored(self) -> None:
        super().restored()
        self.last_route, self._last = None, None

    def way(self, b: int = 0) -> tuple[np.ndarray, float] | None:
        """The whole way the memory gives now from the last step's pose to its goal, as the route input's
        waypoint is picked from it: (points (N, 2) in the odometry frame: the pose, the track cell the way
        leaves from, the cells down the distance field to a place the goal was seen from, the remembered
        goal position; the route's cost in metres); None when the memory has no way (goal not remembered
        with mass above one half, no stood floor joins a place it was seen from, or no step yet)."""
        if self.last_pose is None or self.last_goal is None:
            return None
        odom = self.last_pose[b]
        way = self._way(b, odom, int(self.last_goal[b]))
        if way is None:
            return None
        goal_xy, D, origin, D0, ((i, j), length, _) = way
        pts = [np.asarray(odom[:2], dtype=np.float64), self._centre(np.array([i, j]) + origin)]
        pts += [self._centre(np.array(c) + origin) for c in self._downhill(D, D0, i, j)]  # down to a seed
        pts.append(np.asarray(goal_xy, dtype=np.float64))
        return np.stack(pts), float(length) if math.isfinite(length) else float("nan")
