"""MiniWorld house env (icrl_ros/MiniWorldHouse-v0): contract, trial semantics, geometry,
a shortest-path agent, the process-vectorised version and the splits."""

import dataclasses
import importlib.util
import math
import os
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

# Not importorskip: importing miniworld here would load pyglet before headless mode is set.
if importlib.util.find_spec("miniworld") is None:
    pytest.skip("miniworld is not installed", allow_module_level=True)

import icrl_ros.sim  # noqa: F401,E402  (registers the ids)
from icrl_ros.sim.house import FORWARD, NO_ACTION, STOP, TURN_LEFT, HouseEnv  # noqa: E402
from icrl_ros.sim.house_layout import (  # noqa: E402
    CATEGORIES, GOAL_NAMES, HouseLayout, ObjectInstance, Room, generate_layout, house_seeds, house_split,
)
from icrl_ros.sim.house_nav import NavGrid, visible  # noqa: E402
from icrl_ros.sim.house_render import CAMERA_HEIGHT, CAMERA_PITCH_DEG, FOV_Y_DEG, HouseRenderer  # noqa: E402

ENV_ID = "icrl_ros/MiniWorldHouse-v0"


@pytest.fixture(scope="module")
def env():
    e = HouseEnv()
    yield e
    e.close()


def _rollout(env, actions):
    out = []
    for a in actions:
        obs, r, term, trunc, info = env.step(a)
        out.append((obs, r, term, trunc, info))
        if term or trunc:
            break
    return out


def test_contract_and_gymnasium_checker():
    from gymnasium.utils.env_checker import check_env

    e = gym.make(ENV_ID)
    check_env(e.unwrapped, skip_render_check=True)
    u = e.unwrapped
    assert u.action_space == gym.spaces.Discrete(4)
    assert u.action_names == ("stop", "forward", "turn_left", "turn_right")
    assert len(u.goal_names) >= 12 and u.goal_names == GOAL_NAMES and u.max_episode_steps == 200
    obs, info = e.reset(seed=0)
    assert obs["rgb"].shape == (64, 64, 3) and obs["rgb"].dtype == np.uint8
    assert obs["odom"].dtype == np.float32 and np.allclose(obs["odom"], 0)
    assert int(obs["prev_action"]) == NO_ACTION
    for key in ("goal_name", "success", "spl", "geodesic_distance", "agent_pose", "episode_step", "episode_index"):
        assert key in info
    assert info["goal_name"] == GOAL_NAMES[int(obs["goal"])]
    e.close()


def test_layouts_are_houses():
    for seed in range(6):
        L = generate_layout(seed)
        assert 3 <= len(L.rooms) <= 6 and len(L.doors) >= len(L.rooms) - 1
        assert 20 <= len(L.objects) <= 40 and len(L.categories_present()) >= 8
        assert len({r.wall_tex for r in L.rooms} | {r.floor_tex for r in L.rooms}) >= 2
        assert NavGrid(L).doors_connected()
        assert generate_layout(seed) == L  # a pure function of the seed
    assert len({c.name for c in CATEGORIES}) == len(CATEGORIES) >= 12
    assert len({(c.shape, c.color) for c in CATEGORIES}) == len(CATEGORIES)


def test_determinism_under_a_seed(env):
    other = HouseEnv()
    rng = np.random.default_rng(0)
    acts = rng.choice(4, size=60, p=[0.02, 0.5, 0.24, 0.24])
    for e in (env, other):
        e.reset(seed=7)
    a, b = _rollout(env, acts), _rollout(other, acts)
    assert len(a) == len(b)
    for (oa, ra, *_), (ob, rb, *_) in zip(a, b):
        assert ra == rb and np.array_equal(oa["rgb"], ob["rgb"]) and np.array_equal(oa["odom"], ob["odom"])
    other.close()


def test_new_trial_regenerates_the_house_and_plain_reset_keeps_it(env):
    _, info = env.reset(seed=3)
    house, layout = info["house_seed"], env.layout
    _, r, term, *_ = env.step(STOP)
    assert term
    for k in range(1, 4):
        obs, info = env.reset()
        assert info["house_seed"] == house and env.layout is layout and info["episode_index"] == k
        assert int(obs["prev_action"]) in (STOP, NO_ACTION)  # carried across episodes
        assert info["goal_name"] in {CATEGORIES[c].name for c in layout.categories_present()}
    obs, info = env.reset(options={"new_trial": True})
    assert info["house_seed"] != house and info["episode_index"] == 0 and int(obs["prev_action"]) == NO_ACTION
    fixed = house_seeds("train", 1, start=1000)[0]
    _, info = env.reset(options={"new_trial": True, "house_seed": fixed})
    assert info["house_seed"] == fixed


def _relaxed_distances(D, free, cell):
    """Reference for grid_distances: plain Bellman-Ford sweeps over the same 16-neighbour moves."""
    from icrl_ros.geometry import MOVES

    D = np.where(free, D, np.inf).astype(np.float64)
    H, W = D.shape
    while True:
        before = D.copy()
        for di, dj in MOVES:
            for i in range(max(di, 0), H + min(di, 0)):
                for j in range(max(dj, 0), W + min(dj, 0)):
                    if free[i, j]:
                        D[i, j] = min(D[i, j], D[i - di, j - dj] + math.hypot(di, dj) * cell)
        if np.array_equal(before, D):
            return D


def test_grid_distances_are_the_shortest_paths_over_free_cells_from_weighted_seeds():
    from icrl_ros.geometry import grid_distances

    rng = np.random.default_rng(3)
    for H, W in ((1, 1), (1, 7), (9, 1), (12, 15), (20, 9)):
        free = rng.random((H, W)) < 0.7
        D = np.where(rng.random((H, W)) < 0.1, rng.random((H, W)) * 2, np.inf).astype(np.float32)
        D[0, 0] = 0.0  # a seed of start value 0 (an explicit zero-weight edge) beside weighted ones
        got = grid_distances(D, free, 0.25)
        want = _relaxed_distances(D, free, 0.25)
        assert got.dtype == np.float32 and got.shape == (H, W)
        assert np.array_equal(np.isfinite(got), np.isfinite(want))
        assert np.allclose(got[np.isfinite(got)], want[np.isfinite(want)], rtol=1e-6, atol=1e-6)
    empty = grid_distances(np.full((4, 5), np.inf, np.float32), np.ones((4, 5), bool), 0.25)
    assert not np.isfinite(empty).any()


def test_geodesic_distance_against_straight_lines(env):
    env.reset(seed=5)
    nav, D = env.nav, env._field(env.goal)
    goal = D == 0
    gi, gj = np.argwhere(goal).T
    rng = np.random.default_rng(0)
    free = np.argwhere(np.isfinite(D))
    ratios = []
    for i, j in free[rng.choice(len(free), 200)]:
        x, z = nav.xs[j], nav.zs[i]
        straight = np.hypot(nav.xs[gj] - x, nav.zs[gi] - z).min()
        g = nav.geodesic(D, x, z)
        assert g >= straight * 0.99 - 1e-6  # never shorter than the straight line
        ratios.append(g / max(straight, 1e-6))
    # Many pairs see each other in a straight line: there geodesic ~ straight (16-neighbour grid).
    assert np.median(ratios) < 1.2 and min(ratios) < 1.04
    assert not np.isfinite(D[~nav.free]).any()


def test_shortest_path_agent_succeeds_with_spl_near_one(env):
    env.reset(seed=11)
    spl = []
    for _ in range(4):
        for _ in range(env.max_episode_steps):
            obs, r, term, trunc, info = env.step(env.oracle_action())
            if term or trunc:
                break
        assert term and info["success"], info
        assert info["geodesic_distance"] < 0.5
        spl.append(info["spl"])
        env.reset()
    assert min(spl) > 0.8 and np.mean(spl) > 0.9, spl


def test_stop_far_from_the_target_fails(env):
    env.reset(seed=2)
    assert env.geodesic_distance >= env.min_start_distance
    obs, r, term, trunc, info = env.step(STOP)
    assert term and not trunc and not info["success"] and info["spl"] == 0.0
    assert r == pytest.approx(-env.slack_reward)
    with pytest.raises(RuntimeError, match="reset"):
        env.step(FORWARD)


@pytest.mark.parametrize("refund", [True, False])
def test_a_failed_episode_gives_its_progress_back(refund):
    """Walking 20 oracle steps towards the goal, then stopping short: with refund_on_failure the
    episode's rewards sum to the slack alone (nothing to farm by starting over); without it they
    keep the progress made. The same for an episode that runs out of steps."""
    env = HouseEnv(split="test", image_size=32, refund_on_failure=refund, max_episode_steps=30)
    for stop in (True, False):
        env.reset(seed=2)
        start, total, n = env.geodesic_distance, 0.0, 0
        for _ in range(20 if stop else env.max_episode_steps):
            _, r, term, trunc, _ = env.step(env.oracle_action() if n < 20 else TURN_LEFT)
            total, n = total + r, n + 1
            if term or trunc:
                break
        if stop:
            _, r, term, trunc, info = env.step(STOP)
            total, n = total + r, n + 1
            assert term and not info["success"]
        else:
            assert trunc
        progress = start - env.geodesic_distance
        assert progress > 1.0  # it did get closer
        expect = -env.slack_reward * n + (0.0 if refund else progress)
        assert total == pytest.approx(expect, abs=1e-6), (stop, total, expect)
    env.close()


def test_success_needs_the_target_in_view(env):
    env.reset(seed=11)
    for _ in range(env.max_episode_steps):
        a = env.oracle_action()
        if a == STOP:
            break
        env.step(a)
    assert env.target_visible_in_reach()
    for _ in range(6):  # turn around: still in reach, no longer in view
        env.step(TURN_LEFT)
    assert not env.target_visible_in_reach()
    assert not env.step(STOP)[4]["success"]


def test_odometry_and_move_continuous_collisions(env):
    env.reset(seed=4)
    obs0 = env.observe()
    x0, z0 = env.x, env.z
    assert env.move_continuous(0.0, math.pi / 2)  # a turn never collides
    assert env.observe()["odom"][2] == pytest.approx(math.pi / 2, abs=1e-5)
    assert env.episode_step == 0  # not an episode step
    moved = 0.0
    for _ in range(400):  # drive straight until something blocks
        if not env.move_continuous(0.05, 0.0):
            break
        moved += 0.05
    else:
        pytest.fail("never blocked")
    assert not env.nav.collides(env.x, env.z) and env.episode_step == 0
    odom = env.observe()["odom"]  # moved along +y (left of the start heading)
    assert odom[0] == pytest.approx(0.0, abs=1e-4) and odom[1] == pytest.approx(moved, abs=1e-4)
    assert math.hypot(env.x - x0, env.z - z0) == pytest.approx(moved, abs=1e-6)
    assert not np.array_equal(obs0["rgb"], env.observe()["rgb"])
    # A blocked forward action does not move through the wall either.
    for _ in range(3):
        env.step(FORWARD)
    assert not env.nav.collides(env.x, env.z)


def test_geometric_visibility_matches_the_renderer():
    """Two rooms through a door: an object in the far room is visible iff the renderer
    draws pixels of it (rendered with and without the object)."""
    from icrl_ros.sim.house_layout import Door

    rooms = (Room(0, 4, 0, 4, "drywall_1", "wood_1", "white_1"), Room(4.2, 8.2, 0, 4, "drywall_1", "wood_1", "white_1"))
    doors = (Door("x", 0, 1, 1.5, 2.7, 2.2),)
    ball = ObjectInstance(2, 6.0, 0.8, 0.0)  # blue ball in the east room, north of the door
    with_ball = HouseLayout(0, rooms, doors, (ball,), ())
    without = HouseLayout(0, rooms, doors, (), ())
    r_with, r_without = HouseRenderer(with_ball, 64), HouseRenderer(without, 64)
    nav = NavGrid(with_ball)
    poses = [(3.0, 2.6, 0.4), (2.0, 2.1, math.pi), (1.0, 0.8, 0.0), (3.5, 2.1, 0.3), (5.0, 2.0, 0.5),
             (7.5, 3.5, 2.0), (6.0, 3.0, math.pi / 2), (6.0, 3.0, -math.pi / 2), (2.0, 3.5, 0.2)]
    agree = 0
    for x, z, yaw in poses:
        drawn = (np.abs(r_with.render(x, z, yaw).astype(int) - r_without.render(x, z, yaw)).sum(-1) > 30).sum() > 0
        geo = visible([ball], (x, CAMERA_HEIGHT, z), yaw, CAMERA_PITCH_DEG, FOV_Y_DEG, 1.0, nav.sight_walls)[0]
        agree += drawn == geo
    r_with.close()
    r_without.close()
    assert agree == len(poses)


def test_top_down_map(env):
    env.reset(seed=6)
    traj = [np.array([env.x, env.z])]
    for a in (FORWARD, FORWARD, TURN_LEFT, FORWARD, FORWARD):
        traj.append(env.step(a)[4]["agent_pose"][:2])
    img = env.render_top_down([np.array(traj)])
    plain = env.render_top_down()
    assert img.dtype == np.uint8 and img.ndim == 3 and img.shape[2] == 3 and img.shape == plain.shape
    assert (img != plain).any(axis=-1).sum() > 20  # the trajectory is drawn


def test_vec_env_shapes_and_auto_reset():
    from icrl_ros.sim.house_vec import HouseVecEnv

    with HouseVecEnv(3, "train", seed=0, image_size=32, num_workers=2, max_episode_steps=6,
                     pose_frame="episode") as v:
        assert v.num_workers == 2
        obs = obs0 = v.reset_trial()
        assert obs["rgb"].shape == (3, 32, 32, 3) and obs["rgb"].dtype == np.uint8
        assert obs["goal"].shape == (3,) and obs["odom"].shape == (3, 3) and obs["prev_action"].shape == (3,)
        assert (obs["prev_action"] == NO_ACTION).all()
        houses = [i["house_seed"] for i in v.call("_info")]
        for t in range(6):
            obs, rew, done, infos = v.step(np.full(3, TURN_LEFT))
            assert rew.shape == (3,) and done.shape == (3,) and len(infos) == 3
        assert done.all() and all(i["truncated"] and not i["terminated"] for i in infos)
        assert (v.episode_step == 0).all() and np.allclose(obs["odom"], 0)  # next episode started
        assert (obs["prev_action"] == TURN_LEFT).all()  # carried into the next episode
        now = v.call("_info")
        assert [i["house_seed"] for i in now] == houses and all(i["episode_index"] == 1 for i in now)
        v.reset_trial()
        assert [i["house_seed"] for i in v.call("_info")] != houses
        assert all(house_split(h) == "train" for h in houses)
        # reseed: the next trial is the one new workers with that seed would start (evaluation batches)
        v.step(np.full(3, TURN_LEFT))
        v.reseed(0)
        again = v.reset_trial()
        assert [i["house_seed"] for i in v.call("_info")] == houses
        assert np.array_equal(again["rgb"], obs0["rgb"]) and np.array_equal(again["goal"], obs0["goal"])
        # held envs (an evaluation's finished trials) are not stepped: the same observation, not done
        obs, _, _, _ = v.step(np.full(3, TURN_LEFT))
        for _ in range(5):  # steps 2-6 of a 6-step episode
            held, rew, done, infos = v.step(np.full(3, TURN_LEFT), active=[True, False, True])
            assert rew[1] == 0 and not done[1] and infos[1]["held"] and "success" not in infos[1]
            assert np.array_equal(held["rgb"][1], obs["rgb"][1]) and v.episode_step[1] == 1
        assert done[0] and done[2] and not done[1]  # the others ran out their episodes meanwhile
        assert [i["episode_index"] for i in v.call("_info")] == [1, 0, 1]
        with pytest.raises(ValueError, match="active flags"):
            v.step(np.full(3, TURN_LEFT), active=[True, False])


def test_waypoint_follower_steers_for_free_headings():
    """The route labels' follower (HouseEnv.waypoint_action; HouseVecEnv.waypoint_actions in the workers):
    forward toward a waypoint ahead when the step is free, a free heading instead when it is not."""
    from icrl_ros.sim.house import TURN_RIGHT
    from icrl_ros.sim.house_oracle import end_game
    from icrl_ros.sim.house_vec import HouseVecEnv

    e = HouseEnv(split="test")

    def blocked() -> bool:  # the full forward step from the current pose collides
        return e.nav.collides(e.x + e.forward_step * math.cos(e.yaw), e.z - e.forward_step * math.sin(e.yaw))

    try:
        e.reset(seed=3, options={"new_trial": True})
        assert end_game(e) is None  # starts away from the goal: the follower, not the end game, acts
        for _ in range(12):  # face a heading whose forward step is free
            if not blocked():
                break
            e.step(TURN_LEFT)
        assert e.waypoint_action(2.0, 0.0) == FORWARD
        assert e.waypoint_action(0.0, 2.0) == TURN_LEFT and e.waypoint_action(0.0, -2.0) == TURN_RIGHT
        for _ in range(12):  # face a wall: straight ahead is blocked, so it turns to a free heading
            if blocked():
                break
            e.step(FORWARD)
        assert e.waypoint_action(3.0, 0.0) in (TURN_LEFT, TURN_RIGHT)
    finally:
        e.close()
    with HouseVecEnv(2, "test", seed=3, num_workers=2) as v:
        v.reset_trial()
        acts = v.waypoint_actions([[0.0, 2.0], [0.0, 2.0]], [True, False])
        assert acts.tolist() == [TURN_LEFT, -1]


def test_the_scan_says_which_headings_a_forward_step_can_take():
    """``scan=True``: obs["scan"] holds, for the 12 headings 30 degrees apart from straight ahead (counter-clockwise),
    whether a full forward step that way is free: the test the route follower's steering makes. The vec env stacks
    it; without the option there is no such key."""
    from icrl_ros.sim.house_vec import HouseVecEnv

    e = HouseEnv(split="test", scan=True)
    try:
        obs, _ = e.reset(seed=3, options={"new_trial": True})
        assert e.observation_space.contains(obs)
        seen = set()
        for t in range(60):
            obs, *_ = e.step([FORWARD, TURN_LEFT, FORWARD, FORWARD][t % 4])
            for k in range(12):  # bin k = k turns to the left
                h = e.yaw + k * e.turn_step
                free = not e.nav.collides(e.x + e.forward_step * math.cos(h), e.z - e.forward_step * math.sin(h))
                assert obs["scan"][k] == float(free)
            seen.update(obs["scan"].tolist())
        assert seen == {0.0, 1.0}  # walls were met: both values occur
    finally:
        e.close()
    with HouseVecEnv(2, "test", seed=3, num_workers=1, scan=True, scan_bands=True) as v:
        obs = v.reset_trial()
        assert obs["scan"].shape == (2, 12) and obs["scan"].dtype == np.float32
        assert v.observation_space["scan"].shape == (12,)
        assert obs["scan_bands"].shape == (2, 8) and v.observation_space["scan_bands"].shape == (8,)
        from icrl_ros.training.ppo import env_inputs

        assert set(env_inputs(obs, "cpu")) == {"rgb", "odom", "goal", "scan", "scan_bands"}  # the policy gets both
    plain = HouseEnv(split="test")
    try:
        assert "scan" not in plain.reset(seed=3)[0] and "scan" not in plain.observation_space.spaces
    finally:
        plain.close()


def test_a_laser_scan_gives_the_env_scan_through_the_shared_conversion():
    """What a robot computes (its laser scan -> :func:`free_headings_from_scan`) equals the env's ``scan`` on a
    walk past walls and furniture (a 360-beam laser at 1 degree, the sim bridge's); a scan narrower than 360
    degrees reads the headings it does not cover as blocked; a beam hits a wall straight ahead at its distance."""
    from icrl_ros.geometry import free_headings_from_scan

    angles = np.deg2rad(np.arange(360.0)) - np.pi
    e = HouseEnv(split="test", scan=True)
    try:
        e.reset(seed=3, options={"new_trial": True})
        rng, bins = np.random.default_rng(0), 0
        for _ in range(150):
            obs, _, term, trunc, _ = e.step(int(rng.choice([FORWARD, FORWARD, FORWARD, TURN_LEFT, 3])))
            if term or trunc:
                obs, _ = e.reset()
            ranges = e.nav.laser(e.x, e.z, e.yaw, angles, 10.0)
            assert np.array_equal(free_headings_from_scan(ranges, angles, e.forward_step, e.agent_radius), obs["scan"])
            bins += int((obs["scan"] == 0).sum())
        assert bins > 0  # blocked headings were met
    finally:
        e.close()
    from types import SimpleNamespace

    from icrl_ros.sim.house_nav import NavGrid

    one_wall = SimpleNamespace(walls=np.array([[[2.0, -5.0], [2.0, 5.0]]]), layout=SimpleNamespace(objects=[]))
    assert NavGrid.laser(one_wall, 0.0, 0.0, 0.0, np.array([0.0, np.pi, 0.1]), 10.0) == pytest.approx(
        [2.0, np.inf, 2.0 / math.cos(0.1)])  # a wall 2 m ahead (+x): beams ahead hit it, the one behind sees nothing
    front = np.deg2rad(np.arange(-110.0, 111.0))  # a Fetch-like 220-degree laser, nothing near
    bits = free_headings_from_scan(np.full(front.size, np.inf), front, 0.25, 0.25)
    assert bits.tolist() == [1, 1, 1, 1, 1, 0, 0, 0, 1, 1, 1, 1]  # 150-210 degrees: behind the laser's span


def test_splits_are_disjoint_and_respected():
    train, test = set(house_seeds("train", 400)), set(house_seeds("test", 100))
    assert not train & test
    assert 0.1 < len(test) / (max(train | test) + 1) < 0.3
    e = HouseEnv(split="test")
    for s in range(3):
        assert house_split(e.reset(seed=s)[1]["house_seed"]) == "test"
    e.close()


def test_bad_arguments_fail_loudly():
    with pytest.raises(TypeError, match="bad_kwarg"):
        gym.make(ENV_ID, bad_kwarg=1)
    with pytest.raises(ValueError, match="'val'"):
        HouseEnv(split="val")
    with pytest.raises(ValueError, match="image_size"):
        HouseEnv(image_size=3)
    test_seed = house_seeds("test", 1)[0]
    with pytest.raises(ValueError, match="split"):
        HouseEnv(split="train", house_seed=test_seed)
    e = HouseEnv()
    with pytest.raises(ValueError, match="split"):
        e.reset(options={"house_seed": test_seed})
    e.reset(seed=0)
    with pytest.raises(ValueError, match="action"):
        e.step(7)
    e.close()


def test_missing_egl_names_the_system_packages():
    """Without libEGL the env raises a RuntimeError that names the Debian packages."""
    code = (
        "import pyglet.lib\n"
        "orig = pyglet.lib.load_library\n"
        "def fake(*names, **kw):\n"
        "    if 'EGL' in names:\n"
        "        raise ImportError('Library \"EGL\" not found.')\n"
        "    return orig(*names, **kw)\n"
        "pyglet.lib.load_library = fake\n"
        "from icrl_ros.sim.house import HouseEnv\n"
        "try:\n"
        "    HouseEnv().reset(seed=0)\n"
        "except RuntimeError as e:\n"
        "    print(e)\n"
    )
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=root, timeout=120,
                         env={**os.environ, "PYTHONPATH": str(root)})
    assert "apt-get install" in out.stdout and "libegl1" in out.stdout and "libgl1-mesa-dri" in out.stdout, out


def test_ppo_rollout_and_update_on_the_house():
    """One PPO rollout with partial updates on the batched house (image Memo): the trainer's
    step inputs must accept the house's per-env info list."""
    import torch

    from icrl_ros.models import ModelArgs, build_policy
    from icrl_ros.sim.house_vec import HouseVecEnv
    from icrl_ros.training.config import PPOConfig
    from icrl_ros.training.ppo import PPOTrainer

    torch.manual_seed(0)
    with HouseVecEnv(2, "train", seed=0, image_size=32, num_workers=1, max_episode_steps=8) as v:
        args = ModelArgs.from_dict({**v.model_fields(), "kind": "memo", "d_model": 32, "n_layers": 1, "n_heads": 4,
                                    "d_mlp": 64, "l_seg": 8, "l_sum": 2, "sink": "none"})
        policy = build_policy(args)
        before = [p.detach().clone() for p in policy.parameters()]
        trainer = PPOTrainer(policy, v, PPOConfig(rollout_length=20, num_updates=2), total_rollouts=1)
        stats = trainer.rollout_and_update()
        assert stats.episode_returns and "policy_loss" in stats.losses
        assert any(not torch.equal(a, b) for a, b in zip(before, policy.parameters()))


def test_pose_frames_house_is_fixed_for_the_trial_episode_restarts():
    from icrl_ros.geometry import episode_odometry

    house, episode = HouseEnv(pose_frame="house"), HouseEnv(pose_frame="episode")
    try:
        for e in (house, episode):
            e.reset(seed=11)
            for _ in range(3):
                e.step(FORWARD)
            e.reset()  # next episode, same house, new start pose
        assert house.start_pose == episode.start_pose and house.house_origin != house.start_pose
        assert np.allclose(episode.observe()["odom"], 0)
        want = episode_odometry(house.house_origin, (house.x, house.z, house.yaw))
        assert np.allclose(house.observe()["odom"], want) and not np.allclose(want, 0)
        house.reset(options={"new_trial": True})  # a new trial: a new frame at its first start
        assert house.house_origin == house.start_pose and np.allclose(house.observe()["odom"], 0)
    finally:
        house.close()
        episode.close()
    with pytest.raises(ValueError, match="pose_frame"):
        HouseEnv(pose_frame="map")


def test_task_defaults_single_instance_goals_started_away_from_their_room():
    e = HouseEnv(split="test")
    try:
        e.reset(seed=2)
        for _ in range(12):
            count = sum(o.category == e.goal for o in e.layout.objects)
            limit = max(1, min(sum(o.category == c for o in e.layout.objects) for c in e.layout.categories_present()))
            assert count <= limit
            assert e.geodesic_distance >= e.min_start_distance - 1e-6
            start_room = [r for r in e.layout.rooms if r.min_x < e.x < r.max_x and r.min_z < e.z < r.max_z]
            for r in start_room:
                assert not any(o.category == e.goal and r.min_x <= o.x <= r.max_x and r.min_z <= o.z <= r.max_z
                               for o in e.layout.objects)
            e.reset(options={"new_trial": True})
    finally:
        e.close()


def test_recognition_counts_pixels_the_render_shows():
    """The ray-cast pixel counts agree with MiniWorld's picture: against the pixels that differ
    from a render with every object removed, the cast's object pixels overlap them and the
    estimated count (cast pixels x the category's fill) is of the same size."""
    from icrl_ros.sim.house_layout import HouseLayout as Layout
    from icrl_ros.sim.house_view import cast_view

    e = HouseEnv(split="test")
    try:
        e.reset(seed=5)
        empty = Layout(e.layout.seed, e.layout.rooms, e.layout.doors, (), e.layout.pictures)
        bare = HouseRenderer(empty, 64)
        iou, ratio = [], []
        for _ in range(40):
            e.reset()
            v = cast_view(e.layout, e.nav.walls, e.x, e.z, e.yaw, 64, CAMERA_HEIGHT, CAMERA_PITCH_DEG, FOV_Y_DEG)
            if (v.instance >= 0).sum() < 40:
                continue
            changed = (np.abs(e.observe()["rgb"].astype(int) - bare.render(e.x, e.z, e.yaw).astype(int)).sum(-1) > 30)
            cast = (v.instance >= 0).reshape(64, 64)
            iou.append((changed & cast).sum() / max((changed | cast).sum(), 1))
            ratio.append(v.pixels.sum() / max(changed.sum(), 1))
        bare.close()
        assert len(iou) >= 10
        assert np.median(iou) > 0.35 and 0.6 < np.median(ratio) < 1.6, (np.median(iou), np.median(ratio))
    finally:
        e.close()


def test_obstacle_bands_are_the_floor_a_laser_finds_free():
    """The floor distance per image band (the encoder's free-space labels, a depth camera's reading) against
    the planar laser from the same pose read per band (``bands_from_scan``): where a band shows no object, both
    give the nearest wall's horizontal distance from the robot."""
    from icrl_ros.house.frontier import bands_from_scan
    from icrl_ros.models.encoders import FREE_BANDS
    from icrl_ros.sim.house_view import cast_view, obstacle_bands

    e = HouseEnv(split="test")
    try:
        e.reset(seed=7)
        gaps = []
        for _ in range(30):
            e.reset()
            v = cast_view(e.layout, e.nav.walls, e.x, e.z, e.yaw, 64, CAMERA_HEIGHT, CAMERA_PITCH_DEG, FOV_Y_DEG)
            cast = obstacle_bands(v, FREE_BANDS, CAMERA_HEIGHT, CAMERA_PITCH_DEG, FOV_Y_DEG, cap_m=10.0)
            a0, inc, ranges, cap = e.laser_scan()
            laser = bands_from_scan(ranges, a0 + inc * np.arange(len(ranges)), cap, FOV_Y_DEG)
            objects = (v.instance >= 0).reshape(64, 64).any(axis=0).reshape(FREE_BANDS, -1).any(axis=1)
            gaps += list((cast - laser)[~objects])
        assert len(gaps) >= 100, len(gaps)
        assert np.percentile(np.abs(gaps), 90) < 0.15, np.percentile(np.abs(gaps), [50, 90, 100])
    finally:
        e.close()


@pytest.mark.parametrize("mode", ["seeing", "inputs", "inputs+laser"])
def test_the_seeing_teacher_in_the_env_labels_as_the_scripted_searcher_acts(mode):
    """``teacher=seeing`` runs the teacher's search on a frozen encoder's eyes inside the env, ``teacher=inputs`` the
    rule on a student's own inputs (labels a student on that encoder can follow): driven by its labels, a trial takes
    the same actions as the searcher run beside an env without a teacher (as the benchmark's ``seeing`` / ``inputs``
    agent); the option is refused without an encoder file, and an encoder for another mode."""
    from icrl_ros.house.input_searcher import InputSearcher
    from icrl_ros.house.perception import encoder_perceiver, with_laser_bands

    laser = mode == "inputs+laser"  # the rule on the laser's floor, heading for a sighting over looked-at floor,
    # stopping on two images in a row
    mode = mode.split("+")[0]
    enc, seed, episodes = "checkpoints/house_encoder.pt", (7 if laser else 5) if mode == "inputs" else 4, 2  # a find
    extra = {"approach": "looked", "stop_frames": 2} if laser else {}
    found, _, _, ref = _run_perceiving(
        lambda e: (with_laser_bands(e, encoder_perceiver(enc, e.image_size)) if laser else
                   encoder_perceiver(enc, e.image_size)), episodes, seed=seed, present=0.8,
        searcher=InputSearcher if mode == "inputs" else None, **extra)
    seeing = HouseEnv(split="test", teacher=mode, teacher_encoder=enc, teacher_present=0.8,
                      **({"teacher_bands": "laser", "teacher_approach": "looked", "teacher_stop_frames": 2}
                         if laser else {}))
    try:
        got = []
        _, info = seeing.reset(seed=seed)
        for _ in range(episodes):
            while True:
                got.append(int(info["teacher_action"]))
                _, _, term, trunc, info = seeing.step(got[-1])
                if term or trunc:
                    break
            _, info = seeing.reset()
    finally:
        seeing.close()
    assert got == ref and any(found), (len(got), len(ref), found)
    with pytest.raises(ValueError, match="teacher_encoder"):
        HouseEnv(split="test", teacher=mode)
    with pytest.raises(ValueError, match="teacher_encoder"):
        HouseEnv(split="test", teacher="memory", teacher_encoder=enc)
    with pytest.raises(ValueError, match="input searcher"):
        HouseEnv(split="test", teacher="seeing", teacher_encoder=enc, teacher_bands="laser")
    with pytest.raises(ValueError, match="input searcher"):
        HouseEnv(split="test", teacher="seeing", teacher_encoder=enc, teacher_stop_frames=2)


def test_scan_bands_are_the_lasers_floor_per_camera_band_in_the_observation():
    """``scan_bands``: the observation carries the laser's nearest return per image band (what a robot's laser scan
    gives through the agent's conversion), within the laser's range, in the observation space."""
    from icrl_ros.house.frontier import bands_from_scan

    e = HouseEnv(split="test", scan_bands=True)
    try:
        obs, _ = e.reset(seed=3)
        for a in (FORWARD, TURN_LEFT, FORWARD):
            assert e.observation_space.contains(obs)
            a0, inc, ranges, cap = e.laser_scan()
            want = bands_from_scan(ranges, a0 + inc * np.arange(len(ranges)), cap, e.camera_fov_deg)
            np.testing.assert_allclose(obs["scan_bands"], want)
            assert 0.0 < obs["scan_bands"].min() and obs["scan_bands"].min() < cap  # a wall or object in view
            obs, *_ = e.step(a)
    finally:
        e.close()
    assert "scan_bands" not in HouseEnv(split="test").observation_space.spaces


@pytest.mark.parametrize("memory", [True, False])
def test_in_context_teacher_finds_goals_and_memory_makes_it_faster(memory):
    e = HouseEnv(split="test", teacher="memory" if memory else "wiped")
    try:
        steps, found = [], []
        _, info = e.reset(seed=3)
        for ep in range(6):
            while True:
                _, _, term, trunc, info = e.step(info["teacher_action"])
                if term or trunc:
                    break
            steps.append(info["episode_step"])
            found.append(info["success"])
            _, info = e.reset()
        known = e.teacher.known.sum()
        assert sum(found) >= 4
        if memory:
            assert known >= 5 and np.mean(steps[3:]) < 80
        else:
            assert known <= len(e.layout.objects)
    finally:
        e.close()


def test_teacher_noise_makes_memories_from_earlier_episodes_coarse_and_the_teacher_looks_for_them():
    """``teacher_noise``: at an episode start the instances seen before sit off their true places
    by Gaussian noise of ``noise`` metres per axis; sighting one again makes it exact;
    the teacher still finds goals, and where a remembered goal is not, it turns a full circle
    (12 turns) and searches on round the memory instead of stopping blind or waiting there."""
    e = HouseEnv(split="test", teacher="memory", teacher_noise=0.8)
    try:
        _, info = e.reset(seed=3)
        t, objects = e.teacher, e.layout.objects
        found, ratios = [], []
        for ep in range(3):
            if ep:
                for k in np.flatnonzero(t.known & ~t.fresh):
                    err = math.hypot(t.guess[k].x - objects[k].x, t.guess[k].z - objects[k].z)
                    ratios.append(err / 0.8)
            while True:
                _, _, term, trunc, info = e.step(info["teacher_action"])
                assert all(t.guess[k] == objects[k] for k in np.flatnonzero(t.fresh))
                if term or trunc:
                    break
            found.append(info["success"])
            _, info = e.reset()
        # |N(0, I_2)| has mean 1.25; 0 would mean no noise, large values a wrong scale
        assert len(ratios) >= 10 and 0.6 < np.mean(ratios) < 2.0, ratios
        assert sum(found) >= 2, found
        # a remembered goal that is not where it is remembered: 0.6 m ahead of the robot
        goal = next(k for k, o in enumerate(objects) if o.category == e.goal)
        t.known[goal], t.fresh[goal] = True, False
        t.guess[goal] = dataclasses.replace(objects[goal], x=e.x + 0.6 * math.cos(e.yaw), z=e.z - 0.6 * math.sin(e.yaw))
        actions = [t.act()]
        while len(actions) <= 12 and t.known[goal] and not t.fresh[goal]:
            _, _, term, trunc, info = e.step(actions[-1])
            assert not (term or trunc)
            actions.append(info["teacher_action"])
        # not sighted on this seed: a full turn, the floor round here marked as looked at, and it
        # moves on to look again from another place the goal may be
        assert actions[:12] == [TURN_LEFT] * 12 and actions[12] != STOP, actions
        assert t.looks == 1 and t.checked[t._index(e.x, e.z)] and t.known[goal]
        where = [(e.x, e.z)]
        for _ in range(60):
            if t.fresh[goal] or not t.known[goal] or t.looks == 2:
                break
            _, _, term, trunc, info = e.step(info["teacher_action"])
            assert not (term or trunc)
        where.append((e.x, e.z))
        assert t.fresh[goal] or not t.known[goal] or (t.looks == 2 and math.dist(*where) > 0.5), (t.looks, where)
    finally:
        e.close()
    with pytest.raises(ValueError, match="teacher_noise"):
        HouseEnv(teacher="memory", teacher_noise=-0.1)


def test_teacher_pixels_sets_the_size_at_which_the_teacher_recognises_an_instance():
    """``teacher_pixels``: on the same views, a teacher that needs 60 pixels knows a subset of
    what one that needs 10 knows, and strictly less somewhere; below the recognition rule's 10
    pixels the env refuses."""
    envs = [HouseEnv(split="train", teacher="memory", teacher_pixels=px) for px in (10.0, 60.0)]
    try:
        for e in envs:
            e.reset(seed=5)
        fewer = False
        for a in [3] * 12 + [2] * 20 + [3] * 12:
            for e in envs:
                e.step(a)
            k10, k60 = (e.teacher.known.copy() for e in envs)
            assert not (k60 & ~k10).any()
            fewer |= bool((k10 & ~k60).any())
        assert (envs[0].x, envs[0].z) == (envs[1].x, envs[1].z) and fewer
    finally:
        for e in envs:
            e.close()
    with pytest.raises(ValueError, match="teacher_pixels"):
        HouseEnv(teacher="memory", teacher_pixels=5)


def test_ppo_scores_the_logits_the_stop_rule_acted_on():
    """PPO on a policy with a stop rule (the shipped house Memo): the rollout samples from the
    masked / forced logits, so the update must score those. Before any optimiser step the
    recomputed log-probabilities equal the stored ones (approx KL ~ 0); scoring the raw logits
    instead gives a KL orders of magnitude larger (the masked stop's probability is small, so
    the KL is small in absolute terms; it is the only difference between the two runs)."""
    import torch

    from icrl_ros.models.checkpoint import load_checkpoint
    from icrl_ros.sim.house_vec import HouseVecEnv
    from icrl_ros.training.config import PPOConfig
    from icrl_ros.training.ppo import PPOTrainer

    torch.manual_seed(0)
    policy, _ = load_checkpoint("checkpoints/house_memo.pt")
    assert policy.args.house.stop_gate > 0 and policy.args.house.stop_sure > 0
    with HouseVecEnv(2, "train", seed=3, num_workers=1, max_episode_steps=40, pose_frame="house") as v:
        trainer = PPOTrainer(policy, v, PPOConfig(rollout_length=64, num_updates=1, num_minibatches=1,
                                                  update_epochs=1, lr=0.0), total_rollouts=1)
        stats = trainer.rollout_and_update()
    kl = stats.losses["approx_kl"][0]  # measured 6e-10 (stepping vs the whole-trial pass)
    assert kl < 1e-7, kl
    trainer.logit_rules = []  # the raw logits scored against the rule's samples: the old mismatch
    with HouseVecEnv(2, "train", seed=3, num_workers=1, max_episode_steps=40, pose_frame="house") as v:
        trainer.env = v
        torch.manual_seed(0)
        raw = trainer.rollout_and_update()
    assert raw.losses["approx_kl"][0] > max(100 * kl, 1e-7), (kl, raw.losses["approx_kl"])  # measured 1.4e-5


def test_target_positions_are_the_goal_instances_in_either_odometry_frame(env):
    env.reset(seed=3)
    for _ in range(5):
        env.step(1)  # walk a little: the robot's pose now differs from the frames' origins
    world = np.array([(o.x, o.z) for o in env.target_instances()])
    assert len(world) >= 1
    for frame in ("house", "episode"):
        xy = env.target_positions(frame)
        assert xy.shape == (len(world), 2)
        robot = env.pose_in(frame)[:2]
        # a rigid change of frame keeps the robot-to-instance distances
        assert np.allclose(np.linalg.norm(xy - robot, axis=1), np.hypot(*(world - [env.x, env.z]).T), atol=1e-4)
    with pytest.raises(ValueError, match="frame"):
        env.target_positions("map")


def test_a_teacher_that_maps_only_the_floor_it_stood_on_and_never_the_whole_map():
    """``HouseTeacher(floor="stood", whole_map=False)`` (a diagnostic of house_route_probe.py): watching the
    env teacher's trial, its known floor is only what lies within FOOTPRINT_M of a cell it stood on (the
    env's teacher also knows what its camera swept), and it never plans over the whole map."""
    from icrl_ros.sim.house_teacher import FOOTPRINT_M, HouseTeacher

    e = HouseEnv(split="test", teacher="memory")
    try:
        _, info = e.reset(seed=3)
        trail = HouseTeacher(e, floor="stood", whole_map=False)
        trail.episode_start()
        stood = [(e.x, e.z)]
        with pytest.raises(ValueError, match="floor"):
            HouseTeacher(e, floor="map")
        for _ in range(40):
            _, _, term, trunc, info = e.step(info["teacher_action"])
            if term or trunc:
                break
            trail.observe()
            stood.append((e.x, e.z))
            trail.act()
        pts = np.array(stood)
        d = np.hypot(trail.X[..., None] - pts[:, 0], trail.Z[..., None] - pts[:, 1]).min(-1)
        assert trail.seen.any() and (d[trail.seen] <= FOOTPRINT_M + 1e-6).all()
        assert e.teacher.seen.sum() > 2 * trail.seen.sum()  # the camera's floor is most of what the env teacher knows
        assert trail.whole_map_plans == 0
    finally:
        e.close()


def _run_perceiving(perceive_for, episodes: int, seed: int = 3, searcher=None, **opts):
    """A ``PerceivingTeacher`` (or ``searcher``, the same interface; ``opts``) on ``perceive_for(env)`` driving a
    test house: (success per episode, stops, the teacher, its actions)."""
    from icrl_ros.sim.house_teacher import PerceivingTeacher

    e = HouseEnv(split="test")
    try:
        obs, _ = e.reset(seed=seed)
        t = (searcher or PerceivingTeacher)(e, perceive_for(e), **opts)
        found, actions = [], []
        for _ in range(episodes):
            t.see(obs["rgb"])
            t.episode_start()
            while True:
                actions.append(t.act())
                obs, _, term, trunc, info = e.step(actions[-1])
                if term or trunc:
                    break
                t.see(obs["rgb"])
                t.observe()
            found.append(info["success"])
            obs, _ = e.reset()
        return found, actions.count(0), t, actions
    finally:
        e.close()


def test_perceiving_teacher_searches_with_a_detector_and_never_stops_blind():
    """``PerceivingTeacher`` recognises, places and stops on what its detector says of the image: with a
    detector that reads the truth off the layout (P 1 for what the recognition rule resolves, the true
    position and surface distance) it finds goals as the teacher does; with one that never sees anything it
    explores and never stops."""
    from icrl_ros.geometry import planar
    from icrl_ros.sim.house_render import CAMERA_HEIGHT, CAMERA_PITCH_DEG, FOV_Y_DEG
    from icrl_ros.sim.house_view import MIN_PIXELS, cast_view

    n_cat = len(GOAL_NAMES)

    def truthful(e):
        def perceive(rgb, pose):
            assert rgb.shape == (e.image_size, e.image_size, 3)
            assert np.allclose(pose, planar((e.x, e.z, e.yaw)))
            view = cast_view(e.layout, e.nav.walls, e.x, e.z, e.yaw, 64, CAMERA_HEIGHT, CAMERA_PITCH_DEG, FOV_Y_DEG)
            p, xy, dist = np.zeros(n_cat), np.zeros((n_cat, 2)), np.full(n_cat, 9.0)
            for k in np.flatnonzero(view.resolved(MIN_PIXELS)):
                o = e.layout.objects[k]
                p[o.category], xy[o.category] = 1.0, (o.x, -o.z)
                dist[o.category] = math.hypot(o.x - e.x, o.z - e.z) - o.cat.radius
            return p, xy, dist
        return perceive

    found, stops, t, _ = _run_perceiving(truthful, 4)
    assert sum(found) >= 3 and stops == sum(found), (found, stops)
    assert t.sightings > 0 and t.known.any()
    blind = lambda e: lambda rgb, pose: (np.zeros(n_cat), np.zeros((n_cat, 2)), np.full(n_cat, 9.0))  # noqa: E731
    found, stops, t, _ = _run_perceiving(blind, 2)
    assert stops == 0 and not any(found) and t.seen.sum() > 50 and not t.known.any()


def test_the_input_searcher_stops_after_stop_frames_images_in_a_row_give_the_goal_within_reach():
    """``stop_frames=2``: one image that puts the goal within reach makes it close in, not stop (single-image false
    alarms of the heads were most of its wrong stops); a second in a row stops; an image without it starts again."""
    from icrl_ros.house.input_searcher import InputSearcher
    from icrl_ros.models.encoders import FREE_BANDS
    from icrl_ros.sim.house_teacher import STOP

    e = HouseEnv(split="test")
    try:
        e.reset(seed=3)
        n_cat, g = int(e.observation_space["goal"].n), int(e.goal)
        state = {"p": 0.9}

        def perceive(rgb, pose):  # the goal 0.5 m ahead at P state["p"], open floor all round
            p = np.zeros(n_cat)
            p[g] = state["p"]
            xy = np.tile(np.array(pose[:2]) + 0.5 * np.array([math.cos(pose[2]), math.sin(pose[2])]), (n_cat, 1))
            return p, xy, np.full(n_cat, 0.5), np.full(FREE_BANDS, 3.0)

        for frames, want in ((1, [STOP]), (2, [None, STOP]), (3, [None, None, STOP])):
            s = InputSearcher(e, perceive, stop_frames=frames)
            s.see(None)
            s.episode_start()
            got = [s.act() for _ in want]
            assert [a if a == STOP else None for a in got] == want, (frames, got)
        s = InputSearcher(e, perceive, stop_frames=2)
        s.see(None)
        s.episode_start()
        assert s.act() != STOP
        state["p"] = 0.0  # not in this image: the count starts again
        s.see(None)
        assert s.act() != STOP
        state["p"] = 0.9
        s.see(None)
        assert s.act() != STOP
        s.see(None)
        assert s.act() == STOP
        with pytest.raises(ValueError, match="stop_frames"):
            InputSearcher(e, perceive, stop_frames=0)
    finally:
        e.close()
