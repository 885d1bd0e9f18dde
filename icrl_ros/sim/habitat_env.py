"""Habitat ExtObjNav behind the MiniWorld house's interface: ``icrl_ros/HabitatExtObjNav-v0``.

ExtObjNav (ReLIC) is ObjectNav made into in-context trials: a *trial* is one scene (a house) and
each *episode* one of that scene's ObjectNav episodes (a start pose and a goal category), drawn at
random. The agent keeps its memory across the episodes of a trial; the env keeps the scene. This
class drives habitat-lab's ``habitat.Env`` on any ObjectNav-v1 dataset (HM3D, MP3D, or our own
houses exported by ``icrl_ros.sim.habitat_scene``: ``HabitatExtObjNavEnv.for_houses(export_dir)``),
so the sim bridge runs it exactly like the MiniWorld house, with the same:

* observations: ``rgb`` (H, W, 3) uint8 from a camera at the house camera's height, pitch and
  field of view; ``goal`` (the dataset's ``category_to_task_category_id``: for our houses the index
  into ``house_layout.GOAL_NAMES``); ``odom`` (x forward, y left, yaw CCW) in ``pose_frame``
  (``house``: from the trial's first start; ``episode``: from each episode's start); ``prev_action``
  (4 = none at a trial's start, carried across its episodes);
* actions: 0 stop, 1 forward 0.25 m, 2 turn left 30 deg, 3 turn right;
* success rule: ``stop`` with a goal instance within ``success_distance`` of its surface (agent
  centre to the edge of its footprint disc, on the floor plane) that shows in the camera: a point of
  the object (a 5 x 3 grid across its silhouette, as the house's geometric test) projects into the
  image and the rendered depth there is not nearer than the object (a depth camera beside the RGB
  one, same pose);
* reward: ``-(d_t - d_{t-1}) - slack + success_bonus * success`` with ``d`` habitat-lab's
  ``distance_to_goal`` (geodesic to the goals' view points: for our houses the cells from which
  stopping can succeed, i.e. the house reward's distance); SPL ``d_0 / max(d_0, path length)`` on
  success, 0 otherwise; an episode ends on ``stop`` (terminated) or after ``max_episode_steps``
  (truncated);
* ``info``: ``goal_name``, ``success``, ``spl``, ``geodesic_distance``, ``agent_pose`` (x, z, yaw
  in the planar frame X = world x, Y = -world z), ``episode_step``, ``episode_index``,
  ``episode_return``, ``path_length``, ``shortest_path``, ``odom_episode``, ``odom_house``,
  ``scene`` and, for our houses, ``house_seed``;
* a forward action moves as the house's does: the full step when the straight move stays on the
  navmesh, else the longest free multiple of 5 cm (no sliding along walls);
* ``move_continuous(linear_m, angular_rad)`` for the bridge's real-time mode (the navmesh's
  ``try_step_no_sliding``: a blocked move stops at the obstacle, as in the house, and returns False).

``scene_navmesh``: run on the ``.navmesh`` beside the scene file instead of the one habitat-sim recomputes
(from the drawn meshes, at its default Recast settings) whenever the file's settings differ from its
defaults. ``None`` (the default): when the file was built for this agent's radius, as our exported houses'
are; a navmesh built for another radius (HM3D's) is left to habitat-sim's recompute. ``True`` / ``False``:
always / never.

``reset()`` keeps the scene (next episode of the trial, drawn at random from the scene's episodes)
unless a seed or ``options={"new_trial": True}`` is given, or no trial has started yet. Options:
``scene`` (a scene id) or ``house_seed`` (an exported house) pick the trial's scene; ``episode`` (an
index into the scene's episodes) picks the episode; ``start`` ((x, z, yaw)) and ``goal`` (a category
name) replace the episode's start and goal, so a (start, goal) of another simulator can be replayed.

habitat-sim has no PyPI wheel for most Pythons: this module imports habitat only when the env is
built (registration costs nothing). Here it runs in the Debian 13 chroot of ``../shared/habitat``
(``scripts/habitat_prepare.sh``); elsewhere a conda install or the Habitat docker image. API
differences between habitat 0.2 and 0.3 live in ``icrl_ros.sim.habitat_compat``.
"""

from __future__ import annotations

import copy
import math
from collections import defaultdict
from pathlib import Path

import gymnasium as gym
import numpy as np

from icrl_ros.sim.house import (LASER_RANGE_M, NO_ACTION, POSE_FRAMES, HouseEnv, forward_tries,
                                observation_space, step_reward)
from icrl_ros.sim.house_render import CAMERA_HEIGHT, CAMERA_PITCH_DEG, FOV_Y_DEG  # constants only, no GL
from icrl_ros.geometry import episode_odometry, scan_headings, wrap_angle

DEFAULT_CONFIG = "benchmark/nav/objectnav/objectnav_hm3d.yaml"
ACTION_NAMES = ("stop", "move_forward", "turn_left", "turn_right")  # habitat-lab's names, our indices
ODOM_LIMIT_M = 100.0
# The MiniWorld house's agent and camera: the same robot in both simulators (habitat-lab's hfov is an int).
AGENT_RADIUS, FOV_DEG = HouseEnv.agent_radius, int(round(FOV_Y_DEG))
SENSORS = "habitat.simulator.agents.main_agent.sim_sensors"
LASER_TOLERANCE_M = 0.01  # the navmesh laser's range resolution (bisection per beam)
NAVMESH_LASER_BEAMS = 120  # every 3 degrees (the house's laser: 360): each beam costs ~12 navmesh queries


def import_habitat():
    """habitat-lab's package, or an ImportError that says how to get it."""
    try:
        from icrl_ros.sim.habitat_compat import import_habitat_sim

        import_habitat_sim()
        import habitat  # habitat-lab
    except ImportError as e:
        raise ImportError(
            "icrl_ros/HabitatExtObjNav-v0 needs habitat-sim and habitat-lab, which have no PyPI wheel for this "
            "Python: here use the chroot of ../shared/habitat (scripts/habitat_prepare.sh), elsewhere the Habitat "
            f"docker image (docker/Dockerfile.habitat) or a conda install of habitat-sim ({e})") from e
    return habitat


def yaw_of(rotation) -> float:
    """Planar yaw (CCW from world +x, Y = -world z) of a habitat agent rotation (a quaternion about +Y:
    the agent looks along -z at angle 0, so yaw = angle + pi/2)."""
    # forward = R * (0, 0, -1); for a rotation by a about +Y: (-sin a, 0, -cos a)
    w, y = float(rotation.w), float(rotation.y)
    angle = 2.0 * math.atan2(y, w)
    return wrap_angle(angle + math.pi / 2)


def rotation_for_yaw(yaw: float):
    """The habitat agent rotation (numpy-quaternion, about +Y) that gives planar ``yaw``."""
    import quaternion  # numpy-quaternion, a habitat-sim dependency

    half = (yaw - math.pi / 2) / 2
    return quaternion.quaternion(math.cos(half), 0.0, math.sin(half), 0.0)


def silhouette_points(centre: np.ndarray, radius: float, height: float, cam: np.ndarray) -> np.ndarray:
    """Points across an object's silhouette seen from ``cam`` (world x, y, z): 5 across x 3 heights
    on the vertical plane through its centre facing the camera, plus the nearest point (16, 3)."""
    view = np.array([centre[0] - cam[0], centre[2] - cam[2]])
    view /= max(float(np.linalg.norm(view)), 1e-6)
    side = np.array([-view[1], view[0]])
    base = centre[1] - height / 2
    pts = [(centre[0] + lat * radius * side[0], base + height * frac, centre[2] + lat * radius * side[1])
           for lat in (-0.85, -0.45, 0.0, 0.45, 0.85) for frac in (0.1, 0.5, 0.9)]
    pts.append((centre[0] - 0.8 * radius * view[0], centre[1], centre[2] - 0.8 * radius * view[1]))
    return np.asarray(pts, np.float64)


def shows_in_depth(points: np.ndarray, radius: float, depth: np.ndarray, cam: np.ndarray, yaw: float,
                   pitch_deg: float, fov_deg: float, slack: float = 0.1) -> bool:
    """Whether any of ``points`` (world) projects inside the square image and the rendered z-depth
    (metres, (H, W)) at its pixel is no nearer than the point minus ``radius + slack`` (the object's
    own front surface is up to ``radius`` nearer than its centre plane)."""
    p = math.radians(pitch_deg)
    f = np.array([math.cos(p) * math.cos(yaw), math.sin(p), -math.cos(p) * math.sin(yaw)])  # forward
    r = np.array([math.sin(yaw), 0.0, math.cos(yaw)])  # right
    u = np.cross(r, f)  # up
    v = points - cam
    zc, xc, yc = v @ f, v @ r, v @ u
    t = math.tan(math.radians(fov_deg) / 2)
    H, W = depth.shape
    ok = zc > 0.05
    if not ok.any():
        return False
    col = ((xc[ok] / (zc[ok] * t)) + 1.0) / 2.0 * W
    row = (1.0 - (yc[ok] / (zc[ok] * t))) / 2.0 * H
    inside = (col >= 0) & (col < W) & (row >= 0) & (row < H)
    if not inside.any():
        return False
    d = depth[row[inside].astype(int), col[inside].astype(int)]
    return bool((d >= zc[ok][inside] - radius - slack).any())


class HabitatExtObjNavEnv(gym.Env):
    """ObjectNav episodes grouped into per-scene trials, with the house env's observations and rules."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": 10}
    action_names = ("stop", "forward", "turn_left", "turn_right")

    def __init__(
        self,
        config: str = DEFAULT_CONFIG,
        split: str = "val",
        data_path: str | None = None,
        scenes_dir: str | None = None,
        image_size: int = 64,
        max_episode_steps: int = 200,
        forward_step: float = 0.25,
        turn_deg: float = 30.0,
        success_distance: float = 1.0,
        slack_reward: float = 0.01,
        success_reward: float = 2.5,
        refund_on_failure: bool = True,
        pose_frame: str = "house",
        overrides: list[str] | tuple[str, ...] = (),
        render_mode: str | None = None,
        scene_navmesh: bool | None = None,
        scan: bool = False,
        scan_bands: bool = False,
    ) -> None:
        if not isinstance(image_size, (int, np.integer)) or not 16 <= image_size <= 1024:
            raise ValueError(f"image_size must be an int in [16, 1024], got {image_size!r}")
        if not isinstance(max_episode_steps, (int, np.integer)) or max_episode_steps <= 0:
            raise ValueError(f"max_episode_steps must be a positive int, got {max_episode_steps!r}")
        if not forward_step > 0 or not turn_deg > 0:
            raise ValueError(f"forward_step and turn_deg must be > 0, got {forward_step!r}, {turn_deg!r}")
        if not success_distance > 0:
            raise ValueError(f"success_distance must be > 0 metres, got {success_distance!r}")
        if pose_frame not in POSE_FRAMES:
            raise ValueError(f"pose_frame must be one of {POSE_FRAMES}, got {pose_frame!r}")
        if render_mode not in (None, "rgb_array"):
            raise ValueError(f"render_mode must be None or 'rgb_array', got {render_mode!r}")
        habitat = import_habitat()
        size = int(image_size)
        camera = [f"{SENSORS}.{s}.{k}={v}" for s in ("rgb_sensor", "depth_sensor") for k, v in (
            ("width", size), ("height", size), ("hfov", FOV_DEG), ("position", [0.0, CAMERA_HEIGHT, 0.0]),
            ("orientation", [math.radians(CAMERA_PITCH_DEG), 0.0, 0.0]))]
        cfg = habitat.get_config(config, overrides=[
            f"habitat.dataset.split={split}",
            *([f"habitat.dataset.data_path='{data_path}'"] if data_path else []),  # quoted: "{split}" in it
            *([f"habitat.dataset.scenes_dir='{scenes_dir}'"] if scenes_dir else []),
            f"habitat.environment.max_episode_steps={int(max_episode_steps)}",
            f"habitat.simulator.forward_step_size={float(forward_step)}",
            f"habitat.simulator.turn_angle={int(round(turn_deg))}",
            f"habitat.simulator.agents.main_agent.radius={AGENT_RADIUS}",
            # no sliding along walls: the house stops a blocked move (see _forward_amount)
            "habitat.simulator.habitat_sim_v0.allow_sliding=False",
            *camera,
            f"{SENSORS}.depth_sensor.min_depth=0.0", f"{SENSORS}.depth_sensor.max_depth=20.0",
            f"{SENSORS}.depth_sensor.normalize_depth=False",
            # our SPL and reward are computed here (the house's rules); habitat-lab's spl also divides by
            # zero when an episode starts on a view point and the agent stops without moving
            *(f"~habitat.task.measurements.{m}" for m in ("spl", "soft_spl", "distance_to_goal_reward")),
            *overrides,
        ])
        self._env = habitat.Env(config=cfg)
        self.image_size, self.max_episode_steps = size, int(max_episode_steps)
        self.forward_step, self.turn_step = float(forward_step), math.radians(turn_deg)
        self.success_distance = float(success_distance)
        self.slack_reward, self.success_reward = float(slack_reward), float(success_reward)
        self.refund_on_failure = bool(refund_on_failure)
        self.pose_frame, self.render_mode = pose_frame, render_mode
        if scene_navmesh not in (None, True, False):
            raise ValueError(f"scene_navmesh must be None (auto), True or False, got {scene_navmesh!r}")
        self.scene_navmesh, self._navmesh_of = scene_navmesh, None
        self.camera_height_m, self.camera_pitch_deg, self.camera_fov_deg = CAMERA_HEIGHT, CAMERA_PITCH_DEG, FOV_DEG
        dataset = self._env._dataset
        by_id = dataset.category_to_task_category_id  # name -> objectgoal index
        self.goal_names = tuple(name for name, _ in sorted(by_id.items(), key=lambda kv: kv[1]))
        self.scenes: dict[str, list] = defaultdict(list)
        for ep in dataset.episodes:
            self.scenes[ep.scene_id].append(ep)
        self.scene_ids = sorted(self.scenes)
        if not self.scene_ids:
            raise ValueError(f"habitat dataset of {config!r} split {split!r} has no episodes")
        self.action_space = gym.spaces.Discrete(len(ACTION_NAMES))
        self.scan, self.scan_bands = bool(scan), bool(scan_bands)
        self.observation_space = observation_space(self.image_size, len(self.goal_names), ODOM_LIMIT_M, self.scan,
                                                   self.scan_bands)
        self._rng = np.random.default_rng()
        self.scene: str | None = None
        self.episode_index = -1
        self._episode_over = True

    @classmethod
    def for_houses(cls, export_dir: str | Path, split: str = "val", **kwargs) -> HabitatExtObjNavEnv:
        """The env on houses exported by ``icrl_ros.sim.habitat_scene`` into ``export_dir``."""
        from icrl_ros.sim.habitat_scene import SCENE_DATASET

        root = Path(export_dir)
        return cls(split=split, data_path=str(root / "datasets" / "objectnav" / SCENE_DATASET / "{split}" /
                                               "{split}.json.gz"),
                   scenes_dir=str(root / "scene_datasets"), **kwargs)

    # -- trials and episodes ---------------------------------------------------------------
    def scene_of_house(self, house_seed: int) -> str:
        """The scene id of an exported house seed."""
        for s in self.scene_ids:
            if Path(s).stem == f"house_{int(house_seed)}":
                return s
        raise ValueError(f"house_seed {house_seed} is not in this dataset; scenes: {self.scene_ids[:5]}...")

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        options = dict(options or {})
        if seed is not None:
            self._rng = np.random.default_rng(seed)
        if "house_seed" in options:
            options["scene"] = self.scene_of_house(options["house_seed"])
        if seed is not None or self.scene is None or options.get("new_trial", False) or "scene" in options:
            scene = options.get("scene") or self.scene_ids[int(self._rng.integers(len(self.scene_ids)))]
            if scene not in self.scenes:
                raise ValueError(f"scene {scene!r} has no episodes in this dataset; known: {self.scene_ids[:5]}...")
            self.scene, self.episode_index, self.prev_action = scene, -1, NO_ACTION
            self.house_origin: tuple[float, float, float] | None = None
        episodes = self.scenes[self.scene]
        episode = episodes[int(options["episode"]) if "episode" in options else int(self._rng.integers(len(episodes)))]
        if "start" in options or "goal" in options:
            episode = self._replayed(episode, options.get("start"), options.get("goal"))
        self._env.episode_iterator = iter([episode])
        obs = self._env.reset()
        if self.scene_navmesh is not False and self._navmesh_of != self.scene and self._load_scene_navmesh():
            self._env.episode_iterator = iter([episode])  # again, so the measures use the scene's navmesh
            obs = self._env.reset()
        self._read_state()
        self.episode_index += 1
        self.episode_step, self.episode_return, self.path_length = 0, 0.0, 0.0
        self.success, self.spl = False, 0.0
        self.start_pose = self._planar()
        if self.house_origin is None:
            self.house_origin = self.start_pose
        self.geodesic_distance = float(self._env.get_metrics()["distance_to_goal"])
        self.shortest_path = self.geodesic_distance
        self._episode_over = False
        return self._observe(obs), self._info()

    def _load_scene_navmesh(self) -> bool:
        """Load the ``.navmesh`` beside the scene file (habitat-sim's own naming rule). habitat-sim
        replaces a scene's navmesh by one it recomputes whenever the file's Recast settings differ from
        its defaults at the agent's radius and height; for our exported houses that recomputed one
        (0.2 m voxels, built from the drawn meshes) let the agent walk through thin objects that
        HouseEnv blocks. False when there is no such file."""
        path = Path(self._env.sim.config.sim_cfg.scene_id).with_suffix(".navmesh")
        self._navmesh_of = self.scene  # decided once per scene load
        if not path.exists():
            return False
        pf = self._env.sim.pathfinder
        if self.scene_navmesh is None:  # auto: only a navmesh built for this agent's radius
            import habitat_sim

            probe = habitat_sim.nav.PathFinder()
            if not probe.load_nav_mesh(str(path)) or abs(probe.nav_mesh_settings.agent_radius - AGENT_RADIUS) > 1e-4:
                return False
        if not pf.load_nav_mesh(str(path)):
            raise RuntimeError(f"habitat-sim could not load the scene's navmesh {path}")
        return True

    def _replayed(self, episode, start, goal):
        """A copy of ``episode`` with another start (x, z, yaw) and / or goal category name: to run
        the same (start, goal) as another simulator."""
        episode = copy.copy(episode)
        episode._shortest_path_cache = None
        if goal is not None:
            key = f"{Path(episode.scene_id).name}_{goal}"
            goals = self._env._dataset.goals_by_category.get(key)
            if not goals:
                raise ValueError(f"goal {goal!r} has no instance in scene {self.scene!r}")
            episode.object_category, episode.goals = str(goal), goals
        if start is not None:
            x, z, yaw = (float(v) for v in start)
            half = (yaw - math.pi / 2) / 2  # rotation_for_yaw as habitat's [x, y, z, w] list
            episode.start_position = [x, float(episode.start_position[1]), z]
            episode.start_rotation = [0.0, math.sin(half), 0.0, math.cos(half)]
        return episode

    # -- acting ------------------------------------------------------------------------------
    def step(self, action):
        if self._episode_over:
            raise RuntimeError("the episode is over; call reset() to start the next one")
        a = int(action)
        if not 0 <= a < len(ACTION_NAMES):
            raise ValueError(f"action must be in [0, {len(ACTION_NAMES)}) {self.action_names}, got {action!r}")
        before = self._position()
        if a == 1:
            self._forward_amount()
        obs = self._env.step({"action": ACTION_NAMES[a]})
        self._read_state()
        self.path_length += float(np.linalg.norm((self._position() - before)[[0, 2]]))
        self.prev_action = a
        self.episode_step += 1
        previous, self.geodesic_distance = self.geodesic_distance, float(self._env.get_metrics()["distance_to_goal"])
        terminated = a == 0
        truncated = not terminated and (self._env.episode_over or self.episode_step >= self.max_episode_steps)
        self.success = bool(terminated and self.target_visible_in_reach(obs))
        if terminated or truncated:
            self._episode_over = True
            if self.success:
                self.spl = self.shortest_path / max(self.shortest_path, self.path_length, 1e-9)
        reward = step_reward(self, previous, terminated or truncated)
        self.episode_return += reward
        return self._observe(obs), float(reward), terminated, truncated, self._info()

    def _forward_amount(self) -> None:
        """Set this forward action's length as ``HouseEnv._forward`` moves (``house.forward_tries``): the
        full step if the straight move is free, else the longest free one 5 cm shorter each time, else none. (habitat-sim's own
        step, sliding off, would stop exactly at the navmesh edge: up to 5 cm further than the house.)"""
        yaw = self._planar()[2]
        amount = next((d for d in forward_tries(self.forward_step) if self._clear(yaw, d)), 0.0)
        specs = self._env.sim.get_agent(0).agent_config.action_space  # {habitat action id: ActionSpec}
        next(spec for spec in specs.values() if spec.name == "move_forward").actuation.amount = amount

    def move_continuous(self, linear_m: float, angular_rad: float) -> bool:
        """Turn by ``angular_rad`` (CCW) and move ``linear_m`` along the mid-turn heading on the
        navmesh, without an episode step (the bridge's real-time mode). False when blocked."""
        if self.scene is None:
            raise RuntimeError("call reset() before move_continuous()")
        sim = self._env.sim
        state = sim.get_agent_state()
        x, z, yaw = self._planar()
        heading = yaw + angular_rad / 2
        target = np.array([x + linear_m * math.cos(heading), state.position[1], z - linear_m * math.sin(heading)],
                          np.float32)
        # no sliding along walls (habitat's try_step slides): the house stops a blocked move
        end = np.asarray(sim.pathfinder.try_step_no_sliding(state.position, target) if linear_m else state.position,
                         np.float32)
        moved = float(np.linalg.norm(end[[0, 2]] - target[[0, 2]])) < 1e-3
        self.path_length += float(np.linalg.norm((end - np.asarray(state.position))[[0, 2]]))
        sim.set_agent_state(end, rotation_for_yaw(wrap_angle(yaw + angular_rad)))
        self._read_state()
        return moved or linear_m == 0.0

    # -- task geometry -------------------------------------------------------------------------
    def target_visible_in_reach(self, obs: dict | None = None) -> bool:
        """The success test of the house, on habitat: a goal instance within ``success_distance`` of
        its surface (floor plane) that shows in the depth image."""
        if obs is None:
            obs = self._env.sim.get_sensor_observations()
        x, z, yaw = self._planar()
        floor_y = float(self._position()[1])
        depth = np.asarray(obs["depth"], np.float32).reshape(self.image_size, self.image_size)
        cam = np.array([x, floor_y + CAMERA_HEIGHT, z])
        for g in self._env.current_episode.goals:
            gx, gy, gz = (float(v) for v in g.position)
            radius = float(g.radius or 0.0)
            if math.hypot(gx - x, gz - z) - radius > self.success_distance:
                continue
            height = 2.0 * max(gy - floor_y, 0.05)  # the goal position is the object's centre
            pts = silhouette_points(np.array([gx, gy, gz]), radius, height, cam)
            if shows_in_depth(pts, radius, depth, cam, yaw, CAMERA_PITCH_DEG, FOV_DEG):
                return True
        return False

    # -- observations ------------------------------------------------------------------------
    def _read_state(self) -> None:
        """Read the agent's state once per change (reset, step, move): each read costs ~30 us."""
        state = self._env.sim.get_agent_state()
        self._pos = np.asarray(state.position, np.float64)
        self._pose = (float(self._pos[0]), float(self._pos[2]), yaw_of(state.rotation))

    def _position(self) -> np.ndarray:
        return self._pos

    def _planar(self) -> tuple[float, float, float]:
        return self._pose

    def pose_in(self, frame: str) -> np.ndarray:
        """The robot's (x, y, yaw) in ``frame`` (``episode`` or ``house``), whatever ``pose_frame``."""
        if frame not in POSE_FRAMES:
            raise ValueError(f"frame must be one of {POSE_FRAMES}, got {frame!r}")
        return episode_odometry(self.start_pose if frame == "episode" else self.house_origin, self._planar())

    def odometry(self) -> np.ndarray:
        """(x forward, y left, yaw CCW) in ``pose_frame``."""
        return self.pose_in(self.pose_frame)

    def observe(self) -> dict[str, np.ndarray]:
        """Observation of the current state, rendered now, without stepping (the bridge's real-time
        mode calls it after ``move_continuous``)."""
        if self.scene is None:
            raise RuntimeError("call reset() before observe()")
        return self._observe({"rgb": self._env.sim.get_sensor_observations()["rgb"], "objectgoal": self._goal})

    def _observe(self, obs: dict) -> dict[str, np.ndarray]:
        self._last_rgb = np.ascontiguousarray(np.asarray(obs["rgb"])[..., :3], dtype=np.uint8)
        self._goal = np.int64(np.asarray(obs["objectgoal"]).reshape(-1)[0])
        out = {"rgb": self._last_rgb, "goal": self._goal, "odom": self.odometry(),
               "prev_action": np.int64(self.prev_action)}
        if self.scan:
            out["scan"] = self.free_headings()
        if self.scan_bands:
            out["scan_bands"] = self.laser_bands()
        return out

    laser_bands = HouseEnv.laser_bands  # the laser's nearest return per camera band, as the house computes it

    # -- the laser -------------------------------------------------------------------------------
    def _clear(self, heading: float, distance: float) -> bool:
        """Whether the agent's centre can move ``distance`` planar metres straight along world ``heading`` on the
        navmesh, without sliding (the test ``_forward_amount`` makes; habitat-sim's no-sliding step does not stop at
        the obstacle, it stays put when the straight move is blocked anywhere along it)."""
        x, z, _ = self._planar()
        start = np.asarray(self._pos, np.float32)
        target = np.array([x + distance * math.cos(heading), start[1], z - distance * math.sin(heading)], np.float32)
        end = np.asarray(self._env.sim.pathfinder.try_step_no_sliding(start, target), np.float32)
        return float(np.linalg.norm((end - target)[[0, 2]])) < 1e-3

    def _reach(self, heading: float, limit: float, tol: float = LASER_TOLERANCE_M) -> float:
        """How far (within ``tol``, at most ``limit``) the agent's centre can move straight along ``heading``:
        bisection on :meth:`_clear` (a clear move's every prefix is clear), ~11 navmesh queries a beam."""
        if self._clear(heading, limit):
            return limit
        lo, hi = 0.0, limit
        while hi - lo > tol:
            mid = 0.5 * (lo + hi)
            lo, hi = (mid, hi) if self._clear(heading, mid) else (lo, mid)
        return lo

    def free_headings(self) -> np.ndarray:
        """(SCAN_BINS,) float32: 1 where a full forward step along that heading stays on the navmesh (the
        house's :meth:`~icrl_ros.sim.house.HouseEnv.free_headings` on Habitat), bin 0 straight ahead, CCW."""
        if self.scene is None:
            raise RuntimeError("call reset() before free_headings()")
        return np.array([1.0 if self._clear(float(h), self.forward_step) else 0.0
                         for h in scan_headings(self._planar()[2])], np.float32)

    def laser_scan(self) -> tuple[float, float, np.ndarray, float]:
        """A 360-degree planar laser from the navmesh (the house's :meth:`~icrl_ros.sim.house.HouseEnv.laser_scan`:
        same return, range and angles; a beam every 3 degrees, ~0.13 s a scan here). A beam's range: how far the
        agent's centre gets along it on the navmesh (to :data:`LASER_TOLERANCE_M`), then out to the obstacle, which
        lies the agent's radius beyond the navmesh's edge along the edge's normal; ``inf`` past ``range_max``. A
        doorway or a gap narrower than the agent reads nearer than it is (the navmesh has no floor there for the
        agent's centre): the laser errs on the blocked side. Drops and holes in the navmesh read as obstacles."""
        if self.scene is None:
            raise RuntimeError("call reset() before laser_scan()")
        inc = 2 * np.pi / NAVMESH_LASER_BEAMS
        x, z, yaw = self._planar()
        pf = self._env.sim.pathfinder
        ranges = np.full(NAVMESH_LASER_BEAMS, np.inf)
        for i in range(NAVMESH_LASER_BEAMS):
            h = yaw - np.pi + inc * i
            t = self._reach(h, LASER_RANGE_M)
            if t >= LASER_RANGE_M:
                continue
            u = np.array([math.cos(h), -math.sin(h)])  # the beam, world (x, z)
            ranges[i] = t + AGENT_RADIUS
            # the obstacle lies AGENT_RADIUS beyond the navmesh's edge along the edge's normal: meet that line
            hit = pf.closest_obstacle_surface_point(np.array([x + t * u[0], self._pos[1], z + t * u[1]], np.float32),
                                                    2 * LASER_TOLERANCE_M + 0.05)
            n = np.asarray(hit.hit_normal, np.float64)[[0, 2]]
            if np.isfinite(hit.hit_dist) and np.linalg.norm(n) > 0.5 and u @ n < -0.2:
                n = n / np.linalg.norm(n)
                wall = np.asarray(hit.hit_pos, np.float64)[[0, 2]] - AGENT_RADIUS * n - np.array([x, z])
                ranges[i] = float(wall @ n / (u @ n))
        ranges[ranges > LASER_RANGE_M] = np.inf
        return -np.pi, inc, ranges.astype(np.float32), LASER_RANGE_M

    def _info(self) -> dict:
        ep = self._env.current_episode
        info = {
            "goal_name": str(ep.object_category),
            "success": bool(self.success),
            "spl": float(self.spl),
            "geodesic_distance": float(self.geodesic_distance),
            "agent_pose": np.array(self._planar(), np.float64),
            "episode_step": self.episode_step,
            "episode_index": self.episode_index,
            "episode_return": float(self.episode_return),
            "path_length": float(self.path_length),
            "shortest_path": float(self.shortest_path),
            "odom_episode": self.pose_in("episode"),
            "odom_house": self.pose_in("house"),
            "scene": str(self.scene),
        }
        if isinstance(ep.info, dict) and "house_seed" in ep.info:
            info["house_seed"] = int(ep.info["house_seed"])
        return info

    def render(self):
        return self._last_rgb if self.render_mode == "rgb_array" else None

    def close(self) -> None:
        self._env.close()
        super().close()


__all__ = ["HabitatExtObjNavEnv", "ACTION_NAMES", "import_habitat", "yaw_of", "rotation_for_yaw"]
