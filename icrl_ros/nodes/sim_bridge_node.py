"""``sim_bridge_node``: a registered Gymnasium env behind the robot's ROS interface.

The env follows the house-env contract (``icrl_ros/MiniWorldHouse-v0``): Discrete actions
(stop / forward / turn_left / turn_right), a dict observation ``{"rgb", "goal", "odom",
"prev_action"}`` with ``odom`` = (x, y, yaw) relative to the episode start, ``reset(options=
{"new_trial": True})`` for a new house, ``goal_names``, ``move_continuous(linear_m, angular_rad)``
and ``observe()``. Envs whose observation is a bare image work too (odometry then stays at 0).

Published: camera ``sensor_msgs/Image`` (rgb8) + ``CameraInfo``, ``nav_msgs/Odometry`` in
``pose_frame`` (``house``: one frame for the whole trial, like a base's odometry since boot or
a localisation map frame; ``episode``: re-anchored at each episode start, like a base whose
odometry is reset; the env computes both), the house-frame pose as ``geometry_msgs/PoseStamped``
on ``map_pose_topic`` (frame ``map_frame``) for envs with ``pose_in(frame)``, the true objects as a
``visualization_msgs/MarkerArray`` on ``objects_topic`` (frame ``map_frame``, at each episode start) for envs
with ``object_positions(frame)``, so a viewer shows the agent's ``~/memory`` beside the truth, TF odom ->
base_link (and map -> odom beside the map pose) when ``tf2_msgs`` is installed, goal ``std_msgs/String`` (transient local, once per
episode), reward ``std_msgs/Float32``, episode events ``std_msgs/String`` (JSON) and ``/clock``.

lockstep: each ``std_msgs/Int32`` on the action topic is one ``env.step``; the next observation
follows (or, after the episode ends, the next episode's goal and first observation). While
waiting, the current observation is republished with its old stamp (late joiners, lost
messages). realtime: ``cmd_vel`` is integrated with ``move_continuous`` at a fixed rate and
zeroed after ``cmd_timeout_s``; the stop action on the action topic ends the episode.
``max_episode_steps`` truncates episodes in the bridge (any env). ``episode_start`` events carry
the start pose (world x, z, yaw), and ``replay_episodes`` starts episodes at a list of such poses
and goals (another simulator's) for envs whose reset takes ``start`` / ``goal`` options. ``episode_end`` events carry
the env's world (x, z) trajectory of the episode (from ``info["agent_pose"]``, the frame of the
house env's top-down map) and the house seed, for plots.
"""

from __future__ import annotations

import json
import math
import signal
import threading
import time
import uuid
from typing import Any

import gymnasium as gym
import numpy as np
import rclpy
from geometry_msgs.msg import PoseStamped, PoseWithCovarianceStamped, TransformStamped, Twist
from nav_msgs.msg import Odometry
from rclpy.executors import ExternalShutdownException, SingleThreadedExecutor
from rclpy.node import Node
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
from rclpy.signals import SignalHandlerOptions
from rosgraph_msgs.msg import Clock
from sensor_msgs.msg import CameraInfo, Image, LaserScan
from std_msgs.msg import Float32, Int32, String
from std_srvs.srv import Trigger

from icrl_ros.geometry import between, map_to_odom
from icrl_ros.nodes.convert import quaternion_from_yaw, rgb_to_image_fields
from icrl_ros.nodes.dds import use_shipped_profile
from icrl_ros.nodes.lifetime import stop_with_parent
from icrl_ros.nodes.params import BridgeParams
from icrl_ros.nodes.ros_params import declare_params, read_params

try:  # not shipped as a PyPI wheel; present on a ROS install
    from tf2_msgs.msg import TFMessage
except ImportError:  # pragma: no cover - depends on the install
    TFMessage = None

LATCHED = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL)


POSE_FRAME_ENVS = ("icrl_ros/MiniWorldHouse-v0", "icrl_ros/HabitatExtObjNav-v0")  # envs taking pose_frame


def make_env(env_id: str, env_kwargs: dict[str, Any], pose_frame: str | None = None) -> gym.Env:
    """``gymnasium.make`` after importing ``icrl_ros.sim`` (which registers the project's ids);
    ``pose_frame`` goes to the envs that take one unless ``env_kwargs`` sets it."""
    try:
        import icrl_ros.sim  # noqa: F401  (registration side effect)
    except ImportError:
        pass
    kwargs = dict(env_kwargs)
    if pose_frame and env_id in POSE_FRAME_ENVS:
        kwargs.setdefault("pose_frame", pose_frame)
    return gym.make(env_id, **kwargs)


def _time_msg(seconds: float) -> Any:
    from builtin_interfaces.msg import Time

    sec = int(math.floor(seconds))
    return Time(sec=sec, nanosec=int(round((seconds - sec) * 1e9)) % 1_000_000_000)


def _transform(stamp: Any, parent: str, child: str, pose: tuple[float, float, float]) -> TransformStamped:
    t = TransformStamped()
    t.header.stamp = stamp
    t.header.frame_id = parent
    t.child_frame_id = child
    t.transform.translation.x, t.transform.translation.y = float(pose[0]), float(pose[1])
    r = t.transform.rotation
    r.x, r.y, r.z, r.w = quaternion_from_yaw(float(pose[2]))
    return t


class SimBridgeNode(Node):
    """Publishes an env's observations as robot topics and steps it on actions or ``cmd_vel``."""

    def __init__(self, node_name: str = "sim_bridge", *, env: gym.Env | None = None, **kwargs: Any) -> None:
        super().__init__(node_name, **kwargs)
        self.param_binding = declare_params(self, BridgeParams)  # every field is read-only: read here, once
        if self.param_binding.start_errors:
            raise ValueError("bad parameter: " + "; ".join(self.param_binding.start_errors.values()))
        self.params: BridgeParams = read_params(self, BridgeParams)
        p = self.params
        self.env = env if env is not None else make_env(p.env_id, json.loads(p.env_kwargs), p.pose_frame)
        self._base = self.env.unwrapped
        if not isinstance(self.env.action_space, gym.spaces.Discrete):
            raise ValueError(f"env_id: {p.env_id!r} has action space {self.env.action_space}; expected Discrete")
        if p.mode == "realtime" and not hasattr(self._base, "move_continuous"):
            raise ValueError(f"mode: realtime needs env.move_continuous(linear_m, angular_rad); {p.env_id!r} has none")

        self.sim_time = 1.0  # /clock starts at 1 s: a zero stamp reads as "unset" to many tools
        # every event carries this run's id: a restarted bridge counts trials from 0 again, and the agent
        # tells its new trial 0 from the old one by the id (not by the index)
        self.run_id = uuid.uuid4().hex[:12]
        self.trial = -1
        self.episode = -1
        self.episode_step = 0
        self.episode_return = 0.0
        self._episode_goal = ""  # the running episode's goal, as published
        self.episodes_done = 0
        self.counters = {"steps": 0, "bad_actions": 0, "episodes": 0, "episodes_ended": 0, "trials": 0}
        self._obs: Any = None
        self._stamp = self.sim_time
        self._cmd = (0.0, 0.0)
        self._cmd_time = -math.inf
        self._cmd_timed_out = True
        self._episode_t0 = self.sim_time
        self._tick = 0
        self._done = False  # episode over and auto_reset off: actions wait for ~/new_episode
        self._first_obs: Any = None
        self._first_obs_timer: Any = None
        self._trajectory: list[list[float]] = []  # world (x, z) of the episode so far (env info "agent_pose")
        self._replay = p.replayed_episodes() if p.replay_episodes else []
        self._started = 0  # episodes started (the index into _replay)

        self.pub_image = self.create_publisher(Image, p.camera_topic, 5)
        self.pub_info = self.create_publisher(CameraInfo, p.camera_info_topic, 5)
        self.pub_odom = self.create_publisher(Odometry, p.odom_topic, 10)
        self.pub_scan = None
        if p.scan_topic and callable(getattr(self._base, "laser_scan", None)):
            self.pub_scan = self.create_publisher(LaserScan, p.scan_topic, 10)
        self.pub_map_pose = None
        if p.map_pose_topic and callable(getattr(self._base, "pose_in", None)):
            self.pub_map_pose = self.create_publisher(PoseStamped, p.map_pose_topic, 10)
        self.pub_localiser = None
        if p.localiser_pose_topic and callable(getattr(self._base, "pose_in", None)):
            self.pub_localiser = self.create_publisher(PoseWithCovarianceStamped, p.localiser_pose_topic, QoSProfile(
                depth=1, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL))
        self._pose_noise = self._make_pose_noise()
        self._noise_trial = False  # a new trial: the noise model restarts at the next observation
        self._noise_episode = False  # a new episode: episode-frame odometry re-anchors at the next observation
        self._noise_t = self.sim_time
        self._odom_anchor = (0.0, 0.0, 0.0)  # drifting odometry at the episode start (pose_frame episode)
        self.pub_objects = None
        if p.objects_topic and callable(getattr(self._base, "object_positions", None)):
            try:
                from visualization_msgs.msg import MarkerArray
            except ImportError:  # pragma: no cover - depends on the install
                self.get_logger().info("visualization_msgs is not installed: the true objects are not published")
            else:
                self.pub_objects = self.create_publisher(MarkerArray, p.objects_topic, LATCHED)
        self.pub_goal = self.create_publisher(String, p.goal_topic, LATCHED)
        self.pub_reward = self.create_publisher(Float32, p.reward_topic, 10)
        self.pub_events = self.create_publisher(String, p.episode_events_topic, QoSProfile(
            depth=10, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL))
        self.pub_clock = self.create_publisher(Clock, "/clock", 10) if p.publish_clock else None
        self.pub_tf = None
        if p.publish_tf:
            if TFMessage is None:
                self.get_logger().info("tf2_msgs is not installed: no TF published (odometry carries the pose)")
            else:
                self.pub_tf = self.create_publisher(TFMessage, "/tf", 10)
                self.pub_tf_static = self.create_publisher(TFMessage, "/tf_static", LATCHED)

        self.create_subscription(Int32, p.action_topic, self._on_action, 10)
        if p.mode == "realtime":
            self.create_subscription(Twist, p.cmd_vel_topic, self._on_cmd_vel, 10)
            self.create_timer(1.0 / p.realtime_rate_hz, self._on_realtime_tick)
        elif p.republish_period_s > 0:
            self.create_timer(p.republish_period_s, self._republish)
        self.create_service(Trigger, "~/new_trial", self._srv_new_trial)
        self.create_service(Trigger, "~/new_episode", self._srv_new_episode)

        self._publish_static_tf()
        self._reset(new_trial=True, seed=p.seed)
        self.get_logger().info(
            f"bridging {p.env_id!r} in {p.mode} mode; goals {list(self.goal_names)}; "
            f"actions {self.env.action_space.n}")

    # -----------------------------------------------------------------------------------------
    # env access

    @property
    def goal_names(self) -> list[str]:
        return list(getattr(self._base, "goal_names", []))

    def _goal_name(self, obs: Any, info: dict[str, Any]) -> str:
        if "goal_name" in info:
            return str(info["goal_name"])
        if isinstance(obs, dict) and "goal" in obs:
            g = int(np.asarray(obs["goal"]).reshape(-1)[0])
            names = self.goal_names
            return names[g] if 0 <= g < len(names) else str(g)
        return ""

    @staticmethod
    def _rgb(obs: Any) -> np.ndarray:
        return np.asarray(obs["rgb"] if isinstance(obs, dict) else obs)

    @staticmethod
    def _odom(obs: Any) -> tuple[float, float, float]:
        if isinstance(obs, dict) and "odom" in obs:
            x, y, yaw = (float(v) for v in np.asarray(obs["odom"], dtype=np.float64).reshape(-1)[:3])
            return x, y, yaw
        return 0.0, 0.0, 0.0

    # -----------------------------------------------------------------------------------------
    # episodes

    def _reset(self, new_trial: bool, seed: int | None = None) -> None:
        options = {}
        if self._started < len(self._replay):
            options = {k: self._replay[self._started][k] for k in ("start", "goal")}
        self._started += 1
        self._noise_episode = True
        if new_trial:
            self._noise_trial = True
            obs, info = self.env.reset(seed=seed, options={"new_trial": True, **options})
            self.trial += 1
            self.episodes_done = 0
            self.counters["trials"] += 1
            self._event({"event": "trial_start", "trial": self.trial, **self._house(info)})
        else:
            obs, info = self.env.reset(options=options or None)
        self._trajectory = []
        self._record_pose(info)
        self.episode = int(info.get("episode_index", self.episode + 1))
        self.episode_step = 0
        self.episode_return = 0.0
        self._episode_t0 = self.sim_time
        self._done = False
        self.counters["episodes"] += 1
        goal = self._goal_name(obs, info)
        self._episode_goal = goal  # the episode_end event names it as the goal topic did
        start = info.get("agent_pose")  # world (x, z, yaw): what replay_episodes takes
        if options:
            self._check_replayed(options, start, goal)
        self._event({"event": "episode_start", "trial": self.trial, "episode": self.episode, "goal": goal,
                     **({"start": [round(float(v), 5) for v in np.asarray(start).reshape(-1)[:3]]}
                        if start is not None else {}),
                     **({"replayed": True} if options else {}), **self._house(info)})
        self.pub_goal.publish(String(data=goal))
        self._publish_objects(obs)
        self._advance(0.0)
        delay = self.params.episode_start_delay_s
        if self.params.mode == "lockstep" and delay > 0:
            # events and goal first, the observation a moment later: a subscriber gets them in that order
            self._cancel_first_obs()
            self._obs = None  # nothing to republish meanwhile (the last one belongs to the episode that ended)
            self._first_obs = obs
            self._first_obs_timer = self.create_timer(delay, self._publish_first_obs)
        else:
            self._publish_obs(obs, publish_image=True)

    def _check_replayed(self, options: dict[str, Any], pose: Any, goal: str) -> None:
        """Warn (and count) when the env did not start where replay_episodes asked: an env whose
        reset ignores start / goal options would otherwise pair nothing, silently."""
        want = np.asarray(options["start"], dtype=np.float64)
        got = None if pose is None else np.asarray(pose, dtype=np.float64).reshape(-1)[:3]
        off = (got is None or np.hypot(*(got[:2] - want[:2])) > 0.1
               or abs(math.remainder(got[2] - want[2], math.tau)) > 0.02 or goal != options["goal"])
        if off:
            self.counters["replay_mismatches"] = self.counters.get("replay_mismatches", 0) + 1
            self.get_logger().warning(
                f"replay_episodes: episode {self._started - 1} asked for start {want.round(3).tolist()} goal "
                f"{options['goal']!r}; the env started at {None if got is None else got.round(3).tolist()} goal "
                f"{goal!r} (does its reset take start / goal options?) "
                f"[replay_mismatches: {self.counters['replay_mismatches']}]", throttle_duration_sec=5.0)

    def _publish_first_obs(self) -> None:
        obs = self._first_obs
        self._cancel_first_obs()
        if obs is not None:
            self._publish_obs(obs, publish_image=True)

    def _cancel_first_obs(self) -> None:
        if self._first_obs_timer is not None:
            self.destroy_timer(self._first_obs_timer)
        self._first_obs_timer = None
        self._first_obs = None

    @staticmethod
    def _house(info: dict[str, Any]) -> dict[str, Any]:
        """The house (layout) seed for event consumers that redraw the map, when the env reports one."""
        return {"house_seed": int(info["house_seed"])} if "house_seed" in info else {}

    def _record_pose(self, info: dict[str, Any]) -> None:
        """Append the env's world (x, z) (``info["agent_pose"]``, the map frame of its top-down render)."""
        pose = info.get("agent_pose")
        if pose is not None:
            x, z = (round(float(v), 4) for v in np.asarray(pose, dtype=np.float64).reshape(-1)[:2])
            self._trajectory.append([x, z])

    def _end_episode(self, info: dict[str, Any], truncated: bool = False) -> None:
        self.episodes_done += 1
        self.counters["episodes_ended"] += 1
        self._done = True
        self._event({
            "event": "episode_end",
            "trial": self.trial,
            "episode": self.episode,
            "goal": str(info.get("goal_name", self._episode_goal)),
            "success": bool(info.get("success", False)),
            "spl": float(info.get("spl", 0.0)),
            "steps": int(info.get("episode_step", self.episode_step)),
            "return": float(self.episode_return),
            "truncated": bool(truncated),
            **self._house(info),
            **({"trajectory": self._trajectory} if self._trajectory else {}),
        })
        limit = self.params.max_episodes
        if limit and self.counters["episodes_ended"] >= limit:
            self.get_logger().info(f"max_episodes {limit} reached: no further episodes")
        elif self.params.auto_reset:
            n = self.params.episodes_per_trial
            self._reset(new_trial=bool(n and self.episodes_done >= n))

    def _step(self, action: int) -> None:
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.counters["steps"] += 1
        self.episode_step += 1
        self.episode_return += float(reward)
        self.pub_reward.publish(Float32(data=float(reward)))
        self._record_pose(info)
        cap = self.params.max_episode_steps
        if cap and not terminated and self.episode_step >= cap:
            truncated = True  # the bridge's own limit (tests, demos): a truncation like the env's
        if terminated or truncated:
            self._end_episode(info, truncated=bool(truncated and not terminated))
        else:
            self._publish_obs(obs, publish_image=True)

    def _event(self, payload: dict[str, Any]) -> None:
        payload = {**payload, "stamp": round(self.sim_time, 6), "run": self.run_id}
        self.pub_events.publish(String(data=json.dumps(payload, sort_keys=True)))

    # -----------------------------------------------------------------------------------------
    # publishing

    def _advance(self, dt: float) -> None:
        self.sim_time += dt
        if self.pub_clock is not None:
            self.pub_clock.publish(Clock(clock=_time_msg(self.sim_time)))

    def _make_pose_noise(self) -> Any:
        """The localisation error / odometry drift model (icrl_ros.sim.pose_noise), or None when both are off or the
        env reports no house-frame pose."""
        p = self.params
        from icrl_ros.sim.pose_noise import LocalisationNoise, OdometryDrift, PoseNoise

        loc = LocalisationNoise(p.loc_error_m, p.loc_error_deg, p.loc_tau_s)
        drift = OdometryDrift(p.odom_scale_error, p.odom_heading_noise, p.odom_bias_deg_per_min)
        if not (loc.active or drift.active):
            return None
        if not callable(getattr(self._base, "pose_in", None)):
            raise ValueError(f"loc_error_* / odom_*: env {p.env_id!r} reports no house-frame pose (pose_in) to add "
                             "localisation error or odometry drift to")
        self.get_logger().info(f"pose errors on: localisation {loc}, odometry drift {drift} (seed {p.pose_noise_seed})")
        return PoseNoise(loc, drift)

    def _noisy_poses(self, odom: tuple[float, float, float]) -> tuple[tuple[float, float, float],
                                                                      tuple[float, float, float] | None]:
        """(odometry to publish, localiser pose or None): the env's odometry and house-frame pose with the pose-error
        model applied (the model advances by the simulated time since its last update; a republished observation
        does not move it)."""
        if not callable(getattr(self._base, "pose_in", None)):
            return odom, None
        true = tuple(float(v) for v in self._base.pose_in("house"))
        n = self._pose_noise
        if n is None:
            return odom, true
        if self._noise_trial or n.true is None:
            n.rng = np.random.default_rng([self.params.pose_noise_seed, max(self.trial, 0)])
            n.reset(true)
            self._noise_trial = False
        else:
            n.advance(true, max(self.sim_time - self._noise_t, 0.0))
        self._noise_t = self.sim_time
        drifting = n.odom
        if self._noise_episode:
            self._odom_anchor = drifting
            self._noise_episode = False
        if self.params.pose_frame == "episode":
            drifting = between(self._odom_anchor, drifting)
        return drifting, n.localised

    def _publish_obs(self, obs: Any, publish_image: bool, twist: tuple[float, float] = (0.0, 0.0)) -> None:
        self._obs = obs
        self._stamp = self.sim_time
        stamp = _time_msg(self.sim_time)
        p = self.params
        (x, y, yaw), localised = self._noisy_poses(self._odom(obs))
        qx, qy, qz, qw = quaternion_from_yaw(yaw)
        odom = Odometry()
        odom.header.stamp = stamp
        odom.header.frame_id = p.odom_frame
        odom.child_frame_id = p.base_frame
        odom.pose.pose.position.x, odom.pose.pose.position.y = x, y
        o = odom.pose.pose.orientation
        o.x, o.y, o.z, o.w = qx, qy, qz, qw
        odom.twist.twist.linear.x, odom.twist.twist.angular.z = float(twist[0]), float(twist[1])
        self.pub_odom.publish(odom)
        transforms = [_transform(stamp, p.odom_frame, p.base_frame, (x, y, yaw))]
        if self.pub_map_pose is not None:
            mx, my, myaw = (float(v) for v in self._base.pose_in("house"))
            pose = PoseStamped()
            pose.header.stamp = stamp
            pose.header.frame_id = p.map_frame
            pose.pose.position.x, pose.pose.position.y = mx, my
            o = pose.pose.orientation
            o.x, o.y, o.z, o.w = quaternion_from_yaw(myaw)
            self.pub_map_pose.publish(pose)
        if localised is not None:
            # map -> odom as a localiser publishes it: its (noisy) map pose against the (drifting) odometry
            transforms.append(_transform(stamp, p.map_frame, p.odom_frame, map_to_odom(localised, (x, y, yaw))))
        if self.pub_localiser is not None and localised is not None:
            msg = PoseWithCovarianceStamped()
            msg.header.stamp = stamp
            msg.header.frame_id = p.map_frame
            msg.pose.pose.position.x, msg.pose.pose.position.y = localised[0], localised[1]
            o = msg.pose.pose.orientation
            o.x, o.y, o.z, o.w = quaternion_from_yaw(localised[2])
            var_xy, var_yaw = (p.loc_error_m ** 2) / 2 or 1e-4, math.radians(p.loc_error_deg) ** 2 or 1e-4
            cov = [0.0] * 36
            cov[0], cov[7], cov[35] = var_xy, var_xy, var_yaw
            msg.pose.covariance = cov
            self.pub_localiser.publish(msg)
        if self.pub_tf is not None:
            self.pub_tf.publish(TFMessage(transforms=transforms))
        # before the image: an agent that reads a scan acts once both are in. Only while someone listens: the
        # Habitat backend's navmesh laser costs ~0.1 s (an agent without a scan input does not subscribe)
        if self.pub_scan is not None and self.pub_scan.get_subscription_count() > 0:
            self.pub_scan.publish(self._scan_msg(stamp))
        if publish_image:
            fields = rgb_to_image_fields(self._rgb(obs))
            img = Image(**fields)
            img.header.stamp = stamp
            img.header.frame_id = p.camera_frame
            self.pub_info.publish(self._camera_info(fields["height"], fields["width"], stamp))
            self.pub_image.publish(img)

    def _publish_objects(self, obs: Any) -> None:
        """The env's true objects in the house frame (the goal's instances marked), for a viewer beside the memory."""
        if self.pub_objects is None:
            return
        from icrl_ros.nodes.introspection import true_objects

        cats, xy = self._base.object_positions("house")
        goal = int(np.asarray(obs["goal"]).reshape(-1)[0]) if isinstance(obs, dict) and "goal" in obs else None
        self.pub_objects.publish(true_objects(cats, xy, self.goal_names, goal, self.params.map_frame,
                                              _time_msg(self.sim_time)))

    def _scan_msg(self, stamp: Any) -> LaserScan:
        angle_min, increment, ranges, range_max = self._base.laser_scan()
        msg = LaserScan()
        msg.header.stamp = stamp
        msg.header.frame_id = self.params.base_frame
        msg.angle_min, msg.angle_increment = float(angle_min), float(increment)
        msg.angle_max = float(angle_min + increment * (len(ranges) - 1))
        msg.range_min, msg.range_max = 0.0, float(range_max)
        msg.ranges = [float(r) for r in ranges]
        return msg

    def _camera_info(self, height: int, width: int, stamp: Any) -> CameraInfo:
        f = (height / 2.0) / math.tan(math.radians(self.params.camera_fov_y_deg) / 2.0)  # square pixels
        cx, cy = width / 2.0, height / 2.0
        info = CameraInfo(height=height, width=width, distortion_model="plumb_bob")
        info.header.stamp = stamp
        info.header.frame_id = self.params.camera_frame
        info.d = [0.0] * 5
        info.k = [f, 0.0, cx, 0.0, f, cy, 0.0, 0.0, 1.0]
        info.r = [1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0]
        info.p = [f, 0.0, cx, 0.0, 0.0, f, cy, 0.0, 0.0, 0.0, 1.0, 0.0]
        return info

    def _publish_static_tf(self) -> None:
        if self.pub_tf is None:
            return
        p = self.params
        t = TransformStamped()
        t.header.stamp = _time_msg(self.sim_time)
        t.header.frame_id = p.base_frame
        t.child_frame_id = p.camera_frame
        t.transform.translation.z = p.camera_height_m
        r = t.transform.rotation  # optical frame: z forward, x right, y down
        r.x, r.y, r.z, r.w = -0.5, 0.5, -0.5, 0.5
        self.pub_tf_static.publish(TFMessage(transforms=[t]))

    # -----------------------------------------------------------------------------------------
    # callbacks

    def _on_action(self, msg: Int32) -> None:
        action = int(msg.data)
        n = int(self.env.action_space.n)
        if not 0 <= action < n:
            self.counters["bad_actions"] += 1
            self.get_logger().warning(f"action {action} is outside [0, {n}); ignored", throttle_duration_sec=2.0)
            return
        if self._done:
            self.get_logger().warning("episode over (auto_reset is off, or max_episodes reached): call ~/new_episode",
                                      throttle_duration_sec=2.0)
            return
        if self._first_obs is not None:
            self.counters["bad_actions"] += 1
            self.get_logger().warning("action before the episode's first observation; ignored", throttle_duration_sec=2.0)
            return
        if self.params.mode == "lockstep":
            self._advance(self.params.lockstep_dt_s)
            self._step(action)
        elif action == self.params.stop_action:  # realtime: only stop is a discrete event
            self._step(action)

    def _republish(self) -> None:
        """Lockstep idle: the current observation again, same stamp (duplicates are ignored by stamp)."""
        if self._obs is not None:
            saved = self.sim_time
            self.sim_time = self._stamp
            self._publish_obs(self._obs, publish_image=True)
            self.sim_time = saved

    def _on_cmd_vel(self, msg: Twist) -> None:
        v, w = float(msg.linear.x), float(msg.angular.z)
        if not (math.isfinite(v) and math.isfinite(w)):
            self.counters["bad_actions"] += 1
            self.get_logger().warning(f"cmd_vel with non-finite values ({v}, {w}); ignored", throttle_duration_sec=2.0)
            return
        self._cmd = (v, w)
        self._cmd_time = time.monotonic()
        self._cmd_timed_out = False

    def _on_realtime_tick(self) -> None:
        p = self.params
        dt = 1.0 / p.realtime_rate_hz
        if time.monotonic() - self._cmd_time > p.cmd_timeout_s:
            if not self._cmd_timed_out and self._cmd != (0.0, 0.0):
                self.get_logger().warning(f"cmd_vel older than {p.cmd_timeout_s} s: stopping")
            self._cmd_timed_out = True
            self._cmd = (0.0, 0.0)
        v, w = self._cmd
        if v != 0.0 or w != 0.0:
            self._base.move_continuous(v * dt, w * dt)
        self._advance(dt)
        self._tick += 1
        every = max(1, round(p.realtime_rate_hz / p.camera_rate_hz))
        obs = self._base.observe() if hasattr(self._base, "observe") else self._obs
        self._publish_obs(obs, publish_image=self._tick % every == 0, twist=(v, w))

    def _srv_new_trial(self, request: Trigger.Request, response: Trigger.Response) -> Trigger.Response:
        self._reset(new_trial=True)
        response.success = True
        response.message = f"trial {self.trial}, episode {self.episode}"
        return response

    def _srv_new_episode(self, request: Trigger.Request, response: Trigger.Response) -> Trigger.Response:
        self._reset(new_trial=False)
        response.success = True
        response.message = f"trial {self.trial}, episode {self.episode}"
        return response

    def destroy_node(self) -> None:
        try:
            env = getattr(self, "env", None)  # None when the constructor refused a parameter
            if env is not None:
                env.close()
        finally:
            super().destroy_node()


def main(args: list[str] | None = None) -> None:
    """Console script. SIGINT / SIGTERM end it with status 0, however often they come (a terminal's
    Ctrl-C reaches the process and ``ros2 launch`` forwards it once more)."""
    use_shipped_profile()  # camera frames of any size between processes (icrl_ros.nodes.dds)
    rclpy.init(args=args, signal_handler_options=SignalHandlerOptions.NO)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda signum, frame: stop.set())
    parent_note = stop_with_parent()  # started by our launch files: SIGTERM when ros2 launch dies
    node = None
    executor = SingleThreadedExecutor()
    try:
        node = SimBridgeNode()
        if parent_note:
            node.get_logger().info(parent_note)
        executor.add_node(node)
        while not stop.is_set() and rclpy.ok():
            executor.spin_once(timeout_sec=0.1)
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    finally:
        executor.shutdown(timeout_sec=2.0)
        if node is not None:
            node.destroy_node()
        rclpy.try_shutdown(uninstall_handlers=False)
        for sig in (signal.SIGINT, signal.SIGTERM):  # the interpreter's own teardown restores SIG_DFL for
            signal.signal(sig, signal.SIG_IGN)  # Python handlers, not for ignored ones: a late signal is harmless


if __name__ == "__main__":
    main()
