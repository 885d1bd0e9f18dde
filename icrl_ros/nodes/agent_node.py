"""``agent_node``: the in-context RL policy as a ROS 2 lifecycle node.

configure  load the bundle (``PolicyRunner.from_bundle``: backend, device, memory policy and
           budget from parameters; an empty ``bundle_path`` = the shipped ``house_memo``),
           create topics, timers and services
activate   start acting on camera + odometry + goal
deactivate stop: abort the current step and publish a zero velocity
cleanup    release the runner and every ROS entity; shutdown does the same from any state

One control step: the newest image (sensor-data QoS, any of rgb8 / bgr8 / rgba8 / bgra8 / mono8,
resized to the bundle's input) + odometry relative to the episode-start pose -> ``runner.act`` ->
``std_msgs/Int32`` (discrete, once per new image: lockstep with the bridge) and, in twist mode,
the :class:`ActionExecutor` driving ``cmd_vel`` closed loop at ``control_rate_hz``.

A goal message starts a new episode (memory kept); a ``trial_start`` event from the bridge or
the ``~/reset_memory`` service starts a new trial (memory cleared). Bad input of any kind is
counted, logged at most once per ``log_throttle_s`` per kind, and dropped: the node never
crashes on a message and never touches memory because of one. The watchdog stops the robot
when camera or odometry go stale and resumes when both are fresh. When an episode ends (new
goal, the bridge's ``episode_end``, a memory reset) its figures go out at once on the status
topic as ``last_episode_*`` (steps, latency, act time, memory).
"""

from __future__ import annotations

import json
import math
import os
import tempfile
import time
from collections import deque
from collections.abc import Callable
from typing import Any

import numpy as np
import rclpy
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from geometry_msgs.msg import Twist
from nav_msgs.msg import Odometry
from rclpy.executors import ExternalShutdownException, SingleThreadedExecutor
from rclpy.lifecycle import LifecycleNode, LifecycleState, TransitionCallbackReturn
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy, qos_profile_sensor_data
from sensor_msgs.msg import Image
from std_msgs.msg import Int32, String
from std_srvs.srv import Trigger

from icrl_ros.nodes.action_executor import ActionExecutor, ActionKind, ExecutorConfig
from icrl_ros.nodes.convert import (
    InputError,
    image_msg_to_rgb,
    odometry_msg_to_pose,
    relative_pose,
    stamp_to_seconds,
)
from icrl_ros.nodes.params import AgentParams
from icrl_ros.nodes.ros_params import declare_params, read_params
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
    own act time, and the memory size at the episode's last step."""

    def __init__(self) -> None:
        self.trial = -1
        self.episode = -1
        self.goal = ""
        self.latency_ms: list[float] = []
        self.act_ms: list[float] = []
        self.memory_tokens = 0
        self.memory_bytes = 0

    def add(self, latency_ms: float, info: dict[str, Any], goal: str) -> None:
        self.trial, self.episode, self.goal = int(info.get("trial", -1)), int(info.get("episode", -1)), goal
        self.latency_ms.append(latency_ms)
        self.act_ms.append(float(info.get("latency_ms", 0.0)))
        self.memory_tokens = int(info.get("memory_tokens", 0))
        self.memory_bytes = int(info.get("memory_bytes", 0))

    def summary(self) -> dict[str, Any]:
        """The ``last_episode_*`` status fields."""
        return {
            "last_episode_trial": self.trial,
            "last_episode": self.episode,
            "last_episode_goal": self.goal,
            "last_episode_steps": len(self.latency_ms),
            "last_episode_latency_mean_ms": float(np.mean(self.latency_ms)) if self.latency_ms else 0.0,
            "last_episode_latency_p99_ms": _percentile(self.latency_ms, 99),
            "last_episode_act_mean_ms": float(np.mean(self.act_ms)) if self.act_ms else 0.0,
            "last_episode_act_p99_ms": _percentile(self.act_ms, 99),
            "last_episode_memory_tokens": self.memory_tokens,
            "last_episode_memory_bytes": self.memory_bytes,
        }


class AgentNode(LifecycleNode):
    """Lifecycle node running a :class:`PolicyRunner` on camera + odometry + goal topics."""

    COUNTERS = (
        "actions", "bad_image_encoding", "bad_image_size", "bad_image_step", "bad_image_data",
        "bad_odometry", "unknown_goal", "goal_before_image", "image_without_goal", "dropped_stale",
        "watchdog_trips", "runner_errors", "bundle_errors", "config_errors", "memory_resets",
        "memory_saves", "memory_loads", "memory_errors", "executor_timeouts", "bad_events",
    )

    def __init__(self, node_name: str = "icrl_agent", *, runner_factory: RunnerFactory | None = None,
                 **kwargs: Any) -> None:
        super().__init__(node_name, **kwargs)
        declare_params(self, AgentParams)
        self._runner_factory = runner_factory or default_runner_factory
        self.pub_cmd: Any = None
        self.counters: dict[str, int] = dict.fromkeys(self.COUNTERS, 0)
        self.latencies_ms: deque[float] = deque(maxlen=2000)  # image received -> action published
        self.act_ms: deque[float] = deque(maxlen=2000)  # the runner's own act() time, for comparison
        self.pub_status: Any = None
        self.episode_stats = EpisodeStats()  # the running episode
        self.last_episode: dict[str, Any] = EpisodeStats().summary()  # the last finished one
        self.episodes_done = 0
        self._last_log: dict[str, float] = {}
        self.params: AgentParams | None = None
        self.runner: Any = None
        self._entities: list[tuple[str, Any]] = []
        self._reset_state()

    # -----------------------------------------------------------------------------------------
    # state

    def _reset_state(self) -> None:
        self.active = False
        self.goal: str | None = None  # goal of the running episode
        self._pending_goal: str | None = None  # begins at the next image
        self._resumed_goal: str | None = None  # episode restored by load_memory, until its first action
        self._bridge_trial: Any = None  # last trial index announced by a trial_start event
        self._origin: tuple[float, float, float] | None = None  # odometry pose at episode start
        self._stopped = False  # the policy chose stop; wait for a new goal
        self._seen_image = False
        self._odom: tuple[tuple[float, float, float], float] | None = None  # (pose, stamp)
        self._pending: tuple[np.ndarray, float, float] | None = None  # (rgb, stamp, t_in)
        self._last_acted_stamp = -math.inf
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
        self.counters[key] = self.counters.get(key, 0) + 1
        self._log_throttled(key, f"{message} [{key}: {self.counters[key]}]", level)

    def _log_throttled(self, key: str, message: str, level: str = "warning") -> None:
        now = time.monotonic()
        throttle = self.params.log_throttle_s if self.params else 2.0
        if now - self._last_log.get(key, -math.inf) < throttle:
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
    # lifecycle

    def on_configure(self, state: LifecycleState) -> TransitionCallbackReturn:
        try:
            self.params = p = read_params(self, AgentParams)
        except ValueError as e:
            self._count("config_errors", f"configure: bad parameter: {e}", "error")
            return TransitionCallbackReturn.FAILURE
        bundle, tried = resolve_bundle_path(p.bundle_path)
        if not bundle:
            what = f"bundle_path {p.bundle_path!r}" if p.bundle_path else "bundle_path is empty and the shipped bundle"
            self._count("bundle_errors", f"configure: {what} does not exist (tried {tried})", "error")
            return TransitionCallbackReturn.FAILURE
        if not p.bundle_path:
            self.get_logger().info(f"bundle_path is empty: using the shipped default bundle {bundle!r}")
        try:
            runner = self._runner_factory(
                bundle, backend=p.backend, device=p.device, memory=p.memory or None,
                memory_budget_bytes=p.memory_budget_bytes or None)
            manifest = runner.manifest
            h, w = (int(v) for v in manifest["observation"]["image_size"])
            goal_names = [str(g) for g in manifest["observation"]["goal_names"]]
            action_names = [str(a) for a in manifest["action"]["names"]]
            kinds = [ActionKind.from_name(a) for a in action_names]
            forward_m = p.forward_m or float(manifest["action"].get("forward_m", 0.25))
            turn_deg = p.turn_deg or float(manifest["action"].get("turn_deg", 30.0))
            executor = ActionExecutor(ExecutorConfig(
                forward_m=forward_m, turn_rad=math.radians(turn_deg),
                max_linear_speed=p.max_linear_speed, max_angular_speed=p.max_angular_speed,
                max_linear_accel=p.max_linear_accel, max_angular_accel=p.max_angular_accel,
                kp_linear=p.kp_linear, kp_angular=p.kp_angular, kp_heading=p.kp_heading,
                min_linear_speed=p.min_linear_speed, min_angular_speed=p.min_angular_speed,
                linear_tolerance_m=p.linear_tolerance_m,
                angular_tolerance_rad=math.radians(p.angular_tolerance_deg),
                timeout_s=p.action_timeout_s, first_dt_s=1.0 / p.control_rate_hz))
        except Exception as e:  # BundleError, ValueError, KeyError, OSError, engine errors...
            self._count("bundle_errors", f"configure: cannot load bundle {bundle!r}: {type(e).__name__}: {e}",
                        "error")
            return TransitionCallbackReturn.FAILURE

        if hasattr(runner, "greedy"):  # PolicyRunner: argmax or seeded sampling
            runner.greedy = p.action_selection == "greedy"
            runner.temperature = p.sample_temperature
            runner.generator.manual_seed(p.sample_seed)
        self._reset_state()
        self.runner = runner
        self.action_executor = executor
        self._kinds = kinds
        self._image_size = (h, w)
        self._goal_names = goal_names
        self._create_entities(p)
        self.get_logger().info(
            f"configured: bundle {bundle!r} ({p.backend} on {p.device}), input {h}x{w}, "
            f"goals {goal_names}, actions {action_names}, mode {p.action_mode}, {p.action_selection} actions")
        return TransitionCallbackReturn.SUCCESS

    def _create_entities(self, p: AgentParams) -> None:
        add = self._entities.append
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
        add(("sub", self.create_subscription(Odometry, p.odom_topic, self._on_odom, qos_profile_sensor_data)))
        add(("sub", self.create_subscription(Image, p.camera_topic, self._on_image, qos_profile_sensor_data)))
        self.pub_action = self.create_lifecycle_publisher(Int32, p.action_topic, 10)
        add(("lpub", self.pub_action))
        self.pub_cmd = None
        if p.action_mode == "twist":
            self.pub_cmd = self.create_lifecycle_publisher(Twist, p.cmd_vel_topic, 10)
            add(("lpub", self.pub_cmd))
        self.pub_status = self.create_publisher(DiagnosticArray, p.status_topic, 10)
        add(("pub", self.pub_status))
        add(("timer", self.create_timer(1.0 / p.control_rate_hz, self._on_control_tick)))
        add(("timer", self.create_timer(1.0 / p.status_rate_hz, self.publish_status)))
        add(("srv", self.create_service(Trigger, "~/reset_memory", self._srv_reset_memory)))
        add(("srv", self.create_service(Trigger, "~/save_memory", self._srv_save_memory)))
        add(("srv", self.create_service(Trigger, "~/load_memory", self._srv_load_memory)))

    def _release(self) -> None:
        for kind, entity in reversed(self._entities):
            if kind == "sub":
                self.destroy_subscription(entity)
            elif kind == "lpub":
                self.destroy_lifecycle_publisher(entity)
            elif kind == "pub":
                self.destroy_publisher(entity)
            elif kind == "timer":
                self.destroy_timer(entity)
            elif kind == "srv":
                self.destroy_service(entity)
        self._entities.clear()
        self.pub_cmd = None
        self.pub_status = None
        close = getattr(self.runner, "close", None)
        if callable(close):
            close()
        self.runner = None
        self._reset_state()

    def on_activate(self, state: LifecycleState) -> TransitionCallbackReturn:
        self.active = True
        self._active_since = time.monotonic()
        self._stale = False
        self.get_logger().info("activated: acting")
        return super().on_activate(state)

    def on_deactivate(self, state: LifecycleState) -> TransitionCallbackReturn:
        self._halt()
        self.active = False
        self._pending = None
        self.get_logger().info("deactivated: stopped, zero velocity sent")
        return super().on_deactivate(state)  # publishers go inactive after the zero went out

    def on_cleanup(self, state: LifecycleState) -> TransitionCallbackReturn:
        self._release()
        self.get_logger().info("cleaned up: runner released")
        return super().on_cleanup(state)

    def on_shutdown(self, state: LifecycleState) -> TransitionCallbackReturn:
        if self.active:
            self._halt()
        self._release()
        return super().on_shutdown(state)

    def on_error(self, state: LifecycleState) -> TransitionCallbackReturn:
        self.get_logger().error(f"error during a transition from {state.label}; releasing everything")
        try:
            self._release()
        except Exception as e:  # pragma: no cover - best effort
            self.get_logger().error(f"release failed: {e}")
        return TransitionCallbackReturn.SUCCESS

    def _halt(self) -> None:
        """Abort the current step and send one zero velocity (while publishers are still active)."""
        if self.action_executor is not None:
            self.action_executor.abort()
        if self.pub_cmd is not None and self.active:
            self.pub_cmd.publish(Twist())

    # -----------------------------------------------------------------------------------------
    # inputs

    def _on_event(self, msg: String) -> None:
        try:
            event = json.loads(msg.data)
            kind = event["event"]
        except (ValueError, KeyError, TypeError) as e:
            self._count("bad_events", f"episode event is not JSON with an 'event' key ({e}): {msg.data[:80]!r}")
            return
        if kind == "trial_start" and self.runner is not None:
            trial = event.get("trial")
            if trial is not None and trial == self._bridge_trial:
                return  # the same trial announced twice
            self._bridge_trial = trial
            self._reset_memory(f"trial_start event (trial {trial})")
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
            self._count("unknown_goal", f"goal {goal!r} is not one of {self._goal_names}; ignored")
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
        try:
            pose = odometry_msg_to_pose(msg)
        except InputError as e:
            self._count("bad_odometry", f"odometry dropped: {e}")
            return
        self._odom = (pose, stamp_to_seconds(msg.header.stamp))
        self._odom_rx = time.monotonic()
        if self._pending is not None:
            self._try_act()

    def _on_image(self, msg: Image) -> None:
        t_in = time.monotonic()
        self._camera_rx = t_in
        if not self.active:
            return
        try:
            rgb = image_msg_to_rgb(msg, self._image_size)
        except InputError as e:
            self._count(f"bad_image_{e.field}", f"image dropped: {e}")
            return
        self._seen_image = True
        stamp = stamp_to_seconds(msg.header.stamp)
        if stamp <= self._last_acted_stamp:
            return  # a republished observation the policy has already acted on
        self._pending = (rgb, stamp, t_in)
        self._try_act()

    # -----------------------------------------------------------------------------------------
    # acting

    def _try_act(self) -> None:
        if not self.active or self._pending is None or self.runner is None or self.params is None:
            return
        p = self.params
        rgb, stamp, t_in = self._pending
        if self._stale:
            self._pending = None
            self._count("dropped_stale", "image dropped: inputs are stale", "debug")
            return
        if self.action_executor is not None and self.action_executor.busy:
            return  # twist mode: the step in progress finishes first; newer images replace this one
        if t_in < self._ready_after:
            self._pending = None  # taken while the base was still moving
            return
        if self._odom is None:
            return  # wait for odometry (the watchdog reports if it never comes)
        pose, odom_stamp = self._odom
        if stamp > 0 and odom_stamp > 0 and odom_stamp + p.odom_sync_tolerance_s < stamp:
            return  # odometry older than the image: wait for the matching one
        if self._pending_goal is not None:
            self._close_episode()
            try:
                self.runner.begin_episode(self._pending_goal)
            except ValueError as e:
                self._count("unknown_goal", f"runner refused goal {self._pending_goal!r}: {e}")
                self._pending_goal = None
                return
            self.goal, self._pending_goal = self._pending_goal, None
            self._origin = pose
            self._stopped = False
        if self.goal is None or self._origin is None:
            self._pending = None
            self._count("image_without_goal", "no goal yet: waiting for one on the goal topic", "info")
            return
        if self._stopped and p.idle_after_stop:
            self._pending = None
            return
        self._pending = None
        obs = {"rgb": rgb, "odom": relative_pose(self._origin, pose)}
        try:
            action, info = self.runner.act(obs)
            action = int(action)
            kind = self._kinds[action]
        except Exception as e:  # the node must outlive an engine error
            self._count("runner_errors", f"runner.act failed: {type(e).__name__}: {e}", "error")
            return
        self._last_acted_stamp = stamp
        self._resumed_goal = None
        self.pub_action.publish(Int32(data=action))
        latency_ms = (time.monotonic() - t_in) * 1e3
        self.latencies_ms.append(latency_ms)
        self.act_ms.append(float(info.get("latency_ms", 0.0)))
        self.episode_stats.add(latency_ms, info, self.goal)
        self.counters["actions"] += 1
        self._last_info = dict(info)
        if kind is ActionKind.STOP:
            self._stopped = True
        if self.pub_cmd is not None and self.action_executor is not None:
            self.action_executor.start(kind, pose)
            self._publish_twist()  # first command without waiting for the next tick

    def _publish_twist(self) -> None:
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

    def _on_control_tick(self) -> None:
        """Watchdog and, in twist mode, the >= 10 Hz velocity republish."""
        if not self.active or self.params is None:
            return
        now = time.monotonic()
        timeout = self.params.input_timeout_s
        # before the first message of a kind, its age counts from activation
        camera_age = now - max(self._camera_rx, self._active_since)
        odom_age = now - max(self._odom_rx, self._active_since)
        if camera_age > timeout or odom_age > timeout:
            if not self._stale:
                self._stale = True
                self.counters["watchdog_trips"] += 1
            if self.action_executor is not None:
                self.action_executor.abort()
            self._pending = None
            self._log_throttled("stale", f"inputs stale (camera {camera_age:.2f} s, odometry {odom_age:.2f} s, "
                                f"timeout {timeout} s): robot stopped [watchdog_trips: {self.counters['watchdog_trips']}]")
            if self.pub_cmd is not None:
                self.pub_cmd.publish(Twist())
            return
        if self._stale:
            self._stale = False
            self.get_logger().info("inputs fresh again: resuming")
        if self.pub_cmd is not None:
            if self.action_executor is not None and self.action_executor.busy:
                self._publish_twist()
            else:
                self.pub_cmd.publish(Twist())
        if self._pending is not None:
            self._try_act()

    # -----------------------------------------------------------------------------------------
    # memory services

    def _close_episode(self) -> None:
        """The running episode is over (new goal, episode_end event, memory reset): keep its figures
        as ``last_episode_*`` and publish a status at once, so consumers get one per episode."""
        if not self.episode_stats.latency_ms:
            return
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
        self.get_logger().info(f"memory reset: {why}")

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
        response.success, response.message = True, f"loaded from {path}"
        return response

    # The runner's snapshot holds the memory; the node's own episode state (goal, episode-start
    # pose, stopped flag) goes beside it so a restarted node continues the same episode.
    def _write_sidecar(self, path: str) -> None:
        state = {"goal": self.goal, "origin": list(self._origin) if self._origin else None,
                 "stopped": self._stopped, "last_acted_stamp": self._last_acted_stamp
                 if math.isfinite(self._last_acted_stamp) else None}
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
                self._last_acted_stamp = float(state["last_acted_stamp"])

    # -----------------------------------------------------------------------------------------
    # status

    def status(self) -> dict[str, Any]:
        info = self._last_info
        state = "active" if self.active else ("inactive" if self.runner is not None else "unconfigured")
        return {
            "state": state,
            "stale": self._stale,
            "goal": self.goal or "",
            "latency_p50_ms": _percentile(self.latencies_ms, 50),
            "latency_p99_ms": _percentile(self.latencies_ms, 99),
            "act_p50_ms": _percentile(self.act_ms, 50),
            "act_p99_ms": _percentile(self.act_ms, 99),
            "memory_tokens": info.get("memory_tokens", 0),
            "memory_bytes": info.get("memory_bytes", 0),
            "memory_entries": info.get("retrieved_entries", 0),  # RA-DT: sub-trajectories in the index
            "episode": info.get("episode", -1),
            "trial": info.get("trial", -1),
            "step": info.get("step", -1),
            "value": float(info.get("value", 0.0)),  # the critic's estimate at the last step
            "episodes_done": self.episodes_done,
            **self.last_episode,
            **self.counters,
        }

    def publish_status(self) -> None:
        if self.pub_status is None:
            return
        s = self.status()
        level = DiagnosticStatus.OK
        message = s["state"]
        if s["stale"]:
            level, message = DiagnosticStatus.WARN, "inputs stale: robot stopped"
        elif s["state"] != "active":
            level = DiagnosticStatus.WARN
        array = DiagnosticArray()
        array.header.stamp = self.get_clock().now().to_msg()
        array.status = [DiagnosticStatus(
            level=level, name=f"{self.get_name()}: icrl_ros agent", message=message,
            hardware_id=self.get_fully_qualified_name(),
            values=[KeyValue(key=k, value=f"{v:.7g}" if isinstance(v, float) else str(v)) for k, v in s.items()])]
        self.pub_status.publish(array)


def main(args: list[str] | None = None) -> None:
    """Console script: spin the lifecycle node (drive it with ``ros2 lifecycle set`` or a launch file)."""
    try:
        rclpy.init(args=args)
        node = AgentNode()
        executor = SingleThreadedExecutor()
        executor.add_node(node)
        if node.get_parameter("autostart").value:
            if node.trigger_configure() == TransitionCallbackReturn.SUCCESS:
                node.trigger_activate()
        try:
            executor.spin()
        finally:
            node.destroy_node()
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    finally:
        rclpy.try_shutdown()


if __name__ == "__main__":
    main()
