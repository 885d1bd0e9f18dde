"""Memory introspection: the route memory as ``MarkerArray`` / ``OccupancyGrid``, checked against the memory.

The conversions (:mod:`icrl_ros.nodes.introspection`) are tested on a real route memory
(:class:`~icrl_ros.house.route_state.RouteState`, the control step's state) fed through its own
``observe`` (a token laid out as the step encoder writes it: :data:`STRUCT_DIM` entries at the end) and
``fill`` (odometry marks the floor); the node test runs the agent with the shipped ``house_relic_scan``
bundle over real DDS and reads both topics from another node.
"""

from __future__ import annotations

import json
import math
import os

import numpy as np
import pytest
import torch
import yaml

from tests.nodes.ros_support import require_ros, spin_for, spin_until

require_ros()
pytest.importorskip("visualization_msgs.msg", reason="visualization_msgs: scripts/ensure_ros.sh installs it")

from rclpy.executors import SingleThreadedExecutor  # noqa: E402
from rclpy.lifecycle import TransitionCallbackReturn  # noqa: E402
from rclpy.parameter import Parameter  # noqa: E402
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy  # noqa: E402
from nav_msgs.msg import OccupancyGrid, Path  # noqa: E402
from sensor_msgs.msg import LaserScan  # noqa: E402
from std_msgs.msg import Float32MultiArray, String  # noqa: E402
from std_srvs.srv import Trigger  # noqa: E402
from visualization_msgs.msg import Marker, MarkerArray  # noqa: E402

from icrl_ros.house.route_state import RouteState  # noqa: E402
from icrl_ros.memory.route import CELL_M, CELLS  # noqa: E402
from icrl_ros.models.object_memory import STRUCT_DIM  # noqa: E402
from icrl_ros.nodes import introspection  # noqa: E402
from icrl_ros.nodes.agent_node import AgentNode  # noqa: E402
from icrl_ros.nodes.recording import RUN_TOPICS, make_recorder, message_class  # noqa: E402
from tests.nodes.fake_runner import FakeRunner, write_fake_bundle  # noqa: E402
from tests.nodes.probe import Probe  # noqa: E402
from tests.nodes.ros_support import REPO, require_house_bundle  # noqa: E402

NAMES = ["red_ball", "blue_box", "green_key", "yellow_cone", "purple_cup"]
SCALE_M = 5.0


def token(cat: int, conf: float, at: tuple[float, float], robot: tuple[float, float] = (0.0, 0.0),
          n_cat: int = len(NAMES), width: int = 32) -> torch.Tensor:
    """One step's token (1, width) with the object-memory entries the step encoder writes last: goal / C,
    sighted category / C, confidence, the sighting's x, y and the robot's x, y (units of SCALE_M), cos, sin yaw."""
    x = torch.randn(1, width)
    s = x[0, -STRUCT_DIM:]
    s[:] = torch.tensor([0.0, cat / n_cat, conf, at[0] / SCALE_M, at[1] / SCALE_M, robot[0] / SCALE_M,
                         robot[1] / SCALE_M, 1.0, 0.0])
    return x


def in_frame(origin, p) -> tuple[float, float]:
    """Memory-frame point ``p`` in the odometry frame, by hand."""
    ox, oy, t = origin
    return ox + math.cos(t) * p[0] - math.sin(t) * p[1], oy + math.sin(t) * p[0] + math.cos(t) * p[1]


def grid_value(grid: OccupancyGrid, xy) -> int:
    """The grid's value at odometry-frame point ``xy``, read through the message's own origin and resolution."""
    info = grid.info
    q = info.origin.orientation
    yaw = 2.0 * math.atan2(q.z, q.w)
    dx, dy = xy[0] - info.origin.position.x, xy[1] - info.origin.position.y
    lx, ly = math.cos(yaw) * dx + math.sin(yaw) * dy, -math.sin(yaw) * dx + math.cos(yaw) * dy
    col, row = int(math.floor(lx / info.resolution)), int(math.floor(ly / info.resolution))
    assert 0 <= col < info.width and 0 <= row < info.height
    return grid.data[row * info.width + col]


def by_ns(markers: MarkerArray, ns: str) -> dict[int, Marker]:
    return {m.id: m for m in markers.markers if m.ns == ns and m.action == Marker.ADD}


def test_a_sighting_lands_at_its_place_with_its_category_and_a_reset_clears_it() -> None:
    route = RouteState(1, len(NAMES), SCALE_M)
    origin = (1.5, -2.0, 0.7)
    route.observe(token(2, 0.95, (3.0, 1.0), robot=(1.0, 0.5)))  # a confident green_key at (3, 1)
    route.observe(token(4, 0.5, (-2.0, 2.0)))  # an unsure purple_cup: weight e^-15, not drawn
    msg = introspection.sightings(route, NAMES, goal=2, origin=origin, frame_id="odom")
    assert msg.markers[0].action == Marker.DELETEALL  # every array replaces the last one
    spheres, labels = by_ns(msg, "sightings"), by_ns(msg, "labels")
    assert set(spheres) == set(labels) == {2}
    x, y = in_frame(origin, (3.0, 1.0))
    s = spheres[2]
    assert s.header.frame_id == "odom" and s.type == Marker.SPHERE
    assert math.hypot(s.pose.position.x - x, s.pose.position.y - y) < CELL_M
    _, mass = route.remembered(0, 2)
    assert 0.9 < mass < 1.0
    assert labels[2].text == f"goal green_key {mass:.2f}"
    assert s.scale.x == introspection.GOAL_SPHERE_M and s.color.a == 1.0  # the goal is highlighted
    cubes = by_ns(msg, "seen_from")[2]  # where the robot stood when it saw it
    assert len(cubes.points) == 1
    rx, ry = in_frame(origin, (1.0, 0.5))
    assert abs(cubes.points[0].x - rx) <= CELL_M and abs(cubes.points[0].y - ry) <= CELL_M

    # another goal: green_key is drawn as a plain category, in its colour, its opacity from its mass
    other = introspection.sightings(route, NAMES, goal=0, origin=origin, frame_id="odom")
    s2 = by_ns(other, "sightings")[2]
    assert s2.scale.x == introspection.SPHERE_M and by_ns(other, "labels")[2].text == f"green_key {mass:.2f}"
    assert s2.color.a == pytest.approx(0.35 + 0.65 * mass) and "seen_from" not in {m.ns for m in other.markers}
    assert (s2.color.r, s2.color.g, s2.color.b) == pytest.approx(introspection.NAME_COLOURS["green"])  # its name's

    route.reset()  # a new trial
    cleared = introspection.sightings(route, NAMES, goal=2, origin=origin, frame_id="odom")
    assert [m.action for m in cleared.markers] == [Marker.DELETEALL]
    assert set(introspection.route_map(route, origin, "odom").data) == {-1}


def test_the_marker_is_the_confidence_weighted_mean_of_the_sightings() -> None:
    route = RouteState(1, len(NAMES), SCALE_M)
    route.observe(token(1, 0.9, (2.0, 0.0)))
    route.observe(token(1, 0.8, (0.0, 2.0)))
    w1, w2 = math.exp(30 * (0.9 - 1)), math.exp(30 * (0.8 - 1))  # the object memory head's weights
    expect = (2.0 * w1 / (w1 + w2), 2.0 * w2 / (w1 + w2))
    s = by_ns(introspection.sightings(route, NAMES, goal=None, origin=(0.0, 0.0, 0.0), frame_id="map"), "sightings")
    assert set(s) == {1}
    assert (s[1].pose.position.x, s[1].pose.position.y) == pytest.approx(expect, abs=1e-6)
    assert (s[1].pose.position.x, s[1].pose.position.y) != pytest.approx((1.0, 1.0), abs=0.1)  # not a plain mean


def test_the_route_arrow_runs_from_the_robot_to_the_waypoint_the_policy_was_handed() -> None:
    """Standing where it saw its goal from, the route memory hands the policy the goal itself as the waypoint
    (icrl_ros/memory/route.py): the arrow then ends on the goal's sphere."""
    route = RouteState(1, len(NAMES), SCALE_M)
    origin, at = (1.5, -2.0, 0.7), (1.1, 0.6, 0.4)  # the memory's frame in the odometry frame; the robot in it

    def step(goal: int) -> None:
        route.before_encode({"odom": torch.tensor([at]), "goal": torch.tensor([goal])}, torch.tensor([0]))

    step(2)  # marks the floor; nothing remembered yet: no way
    assert route.last_route is not None and float(route.last_route[0, 0]) == 0.0
    robot = (*in_frame(origin, at[:2]), origin[2] + at[2])  # the odometry pose of that step
    assert introspection.waypoint(route, robot) is None
    route.observe(token(2, 0.95, (3.0, 1.0), robot=at[:2]))  # green_key seen from here
    step(2)
    way = introspection.waypoint(route, robot)
    assert way is not None and way[1] > 0
    msg = introspection.sightings(route, NAMES, goal=2, origin=origin, frame_id="odom", robot=robot)
    arrow, label = by_ns(msg, "route")[0], by_ns(msg, "route")[1]
    sphere = by_ns(msg, "sightings")[2]
    assert arrow.type == Marker.ARROW and len(arrow.points) == 2
    assert (arrow.points[0].x, arrow.points[0].y) == pytest.approx(robot[:2])
    assert math.hypot(arrow.points[1].x - sphere.pose.position.x, arrow.points[1].y - sphere.pose.position.y) < 0.01
    assert label.text == f"route {way[1]:.1f} m"
    assert introspection.sightings_key(route, 2, robot=robot) != introspection.sightings_key(route, 2)

    step(4)  # a goal never seen: no way, no arrow
    assert "route" not in {m.ns for m in introspection.sightings(route, NAMES, 4, origin, "odom", robot=robot).markers}
    step(2)
    route.reset()  # a new trial: nothing to show
    assert route.last_route is None and introspection.waypoint(route, robot) is None


def test_the_sightings_key_changes_exactly_when_the_drawn_markers_do() -> None:
    """The node sends the markers again only when this key changes."""
    route = RouteState(1, len(NAMES), SCALE_M)
    route.observe(token(2, 0.95, (3.0, 1.0)))
    key = introspection.sightings_key(route, goal=2)
    drawn = introspection.sightings(route, NAMES, 2, (0.0, 0.0, 0.0), "odom")
    route.observe(token(2, 0.3, (-4.0, 4.0)))  # a frame that shows nothing: weight e^-21
    assert introspection.sightings_key(route, goal=2) == key
    again = introspection.sightings(route, NAMES, 2, (0.0, 0.0, 0.0), "odom")
    assert [(m.ns, m.id, m.text, round(m.pose.position.x, 2), round(m.pose.position.y, 2)) for m in again.markers] == \
        [(m.ns, m.id, m.text, round(m.pose.position.x, 2), round(m.pose.position.y, 2)) for m in drawn.markers]
    assert introspection.sightings_key(route, goal=1) != key  # another goal is highlighted
    route.observe(token(2, 0.9, (2.0, 1.0), robot=(1.0, 1.0)))  # a second confident sighting moves the mean
    assert introspection.sightings_key(route, goal=2) != key
    route.reset()
    assert introspection.sightings_key(route, goal=2) == (2, 0, (), None)


def test_the_route_map_is_the_floor_the_robot_stood_on() -> None:
    route = RouteState(1, len(NAMES), SCALE_M)
    # inside cells (a point on a cell's edge may round either way once rotated); the last: a cell again
    track = [(0.1, 0.1), (0.37, 0.12), (0.62, 0.13), (0.6, 0.4), (-1.2, 3.3), (0.4, 0.2)]
    for x, y in track:
        route.fill({"odom": torch.tensor([[x, y, 0.0]]), "goal": torch.tensor([0])}, torch.tensor([0]))
    cells = {(math.floor(x / CELL_M), math.floor(y / CELL_M)) for x, y in track}
    assert route.stood[0].sum() == len(cells) == 5

    for origin in ((0.0, 0.0, 0.0), (4.0, -1.0, 2.1)):
        grid = introspection.route_map(route, origin, "odom")
        assert grid.header.frame_id == "odom" and grid.info.resolution == CELL_M
        assert grid.info.width == grid.info.height == CELLS
        data = np.array(grid.data, dtype=np.int8)
        assert (data == 0).sum() == len(cells) and set(np.unique(data)) == {-1, 0}
        for p in track:  # every place the robot stood is free where the message says it is
            assert grid_value(grid, in_frame(origin, p)) == 0
        # ... and a place it never stood is unknown
        assert grid_value(grid, in_frame(origin, (2.0, -2.0))) == -1
    # memory frame: the message's row r / column c is the memory's cell (x = c, y = r)
    np.testing.assert_array_equal(np.array(introspection.route_map(route, (0.0, 0.0, 0.0), "odom").data)
                                  .reshape(CELLS, CELLS) == 0, route.stood[0].T)


def test_a_runner_without_a_route_memory_has_none() -> None:
    assert introspection.route_state(object()) is None
    assert introspection.route_state(FakeRunner.__new__(FakeRunner)) is None


def test_agent_publishes_the_runners_route_memory_only_while_subscribed(ros_context, tmp_path, monkeypatch) -> None:
    """The shipped house_relic_scan bundle's runner over DDS: nothing is computed without a subscriber; a
    subscriber gets the grid of the cells the runner's route memory marked and a sighting written into the
    runner's route memory (its sums set directly, as the step encoder's sightings would add them); a
    reset_memory call clears both."""
    calls = {"sightings": 0, "route_map": 0}
    for name in calls:
        real = getattr(introspection, name)

        def counted(*a, _real=real, _name=name, **k):
            calls[_name] += 1
            return _real(*a, **k)
        monkeypatch.setattr(introspection, name, counted)

    ex = SingleThreadedExecutor(context=ros_context)
    probe = Probe(ros_context, subscribe=False)
    pub_scan = probe.create_publisher(LaserScan, "scan", 10)
    agent = AgentNode("icrl_agent", context=ros_context, parameter_overrides=[
        Parameter("bundle_path", value=require_house_bundle()), Parameter("introspection", value=True),
        Parameter("idle_after_stop", value=False), Parameter("input_timeout_s", value=30.0)])
    for n in (probe, agent):
        ex.add_node(n)
    step = [0]

    def send(x: float, y: float, yaw: float) -> None:
        step[0] += 1
        stamp = 10.0 + step[0]
        probe.send_odom(x, y, yaw, stamp=stamp)
        scan = LaserScan(angle_min=-math.pi, angle_increment=2 * math.pi / 360, range_min=0.1, range_max=10.0,
                         ranges=[5.0] * 360)
        scan.header.stamp.sec = int(stamp)
        pub_scan.publish(scan)
        probe.send_image(stamp=stamp, height=64, width=64, value=40 * step[0])
        assert spin_until(ex, lambda: agent.counters["actions"] == step[0], 10), agent.status()

    recorder = None
    try:
        assert agent.trigger_configure() == TransitionCallbackReturn.SUCCESS
        assert agent.trigger_activate() == TransitionCallbackReturn.SUCCESS
        route = introspection.route_state(agent.runner)
        assert route is not None and route is agent.runner.control.states["route"]
        spin_for(ex, 0.3)
        probe.pub_goal.publish(String(data="red_ball"))
        origin = (0.5, 0.25, 0.3)
        send(*origin)
        assert calls == {"sightings": 0, "route_map": 0}  # nobody subscribed: nothing computed

        qos = QoSProfile(depth=5, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL)
        recorder = make_recorder(str(tmp_path / "run.mcap"), namespace="/", context=ros_context, topics=[
            t for t in RUN_TOPICS if "/memory/" in t[0]])  # the recorder's own subscriptions to both topics
        ex.add_node(recorder)
        got: dict[str, list] = {"sightings": [], "route_map": []}
        probe.create_subscription(MarkerArray, "icrl_agent/memory/sightings", got["sightings"].append, qos)
        probe.create_subscription(OccupancyGrid, "icrl_agent/memory/route_map", got["route_map"].append, qos)
        # a viewer joining while the robot waits gets the memory without a step (the node checks each second)
        assert spin_until(ex, lambda: got["sightings"] and got["route_map"], 5)
        # both viewers (this one and the recorder) matched before the robot moves on: both get every later message
        assert spin_until(ex, lambda: all(agent._memory_pubs[n].get_subscription_count() == 2 for n in got), 10)

        # a confident sighting of red_ball at (2, -1) m in the memory's frame, written into the runner's memory
        cat = agent.runner.goal_names.index("red_ball")
        route.sums[0, cat] = (2.0 * 1.0, -1.0 * 1.0, 1.0)
        moved = (0.9, 0.45, 0.3)
        n = len(got["route_map"])
        send(*moved)
        assert spin_until(ex, lambda: len(got["route_map"]) > n and len(got["sightings"]) > n, 5)
        grid, markers = got["route_map"][-1], got["sightings"][-1]
        assert grid.header.frame_id == "odom"
        data = np.array(grid.data, dtype=np.int8).reshape(CELLS, CELLS)
        np.testing.assert_array_equal(data == 0, route.stood[0].T)  # the grid is the runner's stood map
        assert route.stood[0].sum() == 2
        for pose in (origin, moved):  # the cell the robot stood in, where the message puts it in the odometry frame
            c, s_ = math.cos(origin[2]), math.sin(origin[2])
            dx, dy = pose[0] - origin[0], pose[1] - origin[1]
            p = (c * dx + s_ * dy, -s_ * dx + c * dy)  # the policy's odometry (the origin itself: a cell corner)
            centre = tuple((math.floor(v / CELL_M) + 0.5) * CELL_M for v in p)
            assert math.dist(in_frame(origin, centre), pose[:2]) < CELL_M
            assert grid_value(grid, in_frame(origin, centre)) == 0
        spheres = by_ns(markers, "sightings")
        assert cat in spheres
        xy, mass = route.remembered(0, cat)
        assert mass > 0.99 and np.allclose(xy, (2.0, -1.0), atol=0.01)
        x, y = in_frame(origin, (2.0, -1.0))
        assert math.hypot(spheres[cat].pose.position.x - x, spheres[cat].pose.position.y - y) < CELL_M
        assert by_ns(markers, "labels")[cat].text.startswith("goal red_ball ")
        # the route the runner's memory handed the policy at that step starts where the robot stood
        arrow = by_ns(markers, "route")[0]
        assert float(route.last_route[0, 0]) == 1.0
        assert (arrow.points[0].x, arrow.points[0].y) == pytest.approx(moved[:2], abs=1e-6)
        assert calls["sightings"] >= 2 and calls["route_map"] >= 2
        # the other topics, each from the runner's memory (its KV cache through the house's fixed heads)
        assert set(agent._memory_pubs) == {"sightings", "route_map", "route", "looked_at", "attention",
                                           "attention_image"}
        extra: dict[str, list] = {"route": [], "looked_at": [], "attention": []}
        for name, cls in (("route", Path), ("looked_at", OccupancyGrid), ("attention", Float32MultiArray)):
            probe.create_subscription(cls, f"icrl_agent/memory/{name}", extra[name].append, qos)
        assert spin_until(ex, lambda: all(extra.values()), 5)  # a new viewer gets each at once
        view = agent._memory_route.view
        by_ep, n_ep = view.attention_by_episode()
        att = extra["attention"][-1]
        assert [d.size for d in att.layout.dim] == [view.n_fixed, n_ep + 1]
        np.testing.assert_allclose(np.array(att.data).reshape(by_ep.shape), by_ep, atol=1e-6)
        np.testing.assert_allclose(by_ep.sum(1), 1.0, atol=1e-6)
        frame_origin = agent.loop.origin
        assert extra["looked_at"][-1].data == introspection.looked_at_map(view, frame_origin, "odom").data
        assert max(extra["looked_at"][-1].data) > 0  # two steps looked somewhere
        path = extra["route"][-1]
        assert route.way() is not None and len(path.poses) == len(route.way()[0])
        end = path.poses[-1].pose.position
        assert (end.x, end.y) == pytest.approx(in_frame(origin, (2.0, -1.0)), abs=0.01)  # ends at the sighting

        # steps sooner than introspection_period_s after the last publication are held back; the last one's
        # memory still goes out once the period is over
        assert agent.set_parameters([Parameter("introspection_period_s", value=2.0)])[0].successful
        spin_for(ex, 0.1)
        n = len(got["route_map"])
        for k in range(3):  # three new cells in quick succession
            send(moved[0] + 0.3 * (k + 1), moved[1], moved[2])
        spin_for(ex, 0.5)  # what was sent has arrived (with introspection_period_s 0: all 3 maps)
        assert len(got["route_map"]) - n <= 2  # not one per step (each step entered a new cell)

        def shows_stood() -> bool:
            return np.array_equal(np.array(got["route_map"][-1].data).reshape(CELLS, CELLS) == 0, route.stood[0].T)
        assert route.stood[0].sum() == 5 and spin_until(ex, shows_stood, 5)

        # a new trial: the view is cleared
        client = probe.create_client(Trigger, "icrl_agent/reset_memory")
        assert client.wait_for_service(timeout_sec=5)
        n = len(got["sightings"])
        future = client.call_async(Trigger.Request())
        assert spin_until(ex, lambda: future.done() and len(got["sightings"]) > n, 5)
        assert [m.action for m in got["sightings"][-1].markers] == [Marker.DELETEALL]
        assert spin_until(ex, lambda: set(got["route_map"][-1].data) == {-1}, 5)
        assert agent.counters.get("introspection_errors", 0) == 0
        spin_for(ex, 0.3)
        recorder.close()

        # the shipped RViz2 config (sim.launch.py rviz:=true) shows every memory topic, with QoS that matches it
        with open(os.path.join(REPO, "config", "memory.rviz")) as f:
            rviz = yaml.safe_load(f)["Visualization Manager"]
        displays = {d["Topic"]["Value"]: d for d in rviz["Displays"] if "Topic" in d}
        assert rviz["Global Options"]["Fixed Frame"] == grid.header.frame_id
        plugin = {"sightings": "MarkerArray", "route_map": "Map", "looked_at": "Map", "route": "Path",
                  "attention_image": "Image"}
        for name, pub in agent._memory_pubs.items():
            if name not in plugin:  # the attention array has no RViz display
                continue
            topic = displays[pub.topic_name]
            assert topic["Class"] == f"rviz_default_plugins/{plugin[name]}", name
            assert topic["Topic"]["Reliability Policy"] == "Reliable"
            assert topic["Topic"]["Durability Policy"] == "Transient Local"
            assert pub.qos_profile.durability == DurabilityPolicy.TRANSIENT_LOCAL
        assert "/true_objects" in displays  # the bridge's truth beside the memory
        # ... and the Foxglove layout shows every memory topic (the attention as raw values) in the same frame
        with open(os.path.join(REPO, "config", "memory.foxglove.json")) as f:
            fox = json.load(f)["configById"]
        shown = (set(fox["3D!memory"]["topics"]) | {c["topicPath"] for k, c in fox.items() if k.startswith("Raw")}
                 | {c["imageMode"]["imageTopic"] for k, c in fox.items() if k.startswith("Image")})
        assert {pub.topic_name for pub in agent._memory_pubs.values()} <= shown
        assert fox["3D!memory"]["followTf"] == grid.header.frame_id
    finally:
        ex.shutdown()
        agent.destroy_node()
        probe.destroy_node()
        if recorder is not None:
            recorder.close()
            recorder.destroy_node()
    # the recording, read back by another reader (rosbags) and decoded by rclpy: what the viewer received
    from rclpy.serialization import deserialize_message
    from rosbags.highlevel import AnyReader

    recorded: dict[str, list] = {}
    with AnyReader([tmp_path / "run.mcap"]) as reader:
        for conn, _t, raw in reader.messages():
            recorded.setdefault(conn.topic, []).append(deserialize_message(raw, message_class(conn.msgtype)))
    grids, arrays = recorded["/icrl_agent/memory/route_map"], recorded["/icrl_agent/memory/sightings"]

    def contents(arrays_) -> set:  # as a set: a reliable resend right after a match can arrive after later ones
        return {tuple((m.ns, m.id, m.action, m.text) for m in a.markers) for a in arrays_}
    assert {tuple(g.data) for g in grids} == {tuple(g.data) for g in got["route_map"]}
    assert contents(arrays) == contents(got["sightings"])
    assert (("", 0, Marker.DELETEALL, ""),) in contents(arrays)  # the reset is in the recording


def test_a_bundle_without_a_route_memory_publishes_nothing(ros_context, tmp_path, capfd) -> None:
    agent = AgentNode("icrl_agent", context=ros_context, runner_factory=FakeRunner.from_bundle, parameter_overrides=[
        Parameter("bundle_path", value=write_fake_bundle(str(tmp_path / "bundle"))),
        Parameter("introspection", value=True)])
    try:
        assert agent.trigger_configure() == TransitionCallbackReturn.SUCCESS
        assert agent._memory_pubs is None
        names = {name for name, _ in agent.get_publisher_names_and_types_by_node("icrl_agent", "/")}
        assert not any("memory" in name for name in names), names
    finally:
        agent.destroy_node()
    assert capfd.readouterr().err.count("keeps no route memory") == 1
