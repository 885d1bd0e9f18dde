"""sim_bridge_node over real rclpy / DDS on loopback, with the test-double image env."""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from tests.nodes.ros_support import require_ros, spin_until

require_ros()

from rclpy.executors import SingleThreadedExecutor  # noqa: E402
from rclpy.parameter import Parameter  # noqa: E402
from std_srvs.srv import Trigger  # noqa: E402

from icrl_ros.nodes.convert import odometry_msg_to_pose, stamp_to_seconds  # noqa: E402
from icrl_ros.nodes.sim_bridge_node import SimBridgeNode  # noqa: E402
from tests.nodes import fixture_env  # noqa: E402, F401  (registers the test env id)
from tests.nodes.probe import Probe  # noqa: E402

ENV_ID = "tests.nodes.fixture_env:icrl_ros_test/TinyImageNav-v0"
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def bridge_params(**kw) -> list[Parameter]:
    values = {"env_id": ENV_ID, "republish_period_s": 0.2, "seed": 3} | kw
    return [Parameter(k, value=v) for k, v in values.items()]


def test_lockstep_publishes_one_observation_per_action(ros_context) -> None:
    ex = SingleThreadedExecutor(context=ros_context)
    probe = Probe(ros_context)
    bridge = SimBridgeNode(context=ros_context, parameter_overrides=bridge_params())
    for n in (probe, bridge):
        ex.add_node(n)
    try:
        env = bridge.env.unwrapped
        assert spin_until(ex, lambda: probe.image_stamps() and probe.got["goal"] and probe.got["odom"]
                          and len(probe.got["episode_events"]) == 2, 10)
        assert probe.got["goal"][-1].data in fixture_env.GOALS
        assert probe.image_stamps() == [1.0]
        events = probe.events()
        assert [e["event"] for e in events] == ["trial_start", "episode_start"]
        img = probe.got["camera/image_raw"][-1]
        assert (img.height, img.width, img.encoding, img.step) == (24, 32, "rgb8", 96)
        info = probe.got["camera/camera_info"][-1]
        assert info.k[2] == 16.0 and info.k[5] == 12.0 and info.k[0] == pytest.approx(12 / math.tan(math.radians(30)))

        # forward then left: one new observation each, odometry relative to the episode start
        for i, (action, expect) in enumerate([(1, (0.25, 0.0, 0.0)), (2, (0.25, 0.0, math.radians(30)))]):
            probe.pub_action.publish(fixture_env_int(action))
            stamp = 1.0 + 0.5 * (i + 1)
            assert spin_until(ex, lambda: len(probe.image_stamps()) == i + 2 and len(probe.got["reward"]) == i + 1
                              and stamp_to_seconds(probe.got["odom"][-1].header.stamp) == stamp, 5)
            odom = probe.got["odom"][-1]
            assert stamp_to_seconds(odom.header.stamp) == probe.image_stamps()[-1] == 1.0 + 0.5 * (i + 1)
            assert odometry_msg_to_pose(odom) == pytest.approx(expect, abs=1e-5)
            assert len(probe.got["reward"]) == i + 1
        assert spin_until(ex, lambda: stamp_to_seconds(probe.got["/clock"][-1].clock) == 2.0, 3)

        # idle: the same observation comes again with its old stamp, nothing new
        n_images = len(probe.got["camera/image_raw"])
        spin_until(ex, lambda: len(probe.got["camera/image_raw"]) > n_images + 1, 2)
        assert len(probe.got["camera/image_raw"]) > n_images and probe.image_stamps()[-1] == 2.0

        # stop ends the episode: episode_end, then the next episode's start, goal and observation
        goals_before = len(probe.got["goal"])
        probe.pub_action.publish(fixture_env_int(0))
        assert spin_until(ex, lambda: len(probe.image_stamps()) == 4 and len(probe.got["goal"]) > goals_before
                          and len(probe.events()) == 4
                          and stamp_to_seconds(probe.got["odom"][-1].header.stamp) == 2.5, 5)
        events = probe.events()
        assert [e["event"] for e in events[2:]] == ["episode_end", "episode_start"]
        end = events[2]
        assert end["steps"] == 3 and end["episode"] == 0 and end["trial"] == 0
        assert set(end) >= {"success", "spl", "steps", "return", "goal", "stamp"}
        assert events[-1]["event"] == "episode_start" and events[-1]["episode"] == 1
        assert odometry_msg_to_pose(probe.got["odom"][-1]) == pytest.approx((0, 0, 0), abs=1e-6)
        assert env.episode_index == 1

        # bad action: counted, ignored, nothing published
        probe.pub_action.publish(fixture_env_int(9))
        assert spin_until(ex, lambda: bridge.counters["bad_actions"] == 1, 3)
        assert len(probe.image_stamps()) == 4

        # services: a new trial
        client = probe.create_client(Trigger, "/sim_bridge/new_trial")
        assert client.wait_for_service(timeout_sec=5)
        future = client.call_async(Trigger.Request())
        assert spin_until(ex, future.done, 5) and future.result().success
        assert spin_until(ex, lambda: len(probe.events()) == 6, 3)
        assert probe.events()[-2]["event"] == "trial_start"
        assert probe.events()[-2]["trial"] == 1 and probe.events()[-1]["episode"] == 0
    finally:
        ex.shutdown()
        bridge.destroy_node()
        probe.destroy_node()


def test_max_episodes_starts_no_episode_after_the_last_until_asked(ros_context) -> None:
    ex = SingleThreadedExecutor(context=ros_context)
    probe = Probe(ros_context)
    bridge = SimBridgeNode(context=ros_context, parameter_overrides=bridge_params(max_episodes=1))
    for n in (probe, bridge):
        ex.add_node(n)
    try:
        assert spin_until(ex, lambda: probe.image_stamps() and len(probe.got["episode_events"]) == 2, 10)
        probe.pub_action.publish(fixture_env_int(0))  # stop: the one episode ends
        assert spin_until(ex, lambda: len(probe.events()) == 3, 5)
        spin_until(ex, lambda: len(probe.events()) > 3, 1.0)
        assert [e["event"] for e in probe.events()] == ["trial_start", "episode_start", "episode_end"]
        probe.pub_action.publish(fixture_env_int(1))  # ignored: no episode is running
        spin_until(ex, lambda: len(probe.image_stamps()) > 1, 1.0)
        assert probe.image_stamps() == [1.0] and bridge.counters["steps"] == 1
        client = probe.create_client(Trigger, "/sim_bridge/new_episode")
        assert client.wait_for_service(timeout_sec=5)
        future = client.call_async(Trigger.Request())
        assert spin_until(ex, future.done, 5) and future.result().success
        assert spin_until(ex, lambda: probe.events()[-1]["event"] == "episode_start", 3)
    finally:
        ex.shutdown()
        bridge.destroy_node()
        probe.destroy_node()


def fixture_env_int(value: int):
    from std_msgs.msg import Int32

    return Int32(data=value)


def test_realtime_integrates_cmd_vel_and_stops_on_timeout(ros_context) -> None:
    from geometry_msgs.msg import Twist

    ex = SingleThreadedExecutor(context=ros_context)
    probe = Probe(ros_context)
    bridge = SimBridgeNode(context=ros_context, parameter_overrides=bridge_params(
        mode="realtime", realtime_rate_hz=20.0, camera_rate_hz=5.0, cmd_timeout_s=0.3))
    pub = probe.create_publisher(Twist, "cmd_vel", 10)
    for n in (probe, bridge):
        ex.add_node(n)
    try:
        env = bridge.env.unwrapped
        assert spin_until(ex, lambda: len(probe.got["odom"]) > 5, 5)
        cmd = Twist()
        cmd.linear.x = 0.2
        t_end = time.monotonic() + 1.0
        while time.monotonic() < t_end:  # 1 s at 0.2 m/s, sent at 10 Hz
            pub.publish(cmd)
            spin_until(ex, lambda: False, 0.1)
        moved = float(env.odom()[0])
        assert 0.12 < moved < 0.3, moved  # sim time follows the 20 Hz ticks
        spin_until(ex, lambda: False, 0.8)  # no command: stops after cmd_timeout_s
        still = float(env.odom()[0])
        assert still - moved < 0.2 * 0.3 + 0.02
        spin_until(ex, lambda: False, 0.5)
        assert float(env.odom()[0]) == pytest.approx(still, abs=1e-9)
        # odometry at 20 Hz, camera at 5 Hz, /clock advancing
        n_odom, n_img = len(probe.got["odom"]), len(probe.got["camera/image_raw"])
        assert n_odom > 2.5 * n_img > 0
        assert stamp_to_seconds(probe.got["/clock"][-1].clock) > 2.0
    finally:
        ex.shutdown()
        bridge.destroy_node()
        probe.destroy_node()


def test_bad_parameters_are_refused(ros_context) -> None:
    with pytest.raises(ValueError, match="mode"):
        SimBridgeNode(context=ros_context, parameter_overrides=bridge_params(mode="fast"))
    with pytest.raises(ValueError, match="env_kwargs"):
        SimBridgeNode(context=ros_context, parameter_overrides=bridge_params(env_kwargs="[1]"))
    bridge = SimBridgeNode(context=ros_context, parameter_overrides=bridge_params(env_kwargs='{"max_steps": 3}'))
    try:
        assert bridge.env.unwrapped.max_steps == 3
        # every bridge parameter is read at start: a runtime set is refused with the reason, never
        # reported successful and then ignored
        for name, value in (("mode", "teleport"), ("realtime_rate_hz", 0.0), ("seed", 7)):
            result = bridge.set_parameters([Parameter(name, value=value)])[0]
            assert not result.successful and "read-only" in result.reason, (name, result.reason)
        assert bridge.get_parameter("seed").value == 3 and bridge.params.seed == 3
    finally:
        bridge.destroy_node()


def test_console_entry_point_runs_and_exits_cleanly_on_sigint(ros_context) -> None:
    """``python -m icrl_ros.nodes.sim_bridge_node`` (what the console script calls) in its own process."""
    ex = SingleThreadedExecutor(context=ros_context)
    probe = Probe(ros_context, namespace="/proc")
    ex.add_node(probe)
    env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.Popen(
        [sys.executable, "-m", "icrl_ros.nodes.sim_bridge_node", "--ros-args", "-r", "__ns:=/proc",
         "-p", f"env_id:={ENV_ID}", "-p", "republish_period_s:=0.2"],
        cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        ok = spin_until(ex, lambda: probe.got["goal"] and probe.got["camera/image_raw"], 30)
        assert ok, "no goal / image from the bridge process"
        rgb = np.frombuffer(probe.got["camera/image_raw"][-1].data, np.uint8)
        assert rgb.size == 24 * 32 * 3
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=15)
        assert proc.returncode == 0, out.decode(errors="replace")[-2000:]
    finally:
        if proc.poll() is None:
            proc.kill()
        ex.shutdown()
        probe.destroy_node()


def test_bridge_drives_the_house_env_when_registered(ros_context) -> None:
    """The default env id: lockstep forward / turn move the odometry by the action's step."""
    import gymnasium as gym

    try:
        import icrl_ros.sim  # noqa: F401  (registers the project's ids)
    except ImportError as e:
        pytest.skip(f"icrl_ros.sim does not import: {e}")
    if "icrl_ros/MiniWorldHouse-v0" not in gym.registry:
        pytest.skip("icrl_ros/MiniWorldHouse-v0 is not registered yet")
    ex = SingleThreadedExecutor(context=ros_context)
    probe = Probe(ros_context)
    bridge = SimBridgeNode(context=ros_context, parameter_overrides=[Parameter("seed", value=1)])
    for n in (probe, bridge):
        ex.add_node(n)
    try:
        assert spin_until(ex, lambda: probe.image_stamps() and probe.got["goal"] and probe.got["odom"], 10)
        assert probe.got["goal"][-1].data in bridge.goal_names
        env = bridge.env.unwrapped
        yaw = 0.0
        for i, action in enumerate([1, 2, 3, 2]):  # forward (maybe blocked by a wall), left, right, left
            probe.pub_action.publish(fixture_env_int(action))
            stamp = 1.0 + 0.5 * (i + 1)
            assert spin_until(ex, lambda: stamp_to_seconds(probe.got["odom"][-1].header.stamp) == stamp, 10)
            pose = odometry_msg_to_pose(probe.got["odom"][-1])
            assert pose == pytest.approx(tuple(float(v) for v in env.observe()["odom"]), abs=1e-5)
            yaw += {1: 0.0, 2: math.radians(30), 3: -math.radians(30)}[action]
            assert pose[2] == pytest.approx(yaw, abs=1e-5)
        img = probe.got["camera/image_raw"][-1]
        assert img.encoding == "rgb8" and img.height > 0 and img.width > 0
    finally:
        ex.shutdown()
        bridge.destroy_node()
        probe.destroy_node()


def test_bridge_pose_frame_reaches_the_env_unless_env_kwargs_sets_it() -> None:
    from icrl_ros.nodes.sim_bridge_node import make_env

    for frame, kwargs, want in (("house", {}, "house"), ("episode", {}, "episode"),
                                ("house", {"pose_frame": "episode"}, "episode")):
        env = make_env("icrl_ros/MiniWorldHouse-v0", {"split": "test", **kwargs}, frame)
        try:
            assert env.unwrapped.pose_frame == want
        finally:
            env.close()


def test_bridge_publishes_the_house_frame_pose_beside_episode_odometry(ros_context) -> None:
    """With pose_frame episode, odom restarts at every episode while map_pose (frame map) stays the
    house-frame pose the env reports: what a localised robot's map pose is."""
    from geometry_msgs.msg import PoseStamped

    from icrl_ros.nodes.convert import yaw_from_quaternion

    ex = SingleThreadedExecutor(context=ros_context)
    probe = Probe(ros_context)
    poses: list = []
    probe.create_subscription(PoseStamped, "map_pose", poses.append, 50)
    bridge = SimBridgeNode(context=ros_context, parameter_overrides=bridge_params(
        env_id="icrl_ros/MiniWorldHouse-v0", env_kwargs='{"split": "test"}', pose_frame="episode", seed=5))
    for n in (probe, bridge):
        ex.add_node(n)
    try:
        env = bridge.env.unwrapped

        def last_pose():
            m = poses[-1]
            q = m.pose.orientation
            return (m.pose.position.x, m.pose.position.y, yaw_from_quaternion(q.x, q.y, q.z, q.w))

        assert spin_until(ex, lambda: poses and probe.got["odom"], 10)
        assert poses[-1].header.frame_id == "map"
        assert last_pose() == pytest.approx((0.0, 0.0, 0.0), abs=1e-5)  # the trial's first start is the origin

        def stamps():
            return stamp_to_seconds(poses[-1].header.stamp), stamp_to_seconds(probe.got["odom"][-1].header.stamp)

        for a in (1, 1, 2, 1):
            # while idle the bridge republishes the last observation with its old stamp, so wait for the
            # pose and odometry of the step this action makes: both stamped later than before it
            before_stamp = stamps()[0]
            probe.pub_action.publish(fixture_env_int(a))
            assert spin_until(ex, lambda: stamps()[0] == stamps()[1] > before_stamp, 5)
        assert last_pose() == pytest.approx(tuple(env.pose_in("house")), abs=1e-4)
        assert odometry_msg_to_pose(probe.got["odom"][-1]) == pytest.approx(tuple(env.pose_in("episode")), abs=1e-4)
        before = last_pose()
        n = len(probe.events())
        probe.pub_action.publish(fixture_env_int(0))  # stop: the next episode starts elsewhere
        assert spin_until(ex, lambda: len(probe.events()) >= n + 2 and env.episode_index == 1
                          and stamp_to_seconds(poses[-1].header.stamp) == stamp_to_seconds(probe.got["odom"][-1].header.stamp)
                          and stamp_to_seconds(probe.got["odom"][-1].header.stamp) > 3.0, 5)
        assert odometry_msg_to_pose(probe.got["odom"][-1]) == pytest.approx((0.0, 0.0, 0.0), abs=1e-5)
        assert last_pose() == pytest.approx(tuple(env.pose_in("house")), abs=1e-4)
        assert last_pose() != pytest.approx(before, abs=1e-3)  # a new start, in the same house frame
    finally:
        ex.shutdown()
        bridge.destroy_node()
        probe.destroy_node()


def test_replay_episodes_starts_where_another_run_did_and_warns_when_the_env_cannot(ros_context, tmp_path) -> None:
    """episode_start events carry the start pose (world x, z, yaw) and goal; a second bridge with
    another seed and ``replay_episodes`` = those starts and goals runs the same episodes (the
    paired cross-simulator curve), then its own draws past the list. An env whose reset ignores
    the options is counted and logged, not silently unpaired; a bad file is refused at start."""
    import json

    def episodes(bridge, n):
        ex = SingleThreadedExecutor(context=ros_context)
        probe = Probe(ros_context)
        for node in (probe, bridge):
            ex.add_node(node)
        try:
            starts = lambda: [e for e in probe.events() if e["event"] == "episode_start"]  # noqa: E731
            assert spin_until(ex, lambda: starts() and probe.image_stamps(), 5)
            for _ in range(n - 1):
                k, images = len(starts()), len(probe.image_stamps())
                probe.pub_action.publish(fixture_env_int(0))  # stop: the next episode starts
                assert spin_until(ex, lambda: len(starts()) == k + 1 and len(probe.image_stamps()) > images, 5)
            return starts(), dict(bridge.counters)
        finally:
            ex.remove_node(probe)
            ex.remove_node(bridge)
            probe.destroy_node()
            bridge.destroy_node()

    first, _ = episodes(SimBridgeNode(context=ros_context, parameter_overrides=bridge_params(seed=3)), 3)
    assert all(len(e["start"]) == 3 and "replayed" not in e for e in first)
    replay = tmp_path / "replay.json"
    replay.write_text(json.dumps([{"start": e["start"], "goal": e["goal"]} for e in first[:2]]))
    again, counters = episodes(SimBridgeNode(context=ros_context, parameter_overrides=bridge_params(
        seed=11, replay_episodes=str(replay))), 3)
    for a, b in zip(first[:2], again[:2]):
        assert b["replayed"] and b["goal"] == a["goal"] and b["start"] == pytest.approx(a["start"], abs=1e-4)
    assert "replayed" not in again[2] and again[2]["start"] != pytest.approx(first[2]["start"], abs=1e-3)
    assert counters.get("replay_mismatches", 0) == 0
    _, counters = episodes(SimBridgeNode(context=ros_context, parameter_overrides=bridge_params(
        seed=11, replay_episodes=str(replay), env_kwargs='{"replay": false}')), 2)
    assert counters["replay_mismatches"] == 2
    replay.write_text(json.dumps([{"start": [1.0, 2.0], "goal": "chair"}]))
    with pytest.raises(ValueError, match="replay_episodes: .* must hold a JSON list"):
        SimBridgeNode(context=ros_context, parameter_overrides=bridge_params(replay_episodes=str(replay)))
