"""The agent's decisions without ROS: input sync, episode state, safety and persistence.

:class:`AgentLoop` is everything ``agent_node`` decides, written against plain values so that it
is tested without DDS (as :class:`~icrl_ros.nodes.action_executor.ActionExecutor` and
:class:`~icrl_ros.nodes.input_gate.StampGate` are). The lifecycle node owns the ROS entities
(subscriptions, publishers, timers, services, parameters) and hands the loop what arrives; the
loop calls back through :class:`AgentIO` to publish, log and re-arm watchdogs.

- **Input sync:** the newest usable camera frame waits (unconverted) for odometry stamped no
  earlier than ``odom_sync_tolerance_s`` before it; frames stamped before the last one acted on
  are dropped unless time jumped back (:class:`StampGate`).
- **Pose:** the policy's pose is the odometry (``pose_source: odom``) or a localiser's map-frame
  pose composed with the odometry travelled since it (``pose_topic``: :class:`LocaliserFusion`);
  with a localiser, frames wait for its first pose, and a pose the odometry has travelled more than
  ``pose_max_travel_m`` from is stale: the base stops and frames are dropped until the next one.
- **Episode state:** a goal starts an episode at the next frame (its odometry is the episode-start
  pose, or in the house frame the trial's first start pose); a ``trial_start`` event or a reset
  starts a new trial with the memory cleared; ``episode_end`` closes the episode's figures.
- **Safety:** an input older than ``input_timeout_s - watchdog_margin_s`` stops the base (one zero
  velocity per check) until both are fresh; a frame taken while stale or while the base moves is
  dropped; :meth:`stop_robot` aborts the step and sends a zero velocity, after which nothing may
  publish a non-zero command until the loop is activated again.
- **Bad input** is counted, logged at most once per ``log_throttle_s`` per kind, and dropped; it
  never reaches the memory.
- **Persistence:** the runner's snapshot holds the memory; the loop's own episode state (goal,
  episode-start pose, stopped, last stamp acted on) goes beside it in ``<path>.node.json``.

Threads: the node calls :meth:`odometry`, :meth:`control_tick` and :meth:`watchdog` from its control
group and the rest from its default group; :attr:`lock` guards what both touch, and the runner is
used from the default group only.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from icrl_ros.nodes.action_executor import ActionExecutor, ActionKind, ExecutorConfig
from icrl_ros.nodes.convert import InputError, relative_pose
from icrl_ros.nodes.input_gate import BACK_DATED, JUMP, REPEAT, StampGate
from icrl_ros.nodes.params import AgentParams
from icrl_ros.nodes.pose_input import BACK_DATED as POSE_BACK_DATED
from icrl_ros.nodes.pose_input import JUMP as POSE_JUMP
from icrl_ros.nodes.pose_input import TOO_OLD as POSE_TOO_OLD
from icrl_ros.nodes.pose_input import LocaliserFusion

Pose = tuple[float, float, float]

COUNTERS = (
    "actions", "images_received", "images_converted", "bad_image_encoding", "bad_image_size",
    "bad_image_step", "bad_image_data", "back_dated_images", "time_jumps", "bad_odometry", "unknown_goal",
    "goal_before_image", "image_without_goal", "image_after_episode_end", "dropped_stale", "watchdog_trips", "runner_errors",
    "bundle_errors", "config_errors", "memory_resets", "memory_saves", "memory_loads", "memory_errors",
    "executor_timeouts", "bad_events", "bad_scan", "bad_pose", "back_dated_poses", "stale_pose",
)


def _percentile(values: deque[float] | list[float], q: float) -> float:
    return float(np.percentile(np.fromiter(values, dtype=np.float64), q)) if values else 0.0


def clip(value: Any, limit: int = 64) -> str:
    """``repr`` of a value for a log line, cut to about ``limit`` characters (a 100 kB goal string
    must not flood the log)."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


def executor_config(p: AgentParams, action: Any = None) -> ExecutorConfig:
    """The discrete-step executor's settings: parameters, with step sizes from the bundle's manifest
    ``action`` (``forward_m`` / ``turn_deg``) where the parameters leave them 0."""
    forward_m = action.forward_m if action is not None and action.forward_m is not None else 0.25
    turn_deg = action.turn_deg if action is not None and action.turn_deg is not None else 30.0
    return ExecutorConfig(
        forward_m=p.forward_m or float(forward_m),
        turn_rad=math.radians(p.turn_deg or float(turn_deg)),
        max_linear_speed=p.max_linear_speed, max_angular_speed=p.max_angular_speed,
        max_linear_accel=p.max_linear_accel, max_angular_accel=p.max_angular_accel,
        kp_linear=p.kp_linear, kp_angular=p.kp_angular, kp_heading=p.kp_heading,
        min_linear_speed=p.min_linear_speed, min_angular_speed=p.min_angular_speed,
        linear_tolerance_m=p.linear_tolerance_m, angular_tolerance_rad=math.radians(p.angular_tolerance_deg),
        timeout_s=p.action_timeout_s, first_dt_s=1.0 / p.control_rate_hz)


class EpisodeStats:
    """Per-episode figures of the agent: steps, latency (image in -> action out), the runner's
    own act time, and the memory size at the episode's last step. Bounded however long an
    episode runs: means over every step, p99 over the newest ``WINDOW`` steps."""

    WINDOW = 4096

    def __init__(self) -> None:
        self.trial = -1
        self.episode = -1
        self.goal = ""
        self.steps = 0
        self._sums = [0.0, 0.0]  # latency, act
        self.latency_ms: deque[float] = deque(maxlen=self.WINDOW)
        self.act_ms: deque[float] = deque(maxlen=self.WINDOW)
        self.memory_tokens = 0
        self.memory_bytes = 0

    def add(self, latency_ms: float, info: dict[str, Any], goal: str) -> None:
        self.trial, self.episode, self.goal = int(info.get("trial", -1)), int(info.get("episode", -1)), goal
        act = float(info.get("latency_ms", 0.0))
        self.steps += 1
        self._sums[0] += latency_ms
        self._sums[1] += act
        self.latency_ms.append(latency_ms)
        self.act_ms.append(act)
        self.memory_tokens = int(info.get("memory_tokens", 0))
        self.memory_bytes = int(info.get("memory_bytes", 0))

    def summary(self) -> dict[str, Any]:
        """The ``last_episode_*`` status fields."""
        n = max(self.steps, 1)
        return {
            "last_episode_trial": self.trial,
            "last_episode": self.episode,
            "last_episode_goal": self.goal,
            "last_episode_steps": self.steps,
            "last_episode_latency_mean_ms": self._sums[0] / n,
            "last_episode_latency_p99_ms": _percentile(self.latency_ms, 99),
            "last_episode_act_mean_ms": self._sums[1] / n,
            "last_episode_act_p99_ms": _percentile(self.act_ms, 99),
            "last_episode_memory_tokens": self.memory_tokens,
            "last_episode_memory_bytes": self.memory_bytes,
        }


@dataclass
class AgentIO:
    """What the loop needs from its host (the lifecycle node, or a test).

    ``action(a)`` publishes the discrete action; ``twist(v, w)`` publishes a velocity and returns
    whether it went out (used in twist mode only); ``log(level, message)``;
    ``status()`` publishes the status now; ``rearm(kind)`` restarts the watchdog of ``"camera"``
    or ``"odometry"``; ``request_act()`` asks for :meth:`AgentLoop.try_act` on the thread that
    owns the runner (default: call it at once); ``convert(frame, (h, w))`` turns a held frame into
    an RGB array (raising :class:`InputError`); ``memory(why)`` shows what the memory holds now (after
    each step, ``"step"``, and when it was reset or loaded; called on the thread that owns the runner)."""

    action: Callable[[int], None]
    log: Callable[[str, str], None]
    convert: Callable[[Any, tuple[int, int]], np.ndarray]
    twist: Callable[[float, float], bool] = lambda v, w: False
    status: Callable[[], None] = lambda: None
    rearm: Callable[[str], None] = lambda kind: None
    request_act: Callable[[], None] | None = None
    memory: Callable[[str], None] = lambda why: None


SCAN_INPUTS = ("scan", "scan_bands")
"""Encoder inputs a bundle may read from a laser scan (:func:`~icrl_ros.nodes.convert.scan_msg_to_inputs`)."""


@dataclass
class RunnerSetup:
    """What a loaded bundle tells the loop (the node's configure; replay of a recording does the same)."""

    image_size: tuple[int, int]
    goal_names: list[str]
    action_names: list[str]
    kinds: list[ActionKind]
    pose_frame: str  # the odometry frame it was trained with (manifest observation.frame)
    reads_scan: bool  # encoder inputs from a laser scan (scan_inputs)
    scan_step_m: float  # the step the scan's free headings are tested for (manifest action.forward_m)
    scan_inputs: tuple[str, ...] = ()  # of SCAN_INPUTS: 'scan' (free headings), 'scan_bands' (floor per image band)

    @classmethod
    def of(cls, runner: Any) -> "RunnerSetup":
        """Read from a runner's bundle; ValueError where the bundle cannot drive this loop."""
        manifest = runner.manifest
        if manifest.observation.image_size is None:
            raise ValueError("manifest field 'observation.image_size' is missing: not an image policy")
        h, w = (int(v) for v in manifest.observation.image_size)
        action_names = [str(a) for a in manifest.action.names]
        specs = getattr(getattr(runner, "bundle", None), "specs", None) or {}
        names = {io["name"] for io in specs.get("encoder", {}).get("inputs", [])}
        scan_inputs = tuple(n for n in SCAN_INPUTS if n in names)
        if "scan" in scan_inputs and not manifest.action.forward_m:
            raise ValueError("the bundle reads a laser scan ('scan' input) but its manifest has no "
                             "action.forward_m (the step the scan's free headings are tested for)")
        return cls(image_size=(h, w), goal_names=[str(g) for g in manifest.observation.goal_names],
                   action_names=action_names, kinds=[ActionKind.from_name(a) for a in action_names],
                   pose_frame=str(manifest.observation.frame), reads_scan=bool(scan_inputs),
                   scan_step_m=float(manifest.action.forward_m or 0.0), scan_inputs=scan_inputs)


class AgentLoop:
    """The agent's state and decisions; see the module docstring. ``clock`` is monotonic seconds."""

    def __init__(self, params: AgentParams, io: AgentIO, clock: Callable[[], float] = time.monotonic) -> None:
        self.params = params
        self.io = io
        self.clock = clock
        self.lock = threading.RLock()
        self.runner: Any = None
        self.counters: dict[str, int] = dict.fromkeys(COUNTERS, 0)
        self.latencies_ms: deque[float] = deque(maxlen=2000)  # image received -> action published
        self.act_ms: deque[float] = deque(maxlen=2000)  # the runner's own act() time, for comparison
        self.episode_stats = EpisodeStats()  # the running episode
        self.last_episode: dict[str, Any] = EpisodeStats().summary()  # the last finished one
        self.episodes_done = 0
        self.last_error = ""  # the last failed configure or runner error, for the status
        self._last_log: dict[str, float] = {}
        self.reset_state()

    # -----------------------------------------------------------------------------------------
    # state

    def reset_state(self) -> None:
        """Forget the episode, the inputs and the runner's action set (configure, cleanup)."""
        self.active = False
        self.goal: str | None = None  # goal of the running episode
        self._pending_goal: str | None = None  # begins at the next image
        self._resumed_goal: str | None = None  # episode restored by load_memory, until its first action
        self._bridge_trial: Any = None  # (bridge run id, trial index) of the trial the memory belongs to
        self._bridge_run: Any = None  # run id of the last bridge event (a bridge restart changes it)
        self._origin: Pose | None = None  # odometry pose the policy's frame starts at
        self.pose_frame = "episode"  # the bundle's training frame
        self._stopped = False  # the policy chose stop; wait for a new goal
        self._ended = False  # the bridge ended the running episode: frames wait for the next goal
        self._seen_image = False
        self._odom: tuple[Pose, float] | None = None  # (pose, stamp)
        # (its encoder inputs, stamp): a bundle that reads a scan
        self._scan: tuple[dict[str, np.ndarray], float] | None = None
        self.needs_scan = False
        self._pending: tuple[Any, float, float] | None = None  # (frame, stamp, t_in): converted only if used
        self.last_pose: Pose | None = None  # the policy's pose (odometry or localised) of the last step acted on
        self.uses_localiser = self.params.pose_source == "pose_topic"  # read at configure (attach)
        self.fusion = LocaliserFusion(self.params.time_jump_s)  # localiser fixes x odometry (pose_topic)
        self._pose_stale = False  # the fix in use is stale (pose_max_travel_m): stopped until the next one
        self.gate = StampGate(self.params.time_jump_s)
        self._camera_rx = -math.inf
        self._odom_rx = -math.inf
        self._scan_rx = -math.inf
        self._active_since = self.clock()
        self.stale = False
        self._ready_after = -math.inf
        self.last_info: dict[str, Any] = {}
        self.action_executor: ActionExecutor | None = None
        self._kinds: list[ActionKind] = []
        self.image_size: tuple[int, int] = (0, 0)
        self.goal_names: list[str] = []
        self.twist_mode = False  # drive the base through io.twist (else publish discrete actions only)

    def attach(self, runner: Any, *, pose_frame: str, image_size: tuple[int, int], goal_names: list[str],
               kinds: list[ActionKind], executor: ActionExecutor, twist: bool, scan: bool = False) -> None:
        """A configured runner and what its bundle says (the node's configure). ``twist``: the loop
        drives the base through ``executor`` and ``io.twist`` (else it publishes actions only). ``scan``: the
        bundle reads encoder inputs from a laser scan (:data:`SCAN_INPUTS`); frames then wait for one, and a stale
        scan stops the base as a stale camera does."""
        with self.lock:
            self.reset_state()
            self.runner = runner
            self.pose_frame = pose_frame
            self.image_size = image_size
            self.goal_names = list(goal_names)
            self._kinds = list(kinds)
            self.action_executor = executor
            self.twist_mode = bool(twist)
            self.needs_scan = bool(scan)
            self.uses_localiser = self.params.pose_source == "pose_topic"

    def detach(self) -> Any:
        """Forget the runner and every episode state; returns the runner for the caller to close."""
        with self.lock:
            runner, self.runner = self.runner, None
            self.reset_state()
        return runner

    def count(self, key: str, message: str, level: str = "warning") -> None:
        """Count one event and log it, at most once per log_throttle_s for each key."""
        with self.lock:
            self.counters[key] = self.counters.get(key, 0) + 1
            n = self.counters[key]
        self.log_throttled(key, f"{message} [{key}: {n}]", level)

    def log_throttled(self, key: str, message: str, level: str = "warning") -> None:
        now = self.clock()
        if now - self._last_log.get(key, -math.inf) < self.params.log_throttle_s:
            return
        self._last_log[key] = now
        self.io.log(level, message)

    def watch_period(self) -> float:
        """The watchdog checks an input this long after it last arrived: the zero is out by input_timeout_s."""
        return self.params.input_timeout_s - self.params.watchdog_margin_s

    # -----------------------------------------------------------------------------------------
    # activation and stopping

    def activate(self) -> None:
        with self.lock:
            self.active = True
            self._active_since = self.clock()
            self.stale = False

    def stop_robot(self, why: str) -> bool:
        """Abort the current step, drop the held frame and publish one zero velocity while the loop is
        active (deactivate, shutdown, error, process exit); the memory and episode are kept. Nothing
        publishes a non-zero command after this until :meth:`activate`. True when a zero went out."""
        with self.lock:
            if self.action_executor is not None:
                self.action_executor.abort()
            self._pending = None
            sent = bool(self.twist_mode and self.active and self.io.twist(0.0, 0.0))
            self.active = False
        if sent:
            self.io.log("info", f"{why}: robot stopped, zero velocity sent")
        return sent

    # -----------------------------------------------------------------------------------------
    # inputs

    def event(self, data: str) -> None:
        """A JSON episode event from the bridge: ``trial_start`` (new memory) or ``episode_end``."""
        try:
            event = json.loads(data)
            kind = event["event"]
        except (ValueError, KeyError, TypeError) as e:
            self.count("bad_events", f"episode event is not JSON with an 'event' key ({e}): {clip(data)}")
            return
        if self.runner is None:
            return
        # a trial is (bridge run, index): a restarted bridge counts from trial 0 again, in another house
        run, trial = event.get("run"), event.get("trial")
        new_run = run is not None and self._bridge_run is not None and run != self._bridge_run
        if run is not None:
            self._bridge_run = run
        if kind == "trial_start":
            key = (run, trial)
            if trial is not None and key == self._bridge_trial:
                return  # the same trial announced twice (or its latched copy after a load)
            first_contact = self._bridge_trial is None and not new_run and self.episodes_done == 0
            self._bridge_trial = key
            if first_contact:  # the first trial this agent hears of, in its first episode: the one it is acting in
                # (its latched trial_start can arrive after the first images; a reset would cut them off)
                self.io.log("info", f"trial_start event (trial {clip(trial)}): the trial this agent is in, memory kept")
                return
            self.reset_memory(f"trial_start event (trial {clip(trial)}"
                              + (f", a new bridge run {clip(run)})" if new_run else ")"))
        elif new_run:  # a restarted bridge whose trial_start did not reach us: its house is another one
            self._bridge_trial = (run, trial)
            self.reset_memory(f"{clip(kind)} event from a new bridge run {clip(run)} (trial {clip(trial)})")
        elif kind == "episode_end":
            current = self._about_current(event)
            self._tell_return(event, current)
            self.close_episode()  # the bridge ended it: its figures are final now
            with self.lock:
                if current and self._pending_goal is None:
                    # a frame before the next goal belongs to the next episode: acting on it under the
                    # old goal would append it to the ended one (RA-DT: store it as an episode of its own)
                    self._ended = True

    def _about_current(self, event: dict[str, Any]) -> bool:
        """Whether an ``episode_end`` event ends the episode the runner is in: it names the runner's goal and
        its step count is the runner's (the usual order, event before the next goal), not the one before it.
        Ambiguous only when the next episode has the ended one's goal and as many steps as it had when the event
        comes (a 1-step episode whose event comes after the next one's first frame)."""
        info = self.last_info
        goal = event.get("goal")
        if isinstance(goal, str) and goal and self.goal is not None and goal != self.goal:
            return False  # it names another goal: the episode before (its event came after the next goal's frame)
        return "step" in info and int(info.get("step", -1)) + 1 == int(event.get("steps", -1))

    def _tell_return(self, event: dict[str, Any], current: bool) -> None:
        """Hand the bridge's episode return to a runner that ranks memories by it (RA-DT: a robot
        gets no reward, so the stored episode's utility comes from here). The event names the
        bridge's episode, not the runner's: it is the episode of the last action when the step
        counts agree (the usual order, event before the next goal), else the one before it."""
        end = getattr(self.runner, "end_episode", None)
        info = self.last_info
        if end is None or "episode" not in info or not isinstance(event.get("return"), (int, float)):
            return
        try:
            end(float(event["return"]), episode=int(info["episode"]) - (0 if current else 1))
        except Exception as e:  # noqa: BLE001 - the agent must outlive a runner error
            self.count("runner_errors", f"runner.end_episode failed: {type(e).__name__}: {e}", "error")

    def goal_message(self, goal: str) -> None:
        """A goal category: it starts a new episode at the next frame (memory kept)."""
        goal = goal.strip()
        if goal not in self.goal_names:
            self.count("unknown_goal", f"goal {clip(goal)} is not one of {self.goal_names}; ignored")
            return
        if goal == self._resumed_goal and not self._ended:
            # a restarted node receives the latched goal of the episode it just restored
            self._resumed_goal = None
            self.io.log("info", f"goal {goal!r} continues the restored episode")
            return
        if not self._seen_image:
            self.count("goal_before_image", f"goal {goal!r} arrived before any image; it starts with the first one",
                       "info")
        with self.lock:
            self._pending_goal = goal  # takes effect at the next image: the episode-start pose is its odometry
            waiting = self._ended and self._pending is not None
        if waiting:
            self._request_act()  # the next episode's first frame came before its goal

    def odometry(self, pose: Pose, stamp: float) -> None:
        """An odometry pose (control group: cheap, never waits for the policy)."""
        with self.lock:
            self._odom = (pose, stamp)
            self._odom_rx = self.clock()
            if self.uses_localiser and self.fusion.odometry(pose, stamp) == POSE_JUMP:
                self.count("time_jumps", f"odometry stamps jumped back to {stamp:.3f} s: the localiser pose composed "
                           "so far is forgotten; acting waits for the next one")
            if self.active:
                self.io.rearm("odometry")
            waiting = self._pending is not None
        if waiting:
            self._request_act()  # the frame waiting for this odometry acts

    def localiser(self, pose: Pose, stamp: float) -> None:
        """A localiser's map-frame pose of the base (pose_source pose_topic; control group, cheap). Back-dated,
        stale and jumped-back stamps are counted and logged (throttled); nothing of them reaches the memory."""
        if not self.uses_localiser:
            return
        with self.lock:
            last = self.fusion.fix_stamp
            verdict = self.fusion.fix(pose, stamp)
            waiting = self._pending is not None
        if verdict == POSE_BACK_DATED:
            self.count("back_dated_poses", f"localiser pose dropped: stamped {stamp:.3f} s, before the one in use "
                       f"({last:.3f} s)")
        elif verdict == POSE_TOO_OLD:
            self.count("stale_pose", f"localiser pose dropped: stamped {stamp:.3f} s, before the odometry kept to "
                       "compose it with")
        if waiting:
            self._request_act()  # a frame waiting for a (fresh) localiser pose acts

    def _stop_for_pose(self, message: str) -> None:
        """The localiser pose is stale: abort the step, zero velocity, drop the frame, count and log (lock held)."""
        self._pending = None
        if self.action_executor is not None:
            self.action_executor.abort()
        if self.twist_mode and self.active:
            self.io.twist(0.0, 0.0)
        if not self._pose_stale:
            self._pose_stale = True
        self.count("stale_pose", message)

    def scan(self, inputs: dict[str, np.ndarray], stamp: float) -> None:
        """The encoder inputs of a laser scan (:func:`~icrl_ros.nodes.convert.scan_msg_to_inputs`; cheap, any
        group)."""
        with self.lock:
            self._scan = (dict(inputs), stamp)
            self._scan_rx = self.clock()
            if self.active and self.needs_scan:
                self.io.rearm("scan")
            waiting = self._pending is not None
        if waiting:
            self._request_act()  # the frame waiting for this scan acts

    def image(self, frame: Any, stamp: float, check: Callable[[Any], None] | None = None) -> None:
        """A camera frame: kept (unconverted) as the newest one to act on, then acting is tried.
        ``check`` validates it cheaply first (raising :class:`InputError`)."""
        t_in = self.clock()
        with self.lock:
            self._camera_rx = t_in
            if self.active:
                self.io.rearm("camera")
            self.counters["images_received"] += 1
            if not self.active:
                return
        if check is not None:
            try:
                check(frame)
            except InputError as e:
                self.count(f"bad_image_{e.field}", f"image dropped: {e}")
                return
        self._seen_image = True
        with self.lock:
            last = self.gate.last_acted
            verdict = self.gate.check(stamp)
            if verdict == REPEAT:
                return  # a republished observation the policy has already acted on
            if verdict == BACK_DATED:
                self.count("back_dated_images", f"image dropped: stamped {stamp:.3f} s, before the last image acted "
                           f"on ({last:.3f} s)")
                return
            if verdict == JUMP:
                self.count("time_jumps", f"image stamps jumped back from {last:.3f} s to {stamp:.3f} s (bridge "
                           "restart, bag loop or sim-time reset): acting on the new stamps")
            self._pending = (frame, stamp, t_in)
        self.try_act()

    def _request_act(self) -> None:
        if self.io.request_act is not None:
            self.io.request_act()
        else:
            self.try_act()

    # -----------------------------------------------------------------------------------------
    # acting (the thread that owns the runner)

    def _take_pending(self) -> tuple[Any, float, float, Pose, Pose] | None:
        """The frame to act on now, its odometry pose and the policy's pose, or None (lock held)."""
        if not self.active or self._pending is None or self.runner is None:
            return None
        frame, stamp, t_in = self._pending
        if self.stale:
            self._pending = None
            self.counters["dropped_stale"] += 1
            return None
        if self.action_executor is not None and self.action_executor.busy:
            return None  # twist mode: the step in progress finishes first; newer images replace this one
        if t_in < self._ready_after:
            self._pending = None  # taken while the base was still moving
            return None
        if self._odom is None:
            return None  # wait for odometry (the watchdog reports if it never comes)
        pose, odom_stamp = self._odom
        if self._behind(odom_stamp, stamp):
            return None  # odometry older than the image: wait for the matching one
        if self.needs_scan:
            if self._scan is None:
                return None  # wait for a scan (the watchdog reports if it never comes)
            if self._behind(self._scan[1], stamp):
                return None  # a scan older than the image: wait for the matching one
        policy_pose = pose
        if self.uses_localiser:
            if not self.fusion.has_fix:
                self.log_throttled("no_pose", f"waiting for a localiser pose on {self.params.pose_topic!r} "
                                   "(pose_source pose_topic)", "info")
                return None
            travelled = self.fusion.travelled()
            if travelled > self.params.pose_max_travel_m:
                self._stop_for_pose(f"localiser pose stale: the odometry travelled {travelled:.2f} m since it "
                                    f"(pose_max_travel_m {self.params.pose_max_travel_m}): robot stopped, image dropped")
                return None
            if self._pose_stale:
                self._pose_stale = False
                self.io.log("info", "localiser pose fresh again: resuming")
            policy_pose = self.fusion.pose(pose)
        self._pending = None
        return frame, stamp, t_in, pose, policy_pose

    def _behind(self, input_stamp: float, image_stamp: float) -> bool:
        """An input stamped more than ``odom_sync_tolerance_s`` before the image (zero stamps: unset, never behind)."""
        return image_stamp > 0 and input_stamp > 0 and input_stamp + self.params.odom_sync_tolerance_s < image_stamp

    def try_act(self) -> None:
        """Act on the held frame if everything it needs is there: begin a pending episode, convert,
        ``runner.act``, publish the action and (twist mode) start the step."""
        with self.lock:
            held = self._ended and self._pending_goal is None  # the frame stays until the next goal
            taken = None if held else self._take_pending()
        if held:
            self.count("image_after_episode_end", "the episode ended: this frame waits for the next goal", "info")
        if taken is None:
            return
        frame, stamp, t_in, odom_pose, pose = taken  # pose: the policy's (odometry, or localised)
        if self._pending_goal is not None:
            self.close_episode()
            try:
                self.runner.begin_episode(self._pending_goal)
            except ValueError as e:
                self.count("unknown_goal", f"runner refused goal {clip(self._pending_goal)}: {e}")
                self._pending_goal = None
                return
            self.goal, self._pending_goal = self._pending_goal, None
            self._ended = False
            if self.pose_frame != "house" or self._origin is None:
                # episode frame: odometry from each episode's start pose; house frame: from the
                # trial's first start pose, kept until the memory is reset (a new house)
                self._origin = pose
            self._stopped = False
        if self.goal is None or self._origin is None:
            self.count("image_without_goal", "no goal yet: waiting for one on the goal topic", "info")
            return
        if self._stopped and self.params.idle_after_stop:
            return
        try:
            rgb = self.io.convert(frame, self.image_size)  # outside the lock: the control loop runs meanwhile
        except InputError as e:
            self.count(f"bad_image_{e.field}", f"image dropped: {e}")
            return
        self.counters["images_converted"] += 1
        obs = {"rgb": rgb, "odom": relative_pose(self._origin, pose)}
        if self.needs_scan:
            obs.update(self._scan[0])
        try:
            action, info = self.runner.act(obs)
            action = int(action)
            kind = self._kinds[action]
        except Exception as e:  # the agent must outlive an engine error
            self.last_error = f"runner.act failed: {type(e).__name__}: {e}"
            self.count("runner_errors", self.last_error, "error")
            return
        with self.lock:
            self.gate.acted(stamp)
            self._resumed_goal = None
            self.last_info = dict(info)
            self.last_pose = pose  # the policy's pose this step acted at
            if kind is ActionKind.STOP:
                self._stopped = True
            if not self.active or self.stale:  # stopped while the policy ran: do not move
                self.counters["dropped_stale"] += 1
                return
            self.io.action(action)
            latency_ms = (self.clock() - t_in) * 1e3
            self.latencies_ms.append(latency_ms)
            self.act_ms.append(float(info.get("latency_ms", 0.0)))
            self.episode_stats.add(latency_ms, info, self.goal)
            self.counters["actions"] += 1
            if self.twist_mode and self.action_executor is not None:
                self.action_executor.start(kind, odom_pose)  # the executor closes its loop on odometry
                self._drive()  # first command without waiting for the next tick
        self.io.memory("step")  # after the action went out: showing the memory never delays it

    def _drive(self) -> None:
        """One executor update -> a velocity (lock held)."""
        if not self.twist_mode or self.action_executor is None or self._odom is None:
            return
        now = self.clock()
        v, w, done = self.action_executor.update(self._odom[0], now)
        if done and self.action_executor.result == "timeout":
            self.count("executor_timeouts", "step timed out before reaching its target")
        if done and self.action_executor.result in ("reached", "timeout", "stopped"):
            self.action_executor.result = None
            self._ready_after = now + self.params.settle_s
        self.io.twist(float(v), float(w))

    # -----------------------------------------------------------------------------------------
    # control group: velocity republish and the watchdog

    def ages(self, now: float) -> dict[str, float]:
        """Seconds since the last camera, odometry (and, for a bundle that reads one, scan) message (before the
        first, since activation)."""
        rx = {"camera": self._camera_rx, "odometry": self._odom_rx}
        if self.needs_scan:
            rx["scan"] = self._scan_rx
        return {k: now - max(t, self._active_since) for k, t in rx.items()}

    def watchdog(self, kind: str) -> None:
        """No ``kind`` message for input_timeout_s - watchdog_margin_s: stop now."""
        with self.lock:
            if not self.active:
                return
            ages = self.ages(self.clock())
            if max(ages.values()) < self.watch_period() - 1e-3:
                return  # a message re-armed it while this callback waited for the lock
            self._trip(ages)

    def _trip(self, ages: dict[str, float]) -> None:
        """Inputs stale: abort the step, publish zero (lock held)."""
        if not self.stale:
            self.stale = True
            self.counters["watchdog_trips"] += 1
        if self.action_executor is not None:
            self.action_executor.abort()
        self._pending = None
        if self.twist_mode:
            self.io.twist(0.0, 0.0)
        self.log_throttled("stale", "inputs stale (" + ", ".join(f"{k} {v:.2f} s" for k, v in ages.items()) + ", "
                           f"timeout {self.params.input_timeout_s} s): robot stopped "
                           f"[watchdog_trips: {self.counters['watchdog_trips']}]")

    def control_tick(self) -> None:
        """The >= 10 Hz velocity republish (twist mode) and the staleness check: zero while stale or
        idle; a frame waiting for the base to settle is tried again."""
        with self.lock:
            if not self.active:
                return
            ages = self.ages(self.clock())
            if max(ages.values()) >= self.watch_period():
                self._trip(ages)
                return
            if self.stale:
                self.stale = False
                self.io.log("info", "inputs fresh again: resuming")
            if self.twist_mode:
                if self.action_executor is not None and self.action_executor.busy:
                    self._drive()
                else:
                    self.io.twist(0.0, 0.0)
            waiting = self._pending is not None
        if waiting:
            self._request_act()

    # -----------------------------------------------------------------------------------------
    # episodes, memory and persistence

    def close_episode(self) -> None:
        """The running episode is over (new goal, episode_end event, memory reset): keep its figures
        as ``last_episode_*`` and publish a status at once, so consumers get one per episode."""
        if not self.episode_stats.steps:
            return
        with self.lock:
            self.last_episode = self.episode_stats.summary()
            self.episode_stats = EpisodeStats()
            self.episodes_done += 1
        self.io.status()

    def reset_memory(self, why: str) -> None:
        """A new trial (a new house): the runner's memory is cleared; the same goal starts episode 0."""
        self.close_episode()
        self.runner.reset_trial()
        self.counters["memory_resets"] += 1
        if self.goal is not None and self._pending_goal is None:
            self._pending_goal = self.goal  # the same goal starts episode 0 of the new trial
        self.goal = None
        self._origin = None
        self._stopped = False
        self._ended = False
        with self.lock:
            self.gate.reset()  # a new trial: the frame in front of the robot is its first observation
            self.last_info = self.runner_info()
        self.io.log("info", f"memory reset: {why}")
        self.io.memory("reset")

    def runner_info(self) -> dict[str, Any]:
        """The runner's memory and position figures now (after a reset or a load, before any act)."""
        r = self.runner
        memory = getattr(r, "memory", None)
        info = {"memory_tokens": int(getattr(memory, "tokens", 0)), "memory_bytes": int(getattr(memory, "nbytes", 0)),
                "episode": int(getattr(r, "episode", -1)), "trial": int(getattr(r, "trial", -1)),
                "step": int(getattr(r, "step_in_episode", 0)) - 1}
        counters = getattr(memory, "counters", None)
        if callable(counters):
            entries = counters().get("entries")
            if entries is not None:
                info["retrieved_entries"] = int(entries)
        return info

    def save_memory(self, path: str) -> tuple[bool, str]:
        """The runner's snapshot and the loop's episode state to ``path`` (+ ``.node.json``)."""
        if self.runner is None or not path:
            return False, "not configured" if self.runner is None else "memory_path is empty"
        try:
            os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
            self.runner.snapshot(path)
            self._write_sidecar(path)
        except Exception as e:
            self.count("memory_errors", f"save_memory to {path!r} failed: {type(e).__name__}: {e}", "error")
            return False, f"{type(e).__name__}: {e}"
        self.counters["memory_saves"] += 1
        info = self.runner_info()
        self.io.log("info", f"memory saved to {path!r}: {info['memory_tokens']} tokens, trial {info['trial']} "
                            f"episode {info['episode']} step {info['step']}")
        return True, f"saved to {path}"

    def load_memory(self, path: str) -> tuple[bool, str]:
        """Restore a :meth:`save_memory`: the memory and, where saved, the episode to continue. A
        snapshot that does not match the bundle is refused and leaves the memory as it was."""
        if self.runner is None or not path:
            return False, "not configured" if self.runner is None else "memory_path is empty"
        try:
            self.runner.restore(path)  # raises and leaves memory unchanged on a mismatch
        except Exception as e:
            self.count("memory_errors", f"load_memory from {path!r} failed: {type(e).__name__}: {e}", "error")
            return False, f"{type(e).__name__}: {e}"
        self._read_sidecar(path)
        self.counters["memory_loads"] += 1
        with self.lock:
            self.last_info = self.runner_info()
            info = dict(self.last_info)
        self.io.log("info", f"memory loaded from {path!r}: {info['memory_tokens']} tokens, trial {info['trial']} "
                            f"episode {info['episode']} step {info['step']}, goal {self.goal!r}")
        self.io.status()
        self.io.memory("load")
        return True, f"loaded from {path}"

    def _write_sidecar(self, path: str) -> None:
        last = self.gate.last_acted
        state = {"goal": self.goal, "origin": list(self._origin) if self._origin else None,
                 "stopped": self._stopped, "ended": self._ended, "last_acted_stamp": last if math.isfinite(last) else None,
                 "bridge_trial": list(self._bridge_trial) if self._bridge_trial is not None else None}
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(path)), suffix=".tmp")
        with os.fdopen(fd, "w") as f:
            json.dump(state, f)
        os.replace(tmp, path + ".node.json")

    def _read_sidecar(self, path: str) -> None:
        try:
            with open(path + ".node.json") as f:
                state = json.load(f)
        except (OSError, ValueError):
            return  # a snapshot without node state: the next goal starts an episode as usual
        if state.get("bridge_trial") is not None:  # the bridge trial the memory belongs to: its latched
            self._bridge_trial = tuple(state["bridge_trial"])  # trial_start must not wipe it,
            self._bridge_run = self._bridge_trial[0]  # another bridge run's events start a new trial
        goal = state.get("goal")
        if goal in self.goal_names:
            self.goal = goal
            self._origin = tuple(state["origin"]) if state.get("origin") else None
            self._stopped = bool(state.get("stopped", False))
            self._ended = bool(state.get("ended", False))
            if self._ended:
                pass  # saved after the bridge ended the episode: the next goal (whatever its name) starts one
            elif self._pending_goal == goal:
                self._pending_goal = None  # the latched goal of the episode we are continuing
            else:
                self._resumed_goal = goal  # ... or it is still on its way
            if state.get("last_acted_stamp") is not None:
                with self.lock:
                    self.gate.acted(float(state["last_acted_stamp"]))

    # -----------------------------------------------------------------------------------------
    # status

    @property
    def origin(self) -> Pose | None:
        """The odometry pose the policy's odometry (and so the route memory's frame) is measured from; None
        before the trial's first episode began."""
        return self._origin

    def lifecycle_state(self) -> str:
        if self.active:
            return "active"
        return "inactive" if self.runner is not None else "unconfigured"

    def status(self) -> dict[str, Any]:
        """The status fields the node publishes (flat: figures, last episode, counters)."""
        with self.lock:  # the default and control groups write these
            info = dict(self.last_info)
            latencies, acts = list(self.latencies_ms), list(self.act_ms)
            counters, last_episode = dict(self.counters), dict(self.last_episode)
        return {
            "state": self.lifecycle_state(),
            "stale": self.stale,
            "last_error": self.last_error,
            "goal": self.goal or "",
            "latency_p50_ms": _percentile(latencies, 50),
            "latency_p99_ms": _percentile(latencies, 99),
            "act_p50_ms": _percentile(acts, 50),
            "act_p99_ms": _percentile(acts, 99),
            "memory_tokens": info.get("memory_tokens", 0),
            "memory_bytes": info.get("memory_bytes", 0),
            "memory_entries": info.get("retrieved_entries", 0),  # RA-DT: sub-trajectories in the index
            "episode": info.get("episode", -1),
            "trial": info.get("trial", -1),
            "step": info.get("step", -1),
            "value": float(info.get("value", 0.0)),  # the critic's estimate at the last step
            "episodes_done": self.episodes_done,
            **last_episode,
            **counters,
        }


__all__ = ["AgentIO", "AgentLoop", "EpisodeStats", "COUNTERS", "RunnerSetup", "clip", "executor_config"]
