"""Habitat ExtObjNav behind the house env's interface: ``icrl_ros/HabitatExtObjNav-v0``.

ExtObjNav (ReLIC) is ObjectNav made into in-context trials: a *trial* is one scene (a
house), and each *episode* in it is one of that scene's ObjectNav episodes (a start pose
and a target category). Memory is kept across the episodes of a trial by the agent; the env
only has to keep the scene. This class wraps habitat-lab's ``habitat.Env`` so the sim
bridge (``icrl_ros.nodes.sim_bridge_node``) drives it exactly like the MiniWorld house:

* observations: ``rgb`` (H, W, 3) uint8, ``goal`` (category index), ``odom`` (x forward,
  y left, yaw CCW relative to the episode start, from the simulator's agent state), and
  ``prev_action``;
* actions: 0 stop, 1 forward (``forward_step`` m), 2 turn left, 3 turn right
  (``turn_deg``), habitat-lab's own action names;
* reward (ReLIC / Memo): ``-delta distance_to_goal - slack + success_bonus * success``;
* ``info``: ``goal_name``, ``success``, ``spl`` (habitat's measures), ``agent_pose`` (x, z,
  yaw in the planar frame X = world x, Y = -world z, as the house env), ``episode_step``,
  ``episode_index``, ``scene``;
* ``move_continuous(linear_m, angular_rad)`` for the bridge's real-time mode, with the
  navmesh's ``try_step`` for collisions.

habitat-sim has no wheel for this project's Python on PyPI: this module imports habitat
only when the env is built (registration costs nothing) and says where to get it
(``docker/Dockerfile.habitat``). Scene datasets (HM3D, MP3D) are the user's: habitat-lab
finds them through its config (``data_path`` / ``scenes_dir`` overrides).
"""

from __future__ import annotations

import math
from collections import defaultdict

import gymnasium as gym
import numpy as np

from icrl_ros.sim.house import NO_ACTION, observation_space
from icrl_ros.sim.house_nav import episode_odometry, wrap_angle

DEFAULT_CONFIG = "benchmark/nav/objectnav/objectnav_hm3d.yaml"
ACTION_NAMES = ("stop", "move_forward", "turn_left", "turn_right")  # habitat-lab's names, our indices
ODOM_LIMIT_M = 100.0


def import_habitat():
    """habitat-lab's package, or an ImportError that says how to get it."""
    try:
        import habitat  # noqa: F401  (habitat-lab; pulls habitat_sim)
    except ImportError as e:
        raise ImportError(
            "icrl_ros/HabitatExtObjNav-v0 needs habitat-sim and habitat-lab, which have no PyPI wheel for this "
            "Python: use the Habitat docker image (docker/Dockerfile.habitat) or a conda install of habitat-sim "
            f"({e})") from e
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


class HabitatExtObjNavEnv(gym.Env):
    """ObjectNav episodes grouped into per-scene trials, with the house env's observations."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": 10}
    action_names = ("stop", "forward", "turn_left", "turn_right")

    def __init__(
        self,
        config: str = DEFAULT_CONFIG,
        split: str = "val",
        image_size: int = 64,
        max_episode_steps: int = 500,
        forward_step: float = 0.25,
        turn_deg: float = 30.0,
        slack_reward: float = 0.01,
        success_reward: float = 2.5,
        overrides: list[str] | tuple[str, ...] = (),
        render_mode: str | None = None,
    ) -> None:
        if not isinstance(image_size, (int, np.integer)) or not 16 <= image_size <= 1024:
            raise ValueError(f"image_size must be an int in [16, 1024], got {image_size!r}")
        if not isinstance(max_episode_steps, (int, np.integer)) or max_episode_steps <= 0:
            raise ValueError(f"max_episode_steps must be a positive int, got {max_episode_steps!r}")
        if not forward_step > 0 or not turn_deg > 0:
            raise ValueError(f"forward_step and turn_deg must be > 0, got {forward_step!r}, {turn_deg!r}")
        if render_mode not in (None, "rgb_array"):
            raise ValueError(f"render_mode must be None or 'rgb_array', got {render_mode!r}")
        habitat = import_habitat()
        sensor = "habitat.simulator.agents.main_agent.sim_sensors.rgb_sensor"
        cfg = habitat.get_config(config, overrides=[
            f"habitat.dataset.split={split}",
            f"habitat.environment.max_episode_steps={int(max_episode_steps)}",
            f"habitat.simulator.forward_step_size={float(forward_step)}",
            f"habitat.simulator.turn_angle={int(round(turn_deg))}",
            f"{sensor}.width={int(image_size)}", f"{sensor}.height={int(image_size)}",
            *overrides,
        ])
        self._env = habitat.Env(config=cfg)
        self.image_size, self.max_episode_steps = int(image_size), int(max_episode_steps)
        self.forward_step, self.turn_step = float(forward_step), math.radians(turn_deg)
        self.slack_reward, self.success_reward = float(slack_reward), float(success_reward)
        self.render_mode = render_mode
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
        self.observation_space = observation_space(self.image_size, len(self.goal_names), ODOM_LIMIT_M)
        self._rng = np.random.default_rng()
        self.scene: str | None = None
        self.episode_index = -1

    # -- trials and episodes ---------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        options = dict(options or {})
        if seed is not None:
            self._rng = np.random.default_rng(seed)
        if seed is not None or self.scene is None or options.get("new_trial", False) or "scene" in options:
            scene = options.get("scene") or self.scene_ids[int(self._rng.integers(len(self.scene_ids)))]
            if scene not in self.scenes:
                raise ValueError(f"scene {scene!r} has no episodes in this dataset; known: {self.scene_ids[:5]}...")
            self.scene, self.episode_index, self.prev_action = scene, -1, NO_ACTION
        episodes = self.scenes[self.scene]
        self._env.episode_iterator = iter([episodes[int(self._rng.integers(len(episodes)))]])
        obs = self._env.reset()
        self.episode_index += 1
        self.episode_step, self.episode_return, self.success, self.spl = 0, 0.0, False, 0.0
        state = self._env.sim.get_agent_state()
        self.start_pose = self._planar(state)
        self.distance = float(self._env.get_metrics()["distance_to_goal"])
        return self._observe(obs), self._info()

    # -- acting ------------------------------------------------------------------------------
    def step(self, action):
        a = int(action)
        if not 0 <= a < len(ACTION_NAMES):
            raise ValueError(f"action must be in [0, {len(ACTION_NAMES)}) {self.action_names}, got {action!r}")
        if self._env.episode_over:
            raise RuntimeError("the episode is over; call reset() to start the next one")
        obs = self._env.step({"action": ACTION_NAMES[a]})
        self.prev_action = a
        self.episode_step += 1
        m = self._env.get_metrics()
        previous, self.distance = self.distance, float(m["distance_to_goal"])
        terminated = a == 0
        truncated = not terminated and (self._env.episode_over or self.episode_step >= self.max_episode_steps)
        self.success = bool(terminated and m.get("success", 0.0) > 0)
        self.spl = float(m.get("spl", 0.0)) if self.success else 0.0
        reward = previous - self.distance - self.slack_reward + self.success_reward * self.success
        self.episode_return += reward
        return self._observe(obs), float(reward), terminated, truncated, self._info()

    def move_continuous(self, linear_m: float, angular_rad: float) -> bool:
        """Turn by ``angular_rad`` (CCW) and move ``linear_m`` along the mid-turn heading on the
        navmesh, without an episode step (the bridge's real-time mode). False when blocked."""
        sim = self._env.sim
        state = sim.get_agent_state()
        x, z, yaw = self._planar(state)
        heading = yaw + angular_rad / 2
        target = np.array([x + linear_m * math.cos(heading), state.position[1], z - linear_m * math.sin(heading)])
        end = sim.pathfinder.try_step(state.position, target) if linear_m else state.position
        moved = float(np.linalg.norm(np.asarray(end)[[0, 2]] - target[[0, 2]])) < 1e-3
        sim.set_agent_state(np.asarray(end, dtype=np.float32), rotation_for_yaw(wrap_angle(yaw + angular_rad)))
        return moved or linear_m == 0.0

    # -- observations ------------------------------------------------------------------------
    @staticmethod
    def _planar(state) -> tuple[float, float, float]:
        return float(state.position[0]), float(state.position[2]), yaw_of(state.rotation)

    def odometry(self) -> np.ndarray:
        """(x forward, y left, yaw CCW) relative to the episode's start pose."""
        return episode_odometry(self.start_pose, self._planar(self._env.sim.get_agent_state()))

    def _observe(self, obs: dict) -> dict[str, np.ndarray]:
        self._last_rgb = np.ascontiguousarray(np.asarray(obs["rgb"])[..., :3], dtype=np.uint8)
        return {"rgb": self._last_rgb, "goal": np.int64(np.asarray(obs["objectgoal"]).reshape(-1)[0]),
                "odom": self.odometry(), "prev_action": np.int64(self.prev_action)}

    def _info(self) -> dict:
        return {
            "goal_name": str(self._env.current_episode.object_category),
            "success": self.success,
            "spl": self.spl,
            "agent_pose": np.array(self._planar(self._env.sim.get_agent_state()), np.float64),
            "episode_step": self.episode_step,
            "episode_index": self.episode_index,
            "episode_return": float(self.episode_return),
            "geodesic_distance": self.distance,
            "scene": str(self.scene),
        }

    def render(self):
        return self._last_rgb if self.render_mode == "rgb_array" else None

    def close(self) -> None:
        self._env.close()
        super().close()


__all__ = ["HabitatExtObjNavEnv", "ACTION_NAMES", "import_habitat", "yaw_of", "rotation_for_yaw"]
