"""The agent's decisions without DDS: :class:`AgentLoop` on a fake clock, a fake runner and
recording outputs (the node tests check the same rules through real topics)."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import numpy as np
import pytest

from icrl_ros.nodes.action_executor import ActionExecutor, ActionKind
from icrl_ros.nodes.agent_loop import AgentIO, AgentLoop, executor_config
from icrl_ros.nodes.convert import InputError
from icrl_ros.nodes.params import AgentParams
from tests.nodes.fake_runner import DEFAULT_MANIFEST, FakeRunner

H, W = DEFAULT_MANIFEST["observation"]["image_size"]
NAMES = DEFAULT_MANIFEST["action"]["names"]


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


class Host:
    """Records what the loop publishes and logs."""

    def __init__(self) -> None:
        self.actions: list[int] = []
        self.twists: list[tuple[float, float]] = []
        self.logs: list[tuple[str, str]] = []
        self.statuses = 0
        self.rearmed: list[str] = []

    def io(self) -> AgentIO:
        def twist(v: float, w: float) -> bool:
            self.twists.append((v, w))
            return True

        def convert(frame, size):
            if frame.shape != (*size, 3):
                raise InputError(f"size {frame.shape} is not {size}", "size")
            return frame

        return AgentIO(action=self.actions.append, log=lambda level, msg: self.logs.append((level, msg)),
                       convert=convert, twist=twist, status=self._status, rearm=self.rearmed.append)

    def _status(self) -> None:
        self.statuses += 1


def check(frame) -> None:
    if frame.dtype != np.uint8:
        raise InputError(f"dtype {frame.dtype}", "encoding")


def frame(value: int = 7) -> np.ndarray:
    return np.full((H, W, 3), value, np.uint8)


def make_loop(twist: bool = False, script: list[int] | None = None, **params) -> tuple[AgentLoop, Host, Clock,
                                                                                     FakeRunner]:
    clock, host = Clock(), Host()
    p = AgentParams(**params)
    loop = AgentLoop(p, host.io(), clock)
    manifest = json.loads(json.dumps(DEFAULT_MANIFEST))
    manifest["fake"]["script"] = script
    runner = FakeRunner(manifest, {})
    loop.attach(runner, pose_frame="episode", image_size=(H, W), goal_names=manifest["observation"]["goal_names"],
                kinds=[ActionKind.from_name(a) for a in NAMES], executor=ActionExecutor(executor_config(p)),
                twist=twist)
    loop.activate()
    return loop, host, clock, runner


def step(loop: AgentLoop, clock: Clock, stamp: float, pose=(0.0, 0.0, 0.0), image=None, dt: float = 0.05) -> None:
    clock.t += dt
    loop.odometry(pose, stamp)
    loop.image(frame() if image is None else image, stamp, check=check)


def test_the_loop_module_imports_no_ros() -> None:
    code = "import sys, icrl_ros.nodes.agent_loop; sys.exit('rclpy' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


def test_goal_starts_an_episode_at_the_next_frame_with_its_odometry_as_origin() -> None:
    loop, host, clock, runner = make_loop()
    step(loop, clock, 1.0)
    assert host.actions == [] and loop.counters["image_without_goal"] == 1  # no goal yet: nothing acts
    loop.goal_message(" chair ")
    step(loop, clock, 2.0, pose=(1.0, 2.0, math.pi / 2))
    step(loop, clock, 3.0, pose=(1.0, 3.0, math.pi / 2))  # 1 m forward in the episode frame
    assert len(host.actions) == 2 and runner.calls[0] == ("begin_episode", "chair")
    assert runner.memory[-1][4:] == pytest.approx([1.0, 0.0, 0.0], abs=1e-6)
    loop.goal_message("sofa")  # a new episode, memory kept: the origin is the new start
    step(loop, clock, 4.0, pose=(5.0, 5.0, 0.0))
    assert runner.memory[-1][4:] == pytest.approx([0.0, 0.0, 0.0]) and len(runner.memory) == 3
    assert loop.last_episode["last_episode_steps"] == 2 and loop.episodes_done == 1 and host.statuses == 1


def test_a_frame_after_the_bridge_ended_the_episode_waits_for_the_next_goal() -> None:
    loop, host, clock, runner = make_loop()
    loop.goal_message("chair")
    step(loop, clock, 1.0)
    step(loop, clock, 2.0)
    loop.event(json.dumps({"event": "episode_end", "episode": 0, "steps": 2, "return": 1.0}))
    # the next episode's first frame comes before its goal: it must not join the ended episode
    step(loop, clock, 3.0, image=frame(9))
    assert len(host.actions) == 2 and loop.counters["image_after_episode_end"] == 1
    loop.goal_message("sofa")  # the held frame acts at once, in the new episode
    assert len(host.actions) == 3 and runner.calls[-2:] == [("begin_episode", "sofa"), ("act", 1, 0)]
    assert runner.memory[-1][:4] == [1, 0, loop.goal_names.index("sofa"), 9.0]
    step(loop, clock, 3.5)
    # an episode_end that arrives after the next goal already began an episode does not hold it
    loop.goal_message("chair")
    step(loop, clock, 4.0)
    loop.event(json.dumps({"event": "episode_end", "episode": 1, "steps": 2, "return": 0.0}))
    step(loop, clock, 5.0)
    assert len(host.actions) == 6 and runner.calls[-1] == ("act", 2, 1)
    assert loop.counters["image_after_episode_end"] == 1
    # a 1-step episode whose event comes after the next goal's first frame: by step count it would end the new
    # episode (and the frames would wait for a goal that already came); the goal it names says it is the old one's
    loop.goal_message("table")
    step(loop, clock, 6.0)  # episode 3, its only step (the bridge ends it)
    loop.goal_message("sofa")
    step(loop, clock, 7.0)  # episode 4, step 0: 0 + 1 steps, as the late event counts
    loop.event(json.dumps({"event": "episode_end", "episode": 3, "steps": 1, "return": 0.0, "goal": "table"}))
    step(loop, clock, 8.0)
    assert len(host.actions) == 9 and runner.calls[-1] == ("act", 4, 1)
    assert loop.counters["image_after_episode_end"] == 1


def test_house_frame_keeps_the_trials_first_origin_until_the_memory_is_reset() -> None:
    loop, host, clock, runner = make_loop()
    loop.pose_frame = "house"
    loop.goal_message("chair")
    step(loop, clock, 1.0, pose=(1.0, 0.0, 0.0))
    loop.goal_message("sofa")
    step(loop, clock, 2.0, pose=(3.0, 0.0, 0.0))
    assert runner.memory[-1][4:] == pytest.approx([2.0, 0.0, 0.0])  # from the trial's first start
    loop.event(json.dumps({"event": "trial_start", "trial": 1}))
    loop.event(json.dumps({"event": "trial_start", "trial": 1}))  # announced twice: one reset
    assert loop.counters["memory_resets"] == 1 and runner.memory == [] and runner.trial == 1
    step(loop, clock, 3.0, pose=(3.0, 0.0, 0.0))  # the same goal starts episode 0 of the new trial
    assert runner.goal == "sofa" and runner.memory[-1][4:] == pytest.approx([0.0, 0.0, 0.0])


def test_a_new_bridge_run_is_a_new_trial_even_with_the_same_index_or_a_missed_trial_start(tmp_path) -> None:
    loop, host, clock, runner = make_loop()
    loop.goal_message("chair")
    step(loop, clock, 0.5)  # the agent acts before the bridge's (latched) trial_start reaches it
    loop.event(json.dumps({"event": "trial_start", "trial": 0, "run": "a"}))  # the trial it is in: adopted, kept
    assert loop.counters["memory_resets"] == 0 and len(runner.memory) == 1
    step(loop, clock, 1.0)
    loop.event(json.dumps({"event": "trial_start", "trial": 0, "run": "a"}))  # the same run's trial again
    assert loop.counters["memory_resets"] == 0 and len(runner.memory) == 2
    # the bridge restarted (another house): trial 0 again, of another run
    loop.event(json.dumps({"event": "trial_start", "trial": 0, "run": "b"}))
    assert loop.counters["memory_resets"] == 1 and runner.memory == []
    step(loop, clock, 2.0)
    # restarted again, and its trial_start was lost: its first other event starts the new trial
    loop.event(json.dumps({"event": "episode_start", "trial": 0, "episode": 0, "goal": "chair", "run": "c"}))
    assert loop.counters["memory_resets"] == 2 and runner.memory == []
    step(loop, clock, 3.0)
    loop.event(json.dumps({"event": "trial_start", "trial": 0, "run": "c"}))  # late: the trial already begun
    assert loop.counters["memory_resets"] == 2 and len(runner.memory) == 1
    step(loop, clock, 4.0)
    # a saved memory knows its bridge trial: that trial's latched trial_start after the load keeps it
    assert loop.save_memory(str(tmp_path / "snap"))[0]
    loop.event(json.dumps({"event": "trial_start", "trial": 1, "run": "c"}))
    assert loop.load_memory(str(tmp_path / "snap"))[0] and len(runner.memory) == 2
    loop.event(json.dumps({"event": "trial_start", "trial": 0, "run": "c"}))
    assert loop.counters["memory_resets"] == 3 and len(runner.memory) == 2
    assert any("a new bridge run 'b'" in m for _, m in host.logs), host.logs


def test_bad_input_is_counted_logged_once_per_interval_and_never_reaches_memory() -> None:
    loop, host, clock, runner = make_loop(log_throttle_s=2.0)
    loop.goal_message("chair")
    step(loop, clock, 1.0)
    memory = list(runner.memory)
    for i in range(5):
        step(loop, clock, 2.0 + i, image=frame().astype(np.float32))  # fails check: encoding
        loop.goal_message("unicorn" * 100)
        loop.event("not json")
    assert (loop.counters["bad_image_encoding"], loop.counters["unknown_goal"], loop.counters["bad_events"]) == (5, 5, 5)
    step(loop, clock, 8.0, image=np.zeros((3, 3, 3), np.uint8))  # passes check, fails conversion: size
    assert loop.counters["bad_image_size"] == 1 and runner.memory == memory and loop.goal == "chair"
    lines = [m for _, m in host.logs]
    assert sum("bad_image_encoding" in m for m in lines) == 1  # 5 events 0.05 s apart: one line
    assert max(len(m) for m in lines) < 400  # the 700-character goal is clipped
    clock.t += 2.5
    loop.event("still not json")
    assert sum("bad_events" in m for _, m in host.logs) == 2  # the interval passed: logged again


def test_back_dated_frames_are_dropped_and_a_time_jump_is_followed() -> None:
    loop, host, clock, runner = make_loop()
    loop.goal_message("chair")
    step(loop, clock, 10.0)
    step(loop, clock, 10.0)  # a republished frame: skipped silently
    step(loop, clock, 9.9)  # back-dated
    assert len(host.actions) == 1 and loop.counters["back_dated_images"] == 1
    step(loop, clock, 1.0)  # 9 s back: the bridge restarted
    step(loop, clock, 1.1)
    assert loop.counters["time_jumps"] == 1 and len(host.actions) == 3


def test_a_frame_waits_for_odometry_stamped_with_it() -> None:
    loop, host, clock, runner = make_loop(odom_sync_tolerance_s=0.05)
    loop.goal_message("chair")
    loop.odometry((0.0, 0.0, 0.0), 1.0)
    loop.image(frame(), 2.0, check=check)
    assert host.actions == []  # odometry 1 s older than the frame
    loop.odometry((0.0, 0.0, 0.0), 2.0)  # no request_act hook: acts at once
    assert len(host.actions) == 1


def test_watchdog_stops_the_base_and_acting_resumes_only_with_fresh_inputs() -> None:
    loop, host, clock, runner = make_loop(twist=True, script=[1], input_timeout_s=0.5, watchdog_margin_s=0.05)
    loop.goal_message("chair")
    step(loop, clock, 1.0)
    assert host.actions == [1] and host.twists[-1][0] > 0  # driving forward
    clock.t += 0.46
    loop.watchdog("odometry")
    assert loop.stale and host.twists[-1] == (0.0, 0.0) and loop.counters["watchdog_trips"] == 1
    loop.image(frame(), 2.0, check=check)  # only the camera came back: still stale
    loop.control_tick()
    assert host.twists[-1] == (0.0, 0.0) and loop.counters["dropped_stale"] == 1 and host.actions == [1]
    step(loop, clock, 3.0, dt=0.0)
    loop.control_tick()  # both fresh: resume; the aborted step left the base idle
    assert not loop.stale and loop.counters["watchdog_trips"] == 1
    step(loop, clock, 4.0)
    assert host.actions == [1, 1]


def test_stop_robot_sends_one_zero_and_nothing_moves_the_base_after_it() -> None:
    loop, host, clock, runner = make_loop(twist=True, script=[1])
    loop.goal_message("chair")
    step(loop, clock, 1.0)
    assert loop.action_executor.busy
    assert loop.stop_robot("deactivated") and host.twists[-1] == (0.0, 0.0)
    n = len(host.twists)
    step(loop, clock, 2.0)
    loop.control_tick()
    loop.watchdog("camera")
    assert len(host.twists) == n and host.actions == [1] and not loop.stop_robot("again")
    assert any("zero velocity sent" in m for _, m in host.logs)


def test_stop_action_idles_until_the_next_goal() -> None:
    loop, host, clock, runner = make_loop(script=[0])
    loop.goal_message("chair")
    step(loop, clock, 1.0)
    step(loop, clock, 2.0)
    assert host.actions == [0]  # stopped: no further action in this episode
    loop.goal_message("sofa")
    step(loop, clock, 3.0)
    assert host.actions == [0, 0]


def test_saved_memory_and_episode_continue_in_a_new_loop(tmp_path) -> None:
    loop, host, clock, runner = make_loop()
    loop.goal_message("table")
    for i in range(3):
        step(loop, clock, 1.0 + i, pose=(0.5 * i, 0.0, 0.0))
    path = str(tmp_path / "mem" / "agent.json")
    assert loop.save_memory(path) == (True, f"saved to {path}")
    step(loop, clock, 4.0, pose=(1.5, 0.0, 0.0))
    expected = runner.memory[-1]

    loop2, host2, clock2, runner2 = make_loop()
    ok, message = loop2.load_memory(path)
    assert ok and loop2.goal == "table" and loop2.status()["memory_tokens"] == 3
    loop2.goal_message("table")  # the latched goal of the restored episode: continues it
    step(loop2, clock2, 2.5, pose=(1.5, 0.0, 0.0))  # before the saved last stamp (3.0): back-dated
    assert loop2.counters["back_dated_images"] == 1
    step(loop2, clock2, 4.0, pose=(1.5, 0.0, 0.0))
    assert runner2.memory[-1] == expected and host2.actions[-1] == host.actions[-1]

    # saved after the bridge ended the episode: after a restart the (latched) goal starts the next one
    loop2.event(json.dumps({"event": "episode_end", "episode": 0, "steps": 4, "return": 0.0}))
    assert loop2.save_memory(path)[0]
    loop3, host3, clock3, runner3 = make_loop()
    assert loop3.load_memory(path)[0]
    step(loop3, clock3, 5.0, image=frame(3))
    assert host3.actions == [] and loop3.counters["image_after_episode_end"] == 1
    loop3.goal_message("table")
    assert runner3.calls[-2:] == [("begin_episode", "table"), ("act", 1, 0)] and len(host3.actions) == 1

    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"version": 9}))
    assert loop2.load_memory(str(bad))[0] is False and loop2.counters["memory_errors"] == 1
    assert len(runner2.memory) == 4  # a refused snapshot leaves the memory as it was


def test_a_bundle_that_reads_a_scan_waits_for_one_acts_on_it_and_stops_when_it_goes_stale() -> None:
    """``attach(scan=True)``: a frame waits for a scan stamped with it (as for odometry), the policy gets its free
    headings as ``obs["scan"]``, and a scan that stops coming trips the watchdog like a stale camera."""
    loop, host, clock, runner = make_loop(twist=True, script=[1], input_timeout_s=0.5, watchdog_margin_s=0.05)
    p = loop.params
    loop.attach(runner, pose_frame="episode", image_size=(H, W), goal_names=["chair"],
                kinds=[ActionKind.from_name(a) for a in NAMES], executor=ActionExecutor(executor_config(p)),
                twist=True, scan=True)
    loop.activate()
    seen = []
    act = runner.act
    runner.act = lambda obs: (seen.append(obs.get("scan")), act(obs))[1]
    loop.goal_message("chair")
    free = np.ones(12, np.float32)
    free[3] = 0.0
    step(loop, clock, 1.0)
    assert host.actions == []  # no scan yet: the frame waits
    loop.scan({"scan": free}, 0.5)
    assert host.actions == []  # a scan older than the frame: still waiting
    loop.scan({"scan": free}, 1.0)  # the matching scan: acts at once (no request_act hook)
    assert host.actions == [1] and np.array_equal(seen[-1], free)
    assert "scan" in host.rearmed
    clock.t += 0.2
    loop.odometry((0.0, 0.0, 0.0), 2.0)
    loop.image(frame(), 2.0, check=check)
    clock.t += 0.26  # camera and odometry fresh, the scan 0.46 s old (the watchdog fires at 0.45)
    loop.odometry((0.0, 0.0, 0.0), 2.1)
    loop.image(frame(), 2.1, check=check)
    loop.control_tick()
    assert loop.stale and host.twists[-1] == (0.0, 0.0) and loop.counters["watchdog_trips"] == 1
    assert any("scan 0.46 s" in m for _, m in host.logs)


def test_the_setup_names_the_scan_inputs_a_bundle_reads() -> None:
    """RunnerSetup.of: the encoder inputs a bundle reads from a laser scan, in SCAN_INPUTS order; free headings need
    the manifest's forward step (what they are tested for), the floor per band does not; the scan then reaches the
    runner as those inputs."""
    from types import SimpleNamespace

    from icrl_ros.nodes.agent_loop import RunnerSetup

    def runner(inputs, forward_m):
        manifest = SimpleNamespace(
            observation=SimpleNamespace(image_size=[H, W], goal_names=["chair"], frame="house"),
            action=SimpleNamespace(names=list(NAMES), forward_m=forward_m))
        specs = {"encoder": {"inputs": [{"name": n} for n in ("rgb", "odom", *inputs)]}}
        return SimpleNamespace(manifest=manifest, bundle=SimpleNamespace(specs=specs))

    s = RunnerSetup.of(runner(["scan_bands", "scan"], 0.25))
    assert s.scan_inputs == ("scan", "scan_bands") and s.reads_scan
    s = RunnerSetup.of(runner(["scan_bands"], None))
    assert s.scan_inputs == ("scan_bands",) and s.reads_scan
    assert not RunnerSetup.of(runner([], None)).reads_scan
    with pytest.raises(ValueError, match="forward_m"):
        RunnerSetup.of(runner(["scan"], None))
