"""What the agent remembers, as messages a viewer shows: the route memory's sightings and floor map.

Pure functions from the runner's route memory (:class:`~icrl_ros.memory.route.RouteMemory`, the
``route`` state of the control step, kept beside the KV cache for bundles whose model has
``route_memory``) to ``visualization_msgs/MarkerArray`` and ``nav_msgs/OccupancyGrid``; the agent
node publishes them on ``~/memory/sightings`` and ``~/memory/route_map`` (parameter
``introspection``), and only while someone subscribes. Nothing here reads the simulator.

Frames: the memory keeps positions in the policy's odometry frame, i.e. relative to ``origin``, the
odometry pose (in the odometry topic's frame) the node measures the policy's odometry from (house
bundles: the trial's first episode start). Every position is composed with ``origin`` and the
messages carry the odometry messages' frame id, so they line up with the robot's TF tree (the
bridge's ``odom``, under ``map``).

* **sightings**: per goal category whose sighting mass (``RouteMemory.remembered``: the weighted
  sum's weight over itself plus the sink's, the number the object memory head's gate reads) is at
  least :data:`MIN_MASS`, a sphere at the remembered position (the weighted mean of the sighted
  positions) and a text ``name mass``; the colour is the category's, its opacity rises with the
  mass. The current goal's sphere is larger and opaque, its text starts with ``goal``, and the places
  it was seen from (``seen_from``) are a cube list. When the route memory handed the policy a way
  to the goal on the last step (its ``route`` input: found, the waypoint in the robot's frame, the
  route's length), an arrow runs from where the robot stood then to that waypoint, labelled with the
  route's length (namespace ``route``). Every array starts with a DELETEALL marker, so a viewer drops
  categories it no longer gets and an array of the DELETEALL alone (a memory reset) clears the view.
* **route map**: the ``CELLS`` x ``CELLS`` grid of ``CELL_M`` cells the route memory keeps: cells
  the robot stood on are free (0), the rest unknown (-1).
"""

from __future__ import annotations

import array
import math
from typing import Any

import numpy as np
from builtin_interfaces.msg import Time
from geometry_msgs.msg import Point
from nav_msgs.msg import OccupancyGrid
from std_msgs.msg import ColorRGBA
from visualization_msgs.msg import Marker, MarkerArray

from icrl_ros.geometry import compose_pose

Pose = tuple[float, float, float]

MIN_MASS = 0.05
"""Categories with a lower sighting mass are not drawn (a sighting at the heads' remembering confidence
``SIGHTING_P`` alone gives 0.5; every step adds a weight, nearly nothing for a frame that shows no object)."""
SPHERE_M = 0.3
GOAL_SPHERE_M = 0.5
TEXT_M = 0.25
PALETTE = ((0.89, 0.10, 0.11), (0.22, 0.49, 0.72), (0.30, 0.69, 0.29), (0.60, 0.31, 0.64), (1.00, 0.50, 0.00),
           (0.65, 0.34, 0.16), (0.97, 0.51, 0.75), (0.45, 0.45, 0.45), (0.74, 0.74, 0.13), (0.09, 0.75, 0.81))
"""Category i's colour: PALETTE[i % len]."""


def route_state(runner: Any) -> Any:
    """The runner's route memory (``runner.control.states["route"]``), or None for a runner without one."""
    states = getattr(getattr(runner, "control", None), "states", None)
    return states.get("route") if isinstance(states, dict) else None


def stamp_msg(seconds: float) -> Time:
    """Float seconds -> ``builtin_interfaces/Time`` (0 for anything not finite or negative)."""
    if not (math.isfinite(seconds) and seconds > 0):
        return Time()
    sec = int(math.floor(seconds))
    return Time(sec=sec, nanosec=min(int(round((seconds - sec) * 1e9)), 999_999_999))


def _yaw_quaternion(pose, yaw: float) -> None:
    o = pose.orientation
    o.x, o.y, o.z, o.w = 0.0, 0.0, math.sin(yaw / 2.0), math.cos(yaw / 2.0)


def _marker(frame_id: str, stamp: Time, ns: str, mid: int, kind: int) -> Marker:
    m = Marker(ns=ns, id=mid, type=kind, action=Marker.ADD)
    m.header.frame_id, m.header.stamp = frame_id, stamp
    m.pose.orientation.w = 1.0
    return m


def clear_markers(frame_id: str, stamp: Time | None = None) -> MarkerArray:
    """An array of one DELETEALL marker: a viewer drops every marker it has."""
    m = Marker(action=Marker.DELETEALL)
    m.header.frame_id, m.header.stamp = frame_id, stamp or Time()
    return MarkerArray(markers=[m])


def category_color(cat: int, alpha: float) -> ColorRGBA:
    r, g, b = PALETTE[cat % len(PALETTE)]
    return ColorRGBA(r=r, g=g, b=b, a=float(alpha))


def waypoint(route: Any, robot: Pose | None, env: int = 0) -> tuple[tuple[float, float], float] | None:
    """The way the route memory handed the policy on the last step, in the odometry frame: (the waypoint's
    (x, y), the route's length in metres), from its ``route`` input (found, the waypoint's forward and left
    offsets from the robot in units of ``scale_m``, ..., the length) and ``robot``, the odometry pose of that
    step; None when no way was found (or no step was taken since a reset)."""
    feats = getattr(route, "last_route", None)
    if feats is None or robot is None:
        return None
    f = [float(v) for v in feats[env]]
    if f[0] <= 0.5:
        return None
    s = float(route.scale_m)
    x, y, _ = compose_pose(robot, (f[1] * s, f[2] * s, 0.0))
    return (x, y), f[5] * s


def sightings(route: Any, goal_names: list[str], goal: int | None, origin: Pose, frame_id: str,
              stamp: Time | None = None, env: int = 0, robot: Pose | None = None) -> MarkerArray:
    """The remembered sightings of env ``env`` of ``route`` as markers in ``frame_id`` (see the module
    docstring); ``goal``: the current goal's index (highlighted), None for none; ``origin``: the odometry
    pose the memory's frame starts at; ``robot``: the odometry pose of the last step (the route's arrow
    starts there)."""
    from icrl_ros.memory.route import CELL_M

    stamp = stamp or Time()
    out = clear_markers(frame_id, stamp)
    for cat in range(route.n_cat):
        xy, mass = route.remembered(env, cat)
        if mass < MIN_MASS:
            continue
        x, y, _ = compose_pose(origin, (float(xy[0]), float(xy[1]), 0.0))
        name = goal_names[cat] if cat < len(goal_names) else f"category {cat}"
        is_goal = cat == goal
        size = GOAL_SPHERE_M if is_goal else SPHERE_M
        sphere = _marker(frame_id, stamp, "sightings", cat, Marker.SPHERE)
        sphere.pose.position.x, sphere.pose.position.y, sphere.pose.position.z = x, y, size / 2
        sphere.scale.x = sphere.scale.y = sphere.scale.z = size
        sphere.color = category_color(cat, 1.0 if is_goal else 0.35 + 0.65 * mass)
        text = _marker(frame_id, stamp, "labels", cat, Marker.TEXT_VIEW_FACING)
        text.pose.position.x, text.pose.position.y, text.pose.position.z = x, y, size + TEXT_M
        text.scale.z = TEXT_M
        text.color = category_color(cat, 1.0)
        text.text = f"{'goal ' if is_goal else ''}{name} {mass:.2f}"
        out.markers += [sphere, text]
        if is_goal:
            seen = np.argwhere(route.seen_from[env, cat])
            if len(seen):
                cubes = _marker(frame_id, stamp, "seen_from", cat, Marker.CUBE_LIST)
                cubes.scale.x = cubes.scale.y = CELL_M
                cubes.scale.z = 0.02
                cubes.color = category_color(cat, 0.5)
                centres = route._centre(seen)
                for cx, cy in centres:
                    px, py, _ = compose_pose(origin, (float(cx), float(cy), 0.0))
                    cubes.points.append(Point(x=px, y=py, z=0.01))
                out.markers.append(cubes)
    way = waypoint(route, robot, env)
    if way is not None:
        (wx, wy), length = way
        cat = goal if goal is not None else 0
        arrow = _marker(frame_id, stamp, "route", 0, Marker.ARROW)
        arrow.points = [Point(x=float(robot[0]), y=float(robot[1]), z=0.1), Point(x=wx, y=wy, z=0.1)]
        arrow.scale.x, arrow.scale.y, arrow.scale.z = 0.05, 0.12, 0.15  # shaft and head diameter, head length
        arrow.color = category_color(cat, 1.0)
        label = _marker(frame_id, stamp, "route", 1, Marker.TEXT_VIEW_FACING)
        label.pose.position.x, label.pose.position.y, label.pose.position.z = wx, wy, 0.3
        label.scale.z = TEXT_M
        label.color = category_color(cat, 1.0)
        label.text = f"route {length:.1f} m"
        out.markers += [arrow, label]
    return out


def sightings_key(route: Any, goal: int | None, env: int = 0, robot: Pose | None = None) -> tuple:
    """What :func:`sightings` draws, to the precision it shows (positions to 1 cm, masses to 0.01, the goal, how
    many places it was seen from and the route's arrow): equal keys draw the same markers, so a step that changes
    none of it need not be sent again."""
    drawn = []
    for cat in range(route.n_cat):
        xy, mass = route.remembered(env, cat)
        if mass >= MIN_MASS:
            drawn.append((cat, round(float(xy[0]), 2), round(float(xy[1]), 2), round(mass, 2)))
    seen = int(route.seen_from[env, goal].sum()) if goal is not None and 0 <= goal < route.n_cat else 0
    way = waypoint(route, robot, env)
    if way is not None:
        way = (round(robot[0], 2), round(robot[1], 2), round(way[0][0], 2), round(way[0][1], 2), round(way[1], 1))
    return goal, seen, tuple(drawn), way


def route_map(route: Any, origin: Pose, frame_id: str, stamp: Time | None = None, env: int = 0) -> OccupancyGrid:
    """Env ``env``'s stood grid as an occupancy grid in ``frame_id``: free (0) where the robot stood, unknown
    (-1) elsewhere. Cell (row r, column c) of the message is the memory's cell (r along the memory frame's y,
    c along its x); the grid's origin is the memory frame's (-CELLS/2, -CELLS/2) cell corner composed with
    ``origin``."""
    from icrl_ros.memory.route import CELL_M, CELLS

    grid = OccupancyGrid()
    grid.header.frame_id, grid.header.stamp = frame_id, stamp or Time()
    info = grid.info
    info.resolution = float(CELL_M)
    info.width = info.height = int(CELLS)
    half = (CELLS // 2) * CELL_M
    ox, oy, oyaw = compose_pose(origin, (-half, -half, 0.0))
    info.origin.position.x, info.origin.position.y = ox, oy
    _yaw_quaternion(info.origin, oyaw)
    # the memory indexes stood[x cell, y cell]; the message is row-major with rows along y
    cells = np.where(route.stood[env].T, np.int8(0), np.int8(-1)).astype(np.int8)
    grid.data = array.array("b", cells.tobytes())
    return grid


__all__ = ["MIN_MASS", "category_color", "clear_markers", "route_map", "route_state", "sightings", "sightings_key",
           "stamp_msg", "waypoint"]
