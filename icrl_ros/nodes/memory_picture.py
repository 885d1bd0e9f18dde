"""A picture of the agent's memory beside the truth, drawn from the topics a viewer gets.

:class:`MemoryWatch` subscribes a node to the agent's ``~/memory`` topics (:mod:`icrl_ros.nodes.introspection`),
the bridge's ``true_objects``, ``odom`` and ``map_pose``, and keeps every message with its stamp;
:meth:`MemoryWatch.snapshot` picks what a viewer showed at the end of an episode (each topic's last message
stamped before the episode's end: the memory after its last step) and the robot's odometry track of the
episode; :func:`plot_memory` draws it top-down in the odometry frame:

* belief (the memory): the remembered position of each category (filled, its name; a table beside gives its
  sighting mass, stored sightings, their age and the distance to the nearest true one),
  the stored sightings (small dots, more transparent the more episodes ago they were made), the route
  memory's way to the goal (magenta line), the looked-at floor (blue shading: what a place memory probe would
  read there), the floor stood on (the robot's cells, light grey);
* truth (the simulator, via the bridge): every object (hollow, in its category's colour and shape, the
  goal's instances larger), the walls, and a dotted line from each remembered category to its nearest true
  instance (paired by the markers' category ids) with the distance;
* the robot's track of the episode (black line, start and end marked).

Colours are the markers' own (:func:`~icrl_ros.nodes.introspection.category_rgb`: a category named for a
colour in that colour), so the picture and RViz / Foxglove agree.
"""

from __future__ import annotations

import bisect
import math
import re
from pathlib import Path
from typing import Any

import numpy as np

from icrl_ros.geometry import compose_pose, episode_odometry, map_to_odom, relative_pose

MEMORY = ("sightings", "route_map", "route", "looked_at")


def _stamp(header: Any) -> float:
    return float(header.stamp.sec) + 1e-9 * float(header.stamp.nanosec)


def _ages(seen: str) -> str:
    """The sightings label's ``N seen, a-b ep ago`` in words: ``N stored sightings, a-b episodes ago`` (``a
    episodes ago`` when a == b, ``this episode`` for 0)."""
    m = re.match(r"(\d+) seen, (\d+)-(\d+) ep ago", seen)
    if not m:
        return seen
    n, a, b = (int(v) for v in m.groups())
    when = ("this episode" if b == 0 else f"{a} episode{'s' if a != 1 else ''} ago" if a == b
            else f"{a}-{b} episodes ago")
    return f"{n} stored sighting{'s' if n != 1 else ''}, {when}"


SHAPES = {"ball": "o", "box": "s", "key": "D"}
"""Marker shape by a category name's last word (red_ball, red_box and red_key share a colour); others: a triangle."""


def shape(name: str) -> str:
    return SHAPES.get(name.rsplit("_", 1)[-1], "^")


def _yaw(q: Any) -> float:
    return 2.0 * math.atan2(float(q.z), float(q.w))


class MemoryWatch:
    """Every message of the memory, truth and odometry topics a node gets, by stamp (sim time)."""

    def __init__(self, node: Any, agent: str = "icrl_agent") -> None:
        from geometry_msgs.msg import PoseStamped
        from nav_msgs.msg import OccupancyGrid, Odometry, Path as PathMsg
        from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
        from visualization_msgs.msg import MarkerArray

        latched = QoSProfile(depth=50, reliability=ReliabilityPolicy.RELIABLE,
                             durability=DurabilityPolicy.TRANSIENT_LOCAL)
        self.log: dict[str, list[tuple[float, Any]]] = {}
        types = {"sightings": MarkerArray, "route_map": OccupancyGrid, "route": PathMsg, "looked_at": OccupancyGrid}
        for name, cls in types.items():
            node.create_subscription(cls, f"{agent}/memory/{name}", self._keep(name), latched)
        node.create_subscription(MarkerArray, "true_objects", self._keep("true_objects"), latched)
        node.create_subscription(Odometry, "odom", self._keep("odom"), 100)
        node.create_subscription(PoseStamped, "map_pose", self._keep("map_pose"), 100)

    def _keep(self, name: str):
        def on(msg) -> None:
            if hasattr(msg, "header"):
                stamp = _stamp(msg.header)
            elif getattr(msg, "markers", None):  # a MarkerArray: its markers carry the stamp
                stamp = _stamp(msg.markers[0].header)
            else:
                return
            self.log.setdefault(name, []).append((stamp, msg))
        return on

    def _last_before(self, name: str, t: float) -> Any:
        got = [m for s, m in self.log.get(name, []) if s < t]
        return got[-1] if got else None

    def snapshot(self, t_start: float, t_end: float) -> dict[str, Any]:
        """What a viewer showed at the end of the episode [t_start, t_end): each memory topic's last message stamped
        before ``t_end``, the true objects published at or before ``t_start`` (the bridge sends them at each episode
        start), the odometry track (N, 2) of the episode and the map -> odom transform (from a map pose and an
        odometry message of one stamp; identity when none pair up)."""
        snap: dict[str, Any] = {name: self._last_before(name, t_end) for name in MEMORY}
        snap["true_objects"] = self._last_before("true_objects", t_start + 1e-6)
        odom = [(s, m) for s, m in self.log.get("odom", []) if t_start <= s < t_end]
        track, seen = [], set()
        for s, m in odom:
            if s in seen:  # the bridge republishes an observation with its old stamp while it waits
                continue
            seen.add(s)
            p = m.pose.pose
            track.append((float(p.position.x), float(p.position.y)))
        snap["track"] = np.array(track, np.float64).reshape(-1, 2)
        snap["map_to_odom"] = (0.0, 0.0, 0.0)
        maps = {s: m for s, m in self.log.get("map_pose", [])}
        stamps = sorted(maps)
        for s, m in odom:
            k = bisect.bisect_left(stamps, s)
            if k < len(stamps) and stamps[k] == s:
                mp, op = maps[s].pose, m.pose.pose
                snap["map_to_odom"] = map_to_odom((mp.position.x, mp.position.y, _yaw(mp.orientation)),
                                                  (op.position.x, op.position.y, _yaw(op.orientation)))
                break
        return snap


def grid_image(grid: Any) -> tuple[np.ndarray, tuple[float, float, float], float]:
    """An OccupancyGrid's cells (height, width) int8, its origin (x, y, yaw) and resolution."""
    info = grid.info
    cells = np.array(grid.data, dtype=np.int8).reshape(info.height, info.width)
    o = info.origin
    return cells, (float(o.position.x), float(o.position.y), _yaw(o.orientation)), float(info.resolution)


def walls_in_house(layout: Any, house_origin: tuple[float, float, float]) -> np.ndarray:
    """The house layout's wall segments (S, 2, 2) in the house frame of a trial that started at world pose
    ``house_origin`` (x, z, yaw): the frame of the bridge's map pose and true objects."""
    segs = np.asarray(layout.wall_segments(), np.float64)
    out = np.empty_like(segs)
    for i, seg in enumerate(segs):
        for j, (x, z) in enumerate(seg):
            out[i, j] = episode_odometry(house_origin, (float(x), float(z), 0.0))[:2]
    return out


def _to_odom(map_to_odom_tf: tuple[float, float, float], xy) -> tuple[float, float]:
    x, y, _ = relative_pose(map_to_odom_tf, (float(xy[0]), float(xy[1]), 0.0))
    return float(x), float(y)


def _crosses(p, q, a, b) -> bool:
    """Whether segments p-q and a-b cross (proper intersection)."""
    def side(u, v, w) -> float:
        return float(np.sign((v[0] - u[0]) * (w[1] - u[1]) - (v[1] - u[1]) * (w[0] - u[0])))
    return side(p, q, a) != side(p, q, b) and side(a, b, p) != side(a, b, q)


def waypoints_across_walls(watch: MemoryWatch, t_start: float, t_end: float, walls_map: np.ndarray,
                           map_to_odom_tf: tuple[float, float, float] = (0.0, 0.0, 0.0)) -> tuple[int, int]:
    """Of the route arrows (robot -> the waypoint the route memory handed the policy, ``~/memory/sightings``
    namespace ``route``) received for steps in [t_start, t_end): (how many, how many cross a wall)."""
    walls = [(_to_odom(map_to_odom_tf, a), _to_odom(map_to_odom_tf, b)) for a, b in np.asarray(walls_map)]
    n = crossing = 0
    for stamp, msg in watch.log.get("sightings", []):
        if not t_start <= stamp < t_end:
            continue
        arrow = next((m for m in msg.markers if m.ns == "route" and m.id == 0 and len(m.points) == 2), None)
        if arrow is None:
            continue
        p, q = (arrow.points[0].x, arrow.points[0].y), (arrow.points[1].x, arrow.points[1].y)
        n += 1
        crossing += any(_crosses(p, q, a, b) for a, b in walls)
    return n, crossing


def plot_memory(snap: dict[str, Any], path: Path, title: str, goal: str, goal_names: list[str],
                walls_map: np.ndarray | None = None, across: tuple[int, int] | None = None) -> dict[str, Any]:
    """Draw ``snap`` (:meth:`MemoryWatch.snapshot`) to ``path`` (PNG) in the odometry frame; ``goal``: the episode's
    goal name; ``walls_map``: wall segments in the map (house) frame, None for none. Returns what it drew:
    remembered categories with their distance to the nearest true instance (m), sightings drawn, route points."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from visualization_msgs.msg import Marker

    from icrl_ros.nodes.introspection import TRUTH_ID

    tf = snap["map_to_odom"]
    fig, ax = plt.subplots(figsize=(10.4, 7.4), dpi=110)
    ax.set_facecolor("white")
    drawn: dict[str, Any] = {"remembered": {}, "sightings": 0, "route_points": 0}
    goal_cat = goal_names.index(goal) if goal in goal_names else None

    # floor: what the route memory stood on, then the looked-at floor over it
    for name, cmap, alpha in (("looked_at", "Blues", 0.55), ("route_map", None, 0.6)):
        grid = snap.get(name)
        if grid is None:
            continue
        cells, (ox, oy, oyaw), res = grid_image(grid)
        h, w = cells.shape
        if abs(math.remainder(oyaw, 2 * math.pi)) > 1e-6:  # the memory's frame is rotated: draw cell centres
            rows, cols = np.nonzero(cells >= 0)
            pts = [compose_pose((ox, oy, oyaw), ((c + 0.5) * res, (r + 0.5) * res, 0.0))[:2]
                   for r, c in zip(rows, cols)]
            if pts:
                pts = np.array(pts)
                vals = cells[rows, cols]
                if name == "route_map":
                    ax.scatter(pts[:, 0], pts[:, 1], s=6, marker="s", c="#bdbdbd", alpha=0.6, lw=0, zorder=3)
                else:
                    ax.scatter(pts[:, 0], pts[:, 1], s=6, marker="s", c=vals, cmap=cmap, vmin=0, vmax=100,
                               alpha=alpha, lw=0, zorder=2)
            continue
        extent = (ox, ox + w * res, oy, oy + h * res)
        if name == "route_map":
            stood = np.ma.masked_where(cells < 0, np.ones_like(cells, dtype=float))
            ax.imshow(stood, origin="lower", extent=extent, cmap="Greys", vmin=0, vmax=4, alpha=0.6, zorder=3,
                      interpolation="nearest")
        else:
            looked = np.ma.masked_where(cells < 0, cells.astype(float))
            ax.imshow(looked, origin="lower", extent=extent, cmap=cmap, vmin=0, vmax=100, alpha=alpha, zorder=2,
                      interpolation="nearest")

    # truth: walls and objects (map frame -> odom)
    if walls_map is not None and len(walls_map):
        for seg in walls_map:
            a, b = _to_odom(tf, seg[0]), _to_odom(tf, seg[1])
            ax.plot([a[0], b[0]], [a[1], b[1]], color="#404040", lw=1.6, zorder=3, solid_capstyle="butt")
    truth: dict[int, list[tuple[float, float]]] = {}  # category -> true positions (odom frame)
    objs = snap.get("true_objects")
    if objs is not None:
        for m in objs.markers:
            if m.ns != "truth" or m.action != Marker.ADD:
                continue
            x, y = _to_odom(tf, (m.pose.position.x, m.pose.position.y))
            is_goal = m.scale.z > 0.3
            truth.setdefault(m.id // TRUTH_ID, []).append((x, y))
            cat = m.id // TRUTH_ID
            ax.scatter([x], [y], s=260 if is_goal else 90, facecolors="none", lw=2.4 if is_goal else 1.3,
                       marker=shape(goal_names[cat] if 0 <= cat < len(goal_names) else ""),
                       edgecolors=[(m.color.r, m.color.g, m.color.b)], zorder=4)
            if is_goal:
                ax.annotate(f"true {goal}", (x, y), xytext=(0, -16), textcoords="offset points", ha="center",
                            fontsize=7, color="black", zorder=9)

    # belief: remembered categories, stored sightings, the route
    markers = snap.get("sightings")
    rows: list[tuple[int, float, str, tuple]] = []  # the side table: goal first, then by sighting mass
    if markers is not None:
        labels = {m.id: m.text for m in markers.markers if m.ns == "labels" and m.action == Marker.ADD}
        for m in markers.markers:
            if m.action != Marker.ADD:
                continue
            rgb = (m.color.r, m.color.g, m.color.b)
            if m.ns == "sighted":
                pts = np.array([(p.x, p.y) for p in m.points]).reshape(-1, 2)
                alphas = [c.a for c in m.colors] or [1.0] * len(pts)
                ax.scatter(pts[:, 0], pts[:, 1], s=14, c=[(*rgb, a) for a in alphas], lw=0, zorder=5)
                drawn["sightings"] += len(pts)
            elif m.ns == "sightings":
                x, y = m.pose.position.x, m.pose.position.y
                is_goal = m.id == goal_cat
                ax.scatter([x], [y], s=170 if is_goal else 80, color=(*rgb, m.color.a), edgecolors="black",
                           marker=shape(goal_names[m.id] if 0 <= m.id < len(goal_names) else ""),
                           lw=1.6 if is_goal else 0.6, zorder=7)
                near = min((math.hypot(tx - x, ty - y) for tx, ty in truth.get(m.id, [])), default=None)
                name = goal_names[m.id] if 0 <= m.id < len(goal_names) else str(m.id)
                drawn["remembered"][name] = near
                if near is not None:
                    tx, ty = min(truth[m.id], key=lambda p: math.hypot(p[0] - x, p[1] - y))
                    ax.plot([x, tx], [y, ty], ls=":", lw=1.2, color=rgb, zorder=6)
                text = labels.get(m.id, name)
                mass = text.split(" | ")[0].split()[-1]
                seen = text.split(" | ")[1] if " | " in text else "no stored sighting above 0.8"
                far = "none in the house" if near is None else f"{near:.1f} m"
                rows.append((0 if is_goal else 1, -float(mass), f"{'GOAL ' if is_goal else ''}{name}: mass {mass}, "
                             f"{_ages(seen)}; nearest true one: {far}", rgb))
                ax.annotate(f"{'goal ' if is_goal else ''}{name}", (x, y), xytext=(6, 4), textcoords="offset points",
                            fontsize=7.5 if is_goal else 6.5, fontweight="bold" if is_goal else "normal", zorder=9,
                            bbox={"boxstyle": "round,pad=0.12", "fc": "white", "ec": rgb, "lw": 0.8, "alpha": 0.85})
    route = snap.get("route")
    if route is not None and route.poses:
        pts = np.array([(p.pose.position.x, p.pose.position.y) for p in route.poses])
        ax.plot(pts[:, 0], pts[:, 1], color="white", lw=4.0, zorder=6)
        ax.plot(pts[:, 0], pts[:, 1], color="#c51b7d", lw=1.8, zorder=6)
        drawn["route_points"] = len(pts)

    track = snap["track"]
    travelled = float(np.hypot(*np.diff(track, axis=0).T).sum()) if len(track) > 1 else 0.0
    extent = np.ptp(track, axis=0) if len(track) else np.zeros(2)
    drawn["travelled_m"] = travelled
    if len(track):
        ax.plot(track[:, 0], track[:, 1], color="black", lw=1.2, zorder=8)
        ax.scatter([track[0, 0]], [track[0, 1]], marker="o", s=40, facecolors="white", edgecolors="black", zorder=8)
        ax.scatter([track[-1, 0]], [track[-1, 1]], marker="X", s=60, color="black", zorder=8)

    # frame: everything drawn, with a margin
    xs, ys = [], []
    for coll in ax.collections:
        off = coll.get_offsets()
        if len(off):
            xs += list(np.asarray(off)[:, 0])
            ys += list(np.asarray(off)[:, 1])
    for line in ax.lines:
        xs += list(line.get_xdata())
        ys += list(line.get_ydata())
    if xs:
        ax.set_xlim(min(xs) - 1.0, max(xs) + 1.0)
        ax.set_ylim(min(ys) - 1.0, max(ys) + 1.0)
    ax.set_aspect("equal")
    ax.set_xlabel("x (m, odometry frame)")
    ax.set_ylabel("y (m)")
    ax.grid(True, color="#eeeeee", lw=0.5, zorder=0)
    handles = [
        Line2D([], [], ls="none", marker="o", ms=9, mfc="#888888", mec="black",
               label="belief: a category's remembered position (fainter: lower mass)"),
        Line2D([], [], ls="none", marker="s", ms=8, mfc="#888888", mec="black",
               label="shape: o ball, square box, diamond key, triangle other; colour: the name's"),
        Line2D([], [], ls="none", marker="o", ms=4, mfc="#888888", mec="none",
               label="belief: a stored sighting (opaque: this episode, fainter: older)"),
        Line2D([], [], color="#c51b7d", lw=1.8, label="belief: the route memory's way to the goal"),
        Line2D([], [], ls="none", marker="s", ms=8, mfc=plt.get_cmap("Blues")(0.6), mec="none",
               label="belief: looked-at floor (place memory; darker = looked at more)"),
        Line2D([], [], ls="none", marker="s", ms=8, mfc="#bdbdbd", mec="none", label="belief: floor stood on "
               "(route memory)"),
        Line2D([], [], ls="none", marker="o", ms=9, mfc="none", mec="#888888", mew=1.5,
               label="truth: an object (hollow, its category's colour and shape; large: this goal)"),
        Line2D([], [], ls=":", color="#888888", label="remembered -> nearest true object of its category"),
        Line2D([], [], color="#404040", lw=1.6, label="truth: walls"),
        Line2D([], [], color="black", lw=1.2, marker="X", ms=6, label=f"robot track (o start, X end): {len(track)} "
               f"poses, {travelled:.1f} m travelled" + (f",\nall within {extent[0]:.1f} x {extent[1]:.1f} m (back and forth)"
                                                       if travelled > 2 * max(extent.sum(), 0.1) else "")),
    ]
    leg = ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=7, frameon=False)
    ax.add_artist(leg)
    table = ["remembered (sighting mass = the object memory's gate; the position is the confidence-weighted",
             "mean of the stored sightings, so sightings in two places give a point between them):"]
    colours = [None, None]
    for _, _, line, rgb in sorted(rows, key=lambda r: r[:2]):
        table.append("  " + line)
        colours.append(rgb)
    if not rows:
        table.append("  nothing (a memory of this trial holds no sighting above the drawing threshold)")
        colours.append(None)
    if across is not None and across[0]:
        table += ["", f"the waypoint the route memory handed the policy lay across a wall from the robot on "
                      f"{across[1]} of {across[0]} steps"]
        colours += [None, None]
    for k, (line, rgb) in enumerate(zip(table, colours)):
        ax.annotate(line, (1.02, 0.50 - 0.032 * k), xycoords="axes fraction", fontsize=6.6, va="top",
                    color="black", fontweight="bold" if line.startswith("  GOAL") else "normal",
                    bbox=None if rgb is None else {"boxstyle": "square,pad=0.05", "fc": (*rgb, 0.18), "ec": "none"})
    ax.set_title(title, fontsize=8.5)
    fig.tight_layout()
    fig.savefig(path, bbox_inches="tight")
    plt.close(fig)
    return drawn


__all__ = ["MEMORY", "MemoryWatch", "grid_image", "plot_memory", "walls_in_house", "waypoints_across_walls"]
