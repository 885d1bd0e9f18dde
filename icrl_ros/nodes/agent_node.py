"""``agent_node``: the in-context RL policy as a ROS 2 lifecycle node.

configure  load the bundle (``PolicyRunner.from_bundle``: backend, device, memory policy and
           budget from parameters; an empty ``bundle_path`` = the shipped ``house_relic_scan``),
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

With ``introspection`` the memory of bundles that keep a route memory goes out on ``~/memory/sightings``,
``route_map``, ``route``, ``looked_at`` and ``attention`` (:mod:`~icrl_ros.nodes.introspection`) after a step
that changed what they show (at most once per ``introspection_period_s``; a step held back goes out when the period
is over) and on a reset or load, computed only while one of them has a subscriber (reliable,
transient local, depth 1: a viewer that joins while the robot idles gets the memory within 0.1 s).

The decisions above are :class:`~icrl_ros.nodes.agent_loop.AgentLoop`'s (no ROS, tested without
DDS); this module turns messages into its inputs and its outputs into messages.
"""

from __future__ import annotations

import math
import os
import signal
import threading
import time
from collections.abc import Callable
from typing import Any

import rclpy
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from geometry_msgs.msg import PoseStamped, PoseWithCovarianceStamped, Twist
from nav_msgs.msg import Odometry
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup
from rclpy.clock import Clock, ClockType
from rclpy.duration import Duration
from rclpy.exceptions import InvalidHandle
from rclpy.executors import ExternalShutdownException, SingleThreadedExecutor
from rclpy.lifecycle import LifecycleNode, LifecycleState, TransitionCallbackReturn
from rclpy.signals import SignalHandlerOptions
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy, qos_profile_sensor_data
from sensor_msgs.msg import Image, LaserScan
from std_msgs.msg import Int32, String
from std_srvs.srv import Trigger

from icrl_ros.nodes.action_executor import ActionExecutor, ExecutorConfig
from icrl_ros.nodes.agent_loop import COUNTERS, AgentIO, AgentLoop, RunnerSetup, clip, executor_config
from icrl_ros.nodes.convert import (
    InputError, check_image_msg, image_msg_to_rgb, odometry_msg_to_pose, pose_msg_to_pose, scan_msg_to_inputs,
    stamp_to_seconds,
)
from icrl_ros.nodes.dds import use_shipped_profile
from icrl_ros.nodes.lifetime import stop_with_parent
from icrl_ros.nodes.params import AgentParams
from icrl_ros.nodes.ros_params import declare_params
from icrl_ros.nodes.shipped import resolve_bundle_path

RunnerFactory = Callable[..., Any]
"""``factory(bundle_path, backend=, device=, memory=, memory_budget_bytes=) -> runner``."""


def default_runner_factory(path: str, **kwargs: Any) -> Any:
    from icrl_ros.runtime import PolicyRunner  # imported here: the node module loads without it

    return PolicyRunner.from_bundle(path, **kwargs)


class AgentNode(LifecycleNode):
    """Lifecycle node running a :class:`PolicyRunner` on camera + odometry + goal topics.

    The node owns the ROS side (parameters, topics, timers, services, the diagnostics message);
    every decision is :class:`~icrl_ros.nodes.agent_loop.AgentLoop`'s, which it feeds with what
    arrives and which publishes through it.

    Threads: the console script spins the node on a single-threaded executor, one callback at a
    time: only the frame the policy acts on is converted, so the longest callback is one act plus
    one conversion (measured: `cmd_vel` max 77 ms at 640x480, 169 ms at 1080p, 30 Hz camera). A
    4-thread ``MultiThreadedExecutor`` stalled the whole node for up to 3 s on this 2-core machine
    and dropped a third of the frames. The callback groups stay (the control group: odometry, the
    ``cmd_vel`` republish and watchdog timers; the default group: camera, goal, events, acting,
    services), and ``self.loop.lock`` guards the state both touch, so a multi-threaded executor
    also works.
    """

    COUNTERS = COUNTERS

    def __init__(self, node_name: str = "icrl_agent", *, runner_factory: RunnerFactory | None = None,
                 **kwargs: Any) -> None:
        super().__init__(node_name, **kwargs)
        self.param_binding = declare_params(self, AgentParams, is_configured=lambda: self.runner is not None,
                                            on_live=self._apply_live, check=self._check_params)
        params = self.param_binding.read()  # the start-up values (refused ones: defaults)
        self._runner_factory = runner_factory or default_runner_factory
        self._control_group = MutuallyExclusiveCallbackGroup()
        self._status_group = MutuallyExclusiveCallbackGroup()
        self._steady = Clock(clock_type=ClockType.STEADY_TIME)  # timers: never stalled by a paused /clock
        self.pub_cmd: Any = None
        self.pub_action: Any = None
        self._entities: list[tuple[str, Any]] = []
        self._control_timer: Any = None
        self._watchdogs: dict[str, Any] = {}
        self._scan_step_m = 0.0  # the bundle's forward step (manifest action.forward_m), set at configure
        self._scan_inputs: tuple[str, ...] = ()  # the encoder inputs the bundle reads from a scan, set at configure
        self._act_trigger: Any = None
        self._status_pubs: list[Any] = []
        self._memory_pubs: dict[str, Any] | None = None  # ~/memory/<name> publishers: introspection on a route memory
        self._memory_route: Any = None  # introspection.MemoryTopics: each topic's key and message
        self._memory_viewers = 0  # subscribers when the memory was last published (a new one gets it at once)
        self._memory_sent = -math.inf  # steady time the memory last went out
        self._memory_pending = False  # a step changed the memory since (introspection_period_s not over yet)
        self._memory_keys: dict[str, Any] = {}  # what each topic showed last (and where)
        self._odom_frame = "odom"  # frame id of the odometry acted on: the frame the memory is shown in
        self._pose_frame_id = "map"  # frame id of the localiser's pose (pose_source pose_topic): then the memory's
        self.loop = AgentLoop(params, AgentIO(
            action=lambda a: self.pub_action.publish(Int32(data=a)), log=self._log, convert=image_msg_to_rgb,
            twist=self._send_twist, status=self.publish_status, rearm=self._rearm, request_act=self._request_act,
            memory=self._publish_memory))
        for name, reason in self.param_binding.start_errors.items():
            self.loop.count("config_errors", f"parameter refused at start: {reason}", "error")
            self.loop.last_error = reason
        # status from the start, in every state: a failed configure is visible without the log
        status_qos = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE,
                                durability=DurabilityPolicy.VOLATILE)
        self._status_pubs = [self.create_publisher(DiagnosticArray, topic, status_qos)
                             for topic in dict.fromkeys((params.status_topic, params.diagnostics_topic)) if topic]
        self._status_timer = self.create_timer(1.0 / params.status_rate_hz, self.publish_status,
                                               callback_group=self._status_group, clock=self._steady)

    # the loop's state, as the node's (status, tests, the latency benchmark)
    params = property(lambda self: self.loop.params)
    runner = property(lambda self: self.loop.runner)
    counters = property(lambda self: self.loop.counters)
    active = property(lambda self: self.loop.active)
    last_error = property(lambda self: self.loop.last_error)
    action_executor = property(lambda self: self.loop.action_executor)
    pose_frame = property(lambda self: self.loop.pose_frame)
    latencies_ms = property(lambda self: self.loop.latencies_ms)
    act_ms = property(lambda self: self.loop.act_ms)
    goal = property(lambda self: self.loop.goal)

    def _log(self, level: str, message: str) -> None:
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

    def _send_twist(self, v: float, w: float) -> bool:
        pub = self.pub_cmd
        if pub is None or not pub.is_activated:
            return False
        msg = Twist()
        msg.linear.x, msg.angular.z = float(v), float(w)
        pub.publish(msg)
        return True

    def _request_act(self) -> None:
        """Acting runs in the default group (it owns the runner): wake it."""
        if self._act_trigger is not None:
            self._act_trigger.trigger()

    def _rearm(self, kind: str) -> None:
        """An input of ``kind`` arrived: its watchdog fires one period from now."""
        timer = self._watchdogs.get(kind)
        if timer is not None:
            timer.reset()

    # -----------------------------------------------------------------------------------------
    # parameters

    def _executor_config(self, p: AgentParams) -> ExecutorConfig:
        return executor_config(p, self.runner.manifest.action if self.runner is not None else None)

    def _check_params(self, p: AgentParams) -> None:
        """Cross-field checks of a runtime change (ValueError refuses the whole set)."""
        self._executor_config(p).validate()

    def _apply_live(self, names: list[str]) -> None:
        """Parameters set at runtime that apply at once (the rest were refused or wait for configure)."""
        loop = self.loop
        with loop.lock:
            old, p = loop.params, self.param_binding.read()
            loop.params = p
            loop.gate.jump_s = p.time_jump_s
            if loop.action_executor is not None:
                loop.action_executor.config = self._executor_config(p).validate()
            if loop.runner is not None:
                self._configure_actions(loop.runner, p)
            if p.control_rate_hz != old.control_rate_hz and self._control_timer is not None:
                self._control_timer.timer_period_ns = int(1e9 / p.control_rate_hz)
            if p.status_rate_hz != old.status_rate_hz:
                self._status_timer.timer_period_ns = int(1e9 / p.status_rate_hz)
            if (p.input_timeout_s, p.watchdog_margin_s) != (old.input_timeout_s, old.watchdog_margin_s):
                for timer in self._watchdogs.values():
                    timer.timer_period_ns = int(1e9 * loop.watch_period())
                    if loop.active:
                        timer.reset()
        self.get_logger().info("parameters applied: " + ", ".join(f"{n}={getattr(p, n)!r}" for n in names))

    def _configure_actions(self, runner, p: AgentParams) -> None:
        """action_selection / sample_temperature, each empty / 0 = the bundle's (manifest action.selection /
        action.temperature, what it was evaluated with)."""
        if hasattr(runner, "configure_actions"):
            runner.configure_actions(p.action_selection or None, p.sample_temperature or None)

    # -----------------------------------------------------------------------------------------
    # lifecycle

    def _configure_failed(self, key: str, message: str) -> TransitionCallbackReturn:
        self.loop.last_error = message
        self.loop.count(key, message, "error")
        self.publish_status()
        return TransitionCallbackReturn.FAILURE

    def on_configure(self, state: LifecycleState) -> TransitionCallbackReturn:
        if self.param_binding.start_errors:
            return self._configure_failed("config_errors", "configure: bad parameter: " + "; ".join(
                self.param_binding.start_errors.values()))
        try:
            self.loop.params = p = self.param_binding.read()
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
                memory_budget_bytes=p.memory_budget_bytes or None,
                **({"kv_dtype": p.kv_dtype} if p.kv_dtype else {}),  # a fake runner may not take them
                **({"threads": p.threads} if p.threads else {}))
            manifest = runner.manifest
            setup = RunnerSetup.of(runner)
            h, w = setup.image_size
            goal_names, action_names, kinds = setup.goal_names, setup.action_names, setup.kinds
            trained_frame, reads_scan = setup.pose_frame, setup.reads_scan
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
        try:
            executor = ActionExecutor(executor_config(p, manifest.action))
        except ValueError as e:
            self._close_runner(runner)
            return self._configure_failed("config_errors", f"configure: bad executor parameters: {e}")
        with self.loop.lock:
            self.loop.attach(runner, pose_frame=trained_frame, image_size=(h, w), goal_names=goal_names, kinds=kinds,
                             executor=executor, twist=p.action_mode == "twist", scan=reads_scan)
            self._scan_step_m, self._scan_inputs = setup.scan_step_m, setup.scan_inputs
            self._create_entities(p)
        self.loop.last_error = ""
        if reads_scan:
            what = {"scan": f"headings free for a {self._scan_step_m} m step with {p.scan_clearance_m} m clearance",
                    "scan_bands": "the nearest return in each band of the camera image (the floor it looks at)"}
            self.get_logger().info(
                f"the bundle reads a laser scan: sensor_msgs/LaserScan from {p.scan_topic!r} (base frame): "
                + "; ".join(what[n] for n in setup.scan_inputs))
        self.get_logger().info(
            f"configured: bundle {bundle!r} ({p.backend} on {p.device}), input {h}x{w}, "
            f"goals {goal_names}, actions {action_names}, mode {p.action_mode}, {selection_words(runner, p)}")
        self.publish_status()
        return TransitionCallbackReturn.SUCCESS

    def _create_entities(self, p: AgentParams) -> None:
        add = self._entities.append
        control = self._control_group
        # creation order = service order when several are ready: events, goal, odom, camera
        if p.episode_events_topic:
            # transient local: a bridge (re)started before the discovery finished still hands over its
            # latest events, whose run id tells a new house; a latched trial_start of the trial a loaded
            # memory belongs to is recognised by (run, trial) and does not wipe it (AgentLoop.event)
            events_qos = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE,
                                    durability=DurabilityPolicy.TRANSIENT_LOCAL)
            add(("sub", self.create_subscription(String, p.episode_events_topic, self._on_event, events_qos)))
        goal_qos = QoSProfile(
            depth=1, reliability=ReliabilityPolicy.RELIABLE,
            durability=DurabilityPolicy.TRANSIENT_LOCAL if p.goal_transient_local else DurabilityPolicy.VOLATILE)
        add(("sub", self.create_subscription(String, p.goal_topic, self._on_goal, goal_qos)))
        add(("sub", self.create_subscription(Odometry, p.odom_topic, self._on_odom, qos_profile_sensor_data,
                                             callback_group=control)))
        if p.pose_source == "pose_topic":
            pose_qos = (QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE,
                                   durability=DurabilityPolicy.TRANSIENT_LOCAL) if p.pose_transient_local else
                        QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE,
                                   durability=DurabilityPolicy.VOLATILE))
            pose_type = PoseStamped if p.pose_topic_type == "PoseStamped" else PoseWithCovarianceStamped
            add(("sub", self.create_subscription(pose_type, p.pose_topic, self._on_pose, pose_qos,
                                                 callback_group=control)))
        add(("sub", self.create_subscription(Image, p.camera_topic, self._on_image, qos_profile_sensor_data)))
        if self.loop.needs_scan:
            add(("sub", self.create_subscription(LaserScan, p.scan_topic, self._on_scan, qos_profile_sensor_data,
                                                 callback_group=control)))
        self.pub_action = self.create_lifecycle_publisher(Int32, p.action_topic, 10)
        add(("lpub", self.pub_action))
        self.pub_cmd = None
        if p.action_mode == "twist":
            self.pub_cmd = self.create_lifecycle_publisher(Twist, p.cmd_vel_topic, 10)
            add(("lpub", self.pub_cmd))
        self._control_timer = self.create_timer(1.0 / p.control_rate_hz, self.loop.control_tick,
                                                callback_group=control, clock=self._steady)
        add(("timer", self._control_timer))
        kinds = ("camera", "odometry") + (("scan",) if self.loop.needs_scan else ())
        for kind in kinds:  # one-shot style: re-armed by each message of its kind
            timer = self.create_timer(self.loop.watch_period(), lambda k=kind: self.loop.watchdog(k),
                                      callback_group=control, clock=self._steady, autostart=False)
            self._watchdogs[kind] = timer
            add(("timer", timer))
        self._act_trigger = self.create_guard_condition(self.loop.try_act)
        add(("guard", self._act_trigger))
        add(("srv", self.create_service(Trigger, "~/reset_memory", self._srv_reset_memory)))
        add(("srv", self.create_service(Trigger, "~/save_memory", self._srv_save_memory)))
        add(("srv", self.create_service(Trigger, "~/load_memory", self._srv_load_memory)))
        if p.introspection:
            self._create_introspection()

    def _create_introspection(self) -> None:
        """``~/memory/*`` publishers for a bundle with a route memory (else one log line and none)."""
        try:
            from icrl_ros.nodes import introspection
        except ImportError as e:  # visualization_msgs missing from a ROS install
            self.get_logger().warning(f"introspection: cannot import its messages ({e}); install "
                                      "visualization_msgs (ros-<distro>-visualization-msgs); not published")
            return
        if introspection.route_state(self.runner) is None:
            self.get_logger().info("introspection: the bundle's model keeps no route memory (bundles house_relic_scan "
                                   "and house_memo_scan do); ~/memory topics are not published")
            return
        qos = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL)
        self._memory_route = topics = introspection.MemoryTopics(self.runner)
        self._memory_pubs = {name: self.create_publisher(cls, f"~/memory/{name}", qos)
                             for name, cls in topics.types.items()}
        self._memory_viewers, self._memory_sent, self._memory_pending, self._memory_keys = 0, -math.inf, False, {}
        self._entities += [("pub", pub) for pub in self._memory_pubs.values()]
        # a viewer that joins while no step runs, a step held back by introspection_period_s: default group, so
        # never beside an act
        self._entities.append(("timer", self.create_timer(0.1, self._memory_viewer_check, clock=self._steady)))
        self.get_logger().info(f"introspection: the memory on {', '.join(p.topic_name for p in self._memory_pubs.values())} "
                               "while subscribed")

    def _memory_viewer_check(self) -> None:
        if self._memory_pubs is None:
            return
        viewers = sum(p.get_subscription_count() for p in self._memory_pubs.values())
        if viewers > self._memory_viewers:
            self._publish_memory("subscribed")
        elif self._memory_pending and time.monotonic() - self._memory_sent >= self.loop.params.introspection_period_s:
            self._publish_memory("held step")
        self._memory_viewers = viewers

    def _publish_memory(self, why: str) -> None:
        """The memory on the ~/memory topics, each only while it has a subscriber (nothing is computed
        otherwise). Runs on the default group, as acting does: the memory does not change meanwhile."""
        pubs = self._memory_pubs
        if pubs is None:
            return
        now = time.monotonic()
        if why == "step" and now - self._memory_sent < self.loop.params.introspection_period_s:
            self._memory_pending = True  # the check timer sends it once the period is over
            return
        self._memory_pending = False
        counts = {name: pub.get_subscription_count() for name, pub in pubs.items()}
        joined = sum(counts.values()) > self._memory_viewers
        self._memory_viewers = sum(counts.values())
        if not any(counts.values()):
            return
        from icrl_ros.nodes import introspection

        loop, topics = self.loop, self._memory_route
        try:
            ctx = {"origin": loop.origin or (0.0, 0.0, 0.0), "stamp": introspection.stamp_msg(loop.gate.last_acted),
                   "goal": getattr(self.runner, "goal", None), "robot": loop.last_pose,
                   "frame": self._pose_frame_id if loop.uses_localiser else self._odom_frame,
                   "goal_names": loop.goal_names}
            # a step that changes nothing a viewer shows sends nothing to viewers that have it (transient local
            # keeps the last for a late one): most steps add a sighting too faint to change the drawn ones, and the
            # map changes only when the robot enters a cell it had not stood on
            sent = False
            for name, pub in pubs.items():
                if not counts[name]:
                    continue
                key = topics.key(name, ctx)
                if why in ("step", "held step") and not joined and key == self._memory_keys.get(name):
                    continue
                pub.publish(topics.message(name, ctx))
                self._memory_keys[name], sent = key, True
            if sent:
                self._memory_sent = now
        except Exception as e:  # noqa: BLE001 - showing the memory must never stop the agent
            loop.count("introspection_errors", f"introspection ({why}) failed: {type(e).__name__}: {e}", "error")

    def _release(self) -> None:
        with self.loop.lock:
            self.loop.active = False
            for kind, entity in reversed(self._entities):
                if kind == "sub":
                    self.destroy_subscription(entity)
                elif kind == "lpub":
                    self.destroy_lifecycle_publisher(entity)
                elif kind == "pub":
                    self.destroy_publisher(entity)
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
            self._memory_pubs = self._memory_route = None
            runner = self.loop.detach()
        self._close_runner(runner)

    @staticmethod
    def _close_runner(runner: Any) -> None:
        close = getattr(runner, "close", None)
        if callable(close):
            close()

    def on_activate(self, state: LifecycleState) -> TransitionCallbackReturn:
        with self.loop.lock:
            self.loop.activate()
            for timer in self._watchdogs.values():  # before the first message, ages count from now
                timer.reset()
        self.get_logger().info("activated: acting")
        return super().on_activate(state)

    def on_deactivate(self, state: LifecycleState) -> TransitionCallbackReturn:
        with self.loop.lock:
            self.loop.stop_robot("deactivated")
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
        return self.loop.stop_robot(why)

    def destroy_node(self) -> None:
        """Every way out of a process that still has its node passes here: stop the base first."""
        try:
            if self.stop_robot("node destroyed") and self.pub_cmd is not None:
                self.pub_cmd.wait_for_all_acked(Duration(seconds=0.5))  # reliable: the zero reached the base
        except Exception as e:  # noqa: BLE001 - never keep the process from exiting
            self.get_logger().error(f"could not send the final zero velocity: {type(e).__name__}: {e}")
        super().destroy_node()

    # -----------------------------------------------------------------------------------------
    # inputs: messages -> plain values for the loop

    def _on_event(self, msg: String) -> None:
        self.loop.event(msg.data)

    def _on_goal(self, msg: String) -> None:
        self.loop.goal_message(msg.data)

    def _converted(self, convert, msg: Any, counter: str, what: str) -> Any:
        """``convert(msg)``, or None for a message it refuses: counted under ``counter``, logged (throttled)."""
        try:
            return convert(msg)
        except InputError as e:
            self.loop.count(counter, f"{what} dropped: {e}")
            return None

    def _on_odom(self, msg: Odometry) -> None:
        """Control group: cheap, never waits for the policy."""
        pose = self._converted(odometry_msg_to_pose, msg, "bad_odometry", "odometry")
        if pose is None:
            return
        self._odom_frame = msg.header.frame_id or "odom"
        self.loop.odometry(pose, stamp_to_seconds(msg.header.stamp))

    def _on_pose(self, msg: Any) -> None:
        """Control group: a localiser's map-frame pose (PoseStamped or PoseWithCovarianceStamped), cheap."""
        pose = self._converted(pose_msg_to_pose, msg, "bad_pose", "localiser pose")
        if pose is None:
            return
        self._pose_frame_id = msg.header.frame_id or "map"
        self.loop.localiser(pose, stamp_to_seconds(msg.header.stamp))

    def _on_scan(self, msg: LaserScan) -> None:
        """Control group: the bundle's scan inputs now (cheap: a few hundred returns), the scan itself is not kept."""
        values = self._converted(lambda m: scan_msg_to_inputs(m, self._scan_inputs, self._scan_step_m,
                                                              self.loop.params.scan_clearance_m),
                                 msg, "bad_scan", "laser scan")
        if values is None:
            return
        self.loop.scan(values, stamp_to_seconds(msg.header.stamp))

    def _on_image(self, msg: Image) -> None:
        """Keeps the newest usable frame; only a frame the policy then acts on is converted."""
        self.loop.image(msg, stamp_to_seconds(msg.header.stamp), check=check_image_msg)  # check: O(1), no pixel read

    # -----------------------------------------------------------------------------------------
    # memory services

    def _memory_path(self) -> str:
        """Read live, so ``ros2 param set`` can point save / load at another file."""
        return os.path.expanduser(str(self.get_parameter("memory_path").value))

    def _srv_reset_memory(self, request: Trigger.Request, response: Trigger.Response) -> Trigger.Response:
        if self.runner is None:
            response.success, response.message = False, "not configured"
            return response
        self.loop.reset_memory("service call")
        response.success, response.message = True, "memory cleared; the next goal starts trial episode 0"
        return response

    def _srv_save_memory(self, request: Trigger.Request, response: Trigger.Response) -> Trigger.Response:
        response.success, response.message = self.loop.save_memory(self._memory_path())
        return response

    def _srv_load_memory(self, request: Trigger.Request, response: Trigger.Response) -> Trigger.Response:
        response.success, response.message = self.loop.load_memory(self._memory_path())
        return response

    # -----------------------------------------------------------------------------------------
    # status

    def lifecycle_state(self) -> str:
        return self.loop.lifecycle_state()

    def status(self) -> dict[str, Any]:
        return self.loop.status()

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


def selection_words(runner: Any, p: AgentParams) -> str:
    """How the configured runner chooses actions, for the configure log: ``actions sampled at temperature 1
    (the bundle's)``, ``actions greedy (argmax; action_selection)``."""
    source = "action_selection / sample_temperature" if p.action_selection or p.sample_temperature else "the bundle's"
    greedy = getattr(runner, "greedy", None)
    if greedy is None:  # a runner without the selection attributes: say what was asked
        return f"actions {p.action_selection or 'as the bundle chooses'} ({source})"
    if greedy:
        return f"actions greedy (argmax; {source})"
    return f"actions sampled at temperature {getattr(runner, 'temperature', 1.0):g} (seed {p.sample_seed}; {source})"


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
    parent_note = stop_with_parent()  # started by our launch files: SIGTERM when ros2 launch dies
    node: AgentNode | None = None
    executor = SingleThreadedExecutor()  # see the class docstring: 4 threads stalled for seconds
    try:
        node = AgentNode()
        if parent_note:
            node.get_logger().info(parent_note)
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
