"""Bridge + agent together over real rclpy / DDS on loopback (test-double env and runner).

Lockstep: episodes run end to end, memory carries across episodes and clears on a new trial,
and the odometry the runner sees is exactly the env's. Real time: the Twist executor drives
the bridge's ``cmd_vel`` integration to 0.25 m / 30 deg within tolerance.
"""

from __future__ import annotations

import math

import numpy as np

from tests.nodes.ros_support import require_ros, spin_until

require_ros()

from rclpy.executors import SingleThreadedExecutor  # noqa: E402
from rclpy.parameter import Parameter  # noqa: E402

from icrl_ros.nodes.agent_node import AgentNode  # noqa: E402
from icrl_ros.nodes.convert import relative_pose  # noqa: E402
from icrl_ros.nodes.sim_bridge_node import SimBridgeNode  # noqa: E402
from tests.nodes.fake_runner import FakeRunner, write_fake_bundle  # noqa: E402
from tests.nodes.probe import Probe  # noqa: E402

ENV_ID = "tests.nodes.fixture_env:icrl_ros_test/TinyImageNav-v0"


def nodes(ctx, tmp_path, bridge: dict, agent: dict, script=None):
    bundle = write_fake_bundle(str(tmp_path / "bundle"), script=script)
    bridge_node = SimBridgeNode(context=ctx, parameter_overrides=[
        Parameter(k, value=v) for k, v in ({"env_id": ENV_ID, "seed": 5} | bridge).items()])
    agent_node = AgentNode(context=ctx, runner_factory=FakeRunner.from_bundle, parameter_overrides=[
        Parameter(k, value=v) for k, v in ({"bundle_path": bundle, "status_rate_hz": 5.0} | agent).items()])
    probe = Probe(ctx)
    ex = SingleThreadedExecutor(context=ctx)
    for n in (bridge_node, agent_node, probe):
        ex.add_node(n)
    return ex, bridge_node, agent_node, probe


def test_lockstep_episodes_memory_carries_then_resets_on_new_trial(ros_context, tmp_path) -> None:
    ex, bridge, agent, probe = nodes(
        ros_context, tmp_path,
        bridge={"episodes_per_trial": 3, "env_kwargs": '{"max_steps": 6}', "republish_period_s": 0.3},
        agent={"action_mode": "discrete"})
    try:
        env = bridge.env.unwrapped
        agent.trigger_configure()
        agent.trigger_activate()
        runner: FakeRunner = agent.runner
        ends = lambda: [e for e in probe.events() if e["event"] == "episode_end"]  # noqa: E731
        assert spin_until(ex, lambda: len(ends()) >= 4, 60), (len(ends()), runner.calls[-3:])
        bridge.params.auto_reset = False  # freeze: the fifth episode would start now

        # three episodes of trial 0: six steps each (the fake policy never stops), memory growing
        goals = [e["goal"] for e in probe.events() if e["event"] == "episode_start"]
        begins = [c[1] for c in runner.calls if c[0] == "begin_episode"]
        assert begins[:4] == goals[:4]
        resets = [i for i, c in enumerate(runner.calls) if c == ("reset_trial",)]
        assert len(resets) == 1, runner.calls  # trial 1 only: the agent missed trial 0's event (volatile)
        acts = [c for c in runner.calls[:resets[0]] if c[0] == "act"]
        assert [(c[1], c[2]) for c in acts] == [(e, s) for e in range(3) for s in range(6)]
        tokens = [info["memory_tokens"] for info in runner.infos]
        assert tokens[:18] == list(range(1, 19))  # memory carried across episode boundaries
        assert tokens[18] == 1  # trial_start (new house) cleared it
        assert [e["trial"] for e in ends()[:4]] == [0, 0, 0, 1] and ends()[2]["steps"] == 6

        # the odometry the runner saw is exactly the env's, step by step (episode starts at 0)
        seen = np.array([m[4:7] for m in runner.memory], np.float32)  # trial 1 only after the reset
        log = [o for (ep, step, o) in env.obs_log][-len(seen) - 1:]
        assert len(seen) >= 6
        np.testing.assert_allclose(seen, np.array(log[: len(seen)]), atol=1e-6)
        assert np.allclose(seen[0], 0)
        assert agent.counters["bad_odometry"] == 0 and agent.counters["runner_errors"] == 0
    finally:
        ex.shutdown()
        for n in (probe, agent, bridge):
            n.destroy_node()


def test_twist_executor_reaches_steps_against_realtime_bridge(ros_context, tmp_path) -> None:
    ex, bridge, agent, probe = nodes(
        ros_context, tmp_path,
        bridge={"mode": "realtime", "realtime_rate_hz": 20.0, "camera_rate_hz": 10.0, "cmd_timeout_s": 0.25,
                "env_kwargs": '{"max_steps": 100}'},
        agent={"action_mode": "twist", "control_rate_hz": 20.0, "settle_s": 0.1, "input_timeout_s": 1.0},
        script=[1, 2, 3, 1, 0])
    env = bridge.env.unwrapped
    poses: list[tuple[int, tuple[float, float, float]]] = []
    try:
        agent.trigger_configure()
        agent.trigger_activate()
        # the env's true pose at the moment the agent publishes each action (before the bridge
        # can react to a stop by resetting the env)
        publish = agent.pub_action.publish

        def record(msg):
            poses.append((msg.data, tuple(float(v) for v in env.pose)))
            publish(msg)
        agent.pub_action.publish = record
        assert spin_until(ex, lambda: len(poses) >= 5, 40), poses
        # each step = the pose change between consecutive actions, in the frame of the first
        for (action, before), (_, after) in zip(poses[:4], poses[1:5]):
            rel = relative_pose(before, after)
            if action == 1:
                assert abs(rel[0] - 0.25) <= 0.02 and abs(rel[1]) <= 0.01, rel
            else:
                sign = 1 if action == 2 else -1
                assert abs(math.degrees(rel[2]) - sign * 30.0) <= 2.0, math.degrees(rel[2])
                assert math.hypot(rel[0], rel[1]) <= 0.01
        # the stop action ends the episode in the bridge
        assert spin_until(ex, lambda: any(e["event"] == "episode_end" for e in probe.events()), 5)
        twists = probe.got["cmd_vel"]
        assert max(abs(t.linear.x) for t in twists) <= 0.3 + 1e-9
        assert max(abs(t.angular.z) for t in twists) <= 0.8 + 1e-9
        assert agent.counters["executor_timeouts"] == 0 and agent.counters["watchdog_trips"] == 0
    finally:
        ex.shutdown()
        for n in (probe, agent, bridge):
            n.destroy_node()
