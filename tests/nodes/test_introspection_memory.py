"""The KV cache as the house model's fixed heads read it, on the viewer's topics: stored sightings with their age,
the looked-at floor, the route as a Path, the fixed heads' attention per episode, and the bridge's true objects.

Everything runs on the shipped ``house_relic_scan`` bundle's runner: sightings are written into its KV cache
(layer 0, head 0 keys and values, laid out as the object memory head writes them) and must come back at the
right place with the right age; a trial reset must clear them. The attention recomputed from the cache is
compared with what the torch engine's attention module computed on the same step.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from tests.nodes.ros_support import require_house_bundle, require_ros

require_ros()
pytest.importorskip("visualization_msgs.msg", reason="visualization_msgs: scripts/ensure_ros.sh installs it")

from visualization_msgs.msg import Marker  # noqa: E402

from icrl_ros.house.memory_view import HouseMemoryView  # noqa: E402
from icrl_ros.memory.route import CELL_M, CELLS  # noqa: E402
from icrl_ros.models.encoders import OBJECT_SCALE_M  # noqa: E402
from icrl_ros.models.object_memory import BETA  # noqa: E402
from icrl_ros.models.place_memory import PRIOR_VIEWS, SIGMA_M, VIEW_AHEAD_M  # noqa: E402
from icrl_ros.nodes import introspection  # noqa: E402
from tests.nodes.test_introspection import by_ns, grid_value, in_frame  # noqa: E402

ORIGIN = (1.5, -2.0, 0.7)


def obs(rng, pose=(0.0, 0.0, 0.0)) -> dict:
    return {"rgb": rng.integers(0, 256, (64, 64, 3), dtype=np.uint8), "odom": np.array(pose, np.float32),
            "scan": np.ones(12, np.float32)}


@pytest.fixture(scope="module")
def runner():
    from icrl_ros.runtime import PolicyRunner

    torch.set_num_threads(1)
    return PolicyRunner.from_bundle(require_house_bundle(), backend="torch")


def fresh(runner, steps: int, episodes: int = 1, goal: str = "cone", seed: int = 0):
    """A new trial of ``episodes`` episodes of ``steps`` random frames each (poses along a line)."""
    runner.reset_trial()
    rng = np.random.default_rng(seed)
    for e in range(episodes):
        runner.begin_episode(goal)
        for t in range(steps):
            runner.act(obs(rng, (0.25 * t, 0.1 * e, 0.1 * t)))
    return rng


def stored_slots(runner) -> np.ndarray:
    _, _, valid, episode = runner.memory.view()
    return np.flatnonzero(valid[0].numpy() & (episode[0].numpy() >= 0))


def write_sighting(runner, slot: int, cat: int, conf: float, xy) -> None:
    """Head 0 of layer 0's key and value of a stored step that saw ``cat`` at ``xy`` (metres): what
    ObjectMemoryHead.qkv writes (key: one-hot category x confidence; value: position / OBJECT_SCALE_M, 1)."""
    k, v, _, _ = runner.memory.view()
    n = len(runner.goal_names)
    k[0, 0, 0, slot, :n + 1] = 0.0
    k[0, 0, 0, slot, cat] = conf
    v[0, 0, 0, slot, 0:2] = torch.tensor(xy) / OBJECT_SCALE_M
    v[0, 0, 0, slot, 2] = 1.0


def test_a_sighting_written_into_the_cache_is_drawn_at_its_place_with_its_age_and_a_reset_clears_it(runner) -> None:
    fresh(runner, 4, episodes=3)
    view = HouseMemoryView.for_runner(runner)
    slots = stored_slots(runner)
    _, _, _, episode = runner.memory.view()
    assert list(episode[0, slots].numpy()) == [0] * 4 + [1] * 4 + [2] * 4
    cat = runner.goal_names.index("red_ball")
    write_sighting(runner, slots[1], cat, 0.97, (3.0, 1.0))  # episode 0: two episodes ago
    write_sighting(runner, slots[9], cat, 0.9, (3.1, 1.05))  # episode 2: this one, same cell
    write_sighting(runner, slots[5], cat, 0.6, (-4.0, 2.0))  # below SIGHTING_P: not remembered
    seen = view.sightings()
    mine = seen["cat"] == cat
    assert sorted(seen["episode"][mine].tolist()) == [0, 2]
    assert np.allclose(np.sort(seen["xy"][mine][:, 0]), [3.0, 3.1], atol=1e-5)
    assert view.current_episode() == 2

    route = runner.control.states["route"]
    route.sums[0, cat] = (3.0, 1.0, 1.0)  # the route memory's mean there too (its sphere is drawn from it)
    msg = introspection.sightings(route, runner.goal_names, cat, ORIGIN, "odom", sighted=seen, current=2)
    dots = by_ns(msg, "sighted")[cat]
    assert dots.type == Marker.SPHERE_LIST and len(dots.points) == 2  # one per cell and episode
    placed = {(round(p.x, 3), round(p.y, 3)): c.a for p, c in zip(dots.points, dots.colors)}
    for xy, age in (((3.1, 1.05), 0), ((3.0, 1.0), 2)):
        x, y = in_frame(ORIGIN, xy)
        (px, py), alpha = min(placed.items(), key=lambda kv: math.hypot(kv[0][0] - x, kv[0][1] - y))
        assert math.hypot(px - x, py - y) < 1e-3 and alpha == introspection.age_alpha(age)
    assert introspection.age_alpha(0) > introspection.age_alpha(1) > introspection.age_alpha(2)
    label = by_ns(msg, "labels")[cat].text
    assert label.startswith("goal red_ball ") and label.endswith("| 2 seen, 0-2 ep ago")
    key = introspection.sightings_key(route, cat, sighted=seen, current=2)
    write_sighting(runner, slots[10], cat, 0.95, (3.2, 1.0))  # one more step saw it: the key changes
    assert introspection.sightings_key(route, cat, sighted=view.sightings(), current=2) != key

    runner.reset_trial()  # a new trial: the cache holds no sighting, nothing is drawn
    assert len(view.sightings()["cat"]) == 0
    cleared = introspection.sightings(route, runner.goal_names, cat, ORIGIN, "odom", sighted=view.sightings())
    assert [m.action for m in cleared.markers] == [Marker.DELETEALL]
    assert view.attention() is None and introspection.attention_array(view).data.tolist() == []
    assert introspection.attention_image(view).height == 0


def test_the_recomputed_attention_is_what_the_step_computed(runner) -> None:
    """The fixed heads' weights over [sink | the cache] recomputed from the cache, times the cache's values, equal
    the fixed heads' outputs the torch engine's layer-0 attention returned on the same step."""
    from icrl_ros.models.attention import SinkAttention

    att0 = next(m for m in runner.engine.graphs["core"].modules() if isinstance(m, SinkAttention))
    got = {}
    hook = att0.register_forward_hook(lambda m, a, o: got.__setitem__("y", o[3].detach().double().clone()))
    try:
        rng = fresh(runner, 10, episodes=2, goal="red_ball")
        cat = runner.goal_names.index("red_ball")
        slots = stored_slots(runner)
        write_sighting(runner, slots[2], cat, 0.95, (2.0, -1.0))  # episode 0
        write_sighting(runner, slots[14], cat, 0.9, (2.2, -1.1))  # episode 1
        runner.act(obs(rng, (1.0, 0.5, 0.3)))  # the step attends to both
        view = HouseMemoryView.for_runner(runner)
        att = view.attention()
        _, v, _, _ = runner.memory.view()
        for h in range(view.n_fixed):
            out = att["slots"][h] @ v[0, 0, h].double().numpy()  # the sink's value is 0
            np.testing.assert_allclose(out, got["y"][0, h, 0].numpy(), atol=1e-5)
        # head 0: the two sightings beat the sink; their weights' ratio is the object memory's exp(BETA (P1 - P2))
        w = att["slots"][0]
        assert w[slots[2]] / w[slots[14]] == pytest.approx(math.exp(BETA * 0.05), rel=1e-4)
        _, mass = runner.control.states["route"].remembered(0, cat)
        by_ep, n_ep = view.attention_by_episode()
        assert n_ep == 2 and by_ep.shape == (view.n_fixed, 3)
        np.testing.assert_allclose(by_ep.sum(1), 1.0, atol=1e-9)
        assert by_ep[0, 0] == pytest.approx(w[slots[2]], abs=1e-6) and by_ep[0, 0] > 0.5 > by_ep[0, 2]
        msg = introspection.attention_array(view)
        assert [d.size for d in msg.layout.dim] == [view.n_fixed, 3]
        assert msg.layout.dim[0].label.startswith("head: object memory, place memory here")
        np.testing.assert_allclose(np.array(msg.data).reshape(view.n_fixed, 3), by_ep, atol=1e-6)
        img = introspection.attention_image(view)  # the same as a picture: a cell per (head, episode)
        px = introspection.ATTENTION_PX
        assert (img.encoding, img.height, img.width, img.step) == ("mono8", view.n_fixed * px, 3 * px, 3 * px)
        cells = np.frombuffer(bytes(img.data), np.uint8).reshape(img.height, img.width)
        for h in range(view.n_fixed):
            for e in range(3):
                assert cells[h * px + px // 2, e * px + px // 2] == round(255 * by_ep[h, e])
        assert mass == 0.0  # the route memory never saw these tokens (written behind its back): the cache's view
    finally:
        hook.remove()


def test_the_object_heads_attention_agrees_with_the_route_memorys_sighting_mass() -> None:
    """Two paths to one number: the route memory's sums (fed from the step's tokens) and the object memory head's
    attention recomputed from the KV cache, on a real house trial."""
    import gymnasium as gym

    import icrl_ros.sim  # noqa: F401
    from icrl_ros.runtime import PolicyRunner

    r = PolicyRunner.from_bundle(require_house_bundle())
    env = gym.make("icrl_ros/MiniWorldHouse-v0", scan=True)
    o, _ = env.reset(seed=3)
    r.begin_episode(int(o["goal"]))
    for _ in range(60):
        a, _ = r.act({"rgb": o["rgb"], "odom": o["odom"], "scan": o["scan"]})
        o, _, term, trunc, _ = env.step(a)
        if term or trunc:
            break
    view = HouseMemoryView.for_runner(r)
    route = r.control.states["route"]
    goal = int(route.last_goal[0])
    _, mass = route.remembered(0, goal)
    assert 1.0 - view.attention()["sink"][0] == pytest.approx(mass, abs=1e-5)
    seen = view.sightings()
    assert len(seen["cat"]) > 0  # the frozen heads saw something in 60 steps of a house
    for cat in np.unique(seen["cat"]):  # each stored sighting is one the route memory also summed
        assert route.remembered(0, int(cat))[1] > 0.5


def test_the_looked_at_floor_is_what_a_place_probe_would_read(runner) -> None:
    fresh(runner, 1)
    view = HouseMemoryView.for_runner(runner)
    k, _, _, _ = runner.memory.view()
    slot = stored_slots(runner)[0]
    # the step stood at (0, 0) facing yaw 0: its view point lies VIEW_AHEAD_M ahead
    assert view.view_points() == pytest.approx(np.array([[VIEW_AHEAD_M, 0.0]]), abs=1e-5)
    k[0, 0, 1:, slot, 0:2] = torch.tensor([2.0, -1.0]) / OBJECT_SCALE_M  # move that view point
    grid = introspection.looked_at_map(view, ORIGIN, "odom")
    assert grid.info.resolution == CELL_M and grid.info.width == CELLS
    centre = ((math.floor(2.0 / CELL_M) + 0.5) * CELL_M, (math.floor(-1.0 / CELL_M) + 0.5) * CELL_M)
    expect = 1.0 / (1.0 + PRIOR_VIEWS)  # one view right at the probe
    assert grid_value(grid, in_frame(ORIGIN, centre)) == round(100 * expect)
    away = (centre[0] + 1.0, centre[1])  # a metre off: exp(-(1 / SIGMA_M)^2)
    s = math.exp(-(1.0 / SIGMA_M) ** 2)
    assert grid_value(grid, in_frame(ORIGIN, away)) == round(100 * s / (s + PRIOR_VIEWS))
    assert grid_value(grid, in_frame(ORIGIN, (-5.0, 5.0))) == -1  # never looked there
    runner.reset_trial()
    assert set(introspection.looked_at_map(view, ORIGIN, "odom").data) == {-1}


def test_the_route_path_runs_from_the_robot_over_stood_floor_to_the_remembered_goal() -> None:
    from icrl_ros.house.route_state import RouteState
    from tests.nodes.test_introspection import NAMES, SCALE_M, token

    route = RouteState(1, len(NAMES), SCALE_M)
    track = [(0.125 + 0.25 * i, 0.125, 0.0) for i in range(12)]  # a corridor along x
    for pose in track:
        route.before_encode({"odom": torch.tensor([pose]), "goal": torch.tensor([2])}, torch.tensor([0]))
    assert introspection.route_path(route, ORIGIN, "odom").poses == []  # nothing remembered: no way
    route.observe(token(2, 0.95, (3.2, 1.5), robot=(2.875, 0.125)))  # seen from the corridor's far end
    route.before_encode({"odom": torch.tensor([track[0]]), "goal": torch.tensor([2])}, torch.tensor([0]))
    path = introspection.route_path(route, ORIGIN, "odom")
    pts = [(p.pose.position.x, p.pose.position.y) for p in path.poses]
    assert path.header.frame_id == "odom" and len(pts) >= 4
    assert pts[0] == pytest.approx(in_frame(ORIGIN, track[0][:2]))  # from where the robot stands
    assert pts[-1] == pytest.approx(in_frame(ORIGIN, route.remembered(0, 2)[0]), abs=1e-9)  # to the goal
    way, length = route.way()
    for x, y in way[1:-1]:  # every point between lies on floor the robot stood on
        i, j = (int(math.floor(v / CELL_M)) + CELLS // 2 for v in (x, y))
        assert route.stood[0, i, j]
    assert length > 2.5  # the corridor's length, at least
    route.reset()
    assert route.way() is None and introspection.route_path(route, ORIGIN, "odom").poses == []


def test_the_bridge_marks_the_true_objects_in_the_house_frame() -> None:
    import gymnasium as gym

    import icrl_ros.sim  # noqa: F401

    env = gym.make("icrl_ros/MiniWorldHouse-v0")
    o, _ = env.reset(seed=5)
    u = env.unwrapped
    cats, xy = u.object_positions("house")
    assert len(cats) == len(u.layout.objects) and xy.shape == (len(cats), 2)
    goal = int(o["goal"])
    np.testing.assert_allclose(xy[cats == goal], u.target_positions("house"))  # the task's own targets
    msg = introspection.true_objects(cats, xy, list(u.goal_names), goal, "map")
    assert msg.markers[0].action == Marker.DELETEALL
    cyl = by_ns(msg, "truth")
    assert len(cyl) == len(cats) and {m.header.frame_id for m in cyl.values()} == {"map"}
    for cat in np.unique(cats):  # id = category x TRUTH_ID + instance: pairs with the memory's sphere (id = category)
        mine = {n: m for n, m in cyl.items() if n // introspection.TRUTH_ID == cat}
        np.testing.assert_allclose(sorted((m.pose.position.x, m.pose.position.y) for m in mine.values()),
                                   sorted(map(tuple, xy[cats == cat])))
        assert all((m.color.r, m.color.g, m.color.b) == pytest.approx(introspection.category_rgb(cat, u.goal_names[cat]))
                   for m in mine.values())
    # a category named for a colour is drawn in it; the others get distinct colours
    assert introspection.category_rgb(0, "yellow_ball") == introspection.NAME_COLOURS["yellow"]
    others = [n for n in u.goal_names if not set(n.split("_")) & set(introspection.NAME_COLOURS)]
    assert len({introspection.category_rgb(list(u.goal_names).index(n), n) for n in others}) == len(others)
    labels = by_ns(msg, "truth_labels")
    assert {n // introspection.TRUTH_ID for n in labels} == {goal} and len(labels) == int((cats == goal).sum())
    assert all(m.text == f"true goal {u.goal_names[goal]}" for m in labels.values())
    assert all(cyl[n].scale.z > 0.3 for n in labels)  # the goal's instances stand out


def test_the_memory_picture_pairs_each_remembered_category_with_its_nearest_true_object(tmp_path) -> None:
    """The demo's picture is drawn from the topics: a remembered red_ball 1 m from the true one, a blue_box with no
    true instance; the track's length; the picture is written."""
    from builtin_interfaces.msg import Time

    from icrl_ros.house.route_state import RouteState
    from icrl_ros.nodes.memory_picture import plot_memory
    from tests.nodes.test_introspection import NAMES, SCALE_M, token

    route = RouteState(1, len(NAMES), SCALE_M)
    route.observe(token(0, 0.97, (2.0, 1.0)))  # red_ball, remembered at (2, 1) in the memory frame
    route.observe(token(1, 0.95, (-1.0, -2.0)))  # blue_box
    origin = (0.0, 0.0, 0.0)
    tf = (0.5, -0.25, 0.3)  # map -> odom: the truth is published in the map frame
    truth_odom = np.array([(3.0, 1.0), (-4.0, 4.0)])  # red_ball 1 m from the memory's, a green_key far away
    truth_map = np.array([introspection.compose_pose(tf, (x, y, 0.0))[:2] for x, y in truth_odom])
    snap = {"sightings": introspection.sightings(route, NAMES, 0, origin, "odom", Time(sec=5)),
            "route_map": introspection.route_map(route, origin, "odom"), "route": None, "looked_at": None,
            "true_objects": introspection.true_objects(np.array([0, 2]), truth_map, NAMES, 0, "map"),
            "track": np.array([(0.0, 0.0), (3.0, 0.0), (3.0, 4.0)]), "map_to_odom": tf}
    drawn = plot_memory(snap, tmp_path / "m.png", "test", "red_ball", NAMES)
    assert drawn["remembered"]["red_ball"] == pytest.approx(1.0, abs=1e-6)
    assert drawn["remembered"]["blue_box"] is None  # no true blue_box
    assert drawn["travelled_m"] == pytest.approx(7.0)
    assert (tmp_path / "m.png").stat().st_size > 10_000


def test_waypoints_across_walls_counts_the_arrows_that_cross_one() -> None:
    from geometry_msgs.msg import Point
    from visualization_msgs.msg import MarkerArray

    from icrl_ros.nodes.memory_picture import MemoryWatch, waypoints_across_walls

    def arrow(a, b) -> MarkerArray:
        m = Marker(ns="route", id=0, type=Marker.ARROW, action=Marker.ADD)
        m.points = [Point(x=a[0], y=a[1]), Point(x=b[0], y=b[1])]
        return MarkerArray(markers=[m])

    watch = MemoryWatch.__new__(MemoryWatch)  # its log alone, as the demo's monitor fills it
    watch.log = {"sightings": [(1.0, arrow((0.0, 0.0), (1.0, 0.0))),  # through the wall x = 0.5
                               (2.0, arrow((0.0, 0.0), (0.0, 1.0))),  # beside it
                               (3.0, MarkerArray()),  # no route that step
                               (9.0, arrow((0.0, 0.0), (1.0, 0.0)))]}  # after the episode
    wall = np.array([[[0.5, -1.0], [0.5, 1.0]]])
    assert waypoints_across_walls(watch, 0.0, 5.0, wall) == (2, 1)
    # walls in the map frame, the arrows in odom: odom 0.75 m along map x puts the wall at odom x = -0.25, behind it
    assert waypoints_across_walls(watch, 0.0, 5.0, wall, (0.75, 0.0, 0.0)) == (2, 0)


@pytest.mark.parametrize("kv_dtype", ["fp16", "int8"])
def test_a_sighting_reads_back_from_a_16_or_8_bit_memory(runner, kv_dtype) -> None:
    """The cache's keys and values as the core reads them: fp16 as stored, int8 decoded with its scales."""
    from types import SimpleNamespace

    from icrl_ros.memory.kv_cache import FullContextMemory

    m = runner.memory
    mem = FullContextMemory(m.n_layers, 1, m.n_heads, m.head_dim, capacity=8, kv_dtype=kv_dtype)
    k = torch.zeros(m.n_layers, 1, m.n_heads, 1, m.head_dim)
    v = torch.zeros_like(k)
    cat = runner.goal_names.index("red_ball")
    k[0, 0, 0, 0, cat] = 0.93
    v[0, 0, 0, 0, :3] = torch.tensor([2.0 / OBJECT_SCALE_M, -1.0 / OBJECT_SCALE_M, 1.0])
    mem.commit(k, v, torch.tensor([3]))
    fake = SimpleNamespace(bundle=runner.bundle, memory=mem,
                           control=SimpleNamespace(own_mask=False, states={"route": None}))
    seen = HouseMemoryView.for_runner(fake).sightings()
    assert seen["cat"].tolist() == [cat] and seen["episode"].tolist() == [3]
    assert seen["conf"][0] == pytest.approx(0.93, abs=0.01)  # int8: within max |x| / 254 of its row
    assert seen["xy"][0] == pytest.approx([2.0, -1.0], abs=0.03)


def test_the_frontier_map_shows_looked_floor_frontier_and_obstacles_on_the_route_grid() -> None:
    """frontier_map: looked-at floor 0, frontier 50, obstacle evidence 100, unknown -1, rows along the memory frame's
    y (as route_map); frontier_path runs from the robot to the held waypoint."""
    from icrl_ros.house.frontier import FrontierMemory
    from icrl_ros.memory.route import CELLS, GridWays
    from icrl_ros.models.encoders import FREE_BANDS
    from icrl_ros.nodes.introspection import frontier_map, frontier_path

    mem = FrontierMemory(1, 5.0)
    mem.mark(0, np.array([0.0, 0.0, 0.0]), np.full(FREE_BANDS, 2.0))  # facing +x, a wall 2 m ahead
    mem.way_input(0, np.zeros(3))
    grid = frontier_map(mem, (0.0, 0.0, 0.0), "odom")
    cells = np.frombuffer(bytes(grid.data), dtype=np.int8).reshape(CELLS, CELLS)  # [y row, x column]
    i, j = GridWays._cells(np.array([1.0, 0.0]))
    assert cells[j, i] == 0  # looked at, 1 m ahead
    i, j = GridWays._cells(np.array([2.1, 0.0]))
    assert cells[j, i] == 100  # the wall
    assert (cells == 50).any() and (cells == -1).sum() > CELLS * CELLS // 2
    assert grid.info.resolution == pytest.approx(0.25) and grid.info.width == CELLS
    path = frontier_path(mem, (0.0, 0.0, 0.0), (0.0, 0.0, 0.0), "odom")
    assert len(path.poses) == 2
    end = path.poses[-1].pose.position
    assert (end.x, end.y) == pytest.approx(tuple(mem.plan[0, :2]))
    assert not frontier_path(mem, None, (0.0, 0.0, 0.0), "odom").poses
