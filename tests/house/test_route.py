"""The route memory: a map of the floor stood on and the way back over it to a remembered goal."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from icrl_ros.memory.route import HOP_M, LOOKAHEAD_M, ROUTE_DIM, STRAIGHT_COST, RouteMemory
from icrl_ros.models.object_memory import STRUCT_DIM

SCALE = 5.0
N_CAT = 3


def token(cat: int, conf: float, at: tuple[float, float], robot: tuple[float, float], d_model: int = 32) -> torch.Tensor:
    """A (1, D) token whose last entries say: category ``cat`` seen with ``conf`` at ``at``."""
    x = torch.zeros(1, d_model)
    x[0, -STRUCT_DIM:] = torch.tensor([0.0, cat / N_CAT, conf, at[0] / SCALE, at[1] / SCALE,
                                       robot[0] / SCALE, robot[1] / SCALE, 1.0, 0.0])
    return x


def step(mem: RouteMemory, x: float, y: float, yaw: float = 0.0, goal: int = 1, episode: int = 0) -> np.ndarray:
    inputs = {"odom": torch.tensor([[x, y, yaw]]), "goal": torch.tensor([goal])}
    return mem.fill(inputs, torch.tensor([episode]))[0].numpy()


def walk_l(mem: RouteMemory) -> None:
    """(0, 0) -> (4, 0) -> (4, 4) in 0.25 m steps, then a confident sighting of category 1 at (4.5, 5)."""
    for k in range(17):
        step(mem, 0.25 * k, 0.0)
        mem.observe(token(0, 0.1, (0.0, 0.0), (0.25 * k, 0.0)))
    for k in range(1, 17):
        step(mem, 4.0, 0.25 * k)
        mem.observe(token(0, 0.1, (0.0, 0.0), (4.0, 0.25 * k)))
    mem.observe(token(1, 0.95, (4.5, 5.0), (4.0, 4.0)))


def test_the_way_back_follows_the_trail_not_the_straight_line():
    mem = RouteMemory(1, N_CAT, SCALE)
    walk_l(mem)
    xy, mass = mem.remembered(0, 1)
    assert mass > 0.98 and np.allclose(xy, (4.5, 5.0))
    r = step(mem, 0.0, 0.0, episode=1)  # back at the start, facing +x
    assert r.shape == (ROUTE_DIM,) and r[0] == 1.0
    fwd, left = r[1] * SCALE, r[2] * SCALE
    # along the trail (+x), not 63 degrees left; the way leaves from a cell up to HOP_M down the trail
    assert 0.8 <= fwd <= LOOKAHEAD_M + HOP_M + 0.1 and abs(left) < 0.45, (fwd, left)
    length = r[5] * SCALE
    assert 7.5 < length < 8.0 + STRAIGHT_COST * math.hypot(0.5, 1.0) + 0.3, length  # the trail, then the weighted line
    r = step(mem, 0.0, 0.0, yaw=math.pi / 2, episode=1)  # facing +y: the waypoint is to the right
    assert r[2] * SCALE < -0.8 and abs(r[1] * SCALE) < 0.45
    r = step(mem, 4.0, 4.0, episode=1)  # where it was seen from: straight to the goal
    assert np.allclose((r[1] * SCALE, r[2] * SCALE), (0.5, 1.0), atol=1e-4)


def test_no_route_without_a_sighting_of_the_goal():
    mem = RouteMemory(1, N_CAT, SCALE)
    walk_l(mem)
    assert step(mem, 0.0, 0.0, goal=2, episode=1)[0] == 0.0  # category 2 never seen
    weak = RouteMemory(1, N_CAT, SCALE)
    for k in range(5):
        step(weak, 0.25 * k, 0.0)
        weak.observe(token(1, 0.6, (2.0, 1.0), (0.25 * k, 0.0)))  # unsure sightings: below the head's gate
    assert weak.remembered(0, 1)[1] < 0.5 and step(weak, 0.0, 0.0)[0] == 0.0


def test_off_the_track_the_way_joins_it_where_a_straight_hop_plus_the_trail_is_shortest():
    """A new episode can start off every floor stood on: the waypoint is the track cell that minimises
    STRAIGHT_COST x the straight hop to it + the way on from it, and the length counts both."""
    mem = RouteMemory(1, N_CAT, SCALE)
    walk_l(mem)
    r = step(mem, 2.0, 1.0, episode=1)  # a metre off the first leg (y = 0), halfway along it
    assert r[0] == 1.0
    waypoint = np.array([2.0 + r[1] * SCALE, 1.0 + r[2] * SCALE])  # yaw 0
    assert waypoint[1] == pytest.approx(0.125, abs=1e-4) and 2.0 <= waypoint[0] <= 3.0, waypoint  # on the leg, ahead
    hop = math.hypot(*(waypoint - (2.0, 1.0)))
    assert r[5] * SCALE > STRAIGHT_COST * hop + (4.0 - waypoint[0]) + 3.5, r[5] * SCALE  # the hop, the legs, the line


def test_per_episode_forgets_at_each_new_episode_and_reset_forgets_all():
    mem = RouteMemory(1, N_CAT, SCALE, per_episode=True)
    walk_l(mem)
    assert step(mem, 0.0, 0.0, episode=0)[0] == 1.0
    assert step(mem, 0.0, 0.0, episode=1)[0] == 0.0 and mem.stood.sum() < 20  # only the new footprint
    kept = RouteMemory(1, N_CAT, SCALE)
    walk_l(kept)
    kept.reset()
    assert not kept.stood.any() and not kept.sums.any() and step(kept, 0.0, 0.0)[0] == 0.0


def test_fill_writes_into_a_bound_buffer_and_the_state_round_trips():
    mem = RouteMemory(1, N_CAT, SCALE)
    walk_l(mem)
    buf = torch.full((1, ROUTE_DIM), -7.0)
    inputs = {"odom": torch.tensor([[0.0, 0.0, 0.0]]), "goal": torch.tensor([1]), "route": buf}
    out = mem.fill(inputs, torch.tensor([1]))
    assert out is buf and buf[0, 0] == 1.0
    twin = RouteMemory(1, N_CAT, SCALE)
    for name, t in twin.tensors().items():
        t.copy_(mem.tensors()[name])
    twin.restored()
    assert np.array_equal(step(twin, 0.0, 0.0, episode=1), step(mem, 0.0, 0.0, episode=1))


def test_poses_off_the_grid_mark_nothing():
    mem = RouteMemory(1, N_CAT, SCALE)
    step(mem, 100.0, -100.0)
    assert not mem.stood.any()
    with pytest.raises(KeyError):
        mem.fill({"odom": torch.zeros(1, 3)}, torch.zeros(1, dtype=torch.long))


def test_the_waypoint_does_not_cut_a_corner_off_the_floor_stood_on():
    """On a one-cell-wide L of stood floor the waypoint stays on the first leg, in a straight line over the
    floor from the robot, not a metre down the path round the corner (a line there leaves the floor the
    robot knows, and a robot steering for it runs into what it walked round)."""
    mem = RouteMemory(1, N_CAT, SCALE)
    c, cell = 64, 0.25  # the grid's origin cell and size
    mem.stood[0, c:c + 9, c] = True  # along +x for 2 m (cells are indexed (x, y)) ...
    mem.stood[0, c + 8, c:c + 9] = True  # ... then along +y
    mem.seen_from[0, 1, c + 8, c + 8] = True
    goal = ((8 + 0.5) * cell, (8 + 1.5) * cell)  # just beyond the end of the L
    mem.sums[0, 1] = (goal[0] * 10.0, goal[1] * 10.0, 10.0)
    here = np.array([(5 + 0.5) * cell, 0.5 * cell])  # on the first leg, three cells before the corner
    r = mem._route(0, np.array([*here, 0.0]), 1)
    assert r[0] == 1.0
    waypoint = here + np.array([r[1], r[2]]) * SCALE  # yaw 0: the robot frame is the odometry frame
    assert waypoint[0] > here[0] and waypoint[1] == pytest.approx(0.5 * cell, abs=1e-4), waypoint  # ahead, on the leg
    assert mem._clear_on(mem.stood[0], here, waypoint)
    assert not mem._clear_on(mem.stood[0], here, np.array([(8 + 0.5) * cell, (1 + 0.5) * cell]))  # round the corner


@pytest.mark.parametrize("kv_dtype", ["fp32", "int8"])
def test_a_sighting_a_fresh_view_contradicts_is_forgotten_in_the_map_and_the_cache(kv_dtype):
    """model.house.forget_contradicted: with the goal's remembered place 1 m ahead of the camera and the goal not
    recognised for N steps in a row, the route memory forgets the category and the edit zeroes the object memory
    head's key entry of that category in every slot of a raw-step KV cache (head 0 of layer 0), and nothing else;
    a recognition in between restarts the count; a place off to the side or behind counts nothing."""
    from icrl_ros.house.route_state import RouteState
    from icrl_ros.memory.kv_cache import FullContextMemory

    def seen(cat, conf, at, robot, yaw=0.0):
        x = token(cat, conf, at, robot)
        x[0, -STRUCT_DIM] = 1 / N_CAT  # the goal: category 1
        x[0, -2:] = torch.tensor([math.cos(yaw), math.sin(yaw)])
        return x

    mem = RouteState(1, N_CAT, SCALE, forget_after=3)
    cache = FullContextMemory(2, 1, 2, 8, capacity=16, kv_dtype=kv_dtype)
    k = torch.rand(2, 1, 2, 4, 8)
    cache.load_sequence(k, torch.rand(2, 1, 2, 4, 8), torch.zeros(1, 4, dtype=torch.long))
    before = cache.float_kv()[0].clone()
    mem.after_encode(seen(1, 0.95, (2.0, 0.0), (0.0, 0.0)))  # the goal seen 2 m ahead: remembered
    assert mem.remembered(0, 1)[1] > 0.5
    for robot, yaw in (((1.0, 1.5), 0.0), ((1.0, 0.0), math.pi)):  # beside it, and with it behind: no count
        for _ in range(4):
            mem.after_encode(seen(0, 0.9, (0.0, 0.0), robot, yaw))
    assert mem.contradicted[0] == 0 and mem.forgotten[0] == 0
    for _ in range(2):  # in front, not recognised, twice; then recognised: the count restarts
        mem.after_encode(seen(0, 0.9, (0.0, 0.0), (1.0, 0.0)))
    mem.after_encode(seen(1, 0.9, (2.0, 0.0), (1.0, 0.0)))
    assert mem.contradicted[0] == 0
    for _ in range(3):
        mem.after_encode(seen(0, 0.2, (0.0, 0.0), (1.0, 0.0)))
        mem.edit_memory(cache)
    assert mem.forgotten[0] == 1 and mem.remembered(0, 1)[1] == 0.0 and not mem.seen_from[0, 1].any()
    after = cache.float_kv()[0]
    assert float(after[0, 0, 0, :, 1].abs().max()) == 0.0  # layer 0, head 0, the category's entry: gone
    untouched = torch.ones_like(after, dtype=torch.bool)
    untouched[0, 0, 0, :, 1] = False
    assert torch.equal(after[untouched], before[untouched])
    off = RouteState(1, N_CAT, SCALE)  # the default: never forgets
    off.after_encode(seen(1, 0.95, (2.0, 0.0), (0.0, 0.0)))
    for _ in range(5):
        off.after_encode(seen(0, 0.2, (0.0, 0.0), (1.0, 0.0)))
    assert off.remembered(0, 1)[1] > 0.5 and off.forgotten[0] == 0


def test_over_looked_floor_the_way_to_a_sighting_goes_round_the_wall_where_over_stood_floor_it_goes_straight():
    """model.house.route_over_looked: the route input leads along the looked-at corridor to a goal seen behind its
    wall; the default route state (only the robot's own cell stood on) heads straight at it."""
    from icrl_ros.house.route_state import RouteState
    from tests.house.test_frontier import corridor_and_branch

    ways, mems = {}, {}
    for over in (True, False):
        mem = mems[over] = RouteState(1, N_CAT, SCALE, over_looked=over)
        if over:
            corridor_and_branch(mem.floor)
        mem.observe(token(1, 0.95, (2.6, 2.6), (0.0, 0.0)))
        ways[over] = step(mem, 0.0, 0.0)
        assert ways[over][0] == 1.0
    fwd, left = ways[True][1] * SCALE, ways[True][2] * SCALE
    assert fwd > 0.5 and abs(left) < 0.3, (fwd, left)
    assert ways[False][2] > 0.3 * ways[False][1] > 0  # straight at the goal, 45 degrees left
    mems[True].reset()
    assert not mems[True].floor.looked.any() and "route_frontier_looked" in mems[True].tensors()
