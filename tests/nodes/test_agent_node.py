"""agent_node over real rclpy / DDS on loopback, driving the FakeRunner test double.

Lifecycle transitions (through the standard lifecycle services), every kind of bad input,
the watchdog, the memory services and a kill / restart / load round trip.
"""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from tests.nodes.ros_support import require_ros, spin_for, spin_until

require_ros()

from geometry_msgs.msg import Twist  # noqa: E402
from lifecycle_msgs.msg import State, Transition  # noqa: E402
from lifecycle_msgs.srv import ChangeState, GetState  # noqa: E402
from rclpy.executors import SingleThreadedExecutor  # noqa: E402
from rclpy.lifecycle import TransitionCallbackReturn  # noqa: E402
from rclpy.parameter import Parameter  # noqa: E402
from std_msgs.msg import String  # noqa: E402
from std_srvs.srv import Trigger  # noqa: E402

from icrl_ros.nodes.agent_node import AgentNode  # noqa: E402
from tests.nodes.fake_runner import FakeRunner, write_fake_bundle  # noqa: E402
from tests.nodes.probe import Probe  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def make_agent(ctx, tmp_path, script=None, name: str = "icrl_agent", **params) -> AgentNode:
    bundle = write_fake_bundle(str(tmp_path / "bundle"), script=script)
    values = {"bundle_path": bundle, "memory_path": str(tmp_path / "mem" / "snapshot.json"),
              "log_throttle_s": 0.5, "status_rate_hz": 10.0} | params
    return AgentNode(name, context=ctx, runner_factory=FakeRunner.from_bundle,
                     parameter_overrides=[Parameter(k, value=v) for k, v in values.items()])


def call(ex, client, request, timeout: float = 5.0):
    assert client.wait_for_service(timeout_sec=timeout), client.srv_name
    future = client.call_async(request)
    assert spin_until(ex, future.done, timeout), f"no answer from {client.srv_name}"
    return future.result()


def change(ex, client, transition_id: int) -> bool:
    return call(ex, client, ChangeState.Request(transition=Transition(id=transition_id))).success


def state_id(ex, client) -> int:
    return call(ex, client, GetState.Request()).current_state.id


def test_lifecycle_transitions_and_missing_bundle(ros_context, tmp_path) -> None:
    ex = SingleThreadedExecutor(context=ros_context)
    probe = Probe(ros_context)
    agent = make_agent(ros_context, tmp_path, bundle_path=str(tmp_path / "no_such_bundle"), action_mode="twist")
    for n in (probe, agent):
        ex.add_node(n)
    change_client = probe.create_client(ChangeState, "/icrl_agent/change_state")
    get_client = probe.create_client(GetState, "/icrl_agent/get_state")
    try:
        assert state_id(ex, get_client) == State.PRIMARY_STATE_UNCONFIGURED
        # a bundle path that does not exist: configure fails, the node stays unconfigured and alive
        assert not change(ex, change_client, Transition.TRANSITION_CONFIGURE)
        assert agent.counters["bundle_errors"] == 1 and agent.runner is None
        assert state_id(ex, get_client) == State.PRIMARY_STATE_UNCONFIGURED
        agent.set_parameters([Parameter("bundle_path", value="")])
        assert not change(ex, change_client, Transition.TRANSITION_CONFIGURE)
        assert agent.counters["bundle_errors"] == 2

        agent.set_parameters([Parameter("bundle_path", value=str(tmp_path / "bundle"))])
        assert change(ex, change_client, Transition.TRANSITION_CONFIGURE)
        runner = agent.runner
        assert isinstance(runner, FakeRunner)
        assert runner.kwargs == {"backend": "onnxruntime", "device": "cpu", "memory": None, "memory_budget_bytes": None}
        assert state_id(ex, get_client) == State.PRIMARY_STATE_INACTIVE
        assert change(ex, change_client, Transition.TRANSITION_ACTIVATE)
        assert state_id(ex, get_client) == State.PRIMARY_STATE_ACTIVE and agent.active
        assert spin_until(ex, lambda: probe.got["cmd_vel"], 3)  # active twist mode republishes (zero when idle)

        n_cmd = len(probe.got["cmd_vel"])
        assert change(ex, change_client, Transition.TRANSITION_DEACTIVATE)
        assert spin_until(ex, lambda: len(probe.got["cmd_vel"]) > n_cmd, 3)
        last = probe.got["cmd_vel"][-1]
        assert (last.linear.x, last.angular.z) == (0.0, 0.0)
        spin_for(ex, 0.3)
        n_cmd = len(probe.got["cmd_vel"])
        spin_for(ex, 0.3)
        assert len(probe.got["cmd_vel"]) == n_cmd  # inactive: silent
        assert spin_until(ex, lambda: probe.status().get("state") == "inactive", 3)

        assert change(ex, change_client, Transition.TRANSITION_ACTIVATE)
        assert change(ex, change_client, Transition.TRANSITION_DEACTIVATE)
        assert change(ex, change_client, Transition.TRANSITION_CLEANUP)
        assert runner.closed and agent.runner is None
        assert state_id(ex, get_client) == State.PRIMARY_STATE_UNCONFIGURED

        assert change(ex, change_client, Transition.TRANSITION_CONFIGURE)
        assert agent.runner is not runner
        assert change(ex, change_client, Transition.TRANSITION_INACTIVE_SHUTDOWN)
        assert state_id(ex, get_client) == State.PRIMARY_STATE_FINALIZED
        assert agent.runner is None
    finally:
        ex.shutdown()
        agent.destroy_node()
        probe.destroy_node()


def test_bad_input_is_counted_and_never_touches_memory(ros_context, tmp_path) -> None:
    ex = SingleThreadedExecutor(context=ros_context)
    probe = Probe(ros_context)
    agent = make_agent(ros_context, tmp_path)
    for n in (probe, agent):
        ex.add_node(n)
    try:
        assert agent.trigger_configure() == TransitionCallbackReturn.SUCCESS
        assert agent.trigger_activate() == TransitionCallbackReturn.SUCCESS
        runner: FakeRunner = agent.runner
        spin_for(ex, 0.3)  # discovery

        probe.pub_goal.publish(String(data="chair"))  # before any image
        assert spin_until(ex, lambda: agent.counters["goal_before_image"] == 1, 3)
        probe.send_odom(0.0, 0.0, 0.0, stamp=10.0)
        probe.send_image(stamp=10.0)
        assert spin_until(ex, lambda: len(probe.got["action"]) == 1, 3)
        assert runner.calls[:2] == [("begin_episode", "chair"), ("act", 0, 0)]
        memory = [list(t) for t in runner.memory]

        bad = [
            ("bad_image_encoding", lambda: probe.send_image(11.0, encoding="yuv422", step=40)),
            ("bad_image_size", lambda: probe.send_image(11.1, height=0, data=b"")),
            ("bad_image_data", lambda: probe.send_image(11.2, data=bytes(100))),
            ("bad_image_step", lambda: probe.send_image(11.3, step=59)),
            ("bad_odometry", lambda: probe.send_odom(math.nan, 0.0, 0.0, stamp=11.4)),
            ("bad_odometry", lambda: probe.send_odom(0.0, math.inf, 0.0, stamp=11.5)),
            ("unknown_goal", lambda: probe.pub_goal.publish(String(data="spaceship"))),
        ]
        for key, send in bad:
            before = agent.counters[key]
            send()
            assert spin_until(ex, lambda: agent.counters[key] == before + 1, 3), key
        assert runner.memory == memory and runner.goal == "chair" and len(probe.got["action"]) == 1

        # valid input again: the episode and its memory continue
        probe.send_odom(0.25, 0.0, 0.0, stamp=12.0)
        probe.send_image(stamp=12.0)
        assert spin_until(ex, lambda: len(probe.got["action"]) == 2, 3)
        assert len(runner.memory) == 2 and runner.memory[0] == memory[0]
        np.testing.assert_allclose(runner.memory[1][4:], [0.25, 0, 0], atol=1e-6)

        # an image whose odometry has not arrived waits for it, then acts
        probe.send_image(stamp=13.0)
        spin_for(ex, 0.2)
        assert len(probe.got["action"]) == 2
        probe.send_odom(0.25, 0.1, 0.5, stamp=13.0)
        assert spin_until(ex, lambda: len(probe.got["action"]) == 3, 3)

        # every counter reaches the status topic
        def status_ok() -> bool:
            s = probe.status()
            return s.get("bad_image_encoding") == "1" and s.get("bad_odometry") == "2" and s.get("actions") == "3"
        assert spin_until(ex, status_ok, 3), probe.status()
        s = probe.status()
        for key in ("bad_image_size", "bad_image_data", "bad_image_step", "unknown_goal", "goal_before_image"):
            assert s[key] == "1", (key, s)
        assert s["memory_tokens"] == "3" and s["episode"] == "0" and float(s["latency_p99_ms"]) > 0
    finally:
        ex.shutdown()
        agent.destroy_node()
        probe.destroy_node()


def test_watchdog_stops_on_stale_input_and_resumes(ros_context, tmp_path) -> None:
    ex = SingleThreadedExecutor(context=ros_context)
    probe = Probe(ros_context)
    agent = make_agent(ros_context, tmp_path, script=[1], action_mode="twist", input_timeout_s=0.4)
    for n in (probe, agent):
        ex.add_node(n)
    pose = [0.0, 0.0, 0.0]

    def drive(seconds: float, odom: bool = True) -> None:
        """A unicycle base: integrates the last cmd_vel, publishes odometry (and a camera) at 20 Hz."""
        t_end = time.monotonic() + seconds
        while time.monotonic() < t_end:
            cmd = probe.got["cmd_vel"][-1] if probe.got["cmd_vel"] else Twist()
            pose[0] += cmd.linear.x * 0.05 * math.cos(pose[2])
            pose[1] += cmd.linear.x * 0.05 * math.sin(pose[2])
            pose[2] += cmd.angular.z * 0.05
            stamp = time.time()
            if odom:
                probe.send_odom(*pose, stamp=stamp)
            probe.send_image(stamp=stamp)
            spin_for(ex, 0.05)

    try:
        agent.trigger_configure()
        agent.trigger_activate()
        spin_for(ex, 0.3)
        probe.pub_goal.publish(String(data="sofa"))
        t0 = time.monotonic()
        drive(1.5)
        n_cmd = len(probe.got["cmd_vel"])
        assert n_cmd / (time.monotonic() - t0) >= 10.0  # republished at >= 10 Hz
        assert any(c.linear.x > 0.05 for c in probe.got["cmd_vel"])
        assert agent.counters["watchdog_trips"] == 0 and len(probe.got["action"]) >= 1

        # odometry stops: zero velocity within the timeout plus a tick, no action while stale
        drive(0.3, odom=False)
        n_actions = len(probe.got["action"])
        drive(0.6, odom=False)
        assert agent.counters["watchdog_trips"] == 1 and agent._stale
        recent = probe.got["cmd_vel"][-5:]
        assert all(c.linear.x == 0.0 and c.angular.z == 0.0 for c in recent)
        assert len(probe.got["action"]) == n_actions
        assert spin_until(ex, lambda: probe.status().get("stale") == "True", 2)

        # odometry returns: acting resumes
        drive(1.5)
        assert not agent._stale and len(probe.got["action"]) > n_actions
        assert any(c.linear.x > 0.05 for c in probe.got["cmd_vel"][-20:])
        assert agent.counters["watchdog_trips"] == 1
    finally:
        ex.shutdown()
        agent.destroy_node()
        probe.destroy_node()


def test_memory_services_and_restart(ros_context, tmp_path) -> None:
    ex = SingleThreadedExecutor(context=ros_context)
    probe = Probe(ros_context)
    agent = make_agent(ros_context, tmp_path)
    for n in (probe, agent):
        ex.add_node(n)
    save = probe.create_client(Trigger, "/icrl_agent/save_memory")
    load = probe.create_client(Trigger, "/icrl_agent/load_memory")
    reset = probe.create_client(Trigger, "/icrl_agent/reset_memory")

    def step(stamp: float, x: float) -> int:
        n = len(probe.got["action"])
        probe.send_odom(x, 0.0, 0.0, stamp=stamp)
        probe.send_image(stamp=stamp, value=int(stamp * 10))
        assert spin_until(ex, lambda: len(probe.got["action"]) == n + 1, 3)
        return probe.got["action"][-1].data

    try:
        agent.trigger_configure()
        agent.trigger_activate()
        spin_for(ex, 0.3)
        probe.pub_goal.publish(String(data="table"))
        step(1.0, 0.0)
        step(2.0, 0.1)
        assert call(ex, save, Trigger.Request()).success
        snapshot = str(tmp_path / "mem" / "snapshot.json")
        assert os.path.exists(snapshot) and os.path.exists(snapshot + ".node.json")
        expected = step(3.0, 0.2)  # what the original node does next
        runner = agent.runner
        saved_memory = [list(t) for t in runner.memory]

        # a corrupt snapshot: refused, memory unchanged
        agent.set_parameters([Parameter("memory_path", value=str(tmp_path / "garbage.json"))])
        (tmp_path / "garbage.json").write_text("{not json")
        answer = call(ex, load, Trigger.Request())
        assert not answer.success and "garbage.json" in answer.message
        assert runner.memory == saved_memory and agent.counters["memory_errors"] == 1
        agent.set_parameters([Parameter("memory_path", value=snapshot)])

        # kill the node, start a fresh one, load: the next action equals the original's
        ex.remove_node(agent)
        agent.destroy_node()
        agent = make_agent(ros_context, tmp_path)
        ex.add_node(agent)
        agent.trigger_configure()
        assert call(ex, load, Trigger.Request()).success
        agent.trigger_activate()
        spin_for(ex, 0.3)
        assert step(3.0, 0.2) == expected
        assert agent.runner.memory == saved_memory and agent.runner.episode == 0

        # reset: a new trial; the same goal starts its episode 0 at the next image
        assert call(ex, reset, Trigger.Request()).success
        assert agent.runner.memory == [] and agent.counters["memory_resets"] == 1
        step(4.0, 0.0)
        assert len(agent.runner.memory) == 1 and agent.runner.trial == 1 and agent.runner.goal == "table"
    finally:
        ex.shutdown()
        agent.destroy_node()
        probe.destroy_node()


def test_params_files_load_and_bad_values_refuse_configure(ros_context, tmp_path) -> None:
    for name in ("agent.yaml", "fetch.yaml"):
        path = os.path.join(REPO, "config", name)
        node = AgentNode(f"agent_{name[:-5]}", context=ros_context, runner_factory=FakeRunner.from_bundle,
                         cli_args=["--ros-args", "--params-file", path])
        try:
            from icrl_ros.nodes.params import AgentParams
            from icrl_ros.nodes.ros_params import read_params

            p = read_params(node, AgentParams)
            if name == "fetch.yaml":
                assert p.camera_topic == "/head_camera/rgb/image_raw" and p.cmd_vel_topic == "/cmd_vel"
                assert p.action_mode == "twist" and p.control_rate_hz >= 10.0
        finally:
            node.destroy_node()
    agent = make_agent(ros_context, tmp_path)
    try:
        result = agent.set_parameters([Parameter("backend", value="tflite")])[0]
        assert not result.successful and "onnxruntime" in result.reason
        result = agent.set_parameters([Parameter("control_rate_hz", value=5.0)])[0]
        assert not result.successful  # the Fetch base needs >= 10 Hz
    finally:
        agent.destroy_node()


def test_console_entry_point_survives_a_missing_bundle(ros_context) -> None:
    """``python -m icrl_ros.nodes.agent_node`` in its own process: bad bundle -> configure fails, node lives."""
    ex = SingleThreadedExecutor(context=ros_context)
    probe = Probe(ros_context, namespace="/proc2", subscribe=False)
    ex.add_node(probe)
    env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.Popen(
        [sys.executable, "-m", "icrl_ros.nodes.agent_node", "--ros-args", "-r", "__ns:=/proc2",
         "-p", "bundle_path:=/nonexistent/bundle"],
        cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        change_client = probe.create_client(ChangeState, "/proc2/icrl_agent/change_state")
        get_client = probe.create_client(GetState, "/proc2/icrl_agent/get_state")
        assert change_client.wait_for_service(timeout_sec=30)
        assert not change(ex, change_client, Transition.TRANSITION_CONFIGURE)
        assert state_id(ex, get_client) == State.PRIMARY_STATE_UNCONFIGURED
        assert proc.poll() is None
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=15)
        text = out.decode(errors="replace")
        assert proc.returncode == 0, text[-2000:]
        assert "does not exist" in text
    finally:
        if proc.poll() is None:
            proc.kill()
        ex.shutdown()
        probe.destroy_node()
