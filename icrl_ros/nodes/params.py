"""Node parameters as typed dataclasses: one documented field per ROS parameter.

The nodes declare one ROS parameter per field (description, range and choices go into the
``ParameterDescriptor``), read them back into the dataclass and call :meth:`validate`, which
raises ``ValueError`` quoting the bad value. Pure Python: the config files and docs are
checked against these fields without ROS.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from icrl_ros.families import memory_policies

BACKENDS = ("onnxruntime", "torch", "tensorrt")
DEVICES = ("cpu", "cuda")
MEMORY_POLICIES = ("", *memory_policies())  # "" (the bundle's default) + every family's (the registry imports no torch)
KV_DTYPES = ("", "fp32", "fp16", "int8", "int8_gqa")  # "" + icrl_ros.memory.quant.KV_DTYPES
ACTION_MODES = ("discrete", "twist")
ACTION_SELECTIONS = ("", "sample", "greedy")  # "" + icrl_ros.runtime.manifest.ACTION_SELECTIONS
BRIDGE_MODES = ("lockstep", "realtime")
POSE_SOURCES = ("odom", "pose_topic")
POSE_TOPIC_TYPES = ("PoseWithCovarianceStamped", "PoseStamped")


APPLY_LIVE = "live"
"""Applied as soon as ``ros2 param set`` succeeds (safe to change while driving)."""
APPLY_CONFIGURE = "configure"
"""Read at configure: settable while unconfigured, refused with the reason while configured."""
APPLY_START = "start"
"""Read once when the process starts: a read-only parameter (``ros2 param set`` is refused)."""


def spec(doc: str, *, choices: tuple[str, ...] | None = None, min: float | None = None,
         max: float | None = None, apply: str = APPLY_START) -> dict[str, Any]:
    """Field metadata: the ROS parameter's description, allowed strings, numeric range and when
    a change takes effect (``apply``: live, configure or start)."""
    assert apply in (APPLY_LIVE, APPLY_CONFIGURE, APPLY_START), apply
    return {"doc": doc, "choices": choices, "min": min, "max": max, "apply": apply}


def _param(default: Any, doc: str, **kw: Any) -> Any:
    return field(default=default, metadata=spec(doc, **kw))


class ParamsBase:
    """Shared checks for the parameter dataclasses."""

    def validate(self) -> "ParamsBase":
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            check_value(f, getattr(self, f.name))
        return self

    @classmethod
    def field_specs(cls) -> list[dataclasses.Field]:
        return list(dataclasses.fields(cls))  # type: ignore[arg-type]

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> "ParamsBase":
        names = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
        unknown = sorted(set(values) - names)
        if unknown:
            raise ValueError(f"unknown parameter(s) {unknown}; known: {sorted(names)}")
        fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
        return cls(**{k: coerce(fields[k], v) for k, v in values.items()}).validate()  # type: ignore[call-arg]


def coerce(f: dataclasses.Field, value: Any) -> Any:
    """An integer given for a float field is that float (``max_linear_speed: 1`` in a YAML file,
    ``ros2 param set ... control_rate_hz 20``); everything else is returned unchanged."""
    if isinstance(f.default, float) and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    return value


def check_value(f: dataclasses.Field, value: Any) -> None:
    """Raise ValueError naming the parameter if ``value`` breaks the field's type, range or choices."""
    meta = f.metadata
    default = f.default
    if isinstance(default, bool):
        ok = isinstance(value, bool)
    elif isinstance(default, int):
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif isinstance(default, float):
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    else:
        ok = isinstance(value, str)
    if not ok:
        raise ValueError(f"{f.name}: {value!r} is not allowed; it takes {allowed(f)}")
    if meta.get("choices") is not None and value not in meta["choices"]:
        raise ValueError(f"{f.name}: {value!r} is not one of {list(meta['choices'])}")
    if meta.get("min") is not None and value < meta["min"]:
        raise ValueError(f"{f.name}: {value!r} is below the minimum {meta['min']}")
    if meta.get("max") is not None and value > meta["max"]:
        raise ValueError(f"{f.name}: {value!r} is above the maximum {meta['max']}")


def allowed(f: dataclasses.Field) -> str:
    """What a field takes, in words: ``a finite number >= 0.01 (not nan or inf)``, ``an integer``, ..."""
    default = f.default
    if isinstance(default, bool):
        return "true or false"
    if isinstance(default, int):
        kind = "an integer"
    elif isinstance(default, float):
        kind = "a finite number"
    else:
        return "a string" if f.metadata.get("choices") is None else f"one of {list(f.metadata['choices'])}"
    lo, hi = f.metadata.get("min"), f.metadata.get("max")
    if lo is not None and hi is not None:
        kind += f" from {lo} to {hi}"
    elif lo is not None:
        kind += f" >= {lo}"
    elif hi is not None:
        kind += f" <= {hi}"
    return kind + (" (not nan or inf)" if isinstance(default, float) else "")


def _live(default: Any, doc: str, **kw: Any) -> Any:
    return _param(default, doc, apply=APPLY_LIVE, **kw)


def _conf(default: Any, doc: str, **kw: Any) -> Any:
    return _param(default, doc, apply=APPLY_CONFIGURE, **kw)


@dataclass
class AgentParams(ParamsBase):
    """Parameters of ``agent_node`` (``config/agent.yaml``, ``config/fetch.yaml``).

    ``_live`` fields take effect at once when set at runtime; ``_conf`` fields are read at
    configure (refused while the node is configured); ``_param`` fields only at process start.
    """

    # --- policy -------------------------------------------------------------------------------
    bundle_path: str = _conf(
        "",
        "Export bundle directory written by training/export.py. Empty = the shipped default "
        "(bundles/house_relic_scan of a checkout, else share/icrl_ros/bundles/house_relic_scan; it reads a laser "
        "scan: a robot without one runs bundles/house_memo); a relative path is "
        "tried against the working directory, the checkout and share/icrl_ros.",
    )
    backend: str = _conf("onnxruntime", "Inference engine.", choices=BACKENDS)
    device: str = _conf("cpu", "Inference device (cuda needs a GPU build of the backend).", choices=DEVICES)
    threads: int = _conf(
        0, "CPU threads of the inference engine (ONNX Runtime's intra-op threads, torch's); 0 = OMP_NUM_THREADS "
        "where set, else the engine's default (a spinning thread per core: on a computer that runs other nodes, "
        "1-2). Not used on a GPU.", min=0)
    memory: str = _conf("", "Memory policy; empty = the bundle's default.", choices=MEMORY_POLICIES)
    memory_budget_bytes: int = _conf(0, "Memory byte budget; 0 = the bundle's default.", min=0)
    kv_dtype: str = _conf(
        "", "How the full / window / memo memory stores keys and values (hcam: its chunk store): fp32 | fp16 | int8 "
        "(per head and token scales; the byte budget then holds ~2x / ~3.5x the steps) | int8_gqa (full / window only, "
        "ONNX Runtime only: static per-channel scales read in place by its GroupQueryAttention kernel, ~4x the steps, the "
        "fastest read at long context); empty = the bundle's default (manifest "
        "memory.kv_dtype). The bundle needs a core for it (training/export.py --kv-dtypes / --add-kv-dtypes).",
        choices=KV_DTYPES)
    memory_path: str = _live(
        "~/.ros/icrl_ros/memory", "Snapshot file used by the save_memory / load_memory services."
    )
    autostart: bool = _param(
        False, "Console script only: configure and activate once at start (no launch file or lifecycle manager)."
    )
    # --- acting -------------------------------------------------------------------------------
    action_mode: str = _conf(
        "discrete",
        "discrete: publish std_msgs/Int32 once per new image (lockstep with the bridge); "
        "twist: drive cmd_vel through the closed-loop ActionExecutor.",
        choices=ACTION_MODES,
    )
    action_selection: str = _live(
        "",
        "Empty = the bundle's (manifest action.selection, what it was evaluated with; sample for bundles "
        "that do not say). sample: draw each action from the policy's distribution (as training and "
        "training/evaluate.py do; seeded by sample_seed, the generator state is saved with the memory); "
        "greedy: the most likely action.",
        choices=ACTION_SELECTIONS,
    )
    sample_seed: int = _conf(0, "Seed of the action-sampling generator (set at configure).", min=0)
    sample_temperature: float = _live(
        0.0, "action_selection sample: draw from softmax(logits / this); 0 = the bundle's (manifest "
        "action.temperature; 1 for bundles that do not say); 1 = the policy's own distribution, lower is "
        "closer to greedy.", min=0.0, max=100.0,
    )
    idle_after_stop: bool = _live(True, "After the stop action, wait for a new goal before acting again.")
    settle_s: float = _live(0.1, "Twist mode: ignore images received sooner than this after a step ends.", min=0.0)
    odom_sync_tolerance_s: float = _live(
        0.05, "Act on an image only with odometry stamped no more than this before it.", min=0.0
    )
    time_jump_s: float = _live(
        1.0,
        "An image stamped this much or more before the last image acted on means time jumped back (bridge "
        "restart, bag loop, sim-time reset): acting goes on from the new stamps (counted in time_jumps). An "
        "image stamped less before it is back-dated: dropped and counted (back_dated_images); three in a row "
        "count as a jump too.",
        min=0.0,
    )
    # --- topics -------------------------------------------------------------------------------
    camera_topic: str = _conf("camera/image_raw", "sensor_msgs/Image input (sensor-data QoS).")
    odom_topic: str = _conf("odom", "nav_msgs/Odometry input (sensor-data QoS).")
    scan_topic: str = _conf(
        "scan", "sensor_msgs/LaserScan input (sensor-data QoS), subscribed only when the bundle reads a scan (its "
        "'scan' input: which of 12 headings a forward step can take); in the base frame. A stale scan stops the base "
        "as a stale camera does.")
    scan_clearance_m: float = _conf(
        0.25, "Radius around the base after a forward step that must hold no scan return for that heading to count "
        "as free (the training env's robot radius: 0.25 m for the MiniWorld house).", min=0.0)
    pose_frame: str = _conf(
        "",
        "Frame the policy sees odometry in: 'house' (relative to the pose at the trial's first episode start, "
        "kept until reset_memory: odom_topic must stay continuous over a trial, like a base's odometry since "
        "boot or a map-frame pose) or 'episode' (relative to each episode's start pose). Empty = the frame the "
        "bundle was trained with (manifest observation.pose_frame); a value that differs from it is refused "
        "at configure.",
        choices=("", "house", "episode"),
    )
    pose_source: str = _conf(
        "odom",
        "Where the policy's pose comes from. odom: odom_topic alone (in the house frame, odometry since boot: it "
        "drifts). pose_topic: a localiser's map-frame pose on pose_topic (AMCL's amcl_pose, slam_toolbox's pose), "
        "composed with the odometry travelled since that pose's stamp, so the policy gets a pose at every step "
        "while the localiser updates more slowly; odom_topic still drives the twist executor's steps. The frame "
        "that holds up on a real base under drift: pose_topic.",
        choices=POSE_SOURCES,
    )
    pose_topic: str = _conf(
        "localiser_pose", "pose_source pose_topic: the localiser's pose of the base in the map frame (QoS: "
        "pose_transient_local).")
    pose_topic_type: str = _conf(
        "PoseWithCovarianceStamped", "Message type on pose_topic: geometry_msgs/PoseWithCovarianceStamped (AMCL, "
        "slam_toolbox) or geometry_msgs/PoseStamped.", choices=POSE_TOPIC_TYPES)
    pose_transient_local: bool = _conf(
        True, "Subscribe to pose_topic reliable with transient-local durability, depth 1, as AMCL publishes amcl_pose "
        "(a node started while the robot stands still gets the last pose at once); false: reliable, volatile, depth "
        "10, as slam_toolbox publishes pose (a transient-local subscription does not match a volatile publisher).")
    pose_max_travel_m: float = _live(
        2.0, "pose_source pose_topic: metres the odometry may travel since the last localiser pose before that pose "
        "counts as stale: then the base stops (a zero velocity), the image is dropped (stale_pose) and acting resumes "
        "with the next localiser pose. Measured as travelled rather than as time because AMCL and slam_toolbox "
        "publish only after the base moved (a robot that stands still keeps a valid pose).", min=0.01)
    goal_topic: str = _conf("goal", "std_msgs/String goal category; each message starts an episode.")
    goal_transient_local: bool = _conf(
        True, "Subscribe to the goal with transient-local durability (receives the bridge's latched goal)."
    )
    episode_events_topic: str = _conf(
        "episode_events", "std_msgs/String JSON events from the bridge; trial_start resets memory. Empty = off."
    )
    action_topic: str = _conf("action", "std_msgs/Int32 output: the chosen discrete action.")
    cmd_vel_topic: str = _conf("cmd_vel", "geometry_msgs/Twist output in twist mode.")
    status_topic: str = _param("agent_status", "diagnostic_msgs/DiagnosticArray status output (from start, in every state).")
    diagnostics_topic: str = _param(
        "/diagnostics", "The same status on the standard diagnostics aggregator topic; empty = off."
    )
    introspection: bool = _conf(
        False,
        "Publish what the memory holds (bundles whose model keeps a route memory: house_relic_scan, "
        "house_memo_scan): ~/memory/sightings (visualization_msgs/MarkerArray: per goal category the remembered "
        "position, name and sighting mass, the stored sightings with their age in episodes; the current goal "
        "highlighted, with the places it was seen from), ~/memory/route_map (nav_msgs/OccupancyGrid: the floor the "
        "robot stood on free, the rest unknown), ~/memory/looked_at (OccupancyGrid: the place memory's looked-at "
        "floor), ~/memory/route (nav_msgs/Path: the route memory's way to the goal) and ~/memory/attention "
        "(std_msgs/Float32MultiArray: the fixed memory heads' attention per episode on the last step; "
        "~/memory/attention_image, the same as a small mono8 image), in the "
        "odometry messages' frame, after a step that changed what they show and on a memory reset or load "
        "(reliable, transient local). Each is computed only while it has a subscriber.",
    )
    introspection_period_s: float = _live(
        0.2,
        "introspection: the memory goes out after a step at most once per this many seconds (a step sooner is "
        "shown by a 10 Hz check once the period is over: the last step's memory always goes out); 0 = after every "
        "step. A reset or load goes out at once.",
        min=0.0, max=60.0,
    )
    # --- rates and timeouts -------------------------------------------------------------------
    control_rate_hz: float = _live(
        20.0, "Twist republish rate; >= 10 Hz (Fetch drops commands after 0.25 s).", min=10.0, max=1000.0
    )
    status_rate_hz: float = _live(1.0, "Status publishing rate.", min=0.01, max=100.0)
    input_timeout_s: float = _live(
        1.0, "Watchdog: the zero velocity is out at most this long after the last camera or odometry message.",
        min=0.01,
    )
    watchdog_margin_s: float = _live(
        0.05, "The watchdog trips this long before input_timeout_s (delivery and scheduling of the zero).",
        min=0.0, max=10.0,
    )
    log_throttle_s: float = _live(2.0, "Minimum seconds between two log lines of one kind.", min=0.0)
    # --- executor (twist mode) ----------------------------------------------------------------
    forward_m: float = _live(0.0, "Forward step length in m; 0 = the bundle's action spec.", min=0.0)
    turn_deg: float = _live(0.0, "Turn step in degrees; 0 = the bundle's action spec.", min=0.0, max=180.0)
    max_linear_speed: float = _live(0.3, "m/s.", min=0.0)
    max_angular_speed: float = _live(0.8, "rad/s.", min=0.0)
    max_linear_accel: float = _live(0.5, "m/s^2.", min=0.0)
    max_angular_accel: float = _live(1.5, "rad/s^2.", min=0.0)
    kp_linear: float = _live(2.0, "P gain on the remaining distance, 1/s.", min=0.0)
    kp_angular: float = _live(2.5, "P gain on the remaining angle, 1/s.", min=0.0)
    kp_heading: float = _live(1.5, "P gain holding the heading while driving forward, 1/s.", min=0.0)
    min_linear_speed: float = _live(0.03, "Floor on |v| until the tolerance is met, m/s.", min=0.0)
    min_angular_speed: float = _live(0.08, "Floor on |w| until the tolerance is met, rad/s.", min=0.0)
    linear_tolerance_m: float = _live(0.01, "Forward step done within this distance.", min=1e-4)
    angular_tolerance_deg: float = _live(1.0, "Turn step done within this angle.", min=0.01)
    action_timeout_s: float = _live(5.0, "Give up on a step after this long.", min=0.1)

    def validate(self) -> "AgentParams":
        super().validate()
        if self.watchdog_margin_s >= self.input_timeout_s:
            raise ValueError(f"watchdog_margin_s: {self.watchdog_margin_s} must be below input_timeout_s "
                             f"{self.input_timeout_s}")
        return self


@dataclass
class BridgeParams(ParamsBase):
    """Parameters of ``sim_bridge_node`` (``config/bridge.yaml``)."""

    env_id: str = _param(
        "icrl_ros/MiniWorldHouse-v0",
        "Registered Gymnasium id ('module:Id' imports the module first) with an image observation.",
    )
    env_kwargs: str = _param("{}", "JSON object of keyword arguments for gymnasium.make.")
    seed: int = _param(0, "Seed of the first trial.", min=0)
    mode: str = _param(
        "lockstep",
        "lockstep: one env step per std_msgs/Int32 action; realtime: integrate cmd_vel at realtime_rate_hz.",
        choices=BRIDGE_MODES,
    )
    episodes_per_trial: int = _param(0, "Start a new trial (new house) after this many episodes; 0 = never.", min=0)
    max_episode_steps: int = _param(
        0, "End (truncate) an episode after this many steps; 0 = the env's own limit.", min=0
    )
    auto_reset: bool = _param(True, "Start the next episode as soon as one ends.")
    max_episodes: int = _param(
        0, "Start no episode after this many in all, as if auto_reset were off from then on (~/new_episode still "
        "starts one): a recorded or scripted lockstep run ends with its last episode, not a step into the next; "
        "0 = no limit.", min=0)
    replay_episodes: str = _param(
        "", "JSON file of a list of {\"start\": [x, z, yaw], \"goal\": name} (world frame of the house env, as "
        "episode_start events report them): episode i starts there with that goal instead of the env's own draw, "
        "so two simulators run the same episodes (envs whose reset takes start / goal options: Habitat). "
        "Empty = off; episodes past the list are the env's own.")
    lockstep_dt_s: float = _param(0.5, "Simulated seconds per lockstep step (/clock advance).", min=1e-3)
    republish_period_s: float = _param(
        0.5, "Lockstep: republish the current observation this often while waiting for an action; 0 = off.", min=0.0
    )
    episode_start_delay_s: float = _param(
        0.05,
        "Lockstep: publish an episode's first observation this long after its events and goal "
        "(DDS does not order messages across topics).",
        min=0.0,
    )
    realtime_rate_hz: float = _param(20.0, "Realtime: integration and odometry rate.", min=1.0, max=1000.0)
    camera_rate_hz: float = _param(10.0, "Realtime: camera publishing rate.", min=0.1, max=1000.0)
    cmd_timeout_s: float = _param(0.5, "Realtime: a cmd_vel older than this counts as zero.", min=0.01)
    stop_action: int = _param(0, "Index of the stop action (ends an episode in realtime mode too).", min=0)
    camera_fov_y_deg: float = _param(60.0, "Vertical field of view for camera_info.", min=1.0, max=179.0)
    camera_height_m: float = _param(1.0, "Camera height above base_link for the static transform.")
    publish_clock: bool = _param(True, "Publish /clock in simulated time.")
    publish_tf: bool = _param(
        True, "Publish odom -> base_link, and map -> odom where the env reports its house-frame pose, on /tf "
        "(needs tf2_msgs).")
    map_frame: str = _param("map", "Frame id of the house frame (the map of a localised robot).")
    map_pose_topic: str = _param(
        "map_pose", "geometry_msgs/PoseStamped output: the robot's pose in the house frame (map_frame), for envs "
        "that report it (env.pose_in('house')), whatever pose_frame odom_topic uses. Empty = off.")
    objects_topic: str = _param(
        "true_objects", "visualization_msgs/MarkerArray output (transient local): the env's goal-category objects "
        "where they truly are, in map_frame, the current goal's instances marked, at each episode start, for envs "
        "that report them (env.object_positions('house')): beside the agent's ~/memory/sightings a viewer shows "
        "belief and truth. Empty = off.")
    localiser_pose_topic: str = _param(
        "localiser_pose", "geometry_msgs/PoseWithCovarianceStamped output (frame map_frame; reliable, transient local, "
        "depth 1, as AMCL publishes amcl_pose): the pose a localiser would give, the house-frame pose plus the "
        "localisation error below (exact when loc_error_m and loc_error_deg are 0), with each observation, for envs "
        "that report their house-frame pose. The agent reads it with pose_source pose_topic. Empty = off.")
    loc_error_m: float = _param(
        0.0, "Localisation error on localiser_pose_topic (and in map -> odom): RMS of the position error, metres; "
        "an Ornstein-Uhlenbeck process over simulated time, clipped at 2x its RMS (icrl_ros/sim/pose_noise.py). "
        "0 = exact.", min=0.0)
    loc_error_deg: float = _param(0.0, "Localisation error: RMS of the heading error, degrees. 0 = exact.", min=0.0)
    loc_tau_s: float = _param(30.0, "Localisation error: correlation time, simulated seconds.", min=1e-3)
    odom_scale_error: float = _param(
        0.0, "Odometry drift on odom_topic: translation scale error, a fraction (0.01 = 1%; its sign drawn per trial). "
        "0 = none.", min=0.0, max=0.5)
    odom_heading_noise: float = _param(
        0.0, "Odometry drift: heading random walk, radians per sqrt(radian turned + metre driven). 0 = none.", min=0.0)
    odom_bias_deg_per_min: float = _param(
        0.0, "Odometry drift: heading bias, degrees per minute of simulated time (lockstep_dt_s per step; its sign "
        "drawn per trial). 0 = none.", min=0.0)
    pose_noise_seed: int = _param(
        0, "Seed of the localisation error and odometry drift (each trial draws from [seed, trial]).", min=0)
    odom_frame: str = _param("odom", "Odometry frame id.")
    base_frame: str = _param("base_link", "Robot base frame id.")
    camera_frame: str = _param("camera_optical_frame", "Image frame id (optical convention).")
    camera_topic: str = _param("camera/image_raw", "sensor_msgs/Image output (rgb8).")
    camera_info_topic: str = _param("camera/camera_info", "sensor_msgs/CameraInfo output.")
    scan_topic: str = _param(
        "scan", "sensor_msgs/LaserScan output (360 beams at 1 degree, in base_frame) for envs that have a laser "
        "(env.laser_scan(): the MiniWorld house), stamped as the image. Empty = off.")
    odom_topic: str = _param(
        "odom", "nav_msgs/Odometry output, in pose_frame (house: one frame per trial; episode: re-anchored at "
        "every episode start).")
    pose_frame: str = _param(
        "house",
        "Odometry frame published on odom_topic, passed to the env as pose_frame when env_kwargs does not set it "
        "(envs that take one: the MiniWorld house, Habitat). house = odometry since boot / the map frame, fixed "
        "for a trial; episode = re-anchored at every episode start (as in the papers).",
        choices=("house", "episode"),
    )
    goal_topic: str = _param("goal", "std_msgs/String goal category (transient local), once per episode.")
    reward_topic: str = _param("reward", "std_msgs/Float32 reward of each step.")
    episode_events_topic: str = _param("episode_events", "std_msgs/String JSON episode and trial events.")
    action_topic: str = _param("action", "std_msgs/Int32 input: one env step each (lockstep).")
    cmd_vel_topic: str = _param("cmd_vel", "geometry_msgs/Twist input (realtime).")

    def validate(self) -> "BridgeParams":
        super().validate()
        try:
            kwargs = json.loads(self.env_kwargs)
        except json.JSONDecodeError as e:
            raise ValueError(f"env_kwargs: not JSON ({e}): {self.env_kwargs!r}") from None
        if not isinstance(kwargs, dict):
            raise ValueError(f"env_kwargs: expected a JSON object, got {self.env_kwargs!r}")
        return self

    def replayed_episodes(self) -> list[dict]:
        """``replay_episodes`` read and checked (once, by the node at start; a bad file stops it):
        [{"start": [x, z, yaw], "goal": str}, ...]."""
        try:
            items = json.loads(Path(self.replay_episodes).read_text())
        except (OSError, json.JSONDecodeError) as e:
            raise ValueError(f"replay_episodes: cannot read {self.replay_episodes!r} ({e})") from None
        ok = isinstance(items, list) and all(
            isinstance(e, dict) and isinstance(e.get("goal"), str) and isinstance(e.get("start"), list)
            and len(e["start"]) == 3 and all(isinstance(v, (int, float)) for v in e["start"]) for e in items)
        if not ok:
            raise ValueError(f"replay_episodes: {self.replay_episodes!r} must hold a JSON list of "
                             "{\"start\": [x, z, yaw], \"goal\": name}")
        return items


__all__ = [
    "AgentParams",
    "BridgeParams",
    "ParamsBase",
    "check_value",
    "coerce",
    "APPLY_LIVE",
    "APPLY_CONFIGURE",
    "APPLY_START",
    "BACKENDS",
    "DEVICES",
    "MEMORY_POLICIES",
    "ACTION_MODES",
    "ACTION_SELECTIONS",
    "BRIDGE_MODES",
]
