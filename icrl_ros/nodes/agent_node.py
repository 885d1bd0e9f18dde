"""``agent_node``: the in-context RL policy as a ROS 2 lifecycle node.

configure  load the bundle (``PolicyRunner.from_bundle``: backend, device, memory policy and
           budget from parameters; an empty ``bundle_path`` = the shipped ``house_relic``),
           create topics, timers and services
activate   start acting on camera + odometry + goal
deactivate stop: abort the current step and publish a zero velocity
cleanup    release the runner and every ROS entity; shutdown does the same from any state
A zero velocity also goes out on shutdown, on error and when the process exits (SIGINT, SIGTERM).

One control step: the newest image (sensor-data QoS, any of rgb8 / bgr8 / rgba8 / bgra8 / mono8,
resized to the bundle's input) + odometry relative to the episode-start pose -> ``runner.act`` ->
``std_msgs/Int32`` (discrete, once per new image: lockstep with the bridge) and, in twist mode,
the :class:`ActionExecutor` driving ``cmd_vel`` closed loop at ``control_rate_hz``.

A goal message starts a new episode (memory kept); a ``trial_start`` event from the bridge or
the ``~/reset_memory`` service starts a new trial (memory cleared). Bad input of any kind is
counted, logged at most once per ``log_throttle_s`` per kind, and dropped: the node never
crashes on a message and never touches memory because of one. Frames stamped before the last
one acted on are back-dated (dropped, counted) unless time jumped back (a bridge restart, a bag
loop): then acting goes on from the new stamps (:class:`StampGate`). The watchdog publishes the
zero velocity within ``input_timeout_s`` of the last camera or odometry message (one timer per
input, re-armed by each message) and acting resumes when both are fresh. Only the frame acted on
is converted, and off the control thread. When an episode ends (new
goal, the bridge's ``episode_end``, a memory reset) its figures go out at once on the status
topic as ``last_episode_*`` (steps, latency, act time, memory).
"""

from __future__ import annotations

import json
import math
import os
import signal
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

import numpy as np
import rclpy
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from geometry_msgs.msg import Twist
from nav_msgs.msg import Odometry
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup
from rclpy.clock import Clock, ClockType
from rclpy.duration import Duration
from rclpy.exceptions import InvalidHandle
from rclpy.executors import ExternalShutdownException, MultiThreadedExecutor
from rclpy.lifecycle import LifecycleNode, LifecycleState, TransitionCallbackReturn
from rclpy.signals import SignalHandlerOptions
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy, qos_profile_sensor_data
from sensor_msgs.msg import Image
from std_msgs.msg import Int32, String
from std_srvs.srv import Trigger

from icrl_ros.nodes.action_executor import ActionExecutor, ActionKind, ExecutorConfig
from icrl_ros.nodes.convert import (
    InputError,
    check_image_msg,
    image_msg_to_rgb,
    odometry_msg_to_pose,
    relative_pose,
    stamp_to_seconds,
)
from icrl_ros.nodes.dds import use_shipped_profile
from icrl_ros.nodes.input_gate import BACK_DATED, JUMP, REPEAT, StampGate
from icrl_ros.nodes.params import AgentParams
from icrl_ros.nodes.ros_params import declare_params
from icrl_ros.nodes.shipped import resolve_bundle_path

RunnerFactory = Callable[..., Any]
"""``factory(bundle_path, backend=, device=, memory=, memory_budget_bytes=) -> runner``."""


def default_runner_factory(path: str, **kwargs: Any) -> Any:
    from icrl_ros.runtime import PolicyRunner  # imported here: the node module loads without it

    return PolicyRunner.from_bundle(path, **kwargs)


def _percentile(values: deque[float] | list[float], q: float) -> float:
    return float(np.percentile(np.fromiter(values, dtype=np.float64), q)) if values else 0.0


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


class AgentNode(LifecycleNode):
    """Lifecycle node running a :class:`PolicyRunner` on camera + odometry + goal topics.

    Threads: with a multi-threaded executor (the console script's), the control group (odometry,
    the ``cmd_vel`` republish timer, the watchdog timers) runs beside the default group (camera,
    goal, events, acting, services, lifecycle transitions), so neither image conversion nor the
    policy ever delays a velocity command or a stop. ``self._lock`` guards the state both touch;
    the runner is used from the default group only. A single-threaded executor works the same,
    one callback at a time.
    """

    COUNTERS = (
        "actions", "images_received", "images_converted", "bad_image_encoding", "bad_image_size",
        "bad_image_step", "bad_image_data", "back_dated_images", "time_jumps", "bad_odometry", "unknown_goal",
        "goal_before_image", "image_without_goal", "dropped_stale", "watchdog_trips", "runner_errors",
        "bundle_errors", "config_errors", "memory_resets", "memory_saves", "memory_loads", "memory_errors",
        "executor_timeouts", "bad_events",
    )

    def __init__(self, node_name: str = "icrl_agent", *, runner_factory: RunnerFactory | None = None,
                 **kwargs: Any) -> None:
        super().__init__(node_name, **kwargs)
        self._lock = threading.RLock()
        self.runner: Any = None
        self.param_binding = declare_params(self, AgentParams, is_configured=lambda: self.runner is not None,
                                            on_live=self._apply_live, check=self._check_params)
        self.params: AgentParams = self.param_binding.read()  # the start-up values (refused ones: defaults)
        self._runner_factory = runner_factory or default_runner_factory
        self._control_group = MutuallyExclusiveCallbackGroup()
        self._status_group = MutuallyExclusiveCallbackGroup()
        self._steady = Clock(clock_type=ClockType.STEADY_TIME)  # timers: never stalled by a paused /clock
        self.pub_cmd: Any = None
        self.pub_action: Any = None
        self.counters: dict[str, int] = dict.fromkeys(self.COUNTERS, 0)
        self.latencies_ms: deque[float] = deque(maxlen=2000)  # image received -> action published
        self.act_ms: deque[float] = deque(maxlen=2000)  # the runner's own act() time, for comparison
        self.episode_stats = EpisodeStats()  # the running episode
        self.last_episode: dict[str, Any] = EpisodeStats().summary()  # the last finished one
        self.episodes_done = 0
        self.last_error = ""  # the last failed configure or runner error, for the status
        self._last_log: dict[str, float] = {}
        self._entities: list[tuple[str, Any]] = []
        self._control_timer: Any = None
        self._watchdogs: dict[str, Any] = {}
        self._act_trigger: Any = None
        self._reset_state()
        for name, reason in self.param_binding.start_errors.items():
            self._count("config_errors", f"parameter refused at start: {reason}", "error")
            self.last_error = reason
        # status from the start, in every state: a failed configure is visible without the log
        status_qos = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE,
                                durability=DurabilityPolicy.VOLATILE)
        p = self.params
        self._status_pubs = [self.create_publisher(DiagnosticArray, topic, status_qos)
                             for topic in dict.fromkeys((p.status_topic, p.diagnostics_topic)) if topic]
        self._status_timer = self.create_timer(1.0 / p.status_rate_hz, self.publish_status,
                                               callback_group=self._status_group, clock=self._steady)

    # -----------------------------------------------------------------------------------------
    # state

    def _reset_state(self) -> None:
        self.active = False
        self.goal: str | None = None  # goal of the running episode
        self._pending_goal: str | None = None  # begins at the next image
        self._resumed_goal: str | None = None  # episode restored by load_memory, until its first action
        self._bridge_trial: Any = None  # last trial index announced by a trial_start event
        self._origin: tuple[float, float, float] | None = None  # odometry pose the policy's frame starts at
        self.pose_frame = "episode"  # the bundle's training frame (set at configure, after this reset)
        self._stopped = False  # the policy chose stop; wait for a new goal
        self._seen_image = False
        self._odom: tuple[tuple[float, float, float], float] | None = None  # (pose, stamp)
        self._pending: tuple[Any, float, float] | None = None  # (Image msg, stamp, t_in): converted only if used
        self._gate = StampGate(self.params.time_jump_s)
        self._camera_rx = -math.inf
        self._odom_rx = -math.inf
        self._active_since = time.monotonic()
        self._stale = False
        self._ready_after = -math.inf
        self._last_info: dict[str, Any] = {}
        self.action_executor: ActionExecutor | None = None
        self._kinds: list[ActionKind] = []
        self._image_size: tuple[int, int] = (0, 0)
        self._goal_names: list[str] = []

    def _count(self, key: str, message: str, level: str = "warning") -> None:
        """Count one event and log it, at most once per log_throttle_s for each key."""
        with self._lock:
            self.counters[key] = self.counters.get(key, 0) + 1
            n = self.counters[key]
        self._log_throttled(key, f"{message} [{key}: {n}]", level)

    def _log_throttled(self, key: str, message: str, level: str = "warning") -> None:
        now = time.monotonic()
        if now - self._last_log.get(key, -math.inf) < self.params.log_throttle_s:
            return
        self._last_log[key] = now
        # one call site per severity: rclpy refuses two severities from one line
        logger = self.get_logger()
        if level == "error":
            logger.error(message)
        elif level == "warning":
            logger.warning(message)
        elif level == "info":
            logger.info(message)
        else:
            logger.debug(message)

    # -----------------------------------------------------------------------------------------
    # parameters

    def _executor_config(self, p: AgentParams) -> ExecutorConfig:
        action = self.runner.manifest.action if self.runner is not None else None
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

    def _check_params(self, p: AgentParams) -> None:
        """Cross-field checks of a runtime change (ValueError refuses the whole set)."""
        self._executor_config(p).validate()

    def _apply_live(self, names: list[str]) -> None:
        """Parameters set at runtime that apply at once (the rest were refused or wait for configure)."""
        with self._lock:
            old, p = self.params, self.param_binding.read()
            self.params = p
            self._gate.jump_s = p.time_jump_s
            if self.action_executor is not None:
                self.action_executor.config = self._executor_config(p).validate()
            if self.runner is not None:
                self._configure_actions(self.runner, p)
            if p.control_rate_hz != old.control_rate_hz and self._control_timer is not None:
                self._control_timer.timer_period_ns = int(1e9 / p.control_rate_hz)
            if p.status_rate_hz != old.status_rate_hz:
                self._status_timer.timer_period_ns = int(1e9 / p.status_rate_hz)
            if (p.input_timeout_s, p.watchdog_margin_s) != (old.input_timeout_s, old.watchdog_margin_s):
                for timer in self._watchdogs.values():
                    timer.timer_period_ns = int(1e9 * self._watch_period())
                    if self.active:
                        timer.reset()
        self.get_logger().info("parameters applied: " + ", ".join(f"{n}={getattr(p, n)!r}" for n in names))

    def _configure_actions(self, runner, p: AgentParams) -> None:
        """action_selection / sample_temperature, each empty / 0 = the bundle's (manifest action.selection /
        action.temperature, what it was evaluated with)."""
        if hasattr(runner, "configure_actions"):
            runner.configure_actions(p.action_selection or None, p.sample_temperature or None)

    def _watch_period(self) -> float:
        """The watchdog checks an input this long after it last arrived: the zero is out by input_timeout_s."""
        return self.params.input_timeout_s - self.params.watchdog_margin_s

    # -----------------------------------------------------------------------------------------
    # lifecycle

    def _configure_failed(self, key: str, message: str) -> TransitionCallbackReturn:
        self.last_error = message
        self._count(key, message, "error")
        self.publish_status()
        return TransitionCallbackReturn.FAILURE

    def on_configure(self, state: LifecycleState) -> TransitionCallbackReturn:
        if self.param_binding.start_errors:
            return self._configure_failed("config_errors", "configure: bad parameter: " + "; ".join(
                self.param_binding.start_errors.values()))
        try:
            self.params = p = self.param_binding.read()
        except ValueError as e:
            return self._configure_failed("config_errors", f"configure: bad parameter: {e}")
        bundle, tried = resolve_bundle_path(p.bundle_path)
        if not bundle:
            what = f"bundle_path {p.bundle_path!r}" if p.bundle_path else "bundle_path is empty and the shipped bundle"
            return self._configure_failed("bundle_errors", f"configure: {what} does not exist (tried {tried})")
        if not p.bundle_path:
            self.get_logger().info(f"bundle_path is empty: using the shipped default bundle {bundle!r}")
        try:
            runner = self._runner_factory(
                bundle, backend=p.backend, device=p.device, memory=p.memory or None,
                memory_budget_bytes=p.memory_budget_bytes or None)
            manifest = runner.manifest
            if manifest.observation.image_size is None:
                raise ValueError("manifest field 'observation.image_size' is missing: not an image policy")
            h, w = (int(v) for v in manifest.observation.image_size)
            goal_names = [str(g) for g in manifest.observation.goal_names]
            action_names = [str(a) for a in manifest.action.names]
            kinds = [ActionKind.from_name(a) for a in action_names]
            trained_frame = str(manifest.observation.frame)
        except Exception as e:  # BundleError, ValueError, KeyError, OSError, engine errors...
            hint = " (device:=cpu runs without a GPU)" if p.device == "cuda" else ""
            return self._configure_failed(
                "bundle_errors", f"configure: cannot load bundle {bundle!r}: {type(e).__name__}: {e}{hint}")
        if p.pose_frame and p.pose_frame != trained_frame:
            self._close_runner(runner)
            return self._configure_failed(
                "config_errors",
                f"configure: pose_frame is {p.pose_frame!r} but bundle {bundle!r} was trained with odometry in the "
                f"{trained_frame!r} frame (manifest observation.pose_frame); publish that frame on odom_topic and set "
                f"pose_frame:={trained_frame} (or leave it empty)")
        self.get_logger().info(
            f"odometry from {p.odom_topic!r} goes to the policy in the {trained_frame!r} frame (the bundle's): "
            + ("relative to the trial's first episode start (keep that odometry continuous over the trial)"
               if trained_frame == "house" else "relative to each episode's start"))
        if hasattr(runner, "generator"):  # PolicyRunner: argmax or seeded sampling
            runner.generator.manual_seed(p.sample_seed)
        self._configure_actions(runner, p)
        with self._lock:
            self._reset_state()
            self.runner = runner
            self.pose_frame = trained_frame
            try:
                self.action_executor = ActionExecutor(self._executor_config(p))
            except ValueError as e:
                self.runner = None
                self._close_runner(runner)
                return self._configure_failed("config_errors", f"configure: bad executor parameters: {e}")
            self._kinds = kinds
            self._image_size = (h, w)
            self._goal_names = goal_names
            self._create_entities(p)
        self.last_error = ""
        self.get_logger().info(
            f"configured: bundle {bundle!r} ({p.backend} on {p.device}), input {h}x{w}, "
            f"goals {goal_names}, actions {action_names}, mode {p.action_mode}, {p.action_selection} actions")
        self.publish_status()
        return TransitionCallbackReturn.SUCCESS

    def _create_entities(self, p: AgentParams) -> None:
        add = self._entities.append
        control = self._control_group
        # creation order = service order when several are ready: events, goal, odom, camera
        if p.episode_events_topic:
            # volatile on purpose: a replayed old trial_start must not wipe a restored memory
            events_qos = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE,
                                    durability=DurabilityPolicy.VOLATILE)
            add(("sub", self.create_subscription(String, p.episode_events_topic, self._on_event, events_qos)))
        goal_qos = QoSProfile(
            depth=1, reliability=ReliabilityPolicy.RELIABLE,
            durability=DurabilityPolicy.TRANSIENT_LOCAL if p.goal_transient_local else DurabilityPolicy.VOLATILE)
        add(("sub", self.create_subscription(String, p.goal_topic, self._on_goal, goal_qos)))
        add(("sub", self.create_subscription(Odometry, p.odom_topic, self._on_odom, qos_profile_sensor_data,
                                             callback_group=control)))
        add(("sub", self.create_subscription(Image, p.camera_topic, self._on_image, qos_profile_sensor_data)))
        self.pub_action = self.create_lifecycle_publisher(Int32, p.action_topic, 10)
        add(("lpub", self.pub_action))
        self.pub_cmd = None
        if p.action_mode == "twist":
            self.pub_cmd = self.create_lifecycle_publisher(Twist, p.cmd_vel_topic, 10)
            add(("lpub", self.pub_cmd))
        self._control_timer = self.create_timer(1.0 / p.control_rate_hz, self._on_control_tick,
                                                callback_group=control, clock=self._steady)
        add(("timer", self._control_timer))
        for kind in ("camera", "odometry"):  # one-shot style: re-armed by each message of its kind
            timer = self.create_timer(self._watch_period(), lambda k=kind: self._on_watchdog(k),
                                      callback_group=control, clock=self._steady, autostart=False)
            self._watchdogs[kind] = timer
            add(("timer", timer))
        self._act_trigger = self.create_guard_condition(self._try_act)
        add(("guard", self._act_trigger))
        add(("srv", self.create_service(Trigger, "~/reset_memory", self._srv_reset_memory)))
        add(("srv", self.create_service(Trigger, "~/save_memory", self._srv_save_memory)))
        add(("srv", self.create_service(Trigger, "~/load_memory", self._srv_load_memory)))

    def _release(self) -> None:
        with self._lock:
            self.active = False
            for kind, entity in reversed(self._entities):
                if kind == "sub":
                    self.destroy_subscription(entity)
                elif kind == "lpub":
                    self.destroy_lifecycle_publisher(entity)
                elif kind == "timer":
                    self.destroy_timer(entity)
                elif kind == "guard":
                    self.destroy_guard_condition(entity)
                elif kind == "srv":
                    self.destroy_service(entity)
            self._entities.clear()
            self._watchdogs.clear()
            self._control_timer = self._act_trigger = None
            self.pub_cmd = self.pub_action = None
            runner, self.runner = self.runner, None
            self._reset_state()
        self._close_runner(runner)

    @staticmethod
    def _close_runner(runner: Any) -> None:
        close = getattr(runner, "close", None)
        if callable(close):
            close()

    def on_activate(self, state: LifecycleState) -> TransitionCallbackReturn:
        with self._lock:
            self.active = True
            self._active_since = time.monotonic()
            self._stale = False
            for timer in self._watchdogs.values():  # before the first message, ages count from now
                timer.reset()
        self.get_logger().info("activated: acting")
        return super().on_activate(state)

    def on_deactivate(self, state: LifecycleState) -> TransitionCallbackReturn:
        self.stop_robot("deactivated")
        with self._lock:
            self.active = False
            self._pending = None
            for timer in self._watchdogs.values():
                timer.cancel()
        return super().on_deactivate(state)  # publishers go inactive after the zero went out

    def on_cleanup(self, state: LifecycleState) -> TransitionCallbackReturn:
        self._release()
        self.get_logger().info("cleaned up: runner released")
        return super().on_cleanup(state)

    def on_shutdown(self, state: LifecycleState) -> TransitionCallbackReturn:
        self.stop_robot("shutting down")
        self._release()
        return super().on_shutdown(state)

    def on_error(self, state: LifecycleState) -> TransitionCallbackReturn:
        self.get_logger().error(f"error during a transition from {state.label}; stopping and releasing everything")
        try:
            self.stop_robot("error")
            self._release()
        except Exception as e:  # pragma: no cover - best effort
            self.get_logger().error(f"release failed: {e}")
        return TransitionCallbackReturn.SUCCESS

    def stop_robot(self, why: str) -> bool:
        """Abort the current step and publish one zero velocity while the publisher is still active
        (deactivate, shutdown, error, process exit). True when a zero went out."""
        with self._lock:
            if self.action_executor is not None:
                self.action_executor.abort()
            self._pending = None
            pub = self.pub_cmd
            sent = pub is not None and self.active and pub.is_activated
            if sent:
                pub.publish(Twist())
            self.active = False  # nothing may publish a non-zero command after this
        if sent:
            self.get_logger().info(f"{why}: robot stopped, zero velocity sent")
        return sent

    def destroy_node(self) -> None:
        """Every way out of a process that still has its node passes here: stop the base first."""
        try:
            if self.stop_robot("node destroyed") and self.pub_cmd is not None:
                self.pub_cmd.wait_for_all_acked(Duration(seconds=0.5))  # reliable: the zero reached the base
        except Exception as e:  # noqa: BLE001 - never keep the process from exiting
            self.get_logger().error(f"could not send the final zero velocity: {type(e).__name__}: {e}")
        super().destroy_node()

    # -----------------------------------------------------------------------------------------
    # inputs

    def _on_event(self, msg: String) -> None:
        try:
            event = json.loads(msg.data)
            kind = event["event"]
        except (ValueError, KeyError, TypeError) as e:
            self._count("bad_events", f"episode event is not JSON with an 'event' key ({e}): {clip(msg.data)}")
            return
        if kind == "trial_start" and self.runner is not None:
            trial = event.get("trial")
            if trial is not None and trial == self._bridge_trial:
                return  # the same trial announced twice
            self._bridge_trial = trial
            self._reset_memory(f"trial_start event (trial {clip(trial)})")
        elif kind == "episode_end":
            self._tell_return(event)
            self._close_episode()  # the bridge ended it: its figures are final now

    def _tell_return(self, event: dict[str, Any]) -> None:
        """Hand the bridge's episode return to a runner that ranks memories by it (RA-DT: a robot
        gets no reward, so the stored episode's utility comes from here). The event names the
        bridge's episode, not the runner's: it is the episode of the last action when the step
        counts agree (the usual order, event before the next goal), else the one before it."""
        end = getattr(self.runner, "end_episode", None)
        info = self._last_info
        if end is None or "episode" not in info or not isinstance(event.get("return"), (int, float)):
            return
        same = int(info.get("step", -1)) + 1 == int(event.get("steps", -1))
        try:
            end(float(event["return"]), episode=int(info["episode"]) - (0 if same else 1))
        except Exception as e:  # noqa: BLE001 - the node must outlive a runner error
            self._count("runner_errors", f"runner.end_episode failed: {type(e).__name__}: {e}", "error")

    def _on_goal(self, msg: String) -> None:
        goal = msg.data.strip()
        if goal not in self._goal_names:
            self._count("unknown_goal", f"goal {clip(goal)} is not one of {self._goal_names}; ignored")
            return
        if goal == self._resumed_goal:
            # a restarted node receives the latched goal of the episode it just restored
            self._resumed_goal = None
            self.get_logger().info(f"goal {goal!r} continues the restored episode")
            return
        if not self._seen_image:
            self._count("goal_before_image", f"goal {goal!r} arrived before any image; it starts with the first one",
                        "info")
        self._pending_goal = goal  # takes effect at the next image: the episode-start pose is its odometry

    def _on_odom(self, msg: Odometry) -> None:
        """Control group: cheap, never waits for the policy."""
        try:
            pose = odometry_msg_to_pose(msg)
        except InputError as e:
            self._count("bad_odometry", f"odometry dropped: {e}")
            return
        with self._lock:
            self._odom = (pose, stamp_to_seconds(msg.header.stamp))
            self._odom_rx = time.monotonic()
            self._rearm("odometry")
            waiting = self._pending is not None and self._act_trigger is not None
        if waiting:
            self._act_trigger.trigger()  # the image waiting for this odometry acts (default group)

    def _on_image(self, msg: Image) -> None:
        """Keeps the newest usable frame; only a frame the policy then acts on is converted."""
        t_in = time.monotonic()
        with self._lock:
            self._camera_rx = t_in
            self._rearm("camera")
            self.counters["images_received"] += 1
            if not self.active:
                return
        try:
            check_image_msg(msg)  # O(1): header and length, no pixel read
        except InputError as e:
            self._count(f"bad_image_{e.field}", f"image dropped: {e}")
            return
        self._seen_image = True
        stamp = stamp_to_seconds(msg.header.stamp)
        with self._lock:
            last = self._gate.last_acted
            verdict = self._gate.check(stamp)
            if verdict == REPEAT:
                return  # a republished observation the policy has already acted on
            if verdict == BACK_DATED:
                self._count("back_dated_images", f"image dropped: stamped {stamp:.3f} s, before the last image acted "
                            f"on ({last:.3f} s)")
                return
            if verdict == JUMP:
                self._count("time_jumps", f"image stamps jumped back from {last:.3f} s to {stamp:.3f} s (bridge "
                            "restart, bag loop or sim-time reset): acting on the new stamps")
            self._pending = (msg, stamp, t_in)
        self._try_act()

    def _rearm(self, kind: str) -> None:
        """An input of ``kind`` arrived: its watchdog fires one period from now (lock held)."""
        timer = self._watchdogs.get(kind)
        if timer is not None and self.active:
            timer.reset()

    # -----------------------------------------------------------------------------------------
    # acting (default group)

    def _take_pending(self) -> tuple[Any, float, float, tuple[float, float, float]] | None:
        """The frame to act on now and its odometry pose, or None (lock held)."""
        p = self.params
        if not self.active or self._pending is None or self.runner is None:
            return None
        msg, stamp, t_in = self._pending
        if self._stale:
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
        if stamp > 0 and odom_stamp > 0 and odom_stamp + p.odom_sync_tolerance_s < stamp:
            return None  # odometry older than the image: wait for the matching one
        self._pending = None
        return msg, stamp, t_in, pose

    def _try_act(self) -> None:
        with self._lock:
            taken = self._take_pending()
        if taken is None:
            return
        msg, stamp, t_in, pose = taken
        if self._pending_goal is not None:
            self._close_episode()
            try:
                self.runner.begin_episode(self._pending_goal)
            except ValueError as e:
                self._count("unknown_goal", f"runner refused goal {clip(self._pending_goal)}: {e}")
                self._pending_goal = None
                return
            self.goal, self._pending_goal = self._pending_goal, None
            if self.pose_frame != "house" or self._origin is None:
                # episode frame: odometry from each episode's start pose; house frame: from the
                # trial's first start pose, kept until the memory is reset (a new house)
                self._origin = pose
            self._stopped = False
        if self.goal is None or self._origin is None:
            self._count("image_without_goal", "no goal yet: waiting for one on the goal topic", "info")
            return
        if self._stopped and self.params.idle_after_stop:
            return
        try:
            rgb = image_msg_to_rgb(msg, self._image_size)  # outside the lock: the control loop runs meanwhile
        except InputError as e:
            self._count(f"bad_image_{e.field}", f"image dropped: {e}")
            return
        self.counters["images_converted"] += 1
        obs = {"rgb": rgb, "odom": relative_pose(self._origin, pose)}
        try:
            action, info = self.runner.act(obs)
            action = int(action)
            kind = self._kinds[action]
        except Exception as e:  # the node must outlive an engine error
            self.last_error = f"runner.act failed: {type(e).__name__}: {e}"
            self._count("runner_errors", self.last_error, "error")
            return
        with self._lock:
            self._gate.acted(stamp)
            self._resumed_goal = None
            self._last_info = dict(info)
            if kind is ActionKind.STOP:
                self._stopped = True
            if not self.active or self._stale:  # stopped while the policy ran: do not move
                self.counters["dropped_stale"] += 1
                return
            self.pub_action.publish(Int32(data=action))
            latency_ms = (time.monotonic() - t_in) * 1e3
            self.latencies_ms.append(latency_ms)
            self.act_ms.append(float(info.get("latency_ms", 0.0)))
            self.episode_stats.add(latency_ms, info, self.goal)
            self.counters["actions"] += 1
            if self.pub_cmd is not None and self.action_executor is not None:
                self.action_executor.start(kind, pose)
                self._publish_twist()  # first command without waiting for the next tick

    def _publish_twist(self) -> None:
        """One executor update -> cmd_vel (lock held)."""
        if self.pub_cmd is None or self.action_executor is None or self._odom is None:
            return
        v, w, done = self.action_executor.update(self._odom[0], time.monotonic())
        if done and self.action_executor.result == "timeout":
            self._count("executor_timeouts", "step timed out before reaching its target")
        if done and self.action_executor.result in ("reached", "timeout", "stopped"):
            self.action_executor.result = None
            self._ready_after = time.monotonic() + self.params.settle_s
        msg = Twist()
        msg.linear.x, msg.angular.z = float(v), float(w)
        self.pub_cmd.publish(msg)

    # -----------------------------------------------------------------------------------------
    # control group: cmd_vel republish and the watchdog

    def _ages(self, now: float) -> tuple[float, float]:
        # before the first message of a kind, its age counts from activation
        return now - max(self._camera_rx, self._active_since), now - max(self._odom_rx, self._active_since)

    def _on_watchdog(self, kind: str) -> None:
        """No ``kind`` message for input_timeout_s - watchdog_margin_s: stop now."""
        with self._lock:
            if not self.active:
                return
            camera_age, odom_age = self._ages(time.monotonic())
            period = self._watch_period()
            if max(camera_age, odom_age) < period - 1e-3:
                return  # a message re-armed it while this callback waited for the lock
            self._trip(camera_age, odom_age)

    def _trip(self, camera_age: float, odom_age: float) -> None:
        """Inputs stale: abort the step, publish zero (lock held)."""
        if not self._stale:
            self._stale = True
            self.counters["watchdog_trips"] += 1
        if self.action_executor is not None:
            self.action_executor.abort()
        self._pending = None
        if self.pub_cmd is not None:
            self.pub_cmd.publish(Twist())
        self._log_throttled("stale", f"inputs stale (camera {camera_age:.2f} s, odometry {odom_age:.2f} s, "
                            f"timeout {self.params.input_timeout_s} s): robot stopped "
                            f"[watchdog_trips: {self.counters['watchdog_trips']}]")

    def _on_control_tick(self) -> None:
        """In twist mode the >= 10 Hz velocity republish; zero while stale or idle."""
        with self._lock:
            if not self.active:
                return
            camera_age, odom_age = self._ages(time.monotonic())
            if max(camera_age, odom_age) >= self._watch_period():
                self._trip(camera_age, odom_age)
                return
            if self._stale:
                self._stale = False
                self.get_logger().info("inputs fresh again: resuming")
            if self.pub_cmd is not None:
                if self.action_executor is not None and self.action_executor.busy:
                    self._publish_twist()
                else:
                    self.pub_cmd.publish(Twist())
            waiting = self._pending is not None and self._act_trigger is not None
        if waiting:
            self._act_trigger.trigger()

    # -----------------------------------------------------------------------------------------
    # memory services

    def _close_episode(self) -> None:
        """The running episode is over (new goal, episode_end event, memory reset): keep its figures
        as ``last_episode_*`` and publish a status at once, so consumers get one per episode."""
        if not self.episode_stats.steps:
            return
        with self._lock:
            self.last_episode = self.episode_stats.summary()
            self.episode_stats = EpisodeStats()
            self.episodes_done += 1
        self.publish_status()

    def _reset_memory(self, why: str) -> None:
        self._close_episode()
        self.runner.reset_trial()
        self.counters["memory_resets"] += 1
        if self.goal is not None and self._pending_goal is None:
            self._pending_goal = self.goal  # the same goal starts episode 0 of the new trial
        self.goal = None
        self._origin = None
        self._stopped = False
        with self._lock:
            self._gate.reset()  # a new trial: the frame in front of the robot is its first observation
            self._last_info = self._runner_info()
        self.get_logger().info(f"memory reset: {why}")

    def _runner_info(self) -> dict[str, Any]:
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

    def _memory_path(self) -> str:
        """Read live, so ``ros2 param set`` can point save / load at another file."""
        return os.path.expanduser(str(self.get_parameter("memory_path").value))

    def _srv_reset_memory(self, request: Trigger.Request, response: Trigger.Response) -> Trigger.Response:
        if self.runner is None:
            response.success, response.message = False, "not configured"
            return response
        self._reset_memory("service call")
        response.success, response.message = True, "memory cleared; the next goal starts trial episode 0"
        return response

    def _srv_save_memory(self, request: Trigger.Request, response: Trigger.Response) -> Trigger.Response:
        path = self._memory_path()
        if self.runner is None or not path:
            response.success, response.message = False, "not configured" if self.runner is None else "memory_path is empty"
            return response
        try:
            os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
            self.runner.snapshot(path)
            self._write_sidecar(path)
        except Exception as e:
            self._count("memory_errors", f"save_memory to {path!r} failed: {type(e).__name__}: {e}", "error")
            response.success, response.message = False, f"{type(e).__name__}: {e}"
            return response
        self.counters["memory_saves"] += 1
        info = self._runner_info()
        self.get_logger().info(f"memory saved to {path!r}: {info['memory_tokens']} tokens, trial {info['trial']} "
                               f"episode {info['episode']} step {info['step']}")
        response.success, response.message = True, f"saved to {path}"
        return response

    def _srv_load_memory(self, request: Trigger.Request, response: Trigger.Response) -> Trigger.Response:
        path = self._memory_path()
        if self.runner is None or not path:
            response.success, response.message = False, "not configured" if self.runner is None else "memory_path is empty"
            return response
        try:
            self.runner.restore(path)  # raises and leaves memory unchanged on a mismatch
        except Exception as e:
            self._count("memory_errors", f"load_memory from {path!r} failed: {type(e).__name__}: {e}", "error")
            response.success, response.message = False, f"{type(e).__name__}: {e}"
            return response
        self._read_sidecar(path)
        self.counters["memory_loads"] += 1
        with self._lock:
            self._last_info = self._runner_info()
            info = dict(self._last_info)
        self.get_logger().info(f"memory loaded from {path!r}: {info['memory_tokens']} tokens, trial {info['trial']} "
                               f"episode {info['episode']} step {info['step']}, goal {self.goal!r}")
        self.publish_status()
        response.success, response.message = True, f"loaded from {path}"
        return response

    # The runner's snapshot holds the memory; the node's own episode state (goal, episode-start
    # pose, stopped flag) goes beside it so a restarted node continues the same episode.
    def _write_sidecar(self, path: str) -> None:
        last = self._gate.last_acted
        state = {"goal": self.goal, "origin": list(self._origin) if self._origin else None,
                 "stopped": self._stopped, "last_acted_stamp": last if math.isfinite(last) else None}
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
        goal = state.get("goal")
        if goal in self._goal_names:
            self.goal = goal
            self._origin = tuple(state["origin"]) if state.get("origin") else None
            self._stopped = bool(state.get("stopped", False))
            if self._pending_goal == goal:
                self._pending_goal = None  # the latched goal of the episode we are continuing
            else:
                self._resumed_goal = goal  # ... or it is still on its way
            if state.get("last_acted_stamp") is not None:
                with self._lock:
                    self._gate.acted(float(state["last_acted_stamp"]))

    # -----------------------------------------------------------------------------------------
    # status

    def lifecycle_state(self) -> str:
        if self.active:
            return "active"
        return "inactive" if self.runner is not None else "unconfigured"

    def status(self) -> dict[str, Any]:
        with self._lock:  # the default and control groups write these
            info = dict(self._last_info)
            latencies, acts = list(self.latencies_ms), list(self.act_ms)
            counters, last_episode = dict(self.counters), dict(self.last_episode)
        return {
            "state": self.lifecycle_state(),
            "stale": self._stale,
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

    def publish_status(self) -> None:
        """The status on ``status_topic`` and ``diagnostics_topic`` (every state, from start-up)."""
        if not self._status_pubs:
            return
        s = self.status()
        level, message = DiagnosticStatus.OK, s["state"]
        if s["stale"]:
            level, message = DiagnosticStatus.WARN, "inputs stale: robot stopped"
        elif s["state"] == "unconfigured" and s["last_error"]:
            level, message = DiagnosticStatus.ERROR, f"unconfigured: {clip(s['last_error'], 200)}"
        elif s["state"] != "active":
            level = DiagnosticStatus.WARN
        array = DiagnosticArray()
        array.header.stamp = self.get_clock().now().to_msg()
        array.status = [DiagnosticStatus(
            level=level, name=f"{self.get_name()}: icrl_ros agent", message=message,
            hardware_id=self.get_fully_qualified_name(),
            values=[KeyValue(key=k, value=f"{v:.7g}" if isinstance(v, float) else str(v)) for k, v in s.items()])]
        for pub in self._status_pubs:
            pub.publish(array)


def clip(value: Any, limit: int = 64) -> str:
    """``repr`` of a value for a log line, cut to about ``limit`` characters (a 100 kB goal string
    must not flood the log)."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


def main(args: list[str] | None = None) -> None:
    """Console script: spin the lifecycle node (drive it with ``ros2 lifecycle set`` or a launch file).

    SIGINT and SIGTERM (Ctrl-C, ``ros2 launch`` stopping, ``kill``) are handled here rather than by
    rclpy, whose handler shuts the context down before the node could publish: the node first
    sends a zero velocity (``destroy_node``), then the process exits with status 0 (a repeated
    signal, as a terminal's Ctrl-C plus ``ros2 launch`` forwarding it, changes nothing). SIGKILL cannot be handled:
    there the base's own command timeout stops it (Fetch: 0.25 s).
    """
    use_shipped_profile()  # before rclpy starts DDS: camera frames need the large segment
    rclpy.init(args=args, signal_handler_options=SignalHandlerOptions.NO)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda signum, frame: stop.set())
    node: AgentNode | None = None
    executor = MultiThreadedExecutor(num_threads=4)
    try:
        node = AgentNode()
        executor.add_node(node)
        if node.params.autostart:  # once, at start; later transitions are the operator's
            if node.trigger_configure() == TransitionCallbackReturn.SUCCESS:
                node.trigger_activate()
        while not stop.is_set() and rclpy.ok():
            try:
                executor.spin_once(timeout_sec=0.1)
            except InvalidHandle:  # a timer or subscription taken just before cleanup destroyed it
                pass
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    finally:
        executor.shutdown(timeout_sec=2.0)
        if node is not None:
            node.destroy_node()  # zero velocity first (AgentNode.destroy_node)
        # keep our handlers: ros2 launch forwards the terminal's Ctrl-C once more, and the restored
        # default would turn that second SIGINT into a KeyboardInterrupt exit (-2) after a clean stop
        rclpy.try_shutdown(uninstall_handlers=False)
        for sig in (signal.SIGINT, signal.SIGTERM):  # the interpreter's own teardown restores SIG_DFL for
            signal.signal(sig, signal.SIG_IGN)  # Python handlers, not for ignored ones: a late signal is harmless


if __name__ == "__main__":
    main()
