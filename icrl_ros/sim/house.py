"""MiniWorld house object search (ExtObjNav in miniature): ``icrl_ros/MiniWorldHouse-v0``.

A *trial* is one procedurally generated house (``house_layout``); each *episode* starts
at a random pose and names a target category present in the house. The agent sees a
first-person RGB image, the goal index, odometry and its previous action. Odometry is
in the ``pose_frame``: ``house`` (default) is one frame for the whole trial, the pose of
the trial's first start (what a robot's odometry since boot or its localisation's map
frame gives); ``episode`` restarts at every episode start, as in the papers.

The task defaults make memory matter (as ExtObjNav does): goals are categories with at
most ``goal_instances`` instances in the house (1), and an episode starts at least
``min_start_distance`` (geodesic, 3 m) from the goal region in a room that holds no
instance of the goal (``start_away``). ``OLD_TASK`` gives the earlier defaults (any
category present, starts 1 m from the goal region, anywhere), under which search without
memory is already easy. With ``teacher`` (``"memory"`` or ``"wiped"``) the env runs the
in-context teacher of :mod:`icrl_ros.sim.house_teacher` and reports its action for the
current state as ``info["teacher_action"]``; ``teacher_pixels`` is the size (pixels of a 64x64
image) at which it recognises an instance (10, the recognition rule; more, to know only what a
student's encoder reliably sees); ``teacher_noise`` the error (metres per axis) of what it remembers
from earlier episodes (0: exact; see the teacher's docstring). The agent succeeds by taking ``stop`` within
``success_distance`` of a target instance (agent centre to the edge of the object's footprint disc) that is visible in its
image (a point of the object projects into the camera frustum with a sight line blocked
by no wall and no taller object; ~97% agreement with the rendered pixels). Reward (as in
ReLIC / Memo): ``-(geodesic_t - geodesic_{t-1}) - slack + success_bonus * success``, with
the geodesic distance to the nearest cell from which stopping can succeed (free, within
reach of a target instance, with a line of sight to it) on a 0.1 m occupancy grid. SPL
uses the same distance from the start as the shortest path. With ``refund_on_failure``
(default) an episode that ends without success (a wrong stop or the step cap) gives its
progress reward back at its last step: in a trial of several episodes, walking towards the
goal and stopping anywhere would otherwise collect progress again at every new start (PPO on
the house found exactly that: episodes of 40-70 steps that stop short).

``reset()`` keeps the house (next episode of the same trial) unless a seed or
``options={"new_trial": True}`` is given, or no trial has started yet. The previous
action carries across episodes of a trial (4 = none at the trial start).
"""

from __future__ import annotations

import math
from pathlib import Path

import gymnasium as gym
import numpy as np

from icrl_ros.sim.house_layout import (
    CATEGORIES, FORWARD_STEP_M, GOAL_NAMES, ODOM_LIMIT_M, TURN_STEP_DEG, HouseLayout, check_split, draw_house_seed,
    generate_layout, house_split,
)
from icrl_ros.geometry import (FREE_BANDS, SCAN_BINS, bands_from_scan, episode_odometry, scan_headings,
                               wrap_angle)
from icrl_ros.sim.house_nav import NavGrid, visible
from icrl_ros.sim.house_render import CAMERA_HEIGHT, CAMERA_PITCH_DEG, FOV_Y_DEG  # constants only, no GL
from icrl_ros.sim.house_topdown import draw_top_down
from icrl_ros.sim.house_view import MIN_PIXELS

STOP, FORWARD, TURN_LEFT, TURN_RIGHT = 0, 1, 2, 3
NO_ACTION = 4
POSE_FRAMES = ("episode", "house")
LASER_BEAMS = 360  # the laser_scan: one beam per degree
LASER_RANGE_M = 10.0
SEEING_TEACHERS = ("seeing", "seeing_wiped", "inputs", "inputs_wiped")
"""Teachers on a frozen encoder's eyes (``teacher_encoder``): ``seeing``, the teacher's search with recognition from
the encoder's heads; ``inputs``, a rule on what a student on that encoder is handed (its route and frontier
memories, the free headings); ``_wiped``: memory wiped every episode."""
TEACHERS = ("memory", "wiped", *SEEING_TEACHERS)
# The task before memory was made to matter (goals of any category, starts 1 m away, anywhere).
OLD_TASK = {"goal_instances": 0, "start_away": False, "min_start_distance": 1.0}


def observation_space(image_size: int, n_goals: int, odom_limit_m: float, scan: bool = False,
                      scan_bands: bool = False) -> gym.spaces.Dict:
    """The object-search observation (this env's and the Habitat backend's): RGB, goal category,
    odometry (x, y, yaw) from the episode start, previous action (``NO_ACTION`` = none); with ``scan``,
    which of the :data:`~icrl_ros.geometry.SCAN_BINS` headings around the robot a forward step can take
    (1 free, 0 blocked: what a robot's laser scan says of its surroundings); with ``scan_bands``, the laser's
    nearest return in each of the camera image's :data:`~icrl_ros.geometry.FREE_BANDS` column bands, in
    metres (:func:`~icrl_ros.geometry.bands_from_scan`: the floor in view, measured)."""
    extra = {"scan": gym.spaces.Box(0.0, 1.0, (SCAN_BINS,), np.float32)} if scan else {}
    if scan_bands:
        extra["scan_bands"] = gym.spaces.Box(0.0, LASER_RANGE_M, (FREE_BANDS,), np.float32)
    return gym.spaces.Dict({**extra,
        "rgb": gym.spaces.Box(0, 255, (image_size, image_size, 3), np.uint8),
        "goal": gym.spaces.Discrete(n_goals),
        "odom": gym.spaces.Box(np.array([-odom_limit_m, -odom_limit_m, -np.pi], np.float32),
                               np.array([odom_limit_m, odom_limit_m, np.pi], np.float32), dtype=np.float32),
        "prev_action": gym.spaces.Discrete(NO_ACTION + 1),
    })


def forward_tries(dist: float) -> tuple[float, ...]:
    """The lengths a forward action tries, longest first, until one is free: the full ``dist``, then
    5 cm less each time (a blocked move advances as far as free). One rule for every house backend."""
    return (float(dist), *(float(d) for d in np.arange(dist - 0.05, 0.0, -0.05)))


def step_reward(env, previous: float, ended: bool) -> float:
    """One step's reward of a house env (MiniWorld or Habitat: ``geodesic_distance`` now,
    ``previous`` before the step, ``shortest_path`` at the episode start, ``success``): progress
    minus slack plus the success bonus; a failed last step (``ended``, no success) with
    ``refund_on_failure`` also gives back the episode's progress, ``shortest_path - geodesic``."""
    reward = previous - env.geodesic_distance - env.slack_reward + env.success_reward * env.success
    if ended and not env.success and env.refund_on_failure:
        reward -= env.shortest_path - env.geodesic_distance
    return float(reward)


class HouseEnv(gym.Env):
    metadata = {"render_modes": ["rgb_array"], "render_fps": 10}
    action_names = ("stop", "forward", "turn_left", "turn_right")
    goal_names = GOAL_NAMES
    forward_step = FORWARD_STEP_M  # metres per forward action
    turn_step = math.radians(TURN_STEP_DEG)  # radians per turn action
    agent_radius = 0.25
    camera_height_m = CAMERA_HEIGHT
    camera_pitch_deg = CAMERA_PITCH_DEG  # negative: looking down
    camera_fov_deg = FOV_Y_DEG  # vertical = horizontal (square images)

    def __init__(
        self,
        split: str = "train",
        image_size: int = 64,
        max_episode_steps: int = 200,
        success_distance: float = 1.0,
        house_seed: int | None = None,
        slack_reward: float = 0.01,
        success_reward: float = 2.5,
        refund_on_failure: bool = True,
        antialias: bool = False,
        render_mode: str | None = None,
        pose_frame: str = "house",
        goal_instances: int = 1,
        start_away: bool = True,
        min_start_distance: float = 3.0,
        teacher: str | None = None,
        teacher_pixels: float = MIN_PIXELS,
        teacher_noise: float = 0.0,
        teacher_encoder: str | None = None,
        teacher_present: float = 0.8,
        teacher_bands: str = "heads",
        teacher_approach: str = "route",
        teacher_stop_frames: int = 1,
        scan: bool = False,
        scan_bands: bool = False,
    ) -> None:
        check_split(split)
        if not isinstance(image_size, (int, np.integer)) or not 16 <= image_size <= 1024:
            raise ValueError(f"image_size must be an int in [16, 1024], got {image_size!r}")
        if not isinstance(max_episode_steps, (int, np.integer)) or max_episode_steps <= 0:
            raise ValueError(f"max_episode_steps must be a positive int, got {max_episode_steps!r}")
        if not success_distance > 0:
            raise ValueError(f"success_distance must be > 0 metres, got {success_distance!r}")
        if house_seed is not None and house_split(house_seed) != split:
            raise ValueError(f"house_seed {house_seed} belongs to the {house_split(house_seed)!r} split, not {split!r}")
        if render_mode not in (None, "rgb_array"):
            raise ValueError(f"render_mode must be None or 'rgb_array', got {render_mode!r}")
        if pose_frame not in POSE_FRAMES:
            raise ValueError(f"pose_frame must be one of {POSE_FRAMES}, got {pose_frame!r}")
        if not isinstance(goal_instances, (int, np.integer)) or goal_instances < 0:
            raise ValueError(f"goal_instances must be an int >= 0 (0 = any category), got {goal_instances!r}")
        if not min_start_distance >= 0:
            raise ValueError(f"min_start_distance must be >= 0 metres, got {min_start_distance!r}")
        if teacher not in (None, *TEACHERS):
            raise ValueError(f"teacher must be None or one of {TEACHERS}, got {teacher!r}")
        if not teacher_pixels >= MIN_PIXELS:
            raise ValueError(f"teacher_pixels must be >= {MIN_PIXELS} (pixels of a 64x64 image; the recognition rule), "
                             f"got {teacher_pixels!r}")
        if not teacher_noise >= 0:
            raise ValueError(f"teacher_noise must be >= 0 (metres per axis), got {teacher_noise!r}")
        if (teacher in SEEING_TEACHERS) != (teacher_encoder is not None):
            raise ValueError(f"teacher_encoder: the teachers {SEEING_TEACHERS} need a frozen encoder file (and only "
                             f"they read one), got teacher={teacher!r}, teacher_encoder={teacher_encoder!r}")
        if teacher_encoder is not None and not Path(teacher_encoder).is_file():
            raise ValueError(f"teacher_encoder: {teacher_encoder} does not exist (an encoder.pt of house_encoder.py)")
        if not 0.0 < teacher_present <= 1.0:
            raise ValueError(f"teacher_present must be a probability in (0, 1], got {teacher_present!r}")
        if teacher_bands not in ("heads", "laser") or teacher_approach not in ("route", "looked"):
            raise ValueError(f"teacher_bands: heads or laser, teacher_approach: route or looked (the input searcher's "
                             f"floor and its way to a sighting), got {teacher_bands!r}, {teacher_approach!r}")
        if not isinstance(teacher_stop_frames, (int, np.integer)) or teacher_stop_frames < 1:
            raise ValueError(f"teacher_stop_frames must be an int >= 1, got {teacher_stop_frames!r}")
        if ((teacher_bands, teacher_approach, teacher_stop_frames) != ("heads", "route", 1)
                and not str(teacher).startswith("inputs")):
            raise ValueError(f"teacher_bands / teacher_approach / teacher_stop_frames: settings of the input searcher "
                             f"(teacher inputs or inputs_wiped), got teacher={teacher!r}")
        self.pose_frame = pose_frame
        self.goal_instances, self.start_away = int(goal_instances), bool(start_away)
        self.min_start_distance = float(min_start_distance)
        self.teacher_mode, self.teacher_pixels = teacher, float(teacher_pixels)
        self.teacher_noise = float(teacher_noise)
        self.teacher_encoder, self.teacher_present = teacher_encoder, float(teacher_present)
        self.teacher_bands, self.teacher_approach = teacher_bands, teacher_approach
        self.teacher_stop_frames = int(teacher_stop_frames)
        self.scan_bands = bool(scan_bands)
        self.scan = bool(scan)
        self._frame_key, self._frame = None, None
        self.teacher = None
        self.split, self.image_size = split, int(image_size)
        self.max_episode_steps = int(max_episode_steps)
        self.success_distance = float(success_distance)
        self.fixed_house_seed = house_seed
        self.slack_reward, self.success_reward = float(slack_reward), float(success_reward)
        self.refund_on_failure = bool(refund_on_failure)
        self.antialias = antialias
        self.render_mode = render_mode

        self.action_space = gym.spaces.Discrete(4)
        self.observation_space = observation_space(self.image_size, len(GOAL_NAMES), ODOM_LIMIT_M, self.scan,
                                                   self.scan_bands)
        self._rng = np.random.default_rng()
        self._renderer = None
        self.layout: HouseLayout | None = None
        self.nav: NavGrid | None = None
        self._episode_over = True

    # -- trials and episodes --------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        options = dict(options or {})
        if seed is not None:
            self._rng = np.random.default_rng(seed)
        if seed is not None or self.layout is None or options.get("new_trial", False) or "house_seed" in options:
            hs = options.get("house_seed", self.fixed_house_seed)
            if hs is None:
                hs = draw_house_seed(self._rng, self.split)
            elif house_split(hs) != self.split:
                raise ValueError(f"house_seed {hs} belongs to the {house_split(hs)!r} split, not {self.split!r}")
            self._new_trial(int(hs))
        self._new_episode()
        return self.observe(), self._labelled(self._info())

    def _new_trial(self, house_seed: int) -> None:
        self.layout = generate_layout(house_seed)
        self._frame_key = None
        self.nav = NavGrid(self.layout, self.agent_radius)
        if self._renderer is None:
            from icrl_ros.sim.house_render import HouseRenderer  # imports MiniWorld / EGL

            self._renderer = HouseRenderer(self.layout, self.image_size, antialias=self.antialias)
        else:
            self._renderer.set_layout(self.layout)
        self._fields: dict[int, np.ndarray] = {}  # category -> geodesic distance field (lazy)
        self._goal_masks = {c: self.nav.goal_mask([o for o in self.layout.objects if o.category == c],
                                                  self.success_distance)
                            for c in self.layout.categories_present()}
        self.episode_index = -1
        self.prev_action = NO_ACTION
        self.house_origin: tuple[float, float, float] | None = None  # set by the first episode
        # Categories with a goal region in the main free space (all of them, for generated
        # houses at the default success distance), then those with the fewest instances.
        reachable = [c for c, m in self._goal_masks.items() if m.any()]
        if not reachable:
            raise RuntimeError(f"house {house_seed}: no object is reachable "
                               f"at success_distance={self.success_distance}")
        count = {c: sum(o.category == c for o in self.layout.objects) for c in reachable}
        if self.goal_instances:
            limit = max(self.goal_instances, min(count.values()))
            reachable = [c for c in reachable if count[c] <= limit]
        self.goal_categories = tuple(reachable)
        if self.teacher_mode in SEEING_TEACHERS:
            from icrl_ros.house.perception import encoder_perceiver
            from icrl_ros.sim.house_teacher import encoder_searcher

            perceive = encoder_perceiver(self.teacher_encoder, self.image_size)
            opts = {}
            if self.teacher_mode.startswith("inputs"):
                opts["approach"], opts["stop_frames"] = self.teacher_approach, self.teacher_stop_frames
                if self.teacher_bands == "laser":
                    from icrl_ros.house.perception import with_laser_bands

                    perceive = with_laser_bands(self, perceive)
            self.teacher = encoder_searcher(self.teacher_mode, self, perceive, present=self.teacher_present, **opts)
        elif self.teacher_mode is not None:
            from icrl_ros.sim.house_teacher import HouseTeacher

            self.teacher = HouseTeacher(self, memory=self.teacher_mode == "memory", min_pixels=self.teacher_pixels,
                                        noise=self.teacher_noise, rng=np.random.default_rng([house_seed, 0x7E4]))

    def _field(self, category: int) -> np.ndarray:
        if category not in self._fields:
            self._fields[category] = self.nav.distance_field(self._goal_masks[category])
        return self._fields[category]

    def _new_episode(self) -> None:
        self.goal = int(self._rng.choice(self.goal_categories))
        D = self._field(self.goal)
        finite = np.isfinite(D)
        ok = np.argwhere(finite & (D >= self.min_start_distance) & self._start_rooms(self.goal))
        if len(ok) == 0:
            ok = np.argwhere(finite & (D >= self.min_start_distance))
        if len(ok) == 0:
            ok = np.argwhere(finite)
        for _ in range(20):
            i, j = ok[int(self._rng.integers(len(ok)))]
            x = float(self.nav.xs[j] + self._rng.uniform(-0.5, 0.5) * self.nav.cell)
            z = float(self.nav.zs[i] + self._rng.uniform(-0.5, 0.5) * self.nav.cell)
            if not self.nav.collides(x, z):
                break
        else:
            x, z = float(self.nav.xs[j]), float(self.nav.zs[i])
        self.x, self.z = x, z
        self.yaw = wrap_angle(float(self._rng.uniform(-math.pi, math.pi)))
        self.start_pose = (self.x, self.z, self.yaw)
        if self.house_origin is None:
            self.house_origin = self.start_pose
        self.episode_index += 1
        self.episode_step = 0
        self.path_length = 0.0
        self.episode_return = 0.0
        self.geodesic_distance = self.nav.geodesic(D, self.x, self.z)
        self.shortest_path = self.geodesic_distance
        self.success, self.spl = False, 0.0
        self._episode_over = False
        if self.teacher is not None:
            self._teacher_sees()
            self.teacher.episode_start()

    def _start_rooms(self, category: int) -> np.ndarray:
        """Grid cells where an episode for ``category`` may start: with ``start_away``, cells
        of no room holding an instance of it (door passages count as outside every room)."""
        if not self.start_away:
            return np.ones(self.nav.free.shape, dtype=bool)
        ok = np.ones(self.nav.free.shape, dtype=bool)
        for r in self.layout.rooms:
            if any(o.category == category and r.min_x <= o.x <= r.max_x and r.min_z <= o.z <= r.max_z
                   for o in self.layout.objects):
                ok &= ~((self.nav.X > r.min_x) & (self.nav.X < r.max_x) & (self.nav.Z > r.min_z) & (self.nav.Z < r.max_z))
        return ok

    # -- acting ----------------------------------------------------------------------------
    def step(self, action):
        if self._episode_over:
            raise RuntimeError("the episode is over; call reset() to start the next one")
        a = int(action)
        if not 0 <= a < 4:
            raise ValueError(f"action must be in [0, 4) {self.action_names}, got {action!r}")
        if a == FORWARD:
            self._forward(self.forward_step)
        elif a == TURN_LEFT:
            self.yaw = wrap_angle(self.yaw + self.turn_step)
        elif a == TURN_RIGHT:
            self.yaw = wrap_angle(self.yaw - self.turn_step)
        self.prev_action = a
        self.episode_step += 1

        previous = self.geodesic_distance
        self.geodesic_distance = self.nav.geodesic(self._field(self.goal), self.x, self.z)
        terminated = a == STOP
        truncated = not terminated and self.episode_step >= self.max_episode_steps
        self.success = terminated and self.target_visible_in_reach()
        reward = step_reward(self, previous, terminated or truncated)
        if terminated or truncated:
            self._episode_over = True
            if self.success:
                self.spl = self.shortest_path / max(self.shortest_path, self.path_length, 1e-9)
        elif self.teacher is not None:
            self._teacher_sees()
            self.teacher.observe()
        self.episode_return += reward
        return self.observe(), float(reward), terminated, truncated, self._labelled(self._info())

    def _forward(self, dist: float) -> float:
        """Move forward up to ``dist``; when blocked, advance as far as free (5 cm steps)."""
        fx, fz = math.cos(self.yaw), -math.sin(self.yaw)
        for d in forward_tries(dist):
            if not self.nav.collides(self.x + d * fx, self.z + d * fz):
                self.x, self.z = self.x + d * fx, self.z + d * fz
                self.path_length += float(d)
                return float(d)
        return 0.0

    def move_continuous(self, linear_m: float, angular_rad: float) -> bool:
        """Turn by ``angular_rad`` (CCW) and move ``linear_m`` along the mid-turn heading,
        without counting an episode step (a bridge integrating cmd_vel in real time calls
        this). The turn always happens; the translation only if collision-free. Returns
        False when blocked."""
        if self.layout is None:
            raise RuntimeError("call reset() before move_continuous()")
        heading = self.yaw + angular_rad / 2
        nx, nz = self.x + linear_m * math.cos(heading), self.z - linear_m * math.sin(heading)
        self.yaw = wrap_angle(self.yaw + angular_rad)
        if linear_m == 0.0:
            return True
        if self.nav.collides(nx, nz):
            return False
        self.x, self.z = nx, nz
        self.path_length += abs(float(linear_m))
        return True

    # -- observations -----------------------------------------------------------------------
    def odometry(self) -> np.ndarray:
        """(x forward, y left, yaw CCW) relative to the episode's start pose (``pose_frame``
        episode) or to the trial's first start pose (``house``)."""
        return self.pose_in(self.pose_frame)

    def pose_in(self, frame: str) -> np.ndarray:
        """The robot's (x, y, yaw) in ``frame`` (one of ``POSE_FRAMES``), whatever ``pose_frame``
        the observation uses: the bridge publishes the house frame as the map pose."""
        return episode_odometry(self._frame_origin(frame), (self.x, self.z, self.yaw))

    def _frame_origin(self, frame: str) -> tuple[float, float, float]:
        """The world pose at which ``frame``'s odometry is zero."""
        if frame not in POSE_FRAMES:
            raise ValueError(f"frame must be one of {POSE_FRAMES}, got {frame!r}")
        return self.start_pose if frame == "episode" else self.house_origin

    def _rgb(self) -> np.ndarray:
        """The camera image of the current pose (rendered once per pose: a seeing teacher and the observation
        share it)."""
        key = (self.x, self.z, self.yaw)  # cleared at every new house
        if key != self._frame_key:
            self._frame_key, self._frame = key, self._renderer.render(self.x, self.z, self.yaw)
        return self._frame

    def _teacher_sees(self) -> None:
        """A teacher that perceives through an encoder reads the image the robot now faces."""
        if self.teacher_mode in SEEING_TEACHERS:
            self.teacher.see(self._rgb())

    def observe(self) -> dict[str, np.ndarray]:
        """Observation of the current state, without stepping."""
        if self.layout is None:
            raise RuntimeError("call reset() before observe()")
        obs = {
            "rgb": self._rgb().copy(),
            "goal": np.int64(self.goal),
            "odom": self.odometry(),
            "prev_action": np.int64(self.prev_action),
        }
        if self.scan:
            obs["scan"] = self.free_headings()
        if self.scan_bands:
            obs["scan_bands"] = self.laser_bands()
        return obs

    def laser_scan(self) -> tuple[float, float, np.ndarray, float]:
        """A 360-degree planar laser at the robot (what the sim bridge publishes as ``sensor_msgs/LaserScan``):
        (angle_min, angle_increment, ranges (LASER_BEAMS,) float32 with ``inf`` = no return, range_max); angles
        counter-clockwise from straight ahead. Through :func:`~icrl_ros.geometry.free_headings_from_scan` it gives
        :meth:`free_headings`."""
        inc = 2 * np.pi / LASER_BEAMS
        angles = -np.pi + inc * np.arange(LASER_BEAMS)
        return -np.pi, inc, self.nav.laser(self.x, self.z, self.yaw, angles, LASER_RANGE_M).astype(np.float32), LASER_RANGE_M

    def laser_bands(self) -> np.ndarray:
        """(FREE_BANDS,) float32: the :meth:`laser_scan`'s nearest return in each column band of the camera image,
        metres (no return: the laser's range), left band first (:func:`~icrl_ros.geometry.bands_from_scan`)."""
        a0, inc, ranges, cap = self.laser_scan()
        return bands_from_scan(ranges, a0 + inc * np.arange(len(ranges)), cap, self.camera_fov_deg).astype(np.float32)

    def free_headings(self) -> np.ndarray:
        """(SCAN_BINS,) float32: 1 where a full forward step along that heading is collision-free (the test
        the oracle's steering makes), bin 0 straight ahead, counter-clockwise."""
        h = scan_headings(self.yaw)
        ends = zip(self.x + self.forward_step * np.cos(h), self.z - self.forward_step * np.sin(h))
        return np.array([0.0 if self.nav.collides(float(x), float(z)) else 1.0 for x, z in ends], np.float32)

    def _labelled(self, info: dict) -> dict:
        """``info`` plus the teacher's label for the state the agent now faces (none once the
        episode is over: the next episode's first state is labelled by reset()). Only reset()
        and step() label: the teacher's plan advances with each label."""
        if self.teacher is not None and not self._episode_over:
            info["teacher_action"] = self.teacher.act()
            info["teacher_goal_known"] = self.teacher.goal_known()
        return info

    def _info(self) -> dict:
        return {
            "goal_name": GOAL_NAMES[self.goal],
            "success": bool(self.success),
            "spl": float(self.spl),
            "geodesic_distance": float(self.geodesic_distance),
            "agent_pose": np.array([self.x, self.z, self.yaw], np.float64),
            "episode_step": self.episode_step,
            "episode_index": self.episode_index,
            "episode_return": float(self.episode_return),
            "path_length": float(self.path_length),
            "shortest_path": float(self.shortest_path),
            "house_seed": self.layout.seed,
            # Both odometry frames, whatever ``pose_frame`` the observation uses (the bridge
            # publishes the episode frame as odom and the house frame as the map pose).
            "odom_episode": self.pose_in("episode"),
            "odom_house": self.pose_in("house"),
        }

    # -- task geometry -----------------------------------------------------------------------
    def target_instances(self) -> list:
        return [o for o in self.layout.objects if o.category == self.goal]

    def target_positions(self, frame: str = "house") -> np.ndarray:
        """The current goal's instances, (n, 2) positions (x forward, y left) in ``frame``
        (``POSE_FRAMES``): privileged, for diagnostics that score a policy's memory."""
        origin = self._frame_origin(frame)
        return np.array([episode_odometry(origin, (o.x, o.z, 0.0))[:2] for o in self.target_instances()],
                        np.float64).reshape(-1, 2)

    def object_positions(self, frame: str = "house") -> tuple[np.ndarray, np.ndarray]:
        """Every object of a goal category in the house: (categories (n,) goal indices, positions (n, 2) in
        ``frame`` (``POSE_FRAMES``)); privileged, what a viewer shows as the truth beside a policy's memory."""
        origin = self._frame_origin(frame)
        objs = list(self.layout.objects)
        return (np.array([o.category for o in objs], np.int64),
                np.array([episode_odometry(origin, (o.x, o.z, 0.0))[:2] for o in objs], np.float64).reshape(-1, 2))

    def visible_targets(self) -> np.ndarray:
        """Which target instances show in the current camera image (geometric test)."""
        return self._in_sight(self.target_instances())

    def _in_sight(self, instances: list) -> np.ndarray:
        """Which of ``instances`` show in the current camera image (each instance decided on its own)."""
        return visible(instances, (self.x, CAMERA_HEIGHT, self.z), self.yaw, CAMERA_PITCH_DEG, FOV_Y_DEG, 1.0,
                       self.nav.sight_walls, self.layout.objects)

    def target_visible_in_reach(self) -> bool:
        """Success test: a target instance within success_distance (of its surface) and visible."""
        inst = self.target_instances()
        near = [o for o in inst if math.hypot(o.x - self.x, o.z - self.z) - o.cat.radius <= self.success_distance]
        if not near:  # the sight test only where it can decide
            return False
        return bool(self._in_sight(near).any())

    def goal_sight(self) -> tuple[np.ndarray, bool]:
        """(per goal category, the pixels of a 64x64 frame its largest instance covers in the current camera
        view (n_goals,); whether an instance of the current goal is within ``success_distance`` and visible):
        privileged, for diagnostics that ask what a failed episode ever showed or reached."""
        from icrl_ros.sim.house_view import cast_view

        view = cast_view(self.layout, self.nav.walls, self.x, self.z, self.yaw, 64, CAMERA_HEIGHT, CAMERA_PITCH_DEG,
                         FOV_Y_DEG)
        out = np.zeros(len(GOAL_NAMES), np.float32)
        np.maximum.at(out, [o.category for o in self.layout.objects], view.pixels.astype(np.float32))
        return out, self.target_visible_in_reach()

    def oracle_action(self) -> int:
        """The action of a shortest-path follower (see ``house_oracle``); for tests, sanity
        checks and baselines."""
        from icrl_ros.sim.house_oracle import oracle_action

        return oracle_action(self)

    def waypoint_action(self, fwd: float, left: float) -> int:
        """The action of a follower of a waypoint (forward, left) metres from the robot that senses which
        headings are free (``house_oracle.follow_waypoint``). The labels of route steps for imitation and
        PPO's route term: the route comes from a policy's memory, the steering from here."""
        from icrl_ros.sim.house_oracle import follow_waypoint

        return follow_waypoint(self, fwd, left)

    # -- pictures ------------------------------------------------------------------------------
    def render(self):
        if self.render_mode == "rgb_array":
            return self.observe()["rgb"]
        return None

    def render_top_down(self, trajectories: list[np.ndarray] | None = None, px_per_m: float = 24.0) -> np.ndarray:
        """RGB map of the house: walls, objects by category, this episode's target instances
        ringed, the agent, and optional (N, 2) world (x, z) trajectories."""
        if self.layout is None:
            raise RuntimeError("call reset() before render_top_down()")
        return draw_top_down(self.layout, [self.goal], trajectories, (self.x, self.z, self.yaw), px_per_m)

    def close(self) -> None:
        if self._renderer is not None:
            self._renderer.close()
            self._renderer = None
        super().close()


__all__ = ["HouseEnv", "CATEGORIES", "GOAL_NAMES", "STOP", "FORWARD", "TURN_LEFT", "TURN_RIGHT", "NO_ACTION"]
