"""The agent's pose from a localiser composed with odometry (icrl_ros/nodes/pose_input.py) and the loop's
rules for it (pose_source pose_topic): no DDS here; test_agent_pose_topic.py runs the node over real topics."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from icrl_ros.geometry import compose_pose, relative_pose, wrap_angle
from icrl_ros.nodes.action_executor import ActionExecutor, ActionKind
from icrl_ros.nodes.agent_loop import AgentLoop, executor_config
from icrl_ros.nodes.convert import InputError, pose_msg_to_pose
from icrl_ros.nodes.params import AgentParams
from icrl_ros.nodes.pose_input import ACCEPTED, BACK_DATED, JUMP, PENDING, REPEAT, TOO_OLD, LocaliserFusion
from tests.nodes.fake_runner import DEFAULT_MANIFEST, FakeRunner
from tests.nodes.test_agent_loop import NAMES, H, W, Clock, Host, check, frame

MAP_FROM_ODOM = (2.0, -1.0, 0.7)  # where the odometry frame sits in the map


def close(a, b, tol=1e-9) -> bool:
    return abs(a[0] - b[0]) < tol and abs(a[1] - b[1]) < tol and abs(wrap_angle(a[2] - b[2])) < tol


def test_a_lagging_fix_is_composed_with_the_odometry_since_its_stamp() -> None:
    f = LocaliserFusion()
    odom = [(0.1 * k, 0.0, 0.05 * k) for k in range(11)]  # odometry at t = 1.0, 1.1, ... 2.0
    for k, p in enumerate(odom):
        assert f.odometry(p, 1.0 + 0.1 * k) == ACCEPTED
    assert f.pose(odom[-1]) is None and math.isinf(f.travelled())
    # a fix of t = 1.45 (between two odometry messages): the map pose then, which is the odometry then in the map
    at = tuple(0.5 * (a + b) for a, b in zip(odom[4], odom[5]))
    assert f.fix(compose_pose(MAP_FROM_ODOM, at), 1.45) == ACCEPTED
    assert close(f.pose(odom[-1]), compose_pose(MAP_FROM_ODOM, odom[-1]))  # exact map pose now
    assert f.travelled() == pytest.approx(0.55, abs=1e-9)  # 5.5 odometry steps of 0.1 m since the fix
    assert f.fix(compose_pose(MAP_FROM_ODOM, at), 1.45) == REPEAT
    assert f.fix((9.0, 9.0, 0.0), 1.2) == BACK_DATED and close(f.pose(odom[-1]), compose_pose(MAP_FROM_ODOM, odom[-1]))
    # a fix ahead of the odometry waits for it
    assert f.fix(compose_pose(MAP_FROM_ODOM, (1.2, 0.0, 0.6)), 2.2) == PENDING
    assert close(f.pose(odom[-1]), compose_pose(MAP_FROM_ODOM, odom[-1]))  # still the old fix
    f.odometry((1.1, 0.0, 0.55), 2.1)
    f.odometry((1.2, 0.0, 0.6), 2.2)
    assert f.fix_stamp == 2.2 and f.travelled() == pytest.approx(0.0)


def test_fix_older_than_the_odometry_kept_or_a_jump_back() -> None:
    f = LocaliserFusion(time_jump_s=1.0, history=5)
    for k in range(10):
        f.odometry((0.1 * k, 0.0, 0.0), 10.0 + 0.1 * k)
    assert f.fix((0.0, 0.0, 0.0), 10.2) == TOO_OLD and not f.has_fix  # only 10.5 .. 10.9 are kept
    assert f.fix((5.0, 0.0, 0.0), 10.6) == ACCEPTED
    assert f.fix((0.0, 0.0, 0.0), 3.0) == BACK_DATED and f.fix_stamp == 10.6  # however far back: dropped
    assert f.odometry((0.0, 0.0, 0.0), 3.0) == JUMP and not f.has_fix  # odometry jumping back forgets the fix
    assert f.fix((1.0, 0.0, 0.0), 3.0) == ACCEPTED and f.pose((0.5, 0.0, 0.0)) == pytest.approx((1.5, 0.0, 0.0))


def test_pose_messages_convert_both_types_and_refuse_nan() -> None:
    from types import SimpleNamespace as NS

    def msg(x, yaw, cov: bool):
        pose = NS(position=NS(x=x, y=2.0, z=0.0), orientation=NS(x=0.0, y=0.0, z=math.sin(yaw / 2), w=math.cos(yaw / 2)))
        return NS(pose=NS(pose=pose, covariance=[0.0] * 36)) if cov else NS(pose=pose)

    for cov in (True, False):
        assert pose_msg_to_pose(msg(1.0, 0.3, cov)) == pytest.approx((1.0, 2.0, 0.3))
        with pytest.raises(InputError):
            pose_msg_to_pose(msg(float("nan"), 0.3, cov))


def make_loop(twist: bool = False, **params):
    clock, host = Clock(), Host()
    p = AgentParams(pose_source="pose_topic", **params)
    loop = AgentLoop(p, host.io(), clock)
    manifest = json.loads(json.dumps(DEFAULT_MANIFEST))
    manifest["fake"]["script"] = [1]  # always forward
    runner = FakeRunner(manifest, {})
    loop.attach(runner, pose_frame="house", image_size=(H, W), goal_names=manifest["observation"]["goal_names"],
                kinds=[ActionKind.from_name(a) for a in NAMES], executor=ActionExecutor(executor_config(p)),
                twist=twist)
    loop.activate()
    loop.goal_message("chair")
    return loop, host, clock, runner


def test_the_policy_gets_the_localised_pose_at_every_step_while_fixes_come_every_third() -> None:
    """Odometry with a 10% scale error drifts from the map; fixes every third step keep the policy's pose on the
    map's, and between fixes it is the last fix composed with the odometry travelled since."""
    loop, host, clock, runner = make_loop()
    true = (0.0, 0.0, 0.3)
    odom = (0.0, 0.0, 0.0)
    start_map = compose_pose(MAP_FROM_ODOM, true)
    clock.t += 0.05
    loop.odometry(odom, 1.0)
    loop.image(frame(), 1.0, check=check)
    assert host.actions == [] and not runner.memory  # no localiser pose yet: waits
    loop.localiser(compose_pose(MAP_FROM_ODOM, true), 1.0)  # the first fix lets the held frame act
    assert host.actions == [1] and runner.memory[-1][4:] == pytest.approx([0.0, 0.0, 0.0], abs=1e-6)
    odom_only = []
    for k in range(1, 13):
        true = compose_pose(true, (0.25, 0.0, 0.1))
        odom = compose_pose(odom, (0.275, 0.0, 0.1))  # odometry reads 10% long
        stamp = 1.0 + k
        clock.t += 0.05
        loop.odometry(odom, stamp)
        if k % 3 == 0:
            loop.localiser(compose_pose(MAP_FROM_ODOM, true), stamp)
        loop.image(frame(), stamp, check=check)
        got = runner.memory[-1][4:]
        want = relative_pose(start_map, compose_pose(MAP_FROM_ODOM, true))  # the true house-frame pose
        err = math.hypot(got[0] - want[0], got[1] - want[1])
        assert err < 0.06, (k, got, want)  # at most two steps of 2.5 cm scale error since the last fix
        if k % 3 == 0:
            assert err < 1e-5
        odom_only.append(math.hypot(odom[0] - true[0], odom[1] - true[1]))
    assert len(host.actions) == 13 and odom_only[-1] > 0.25  # odometry alone is off by > 0.25 m by now
    assert loop.counters["stale_pose"] == 0


def test_a_stale_localiser_pose_stops_the_base_and_keeps_the_memory() -> None:
    loop, host, clock, runner = make_loop(twist=True, pose_max_travel_m=0.5, settle_s=0.0)
    loop.odometry((0.0, 0.0, 0.0), 1.0)
    loop.localiser((0.0, 0.0, 0.0), 1.0)
    loop.image(frame(), 1.0, check=check)
    assert host.actions == [1]
    loop.action_executor.abort()  # the step is done as far as this test goes
    n_mem = len(runner.memory)
    # the localiser goes quiet while the odometry moves 0.6 m
    for k in range(1, 7):
        loop.odometry((0.1 * k, 0.0, 0.0), 1.0 + 0.1 * k)
    host.twists.clear()
    clock.t += 1.0
    loop.image(frame(), 1.6, check=check)
    assert host.actions == [1] and len(runner.memory) == n_mem  # not acted, nothing reached the memory
    assert loop.counters["stale_pose"] == 1 and host.twists == [(0.0, 0.0)]  # a zero went out
    assert any("localiser pose stale" in m for _, m in host.logs)
    clock.t += 0.01
    loop.image(frame(), 1.61, check=check)
    assert loop.counters["stale_pose"] == 2
    assert sum("localiser pose stale" in m for _, m in host.logs) == 1  # the log is throttled, the counter is not
    # a back-dated localiser pose does not revive it
    loop.localiser((5.0, 5.0, 0.0), 0.5)
    assert loop.counters["back_dated_poses"] == 1
    loop.image(frame(), 1.62, check=check)
    assert len(host.actions) == 1 and len(runner.memory) == n_mem
    # a fresh one does: acting resumes with the memory it had
    loop.localiser((0.6, 0.0, 0.0), 1.6)
    clock.t += 0.01
    loop.image(frame(), 1.63, check=check)
    assert len(host.actions) == 2 and len(runner.memory) == n_mem + 1
    assert runner.memory[-1][4:] == pytest.approx([0.6, 0.0, 0.0], abs=1e-6)
    assert any("fresh again" in m for _, m in host.logs)


def test_odom_source_ignores_localiser_input() -> None:
    clock, host = Clock(), Host()
    loop = AgentLoop(AgentParams(), host.io(), clock)
    assert not loop.uses_localiser
    loop.localiser((1.0, 2.0, 0.0), 1.0)
    assert not loop.fusion.has_fix and np.isinf(loop.fusion.travelled())


def test_the_real_base_profile_takes_its_pose_from_a_localiser() -> None:
    """config/fetch.yaml (a real base) reads AMCL's pose composed with odometry; the simulator profile keeps the
    bridge's exact odometry."""
    from tests.nodes.test_files import ros_parameters

    agent = AgentParams.from_dict(ros_parameters("agent.yaml"))
    fetch = AgentParams.from_dict({**ros_parameters("agent.yaml"), **ros_parameters("fetch.yaml")})
    assert agent.pose_source == "odom" and AgentParams().pose_source == "odom"
    assert (fetch.pose_source, fetch.pose_topic, fetch.pose_topic_type) == (
        "pose_topic", "/amcl_pose", "PoseWithCovarianceStamped")
    assert fetch.pose_transient_local  # AMCL latches amcl_pose
