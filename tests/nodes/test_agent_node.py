"""agent_node over real rclpy / DDS on loopback.

With the real ``PolicyRunner`` and the shipped camera-and-odometry bundle (``bundles/house_memo``,
ONNX Runtime; the default ``house_relic_scan`` also reads a laser scan, fed in test_sim_agent / the demo test): lifecycle transitions (through the standard lifecycle services), a bundle path that
does not exist, every kind of bad input (counted, logged once per throttle period, memory
untouched), and memory saved -> node process killed -> new process -> memory loaded -> the
same next action. The watchdog test keeps the scripted ``FakeRunner``: it needs the robot to
be moving (a forward step) when the odometry stops, which a trained policy does not promise.
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
from icrl_ros.runtime import PolicyRunner  # noqa: E402
from tests.nodes.fake_runner import FakeRunner, write_fake_bundle  # noqa: E402
from tests.nodes.probe import Probe  # noqa: E402
from tests.nodes.ros_support import REPO, require_house_bundle, require_memo_bundle  # noqa: E402


def make_agent(ctx, tmp_path, name: str = "icrl_agent", **params) -> AgentNode:
    """An agent on the shipped Memo house bundle (camera + odometry) with the real runner."""
    values = {"bundle_path": require_memo_bundle(), "memory_path": str(tmp_path / "mem" / "snapshot.npz"),
              "log_throttle_s": 0.5, "status_rate_hz": 10.0} | params
    return AgentNode(name, context=ctx, parameter_overrides=[Parameter(k, value=v) for k, v in values.items()])


def make_fake_agent(ctx, tmp_path, script=None, name: str = "icrl_agent", **params) -> AgentNode:
    """An agent on the scripted FakeRunner (only where a test needs known actions)."""
    bundle = write_fake_bundle(str(tmp_path / "bundle"), script=script)
    values = {"bundle_path": bundle, "log_throttle_s": 0.5, "status_rate_hz": 10.0} | params
    return AgentNode(name, context=ctx, runner_factory=FakeRunner.from_bundle,
                     parameter_overrides=[Parameter(k, value=v) for k, v in values.items()])


def memory_state(runner: PolicyRunner) -> tuple:
    """Everything the runner remembers: memory buffers, counters and episode bookkeeping."""
    m = runner.memory
    return (m.k.clone(), m.v.clone(), m.valid.clone(), m.episode.clone(), m.tokens, m.counters(),
            runner.trial_id, runner.episode, runner.step_in_episode, runner.total_steps, runner.prev_action,
            runner.goal)


def same_memory(a: tuple, b: tuple) -> bool:
    return all(bool((x == y).all()) if hasattr(x, "shape") else x == y for x, y in zip(a, b))


def frames(n: int, seed: int = 0, size: int = 64) -> list[bytes]:
    """Deterministic camera frames (raw rgb8 bytes)."""
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 256, (size, size, 3), dtype=np.uint8).tobytes() for _ in range(n)]


def call(ex, client, request, timeout: float = 5.0):
    assert client.wait_for_service(timeout_sec=timeout), client.srv_name
    future = client.call_async(request)
    assert spin_until(ex, future.done, timeout), f"no answer from {client.srv_name}"
    return future.result()


def call_after_restart(ex, client, request, deadline_s: float = 60.0, per_try_s: float = 5.0):
    """``call`` for a node that replaced a killed one: DDS still lists the dead node's services
    until its lease expires, so a request may reach only the dead server before this client has
    matched the new one. Ask again until someone answers (each try waits ``per_try_s``, far
    longer than the node takes, so a slow answer is not asked for twice)."""
    deadline = time.monotonic() + deadline_s
    while True:
        assert time.monotonic() < deadline, f"the restarted node never answered {client.srv_name}"
        client.wait_for_service(timeout_sec=1)
        future = client.call_async(request)
        if spin_until(ex, future.done, per_try_s):
            return future.result()
        client.remove_pending_request(future)


def change(ex, client, transition_id: int, timeout: float = 5.0) -> bool:
    return call(ex, client, ChangeState.Request(transition=Transition(id=transition_id)), timeout).success


def state_id(ex, client) -> int:
    return call(ex, client, GetState.Request()).current_state.id


def test_lifecycle_transitions_and_missing_bundle(ros_context, tmp_path) -> None:
    ex = SingleThreadedExecutor(context=ros_context)
    probe = Probe(ros_context)
    agent = make_agent(ros_context, tmp_path, bundle_path=str(tmp_path / "no_such_bundle"), action_mode="twist",
                       backend="onnxruntime")
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
        # a directory that is not a bundle: refused with the file and field named, node alive
        (tmp_path / "not_a_bundle").mkdir()
        agent.set_parameters([Parameter("bundle_path", value=str(tmp_path / "not_a_bundle"))])
        assert not change(ex, change_client, Transition.TRANSITION_CONFIGURE)
        assert agent.counters["bundle_errors"] == 2 and agent.runner is None

        # empty = the shipped default bundle (bundles/house_relic_scan of this checkout)
        agent.set_parameters([Parameter("bundle_path", value="")])
        # loading a real bundle (several ONNX Runtime sessions) took over 5 s on a loaded machine
        assert change(ex, change_client, Transition.TRANSITION_CONFIGURE, timeout=60.0)
        runner = agent.runner
        assert isinstance(runner, PolicyRunner) and runner.memory_policy == runner.bundle.manifest.memory.policy
        assert os.path.samefile(runner.bundle.path, require_house_bundle())
        assert runner.greedy is False  # action_selection "": the bundle's (house_relic_scan: sample, seeded)
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
        assert runner.engine is None and agent.runner is None  # runner.close() released the engine
        assert state_id(ex, get_client) == State.PRIMARY_STATE_UNCONFIGURED

        agent.set_parameters([Parameter("threads", value=2)])  # the engine's CPU threads (0: OMP_NUM_THREADS)
        assert change(ex, change_client, Transition.TRANSITION_CONFIGURE, timeout=60.0)
        assert agent.runner is not runner
        session = next(iter(agent.runner.engine.sessions.values()))
        assert session.get_session_options().intra_op_num_threads == 2
        assert change(ex, change_client, Transition.TRANSITION_INACTIVE_SHUTDOWN)
        assert state_id(ex, get_client) == State.PRIMARY_STATE_FINALIZED
        assert agent.runner is None
    finally:
        ex.shutdown()
        agent.destroy_node()
        probe.destroy_node()


def test_bad_input_is_counted_logged_once_and_never_touches_memory(ros_context, tmp_path, capfd) -> None:
    ex = SingleThreadedExecutor(context=ros_context)
    probe = Probe(ros_context)
    agent = make_agent(ros_context, tmp_path, log_throttle_s=30.0, idle_after_stop=False)
    for n in (probe, agent):
        ex.add_node(n)
    try:
        assert agent.trigger_configure() == TransitionCallbackReturn.SUCCESS
        assert agent.trigger_activate() == TransitionCallbackReturn.SUCCESS
        runner: PolicyRunner = agent.runner
        spin_for(ex, 0.3)  # discovery

        probe.pub_goal.publish(String(data="red_box"))  # a goal before any image
        assert spin_until(ex, lambda: agent.counters["goal_before_image"] == 1, 3)
        probe.send_odom(0.0, 0.0, 0.0, stamp=10.0)
        probe.send_image(stamp=10.0, height=48, width=80)  # any size: resized to the bundle's 64x64
        assert spin_until(ex, lambda: len(probe.got["action"]) == 1, 5)
        assert runner.goal == runner.goal_names.index("red_box") and runner.episode == 0 and runner.memory.tokens == 1
        before = memory_state(runner)

        bad = [
            ("bad_image_encoding", lambda i: probe.send_image(11.0 + i, encoding="yuv422", step=40)),
            ("bad_image_size", lambda i: probe.send_image(11.1 + i, height=0, data=b"")),
            ("bad_image_data", lambda i: probe.send_image(11.2 + i, data=bytes(100))),  # truncated
            ("bad_image_step", lambda i: probe.send_image(11.3 + i, step=59)),
            ("bad_odometry", lambda i: probe.send_odom(math.nan, 0.0, 0.0, stamp=11.4 + i)),
            ("bad_odometry", lambda i: probe.send_odom(0.0, math.inf, 0.0, stamp=11.5 + i)),
            ("unknown_goal", lambda i: probe.pub_goal.publish(String(data="spaceship"))),
        ]
        for i in range(2):  # each kind twice: counted twice, logged once (log_throttle_s = 30)
            for key, send in bad:
                n = agent.counters[key]
                send(0.01 * i)
                assert spin_until(ex, lambda: agent.counters[key] == n + 1, 3), key
        assert same_memory(memory_state(runner), before), "bad input changed the memory"
        assert len(probe.got["action"]) == 1 and agent.counters["runner_errors"] == 0

        # valid input again: the same episode and its memory continue
        probe.send_odom(0.25, 0.0, 0.0, stamp=12.0)
        probe.send_image(stamp=12.0)
        assert spin_until(ex, lambda: len(probe.got["action"]) == 2, 5)
        assert runner.memory.tokens == 2 and runner.episode == 0 and runner.step_in_episode == 2

        # an image whose odometry has not arrived waits for it, then acts
        probe.send_image(stamp=13.0)
        spin_for(ex, 0.2)
        assert len(probe.got["action"]) == 2
        probe.send_odom(0.25, 0.1, 0.5, stamp=13.0)
        assert spin_until(ex, lambda: len(probe.got["action"]) == 3, 5)

        # every counter reaches the status topic
        def status_ok() -> bool:
            s = probe.status()
            return s.get("bad_image_encoding") == "2" and s.get("bad_odometry") == "4" and s.get("actions") == "3"
        assert spin_until(ex, status_ok, 3), probe.status()
        s = probe.status()
        for key in ("bad_image_size", "bad_image_data", "bad_image_step", "unknown_goal"):
            assert s[key] == "2", (key, s)
        assert s["goal_before_image"] == "1"
        assert s["memory_tokens"] == "3" and s["episode"] == "0" and float(s["latency_p99_ms"]) > 0
        assert float(s["act_p50_ms"]) > 0 and int(s["memory_bytes"]) == runner.memory.nbytes
    finally:
        ex.shutdown()
        agent.destroy_node()
        probe.destroy_node()
    # one log line per kind although each happened twice (rclpy logs to stderr)
    err = capfd.readouterr().err
    for key in ("bad_image_encoding", "bad_image_size", "bad_image_data", "bad_image_step", "unknown_goal"):
        assert err.count(f"[{key}: 1]") == 1 and f"[{key}: 2]" not in err, (key, err[-3000:])
    assert err.count("[bad_odometry: 1]") == 1 and "[bad_odometry: 2]" not in err


def test_watchdog_stops_on_stale_input_and_resumes(ros_context, tmp_path) -> None:
    ex = SingleThreadedExecutor(context=ros_context)
    probe = Probe(ros_context)
    agent = make_fake_agent(ros_context, tmp_path, script=[1], action_mode="twist", input_timeout_s=0.4)
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
        assert agent.counters["watchdog_trips"] == 1 and agent.loop.stale
        recent = probe.got["cmd_vel"][-5:]
        assert all(c.linear.x == 0.0 and c.angular.z == 0.0 for c in recent)
        assert len(probe.got["action"]) == n_actions
        assert spin_until(ex, lambda: probe.status().get("stale") == "True", 2)

        # odometry returns: acting resumes
        drive(1.5)
        assert not agent.loop.stale and len(probe.got["action"]) > n_actions
        assert any(c.linear.x > 0.05 for c in probe.got["cmd_vel"][-20:])
        assert agent.counters["watchdog_trips"] == 1
    finally:
        ex.shutdown()
        agent.destroy_node()
        probe.destroy_node()


def agent_process(tmp_path, namespace: str, name: str, *params: str) -> subprocess.Popen:
    """``python -m icrl_ros.nodes.agent_node`` (what the console script runs) in its own process."""
    env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""), OMP_NUM_THREADS="1")
    args = [f"bundle_path:={require_memo_bundle()}", f"memory_path:={tmp_path / 'mem' / 'snapshot.npz'}",
            "status_rate_hz:=20.0", "input_timeout_s:=60.0", "sample_seed:=5", "idle_after_stop:=false", *params]
    log = open(tmp_path / f"{name}.log", "wb")
    cmd = [sys.executable, "-m", "icrl_ros.nodes.agent_node", "--ros-args", "-r", f"__ns:={namespace}"]
    for p in args:
        cmd += ["-p", p]
    return subprocess.Popen(cmd, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)


def test_memory_saved_process_killed_restarted_loaded_same_next_action(ros_context, tmp_path) -> None:
    """Save after 70 steps (a Memo summary included), SIGKILL the node, start a new process,
    load: its next action is the one the killed node took. Both equal a reference runner's."""
    ns = "/restart"
    ex = SingleThreadedExecutor(context=ros_context)
    probe = Probe(ros_context, namespace=ns)
    ex.add_node(probe)
    save = probe.create_client(Trigger, f"{ns}/icrl_agent/save_memory")
    load = probe.create_client(Trigger, f"{ns}/icrl_agent/load_memory")
    reset = probe.create_client(Trigger, f"{ns}/icrl_agent/reset_memory")
    images = frames(72, seed=1)
    poses = [(0.1 * k, 0.02 * k, 0.05 * k) for k in range(72)]

    def step(k: int, stamp: float | None = None) -> int:
        n = len(probe.got["action"])
        stamp = 1.0 + k if stamp is None else stamp
        probe.send_odom(*poses[k], stamp=stamp)
        probe.send_image(stamp=stamp, height=64, width=64, data=images[k])
        assert spin_until(ex, lambda: len(probe.got["action"]) == n + 1, 10), f"no action for step {k}"
        return probe.got["action"][-1].data

    first = agent_process(tmp_path, ns, "first", "autostart:=true")
    second = None
    try:
        assert spin_until(ex, lambda: probe.status().get("state") == "active", 60), "first node never became active"
        probe.pub_goal.publish(String(data="blue_box"))
        actions = [step(k) for k in range(70)]
        assert call(ex, save, Trigger.Request(), timeout=10).success
        assert os.path.exists(tmp_path / "mem" / "snapshot.npz")
        assert os.path.exists(str(tmp_path / "mem" / "snapshot.npz") + ".node.json")
        expected = step(70)  # what the original node does next
        # the reference: a PolicyRunner with the same seed fed the same 71 inputs
        ref = PolicyRunner.from_bundle(require_memo_bundle())
        ref.greedy = False
        ref.generator.manual_seed(5)
        ref.begin_episode("blue_box")
        ref_actions = []
        for k in range(71):
            obs = {"rgb": np.frombuffer(images[k], np.uint8).reshape(64, 64, 3).copy(),
                   "odom": np.array([poses[k][0], poses[k][1], poses[k][2]], np.float32)}
            action, info = ref.act(obs)
            ref_actions.append(action)
        # the node's memory holds what the reference's holds after the same 71 steps (ReLIC: 71
        # tokens; Memo: its summaries + the open segment)
        assert spin_until(ex, lambda: probe.status().get("memory_tokens") == str(info["memory_tokens"]), 3)
        expected_value = float(probe.status()["value"])  # the critic's estimate: sensitive to every memory bit
        first.kill()  # SIGKILL: no clean-up, no chance to save anything more
        first.wait(timeout=10)
        assert actions + [expected] == ref_actions
        assert abs(info["value"] - expected_value) < 1e-5
        # (the shipped policy nearly always samples stop, so actions alone would hardly tell a
        # lost memory; its value does: without the 70 steps of memory it differs)
        fresh = PolicyRunner.from_bundle(require_memo_bundle())
        fresh.begin_episode("blue_box")
        fresh.step_in_episode, fresh.prev_action = 70, ref_actions[69]
        assert abs(fresh.act(obs)[1]["value"] - expected_value) > 1e-3

        # a new process: configure, load, activate; the latched goal continues the restored episode
        probe.got["agent_status"].clear()
        second = agent_process(tmp_path, ns, "second")
        change_client = probe.create_client(ChangeState, f"{ns}/icrl_agent/change_state")
        get_client = probe.create_client(GetState, f"{ns}/icrl_agent/get_state")
        state = call_after_restart(ex, get_client, GetState.Request(), per_try_s=2).current_state.id
        assert state == State.PRIMARY_STATE_UNCONFIGURED
        assert change(ex, change_client, Transition.TRANSITION_CONFIGURE, timeout=60)  # loads the bundle
        # `load` was made for the first node: it may not have matched the second one yet
        assert call_after_restart(ex, load, Trigger.Request()).success
        assert change(ex, change_client, Transition.TRANSITION_ACTIVATE)
        spin_for(ex, 0.5)  # the latched goal arrives: no new episode
        assert step(70) == expected
        assert spin_until(ex, lambda: probe.status().get("actions") == "1", 3)
        s = probe.status()
        tokens_71 = info["memory_tokens"]
        assert (s["memory_tokens"], s["episode"], s["step"], s["memory_loads"]) == (str(tokens_71), "0", "70", "1"), s
        assert abs(float(s["value"]) - expected_value) < 1e-5  # the restored memory, bit for bit in effect

        # a corrupt snapshot is refused and the memory stays as it was
        (tmp_path / "mem" / "snapshot.npz").write_bytes(b"not a snapshot")
        answer = call(ex, load, Trigger.Request(), timeout=10)
        assert not answer.success and "snapshot.npz" in answer.message
        assert step(71) == ref.act({"rgb": np.frombuffer(images[71], np.uint8).reshape(64, 64, 3).copy(),
                                    "odom": np.array(poses[71], np.float32)})[0]
        assert spin_until(ex, lambda: probe.status().get("memory_tokens") == str(ref.memory.tokens), 3)
        assert ref.memory.tokens > tokens_71
        assert probe.status()["memory_errors"] == "1"

        # reset: a new trial; the same goal starts its episode 0 at the next image
        assert call(ex, reset, Trigger.Request(), timeout=10).success
        step(0, stamp=100.0)
        assert spin_until(ex, lambda: probe.status().get("memory_tokens") == "1", 3)
        s = probe.status()
        assert (s["trial"], s["episode"], s["memory_resets"]) == ("1", "0", "1"), s

        second.send_signal(signal.SIGINT)
        assert second.wait(timeout=20) == 0, (tmp_path / "second.log").read_text()[-2000:]
    finally:
        for proc in (first, second):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait(timeout=10)
        ex.shutdown()
        probe.destroy_node()


def test_params_files_load_and_bad_values_refuse_configure(ros_context, tmp_path) -> None:
    for name in ("agent.yaml", "fetch.yaml"):
        path = os.path.join(REPO, "config", name)
        node = AgentNode(f"agent_{name[:-5]}", context=ros_context, cli_args=["--ros-args", "--params-file", path])
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
        # the answer waits on the fresh process's first import of the runtime (over 5 s once in a full run)
        assert not change(ex, change_client, Transition.TRANSITION_CONFIGURE, timeout=60.0)
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


def test_pose_frame_other_than_the_bundles_is_refused_at_configure(ros_context, tmp_path) -> None:
    """The shipped house bundle was trained with house-frame odometry (manifest): an agent told
    its odometry is episode-framed refuses to configure and says what to set; empty or the
    bundle's own frame configures."""
    import yaml

    trained = yaml.safe_load(open(os.path.join(require_memo_bundle(), "manifest.yaml")))["observation"]["pose_frame"]
    other = "episode" if trained == "house" else "house"
    for value, ok in (("", True), (trained, True), (other, False)):
        agent = make_agent(ros_context, tmp_path, name=f"pose_{value or 'default'}", pose_frame=value)
        try:
            got = agent.trigger_configure()
            assert (got == TransitionCallbackReturn.SUCCESS) == ok, (value, agent.last_error)
            if ok:
                assert agent.pose_frame == trained
            else:
                assert "pose_frame" in agent.last_error and trained in agent.last_error
        finally:
            agent.destroy_node()


def test_configure_log_says_how_actions_are_chosen_and_nan_is_refused_with_what_is_allowed(
        ros_context, tmp_path, capfd) -> None:
    import yaml

    manifest = yaml.safe_load(open(os.path.join(require_memo_bundle(), "manifest.yaml")))
    selection = manifest["action"]["selection"]
    agent = make_agent(ros_context, tmp_path)  # action_selection empty: the bundle's
    try:
        assert agent.trigger_configure() == TransitionCallbackReturn.SUCCESS
        line = next(ln for ln in capfd.readouterr().err.splitlines() if "configured: bundle" in ln)
        assert ",  actions" not in line and line.endswith("; the bundle's)"), line
        assert ("actions greedy (argmax" in line) == (selection == "greedy"), line
        result = agent.set_parameters([Parameter("input_timeout_s", value=float("nan"))])[0]
        assert not result.successful
        assert result.reason == "input_timeout_s: nan is not allowed; it takes a finite number >= 0.01 (not nan or inf)"
        assert agent.trigger_cleanup() == TransitionCallbackReturn.SUCCESS
        assert agent.set_parameters([Parameter("action_selection", value="greedy")])[0].successful
        assert agent.trigger_configure() == TransitionCallbackReturn.SUCCESS
        line = next(ln for ln in capfd.readouterr().err.splitlines() if "configured: bundle" in ln)
        assert line.endswith("actions greedy (argmax; action_selection / sample_temperature)"), line
    finally:
        agent.destroy_node()
