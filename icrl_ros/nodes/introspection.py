"""What the agent remembers, as messages a viewer shows: sightings, floor maps, the route, attention.

Pure functions from the runner's memory to ROS messages: the route memory
(:class:`~icrl_ros.memory.route.RouteMemory`, the ``route`` state of the control step, kept beside the
KV cache for bundles whose model has ``route_memory``) and the KV cache as the house model's fixed heads
read it (:class:`~icrl_ros.house.memory_view.HouseMemoryView`: each stored step's sighting and view
point, the fixed heads' attention on the last step). The agent node publishes them (parameter
``introspection``) on ``~/memory/sightings`` (``visualization_msgs/MarkerArray``), ``~/memory/route_map``
and ``~/memory/looked_at`` (``nav_msgs/OccupancyGrid``), ``~/memory/route`` (``nav_msgs/Path``) and
``~/memory/attention`` (``std_msgs/Float32MultiArray``, and ``~/memory/attention_image``,
``sensor_msgs/Image``), each only while someone subscribes to it
(:class:`MemoryTopics`). Nothing here reads the simulator.

Frames: the memory keeps positions in the policy's odometry frame, i.e. relative to ``origin``, the
odometry pose (in the odometry topic's frame) the node measures the policy's odometry from (house
bundles: the trial's first episode start). Every position is composed with ``origin`` and the
messages carry the odometry messages' frame id, so they line up with the robot's TF tree (the
bridge's ``odom``, under ``map``).

* **sightings**: per goal category whose sighting mass (``RouteMemory.remembered``: the weighted
  sum's weight over itself plus the sink's, the number the object memory head's gate reads) is at
  least :data:`MIN_MASS`, a sphere at the remembered position (the weighted mean of the sighted
  positions) and a text ``name mass``; the colour is the category's (:func:`category_rgb`: its name's colour word, else a palette colour), its opacity rises with the
  mass. The current goal's sphere is larger and opaque, its text starts with ``goal``, and the places
  it was seen from (``seen_from``) are a cube list. When the route memory handed the policy a way
  to the goal on the last step (its ``route`` input: found, the waypoint in the robot's frame, the
  route's length), an arrow runs from where the robot stood then to that waypoint, labelled with the
  route's length (namespace ``route``). Every array starts with a DELETEALL marker, so a viewer drops
  categories it no longer gets and an array of the DELETEALL alone (a memory reset) clears the view.
  With the KV cache's sightings (``sighted``), each drawn category also gets its stored sightings
  (the steps whose object-memory key says the heads saw it above ``SIGHTING_P``), one point per 0.25 m
  cell and episode, as a sphere list (namespace ``sighted``) whose opacity falls with the sighting's
  age in episodes (:func:`age_alpha`), and its label adds how many steps saw it and how many
  episodes ago the last and the first did (``goal chair 0.97 | 12 seen, 0-2 ep ago``).
* **route map**: the ``CELLS`` x ``CELLS`` grid of ``CELL_M`` cells the route memory keeps: cells
  the robot stood on are free (0), the rest unknown (-1).
* **looked-at floor**: on the same grid, what a place memory probe standing on each cell would read
  (:meth:`~icrl_ros.house.memory_view.HouseMemoryView.looked_at`): 1-100 = 100 x its attention mass on
  past view points (one pass by reads about 50), -1 where it is below 0.02 (never looked there).
* **route**: the whole way the route memory gives from the last step's pose to the remembered goal
  (:meth:`~icrl_ros.house.route_state.RouteState.way`) as a ``nav_msgs/Path`` (the pose, the stood
  cells down its distance field, the goal's remembered position); no poses when it has none.
* **frontier map** and **frontier** (bundles whose model has ``frontier_memory``, :mod:`icrl_ros.house.frontier`):
  ``~/memory/frontier_map`` on the same grid, floor the camera looked at 0, its frontier cells 50, cells with
  obstacle evidence 100, the rest -1; ``~/memory/frontier``, a two-pose ``nav_msgs/Path`` from the robot to the
  frontier way's held waypoint.
* **attention**: the fixed heads' attention mass of the last step per episode of the trial
  (:meth:`~icrl_ros.house.memory_view.HouseMemoryView.attention_by_episode`), a
  ``Float32MultiArray`` of rows = heads (object memory, place memory probes), columns = episodes 0 ..
  E - 1 then one for the sink (nothing remembered); each row sums to 1; ``~/memory/attention_image`` shows
  it as a small ``mono8`` image (:func:`attention_image`).
"""

from __future__ import annotations

import array
import math
from typing import Any

import numpy as np
from builtin_interfaces.msg import Time
from geometry_msgs.msg import Point, PoseStamped
from nav_msgs.msg import OccupancyGrid, Path
from sensor_msgs.msg import Image
from std_msgs.msg import ColorRGBA, Float32MultiArray, MultiArrayDimension
from visualization_msgs.msg import Marker, MarkerArray

from icrl_ros.geometry import compose_pose

Pose = tuple[float, float, float]

MIN_MASS = 0.05
"""Categories with a lower sighting mass are not drawn (a sighting at the heads' remembering confidence
``SIGHTING_P`` alone gives 0.5; every step adds a weight, nearly nothing for a frame that shows no object)."""
SPHERE_M = 0.3
GOAL_SPHERE_M = 0.5
TEXT_M = 0.25
NAME_COLOURS = {"red": (0.89, 0.10, 0.11), "green": (0.20, 0.63, 0.17), "blue": (0.12, 0.47, 0.71),
                "yellow": (0.93, 0.80, 0.05), "purple": (0.50, 0.25, 0.65)}
"""A category whose name has one of these words (``red_ball``, ``blue_key``) is drawn in that colour: a viewer
reading ``yellow_ball`` beside a purple sphere would misread it. The name says which of a colour's kinds it is."""
PALETTE = ((1.00, 0.50, 0.00), (0.65, 0.34, 0.16), (0.97, 0.51, 0.75), (0.45, 0.45, 0.45), (0.09, 0.75, 0.81),
           (0.55, 0.55, 0.00), (0.15, 0.15, 0.15), (0.60, 0.00, 0.30), (0.00, 0.00, 0.50))
"""The other categories' colours (none of NAME_COLOURS'): category i gets PALETTE[i % len]."""


def route_state(runner: Any, name: str = "route") -> Any:
    """The runner's route memory (``runner.control.states["route"]``; or its state ``name``, e.g. ``"frontier"``), or
    None for a runner without one."""
    states = getattr(getattr(runner, "control", None), "states", None)
    return states.get(name) if isinstance(states, dict) else None


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


def category_rgb(cat: int, name: str = "") -> tuple[float, float, float]:
    """Category ``cat``'s colour: the colour its name says (:data:`NAME_COLOURS`), else PALETTE[cat % len]."""
    for word in name.lower().split("_"):
        if word in NAME_COLOURS:
            return NAME_COLOURS[word]
    return PALETTE[cat % len(PALETTE)]


def category_color(cat: int, alpha: float, name: str = "") -> ColorRGBA:
    r, g, b = category_rgb(cat, name)
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


def sighted_points(sighted: dict[str, np.ndarray] | None, cat: int,
                   current: int) -> list[tuple[float, float, int, float]]:
    """Category ``cat``'s stored sightings (:meth:`~icrl_ros.house.memory_view.HouseMemoryView.sightings`) one per
    ``CELL_M`` cell and episode: (x, y) of the most confident of them in the memory frame, its age in episodes
    (``current`` minus its episode), its confidence; newest first."""
    from icrl_ros.memory.route import CELL_M

    if sighted is None:
        return []
    sel = sighted["cat"] == cat
    if not sel.any():
        return []
    xy, conf, ep = sighted["xy"][sel], sighted["conf"][sel], sighted["episode"][sel]
    cells = np.floor(xy / CELL_M).astype(np.int64)
    order = np.argsort(-conf, kind="stable")  # the most confident first: np.unique keeps each key's first
    key = (((cells[order, 0] + (1 << 15)) << 36) | ((cells[order, 1] + (1 << 15)) << 20)
           | np.clip(ep[order], 0, (1 << 20) - 1))  # (cell x, cell y, episode) as one integer
    _, first = np.unique(key, return_index=True)
    out = [(float(xy[k, 0]), float(xy[k, 1]), max(current - int(ep[k]), 0), float(conf[k])) for k in order[first]]
    return sorted(out, key=lambda p: (p[2], -p[3]))


def age_alpha(age: int) -> float:
    """A sighting's opacity by its age in episodes: 1 this episode, 0.6 the last, 0.35 older."""
    return 1.0 if age <= 0 else 0.6 if age == 1 else 0.35


def sightings(route: Any, goal_names: list[str], goal: int | None, origin: Pose, frame_id: str,
              stamp: Time | None = None, env: int = 0, robot: Pose | None = None,
              sighted: dict[str, np.ndarray] | None = None, current: int = 0) -> MarkerArray:
    """The remembered sightings of env ``env`` of ``route`` as markers in ``frame_id`` (see the module
    docstring); ``goal``: the current goal's index (highlighted), None for none; ``origin``: the odometry
    pose the memory's frame starts at; ``robot``: the odometry pose of the last step (the route's arrow
    starts there); ``sighted``: the KV cache's stored sightings (their points and ages, ``current``: the
    last step's episode), None for none."""
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
        sphere.color = category_color(cat, 1.0 if is_goal else 0.35 + 0.65 * mass, name)
        text = _marker(frame_id, stamp, "labels", cat, Marker.TEXT_VIEW_FACING)
        text.pose.position.x, text.pose.position.y, text.pose.position.z = x, y, size + TEXT_M
        text.scale.z = TEXT_M
        text.color = category_color(cat, 1.0, name)
        text.text = f"{'goal ' if is_goal else ''}{name} {mass:.2f}"
        out.markers += [sphere, text]
        points = sighted_points(sighted, cat, current)
        if points:
            ages = [p[2] for p in points]
            text.text += f" | {int((sighted['cat'] == cat).sum())} seen, {min(ages)}-{max(ages)} ep ago"
            dots = _marker(frame_id, stamp, "sighted", cat, Marker.SPHERE_LIST)
            dots.scale.x = dots.scale.y = dots.scale.z = 0.12
            dots.color = category_color(cat, 1.0, name)
            for px, py, age, _ in points:
                qx, qy, _ = compose_pose(origin, (px, py, 0.0))
                dots.points.append(Point(x=qx, y=qy, z=0.06))
                dots.colors.append(category_color(cat, age_alpha(age), name))
            out.markers.append(dots)
        if is_goal:
            seen = np.argwhere(route.seen_from[env, cat])
            if len(seen):
                cubes = _marker(frame_id, stamp, "seen_from", cat, Marker.CUBE_LIST)
                cubes.scale.x = cubes.scale.y = CELL_M
                cubes.scale.z = 0.02
                cubes.color = category_color(cat, 0.5, name)
                centres = route._centre(seen)
                for cx, cy in centres:
                    px, py, _ = compose_pose(origin, (float(cx), float(cy), 0.0))
                    cubes.points.append(Point(x=px, y=py, z=0.01))
                out.markers.append(cubes)
    way = waypoint(route, robot, env)
    if way is not None:
        (wx, wy), length = way
        cat = goal if goal is not None else 0
        cname = goal_names[cat] if 0 <= cat < len(goal_names) else ""
        arrow = _marker(frame_id, stamp, "route", 0, Marker.ARROW)
        arrow.points = [Point(x=float(robot[0]), y=float(robot[1]), z=0.1), Point(x=wx, y=wy, z=0.1)]
        arrow.scale.x, arrow.scale.y, arrow.scale.z = 0.05, 0.12, 0.15  # shaft and head diameter, head length
        arrow.color = category_color(cat, 1.0, cname)
        label = _marker(frame_id, stamp, "route", 1, Marker.TEXT_VIEW_FACING)
        label.pose.position.x, label.pose.position.y, label.pose.position.z = wx, wy, 0.3
        label.scale.z = TEXT_M
        label.color = category_color(cat, 1.0, cname)
        label.text = f"route {length:.1f} m"
        out.markers += [arrow, label]
    return out


def sightings_key(route: Any, goal: int | None, env: int = 0, robot: Pose | None = None,
                  sighted: dict[str, np.ndarray] | None = None, current: int = 0) -> tuple:
    """What :func:`sightings` draws, to the precision it shows (positions to 1 cm, masses to 0.01, the goal, how
    many places it was seen from, the stored sightings' count and episodes and the route's arrow): equal keys draw
    the same markers, so a step that changes none of it need not be sent again."""
    drawn = []
    for cat in range(route.n_cat):
        xy, mass = route.remembered(env, cat)
        if mass >= MIN_MASS:
            drawn.append((cat, round(float(xy[0]), 2), round(float(xy[1]), 2), round(mass, 2)))
    if sighted is not None:
        drawn.append((len(sighted["cat"]), current, int(sighted["episode"].sum()), int(sighted["cat"].sum())))
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
    grid = _grid(frame_id, stamp, origin)
    # the memory indexes stood[x cell, y cell]; the message is row-major with rows along y
    cells = np.where(route.stood[env].T, np.int8(0), np.int8(-1)).astype(np.int8)
    grid.data = array.array("b", cells.tobytes())
    return grid



def _grid(frame_id: str, stamp: Time | None, origin: Pose) -> OccupancyGrid:
    """An empty grid message with the route memory's geometry (see :func:`route_map`)."""
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
    return grid


LOOKED_MIN = 0.02
"""Looked-at cells whose probe mass is below this are unknown (-1) in the grid."""


def looked_at_map(view: Any, origin: Pose, frame_id: str, stamp: Time | None = None, env: int = 0) -> OccupancyGrid:
    """The place memory's looked-at floor (:meth:`~icrl_ros.house.memory_view.HouseMemoryView.looked_at`) on the
    route map's grid: 100 x the mass a probe on the cell would read (1-100), -1 below :data:`LOOKED_MIN`."""
    from icrl_ros.memory.route import CELL_M, CELLS

    grid = _grid(frame_id, stamp, origin)
    mass = view.looked_at(CELLS, CELL_M, env).T  # rows along the memory frame's y
    cells = np.where(mass >= LOOKED_MIN, np.clip(np.rint(100.0 * mass), 1, 100), -1).astype(np.int8)
    grid.data = array.array("b", cells.tobytes())
    return grid


def frontier_map(front: Any, origin: Pose, frame_id: str, stamp: Time | None = None, env: int = 0) -> OccupancyGrid:
    """The frontier memory's map (:class:`~icrl_ros.house.frontier.FrontierMemory`) on the route map's grid: looked-at
    floor 0, its frontier cells 50, cells with obstacle evidence 100, unknown -1."""
    from icrl_ros.house.frontier import BLOCKED_HIT

    grid = _grid(frame_id, stamp, origin)
    cells = np.full(front.looked[env].shape, -1, dtype=np.int8)
    cells[front.looked[env]] = 0
    crop = front.frontier(env)
    if crop is not None:
        (r0, c0), f = crop[3], crop[0]
        cells[r0:r0 + f.shape[0], c0:c0 + f.shape[1]][f] = 50
    cells[front.blocked[env] >= BLOCKED_HIT] = 100
    grid.data = array.array("b", cells.T.tobytes())  # rows along the memory frame's y
    return grid


def frontier_path(front: Any, robot: Pose | None, origin: Pose, frame_id: str, stamp: Time | None = None,
                  env: int = 0) -> Path:
    """The frontier way's held waypoint from the robot (``robot``: the last step's odometry pose), as a two-pose
    ``nav_msgs/Path`` in ``frame_id`` facing the waypoint; no poses without a plan or a pose."""
    path = Path()
    path.header.frame_id, path.header.stamp = frame_id, stamp or Time()
    if robot is None or front.plan_age[env] < 0 or front.target[env, 0] < 0:
        return path
    return route_path(None, origin, frame_id, stamp, env, way=(np.array([robot[:2], front.plan[env, :2]]), 0.0))


def route_path(route: Any, origin: Pose, frame_id: str, stamp: Time | None = None, env: int = 0,
               way: Any = False) -> Path:
    """The route memory's whole way from the last step's pose to the remembered goal
    (:meth:`~icrl_ros.house.route_state.RouteState.way`, or ``way`` when given: its result) in ``frame_id``;
    each pose faces along the way. No poses when the memory has no way."""
    path = Path()
    path.header.frame_id, path.header.stamp = frame_id, stamp or Time()
    if way is False:  # not given: ask the route state
        way = route.way(env) if callable(getattr(route, "way", None)) else None
    if way is None:
        return path
    pts = [compose_pose(origin, (float(x), float(y), 0.0))[:2] for x, y in way[0]]
    for n, (x, y) in enumerate(pts):
        nx, ny = pts[min(n + 1, len(pts) - 1)] if n + 1 < len(pts) else pts[n]
        px, py = pts[n - 1] if n else (x, y)
        yaw = math.atan2(ny - y, nx - x) if n + 1 < len(pts) else math.atan2(y - py, x - px)
        ps = PoseStamped()
        ps.header = path.header
        ps.pose.position.x, ps.pose.position.y = float(x), float(y)
        _yaw_quaternion(ps.pose, yaw)
        path.poses.append(ps)
    return path


def attention_array(view: Any, env: int = 0, got: Any = False) -> Float32MultiArray:
    """The fixed heads' attention mass of the last step per episode
    (:meth:`~icrl_ros.house.memory_view.HouseMemoryView.attention_by_episode`): rows = heads, columns =
    episodes 0 .. E - 1 then the sink; the dimensions' labels name them. Empty (no dimensions) before a step.
    ``got``: ``view.attention_by_episode(env)`` when already computed."""
    msg = Float32MultiArray()
    got = view.attention_by_episode(env) if got is False else got
    if got is None:
        return msg
    mass, n_ep = got
    rows, cols = mass.shape
    msg.layout.dim = [
        MultiArrayDimension(label="head: " + ", ".join(view.head_names), size=rows, stride=rows * cols),
        MultiArrayDimension(label=f"episode: 0-{n_ep - 1}, then the sink" if n_ep else "the sink", size=cols,
                            stride=cols)]
    msg.data = array.array("f", mass.astype(np.float32).ravel().tobytes())
    return msg


ATTENTION_PX = 12
"""Side of one (head, episode) cell of the attention image, pixels."""


def attention_image(view: Any, env: int = 0, frame_id: str = "", stamp: Time | None = None,
                    got: Any = False) -> Image:
    """:func:`attention_array` as a small ``mono8`` image: a row of ATTENTION_PX-pixel cells per head, a column
    per episode and a last one for the sink, each cell 255 x its mass (white: all the head's attention); a
    one-pixel grey line between cells. 0 x 0 before a step."""
    msg = Image(encoding="mono8", is_bigendian=0)
    msg.header.frame_id, msg.header.stamp = frame_id, stamp or Time()
    got = view.attention_by_episode(env) if got is False else got
    if got is None:
        return msg
    mass = got[0]
    cells = np.rint(255.0 * np.clip(mass, 0.0, 1.0)).astype(np.uint8)
    img = np.kron(cells, np.ones((ATTENTION_PX, ATTENTION_PX), np.uint8))
    img[::ATTENTION_PX, :] = 96
    img[:, ::ATTENTION_PX] = 96
    msg.height, msg.width = int(img.shape[0]), int(img.shape[1])
    msg.step = msg.width
    msg.data = array.array("B", img.tobytes())
    return msg


TRUTH_M = 0.35
"""Diameter of a true object's cylinder (the memory's sphere is 0.3 m, the goal's 0.5 m)."""
TRUTH_ID = 100
"""A true object's marker id: its category index x TRUTH_ID + its number among that category's instances."""


def true_objects(cats: np.ndarray, xy: np.ndarray, goal_names: list[str], goal: int | None, frame_id: str,
                 stamp: Time | None = None) -> MarkerArray:
    """The simulator's objects (categories (n,), positions (n, 2) in ``frame_id``) as the bridge publishes them
    beside the agent's memory: a flat cylinder per object in its category's colour (namespace ``truth``, id =
    category index x :data:`TRUTH_ID` + the instance's number in its category, so a viewer pairs it with the
    memory's sphere of id = category index), the current goal's instances taller and labelled ``true goal name``
    (``truth_labels``, same id). Starts with a DELETEALL, like :func:`sightings`."""
    stamp = stamp or Time()
    out = clear_markers(frame_id, stamp)
    count: dict[int, int] = {}
    for cat, (x, y) in zip(np.asarray(cats).tolist(), np.asarray(xy, dtype=np.float64).tolist()):
        n = cat * TRUTH_ID + count.get(cat, 0)
        count[cat] = count.get(cat, 0) + 1
        is_goal = cat == goal
        name = goal_names[cat] if 0 <= cat < len(goal_names) else f"category {cat}"
        cyl = _marker(frame_id, stamp, "truth", n, Marker.CYLINDER)
        cyl.pose.position.x, cyl.pose.position.y = float(x), float(y)
        cyl.scale.x = cyl.scale.y = TRUTH_M
        cyl.scale.z = 0.6 if is_goal else 0.08
        cyl.pose.position.z = cyl.scale.z / 2
        cyl.color = category_color(cat, 0.9 if is_goal else 0.5, name)
        out.markers.append(cyl)
        if is_goal:
            text = _marker(frame_id, stamp, "truth_labels", n, Marker.TEXT_VIEW_FACING)
            text.pose.position.x, text.pose.position.y, text.pose.position.z = float(x), float(y), 0.6 + TEXT_M
            text.scale.z = TEXT_M
            text.color = category_color(cat, 1.0, name)
            text.text = f"true goal {name}"
            out.markers.append(text)
    return out


class MemoryTopics:
    """What the agent node publishes of ``runner``'s memory, by topic name under ``~/memory/``: the message type,
    a key that is equal when the message would be too (a step that changes nothing shown is not sent again),
    and the message. ``runner``: a runner with a route memory (:func:`route_state`); the looked-at floor and the
    attention need the house's fixed heads as well (:class:`~icrl_ros.house.memory_view.HouseMemoryView`;
    without them those topics are absent). Keys and messages take ``ctx``: goal (index or None), origin,
    frame id, stamp, robot (the last step's odometry pose or None) and goal_names."""

    def __init__(self, runner: Any) -> None:
        from icrl_ros.house.memory_view import HouseMemoryView

        self.route = route_state(runner)
        if self.route is None:
            raise ValueError("the runner keeps no route memory")
        self.view = HouseMemoryView.for_runner(runner)
        self.runner = runner
        self._step: tuple | None = None
        self._cache: dict[str, Any] = {}
        self.types: dict[str, type] = {"sightings": MarkerArray, "route_map": OccupancyGrid, "route": Path}
        self.front = route_state(runner, "frontier")
        if self.front is not None:  # a model with the frontier memory
            self.types["frontier_map"] = OccupancyGrid
            self.types["frontier"] = Path
        if self.view is not None:
            if self.view.place:
                self.types["looked_at"] = OccupancyGrid
            self.types["attention"] = Float32MultiArray
            self.types["attention_image"] = Image

    def _once(self, what: str, fn):
        """``fn()``, computed once per step of the runner (a topic's key and message share it)."""
        step = (getattr(self.runner, "total_steps", None), int(getattr(self.runner.memory, "tokens", 0)),
                int(self.route.episode[0]), id(self.route._last))
        if self._step != step:
            self._step, self._cache = step, {}
        if what not in self._cache:
            self._cache[what] = fn()
        return self._cache[what]

    def _sighted(self) -> tuple[dict | None, int]:
        """The cache's stored sightings and the last step's episode."""
        if self.view is None:
            return None, 0
        return self._once("sighted", lambda: (self.view.sightings(), self.view.current_episode()))

    def _way(self):
        return self._once("way", self.route.way)

    def key(self, name: str, ctx: dict) -> Any:
        route, place = self.route, (ctx["origin"], ctx["frame"])
        if name == "sightings":
            sighted, current = self._sighted()
            return sightings_key(route, ctx["goal"], robot=ctx["robot"], sighted=sighted, current=current), place
        if name == "route_map":
            return int(route.stood[0].sum()), place
        if name == "route":
            way = self._way()
            return (None if way is None else tuple(np.round(way[0], 2).ravel().tolist())), place
        if name == "looked_at":
            return len(self.view.view_points()), place
        if name == "frontier_map":
            f = self.front
            return int(f.looked[0].sum()), int((f.blocked[0] > 0).sum()), tuple(f.target[0]), place
        if name == "frontier":
            f = self.front
            return tuple(np.round(f.plan[0], 2)), int(f.plan_age[0] >= 0), ctx["robot"], place
        if name in ("attention", "attention_image"):  # every step moves it
            return int(getattr(self.view.runner, "total_steps", 0)), route.last_pose is None
        raise KeyError(name)

    def message(self, name: str, ctx: dict) -> Any:
        route, origin, frame, stamp = self.route, ctx["origin"], ctx["frame"], ctx["stamp"]
        if name == "sightings":
            sighted, current = self._sighted()
            return sightings(route, ctx["goal_names"], ctx["goal"], origin, frame, stamp, robot=ctx["robot"],
                             sighted=sighted, current=current)
        if name == "route_map":
            return route_map(route, origin, frame, stamp)
        if name == "route":
            return route_path(route, origin, frame, stamp, way=self._way())
        if name == "looked_at":
            return looked_at_map(self.view, origin, frame, stamp)
        if name == "frontier_map":
            return frontier_map(self.front, origin, frame, stamp)
        if name == "frontier":
            return frontier_path(self.front, ctx["robot"], origin, frame, stamp)
        if name == "attention":
            return attention_array(self.view, got=self._once("attention", self.view.attention_by_episode))
        if name == "attention_image":
            return attention_image(self.view, frame_id=frame, stamp=stamp,
                                   got=self._once("attention", self.view.attention_by_episode))
        raise KeyError(name)


__all__ = ["ATTENTION_PX", "LOOKED_MIN", "MIN_MASS", "NAME_COLOURS", "MemoryTopics", "TRUTH_ID", "age_alpha",
           "attention_array", "attention_image", "category_color", "category_rgb", "clear_markers", "frontier_map",
           "frontier_path", "looked_at_map",
           "route_map", "route_path", "route_state", "sighted_points", "sightings", "sightings_key", "stamp_msg",
           "true_objects", "waypoint"]
