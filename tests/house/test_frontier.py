"""The frontier memory: the floor the camera looked at, from the heads' band distances, and the way to its edge."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from icrl_ros.house.frontier import (BLOCKED_HIT, FREE_STRUCT, LOOK_M, REPLAN, STALL_STEPS, WALL_SURE_M,
                                     FrontierMemory, band_edges, frontier_struct)
from icrl_ros.memory.route import CELL_M, GridWays
from icrl_ros.models.encoders import FREE_BANDS, VIEW_FOV_DEG
from icrl_ros.models.object_memory import STRUCT_DIM, object_struct

SCALE = 5.0


def cell(xy):
    return tuple(GridWays._cells(np.asarray(xy, dtype=np.float64)))


def test_band_edges_run_left_to_right_across_the_field_of_view():
    e = band_edges()
    assert len(e) == FREE_BANDS + 1
    assert e[0] == pytest.approx(math.radians(VIEW_FOV_DEG) / 2) and e[-1] == pytest.approx(-e[0])
    assert np.all(np.diff(e) < 0)  # band 0 is the left of the image: counter-clockwise of straight ahead
    assert e[FREE_BANDS // 2] == pytest.approx(0.0, abs=1e-12)


def test_a_view_marks_the_floor_in_front_up_to_the_obstacle_and_blocks_the_cell_beyond():
    mem = FrontierMemory(1, SCALE)
    mem.mark(0, np.array([0.0, 0.0, 0.0]), np.full(FREE_BANDS, 2.0))  # a wall 2 m ahead, facing +x
    looked, blocked = mem.looked[0], mem.blocked[0] >= BLOCKED_HIT
    assert looked[cell((1.0, 0.0))] and looked[cell((1.9, 0.0))]
    assert not looked[cell((2.6, 0.0))]
    assert blocked[cell((2.1, 0.0))] and not blocked[cell((1.0, 0.0))]
    assert not looked[cell((-1.5, 0.0))] and not looked[cell((0.5, 1.5))]  # behind, and outside the 79-degree view
    assert looked[cell((-0.3, 0.0))]  # the robot's footprint


def test_far_band_ends_leave_the_floor_beyond_unknown_not_blocked():
    """A band ending beyond WALL_SURE_M may be a doorway's lintel: no blocked evidence there; the look range caps
    what counts as looked at."""
    mem = FrontierMemory(1, SCALE)
    mem.mark(0, np.array([0.0, 0.0, 0.0]), np.full(FREE_BANDS, WALL_SURE_M + 0.5))
    assert not (mem.blocked[0] > 0).any()
    mem.mark(0, np.array([0.0, 0.0, 0.0]), np.full(FREE_BANDS, 9.0))
    assert mem.looked[0][cell((LOOK_M - 0.2, 0.0))] and not mem.looked[0][cell((LOOK_M + 0.4, 0.0))]


def test_rays_that_pass_over_a_cell_take_its_obstacle_evidence_away():
    mem = FrontierMemory(1, SCALE)
    pose = np.array([0.0, 0.0, 0.0])
    mem.mark(0, pose, np.full(FREE_BANDS, 1.0))
    c = cell((1.1, 0.0))
    assert mem.blocked[0][c] >= BLOCKED_HIT
    for _ in range(BLOCKED_HIT):  # two views that see past it clear it
        mem.mark(0, pose, np.full(FREE_BANDS, 2.5))
    assert mem.blocked[0][c] < BLOCKED_HIT


def _corridor(mem: FrontierMemory) -> None:
    """Looked-at floor 1 m wide from x = -1 to 3 m along y = 0, walls (blocked) along both sides and at x = -1:
    the only unknown floor is beyond x = 3."""
    for x in np.arange(-1.0, 3.0, CELL_M / 2):
        for y in np.arange(-0.5, 0.5, CELL_M / 2):
            mem.looked[0][cell((x, y))] = True
        for y in (-0.75, 0.75):
            mem.blocked[0][cell((x, y))] = BLOCKED_HIT
    for y in np.arange(-0.75, 0.8, CELL_M):
        mem.blocked[0][cell((-1.25, y))] = BLOCKED_HIT


def test_the_way_leads_to_the_open_end_of_what_was_looked_at():
    mem = FrontierMemory(1, SCALE)
    _corridor(mem)
    feats = mem.way_input(0, np.array([0.0, 0.0, 0.0]))
    assert feats[0] == 1.0
    fwd, left = feats[1] * SCALE, feats[2] * SCALE
    assert fwd > 0.5 and abs(left) < 0.3, (fwd, left)  # along the corridor, towards x = 3
    assert 1.8 <= feats[5] * SCALE <= 3.2  # the frontier lies 2-3 m away
    facing_back = mem.way_input(0, np.array([0.0, 0.0, math.pi]))
    assert facing_back[1] < 0  # the same way, behind a robot facing -x


def test_no_way_once_the_looked_floor_is_closed_all_round():
    mem = FrontierMemory(1, SCALE)
    _corridor(mem)
    for y in np.arange(-0.75, 0.8, CELL_M):
        mem.blocked[0][cell((3.0, y))] = BLOCKED_HIT
    assert not mem.way_input(0, np.array([0.0, 0.0, 0.0])).any()
    assert not FrontierMemory(1, SCALE).way_input(0, np.zeros(3)).any()  # nothing looked at yet


def test_a_plan_is_held_for_replan_steps_then_planned_again():
    mem = FrontierMemory(1, SCALE)
    _corridor(mem)
    pose = np.array([0.0, 0.0, 0.0])
    mem.way_input(0, pose)
    assert mem.plan_age[0] == 0
    held = mem.plan[0].copy()
    for k in range(1, REPLAN):
        mem.way_input(0, pose)
        assert mem.plan_age[0] == k and np.array_equal(mem.plan[0], held)
    mem.way_input(0, pose)
    assert mem.plan_age[0] == 0  # planned again


def test_tokens_feed_the_map_as_mark_does_and_reset_forgets():
    """observe() reads the pose and band distances back out of the token entries the step encoder writes."""
    pose = torch.tensor([[0.4, -0.3, 0.7]], dtype=torch.float64)
    bands = torch.linspace(0.8, 3.0, FREE_BANDS, dtype=torch.float64)[None]
    s = object_struct(torch.full((1, 3), 0.1, dtype=torch.float64), torch.zeros(1, 3, 2, dtype=torch.float64), pose,
                      torch.tensor([1]), SCALE)
    token = torch.cat([torch.randn(1, 16, dtype=torch.float64), frontier_struct(bands, SCALE), s], -1)
    assert token.shape[-1] == 16 + FREE_STRUCT + STRUCT_DIM
    a, b = FrontierMemory(1, SCALE), FrontierMemory(1, SCALE)
    a.observe(token)
    b.mark(0, pose[0].numpy(), bands[0].numpy())
    assert np.array_equal(a.looked, b.looked) and np.array_equal(a.blocked, b.blocked) and a.looked.any()
    snap = {k: v.clone() for k, v in a.tensors().items()}
    a.reset()
    assert not a.looked.any() and not a.blocked.any()
    for k, v in a.tensors().items():  # tensors share the arrays: a snapshot loads back in place
        v.copy_(snap[k])
    a.restored()
    assert np.array_equal(a.looked, b.looked)
    assert a.nbytes < 50_000


def test_per_episode_memories_clear_when_the_episode_changes():
    mem = FrontierMemory(2, SCALE, per_episode=True)
    inputs = {"odom": torch.zeros(2, 3)}
    mem.fill(inputs, torch.tensor([0, 0]))
    mem.mark(0, np.zeros(3), np.full(FREE_BANDS, 2.0))
    mem.mark(1, np.zeros(3), np.full(FREE_BANDS, 2.0))
    mem.fill(inputs, torch.tensor([0, 0]))
    assert mem.looked[0].any() and mem.looked[1].any()
    mem.fill(inputs, torch.tensor([0, 1]))
    assert mem.looked[0].any() and not mem.looked[1].any()
    assert inputs["frontier"].shape == (2, 6)


def test_no_way_while_the_goal_is_in_view_and_the_way_back_once_it_is_not():
    """The frontier input says no way while the heads' most confident category at the last step was the goal at
    P >= GOAL_IN_VIEW_P (the policy closes in on what it sees); an ungated memory ignores it."""
    from icrl_ros.house.frontier import GOAL_IN_VIEW_P

    def token(cat: int, p: float) -> torch.Tensor:
        probs = torch.full((1, 3), 0.05, dtype=torch.float64)
        probs[0, cat] = p
        s = object_struct(probs, torch.zeros(1, 3, 2, dtype=torch.float64), torch.zeros(1, 3, dtype=torch.float64),
                          torch.tensor([1]), SCALE)  # the goal is category 1
        return torch.cat([frontier_struct(torch.full((1, FREE_BANDS), 9.0, dtype=torch.float64), SCALE), s], -1)

    gated, open_ = FrontierMemory(1, SCALE), FrontierMemory(1, SCALE, goal_gate=False)
    for mem in (gated, open_):
        _corridor(mem)
    for mem in (gated, open_):
        mem.observe(token(1, GOAL_IN_VIEW_P + 0.1))
    assert not gated.way_input(0, np.zeros(3)).any()
    assert open_.way_input(0, np.zeros(3))[0] == 1.0
    gated.observe(token(2, 0.95))  # another category in view: the way is back
    assert gated.way_input(0, np.zeros(3))[0] == 1.0
    gated.observe(token(1, GOAL_IN_VIEW_P - 0.2))  # the goal, but not sure enough
    assert gated.way_input(0, np.zeros(3))[0] == 1.0


def corridor_and_branch(mem: FrontierMemory) -> None:
    """The corridor, and a branch up from its end (x 2.25-3, y 0.5-3): a point at (2.6, 2.6) lies 45 degrees left
    of a robot at the origin facing +x, behind the corridor's wall."""
    _corridor(mem)
    for x in np.arange(2.25, 3.0, CELL_M / 2):
        for y in np.arange(0.5, 3.0, CELL_M / 2):
            mem.looked[0][cell((x, y))] = True
            mem.blocked[0][cell((x, y))] = 0


def test_the_way_to_a_point_goes_round_the_wall_over_looked_floor_and_none_where_nothing_was_looked_at():
    """way_over_looked: a sighting beyond the corridor's wall is reached along the corridor and up its branch, not
    straight at it; a point with no looked-at floor round it has no way."""
    from icrl_ros.house.frontier import way_over_looked

    mem = FrontierMemory(1, SCALE)
    corridor_and_branch(mem)
    pose = np.array([0.0, 0.0, 0.0])
    feats = way_over_looked(mem, 0, pose, np.array([2.6, 2.6]), 0.5)
    assert feats[0] == 1.0
    fwd, left = feats[1] * SCALE, feats[2] * SCALE
    assert fwd > 0.5 and abs(left) < 0.3, (fwd, left)  # along the corridor first (the target lies 45 degrees left)
    assert 4.0 <= feats[5] * SCALE <= 6.0, feats[5] * SCALE  # round the corner: ~2.6 + ~2.1, not the 3.7 m straight
    assert not way_over_looked(mem, 0, pose, np.array([-3.0, 4.0]), 0.5).any()
    assert not way_over_looked(FrontierMemory(1, SCALE), 0, pose, np.array([1.0, 0.0]), 0.5).any()


def test_a_frontier_the_robot_makes_no_progress_to_is_given_up_for_the_episode():
    """A robot that stays put (its body cannot reach the target, or looking round does not clear it) gives its target
    frontier up after STALL_STEPS steps and is led to the other one; the next episode may try it again."""
    mem = FrontierMemory(1, SCALE)
    for x in np.arange(-3.0, 3.0, CELL_M / 2):  # a corridor looked at from x = -3 to 3 m, open at both ends
        for y in np.arange(-0.5, 0.5, CELL_M / 2):
            mem.looked[0][cell((x, y))] = True
        for y in (-0.75, 0.75):
            mem.blocked[0][cell((x, y))] = BLOCKED_HIT
    mem._episodes(torch.tensor([0]))
    pose = np.array([1.0, 0.0, 0.0])  # nearer the +x end, facing it
    ahead = [mem.way_input(0, pose)[1] > 0 for _ in range(STALL_STEPS)]
    assert all(ahead) and mem.stall[0] == STALL_STEPS - 1
    assert mem.way_input(0, pose)[1] < 0  # given up: the way turns to the -x end
    assert mem.given_up[0].any() and mem.way_input(0, pose + np.array([-0.3, 0.0, 0.0]))[1] < 0
    p = pose.copy()
    for _ in range(28):  # slow progress towards the -x end (0.1 m a step): nothing more is given up
        p[0] -= 0.1
        assert mem.way_input(0, np.array([p[0], 0.0, math.pi]))[1] > 0
    front, _, _, origin = mem.frontier(0)
    end = tuple(np.array(cell((2.9, 0.0))) - origin)
    assert not front[end]
    mem._episodes(torch.tensor([1]))  # a new episode: the +x end is a frontier again
    front, _, _, origin = mem.frontier(0)
    assert not mem.given_up[0].any() and front[end]
