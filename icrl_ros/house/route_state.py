"""The route memory as the control step's extension state (:class:`~icrl_ros.extensions.StepState`)."""

from __future__ import annotations

import math

import numpy as np
from torch import Tensor

from icrl_ros.geometry import compose_pose, relative_pose
from icrl_ros.house.frontier import APPROACH_M, FrontierMemory, way_over_looked
from icrl_ros.memory.quant import zero_code
from icrl_ros.memory.route import RouteMemory
from icrl_ros.models.object_memory import STRUCT_DIM

CHECK_M = (0.5, 1.5)
"""``forget_contradicted``: the goal's remembered position counts as in front of the camera between these
distances (metres) ..."""
CHECK_DEG = 25.0
"""... and within this bearing of the heading (the camera sees 79 degrees across)."""
RECOGNISED_P = 0.5
"""The frozen heads recognise the goal in a frame when it is their most likely category at this confidence."""


class RouteState(RouteMemory):
    """:class:`~icrl_ros.memory.route.RouteMemory` fed by the control step: it writes the ``route``
    input before the encoder and takes in each committed token's sightings. What a viewer shows of the
    last step is kept (None after a reset or load): ``last_route``, the ``route`` input it wrote (B,
    ROUTE_DIM) (the way the policy was handed); ``last_pose`` (B, 3) and ``last_goal`` (B,), the
    step's odometry and goal (the fixed heads' queries, :mod:`icrl_ros.house.memory_view`)."""

    last_route: Tensor | None = None
    _last: tuple[Tensor, Tensor] | None = None  # the step's odom and goal inputs, read only when shown

    def __init__(self, batch: int, n_cat: int, scale_m: float, per_episode: bool = False,
                 forget_after: int = 0, over_looked: bool = False) -> None:
        super().__init__(batch, n_cat, scale_m, per_episode)
        self.forget_after = int(forget_after)
        # over_looked: the floor the camera looked at (the tokens' band distances, as the frontier memory reads them)
        self.floor = FrontierMemory(batch, scale_m, per_episode, goal_gate=False) if over_looked else None
        self._looked_way = np.zeros(batch, dtype=bool)  # the last route came over looked-at floor
        self.contradicted = np.zeros(batch, dtype=np.int64)  # steps in a row the goal's place was in view, unseen
        self.forgotten = np.zeros(batch, dtype=np.int64)  # times a goal's sightings were forgotten
        self._forget: list[tuple[int, int]] = []  # (env, category) the next memory edit forgets

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
        if self.floor is not None:
            self.floor.observe(token)
        if self.forget_after:
            self._contradictions(token)

    def _contradictions(self, token: Tensor) -> None:
        """Count, per env, the steps in a row its goal's remembered place was in front of the camera and the
        heads did not recognise the goal; at ``forget_after`` forget the category's sightings here and queue the
        memory edit."""
        s = token[..., -STRUCT_DIM:].detach().cpu().double().numpy()
        goal = np.rint(s[:, 0] * self.n_cat).astype(np.int64)
        seen = np.rint(s[:, 1] * self.n_cat).astype(np.int64)
        for b in range(self.batch):
            g = int(goal[b])
            at, mass = self.remembered(b, g) if 0 <= g < self.n_cat else (None, 0.0)
            if mass <= 0.5 or (seen[b] == g and s[b, 2] >= RECOGNISED_P):
                self.contradicted[b] = 0
                continue
            pose = (*(s[b, 5:7] * self.scale_m), math.atan2(s[b, 8], s[b, 7]))
            fwd, left = (float(v) for v in relative_pose(pose, (*at, 0.0))[:2])
            if CHECK_M[0] <= math.hypot(fwd, left) <= CHECK_M[1] and abs(math.degrees(math.atan2(left, fwd))) <= CHECK_DEG:
                self.contradicted[b] += 1
                if self.contradicted[b] >= self.forget_after:
                    self.sums[b, g] = 0.0
                    self.seen_from[b, g] = False
                    self._version[b] += 1  # the cached distance field goes with it
                    self._forget.append((b, g))
                    self.forgotten[b] += 1
                    self.contradicted[b] = 0

    def edit_memory(self, memory) -> None:
        """Forget the queued categories' sightings in the object memory head's keys (head 0 of layer 0, the
        category's entry: its confidence) of a KV cache of raw steps; other memories (Memo's summaries, HCAM's
        store) keep theirs, where no entry is one sighting."""
        if not self._forget:
            return
        if getattr(memory, "policy", None) in ("full", "window"):
            for b, g in self._forget:
                memory.k[0, b, 0, :, g] = zero_code(memory.kv_dtype)
        self._forget.clear()

    def _route(self, b: int, odom: np.ndarray, cat: int) -> np.ndarray:
        """With ``over_looked``: the way over the floor the camera looked at to within ``APPROACH_M`` of the
        remembered goal, where that floor reaches it; else (and without) the way over the floor stood on."""
        self._looked_way[b] = False
        if self.floor is not None and 0 <= cat < self.n_cat:
            goal_xy, mass = self.remembered(b, cat)
            if mass > 0.5:
                way = way_over_looked(self.floor, b, odom, goal_xy, APPROACH_M)
                if way[0] > 0:
                    self._looked_way[b] = True
                    return way
        return super()._route(b, odom, cat)

    def tensors(self) -> dict[str, Tensor]:
        out = super().tensors()
        if self.floor is not None:
            out.update({f"route_{k}": v for k, v in self.floor.tensors().items()})
        return out

    @property
    def nbytes(self) -> int:
        return super().nbytes + (self.floor.nbytes if self.floor is not None else 0)

    def reset(self, envs=None) -> None:
        super().reset(envs)
        if self.floor is not None:
            self.floor.reset(envs)
        gone = set(range(self.batch)) if envs is None else {int(b) for b in np.arange(self.batch)[envs]}
        self.contradicted[list(gone)] = 0
        self._forget = [(b, g) for b, g in self._forget if b not in gone]  # those envs' cache is cleared too
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
        if self._looked_way[b] and self.last_route is not None:  # over looked-at floor: to its waypoint, then the goal
            r = self.last_route[b].detach().cpu().double().numpy()
            waypoint = np.array(compose_pose(tuple(odom), (r[1] * self.scale_m, r[2] * self.scale_m, 0.0))[:2])
            goal_xy, _ = self.remembered(b, int(self.last_goal[b]))
            return np.stack([np.asarray(odom[:2], np.float64), waypoint, goal_xy]), float(r[5] * self.scale_m)
        way = self._way(b, odom, int(self.last_goal[b]))
        if way is None:
            return None
        goal_xy, D, origin, D0, ((i, j), length, _) = way
        pts = [np.asarray(odom[:2], dtype=np.float64), self._centre(np.array([i, j]) + origin)]
        pts += [self._centre(np.array(c) + origin) for c in self._downhill(D, D0, i, j)]  # down to a seed
        pts.append(np.asarray(goal_xy, dtype=np.float64))
        return np.stack(pts), float(length) if math.isfinite(length) else float("nan")
