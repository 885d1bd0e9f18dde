"""A shortest-path follower for the house env (like Habitat's ShortestPathFollower).

Pure pursuit on the geodesic field: take the farthest cell of the grid shortest path
(within ``LOOKAHEAD`` metres) reachable in a straight free line, and turn towards it or
step forward. Once within reach of a target instance, turn to face it and stop when it
is visible. Used by the tests (an optimal-ish agent must succeed with SPL near 1) and as
a reference for what a good policy achieves.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from icrl_ros.geometry import compose_pose, planar, wrap_angle
from icrl_ros.sim.house_nav import segments_cross

if TYPE_CHECKING:
    from icrl_ros.sim.house import HouseEnv

LOOKAHEAD = 1.0
STOP, FORWARD, TURN_LEFT, TURN_RIGHT = 0, 1, 2, 3


def steer(env: HouseEnv, x: float, z: float) -> int:
    """Head for (x, z): of the headings reachable by turning (the 30-degree lattice around
    the current yaw) whose full forward step is collision-free, take the one closest to the
    bearing; step forward if it is the current heading, else turn towards it. The choice
    depends only on the position, so turning never oscillates."""
    bearing = math.atan2(-(z - env.z), x - env.x)
    best, best_k = math.inf, None
    for k in range(12):
        h = env.yaw + k * env.turn_step
        err = abs(wrap_angle(bearing - h))
        if err < best and not env.nav.collides(env.x + env.forward_step * math.cos(h),
                                               env.z - env.forward_step * math.sin(h)):
            best, best_k = err, k
    if best_k is None:  # boxed in: turn on the spot
        return TURN_LEFT
    if best_k == 0:
        return FORWARD
    return TURN_LEFT if best_k <= 6 else TURN_RIGHT


def approach(env: HouseEnv, o) -> int | None:
    """Within ``success_distance`` of instance ``o`` with a clear line to it: turn to face it,
    or close in while something hides it. None when ``o`` is out of reach or behind a wall."""
    surf = math.hypot(o.x - env.x, o.z - env.z) - o.cat.radius
    in_sight = not segments_cross(np.array([[env.x, env.z]]), np.array([[o.x, o.z]]), env.nav.sight_walls)[0]
    if surf > env.success_distance or not in_sight:
        return None
    err = wrap_angle(math.atan2(-(o.z - env.z), o.x - env.x) - env.yaw)
    if abs(err) > env.turn_step / 2:
        return TURN_LEFT if err > 0 else TURN_RIGHT
    return steer(env, o.x, o.z)  # facing it but hidden (occluded): get closer


def pursue(env: HouseEnv, points: list[tuple[float, float]]) -> int:
    """Pure pursuit along a path of world (x, z) points: steer for the farthest point within
    ``LOOKAHEAD`` that a straight free line reaches; if none is at least a step away, the
    first point that is (steering avoids contact)."""
    far = [p for p in points if math.hypot(p[0] - env.x, p[1] - env.z) >= 0.3] or [points[-1]]
    target = far[0]
    for p in far:
        if math.hypot(p[0] - env.x, p[1] - env.z) > LOOKAHEAD:
            break
        if env.nav.segment_free(env.x, env.z, p[0], p[1]):
            target = p
    return steer(env, *target)


def end_game(env: HouseEnv) -> int | None:
    """Stop with a target instance in reach and view, or :func:`approach` the nearest one (by its
    surface) when it is in reach; None when neither (the caller navigates)."""
    if env.target_visible_in_reach():
        return STOP
    inst = env.target_instances()
    surf = [math.hypot(o.x - env.x, o.z - env.z) - o.cat.radius for o in inst]
    return approach(env, inst[int(np.argmin(surf))])


def robot_frame_to_world(env: HouseEnv, fwd: float, left: float) -> tuple[float, float]:
    """A point (forward, left) metres from the robot -> world (x, z); left turns add to the yaw."""
    x, y, _ = compose_pose(planar((env.x, env.z, env.yaw)), (fwd, left, 0.0))
    return x, -y


def follow_waypoint(env: HouseEnv, fwd: float, left: float) -> int:
    """A follower of a waypoint that comes from outside (a policy's route memory), (forward, left) metres
    from the robot, with what a robot senses around it: stop / face a target instance within reach
    (:func:`end_game`), else the free heading closest to the waypoint's bearing (:func:`steer`): the
    follower that reached 0.76 of remembered goals in ``house_route_probe.py``. No turning on the spot
    near the waypoint: a route's waypoint can lie within 0.4 m of the robot metres before the goal (16% of
    route steps measured), where a look-round-then-give-up rule fired on the way."""
    near = end_game(env)
    if near is not None:
        return near
    return steer(env, *robot_frame_to_world(env, fwd, left))


def oracle_action(env: HouseEnv) -> int:
    near = end_game(env)
    if near is not None:
        return near
    nav, D = env.nav, env._field(env.goal)
    geo, cell = nav.nearest_on_path(D, env.x, env.z)
    if cell is None:
        return TURN_LEFT
    if D[cell] == 0.0:  # in the goal region, the nearest instance hidden from here
        return steer(env, nav.xs[cell[1]], nav.zs[cell[0]])
    path = nav.descend(D, cell, max_steps=int(LOOKAHEAD / nav.cell) + 4)
    return pursue(env, [(float(nav.xs[j]), float(nav.zs[i])) for i, j in path])
