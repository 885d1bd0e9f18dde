"""TEST DOUBLE: a tiny image-navigation env following the house-env contract.

Stands in for ``icrl_ros/MiniWorldHouse-v0`` in the bridge tests: Discrete(4) actions
(stop / forward 0.25 m / turn left 30 deg / turn right 30 deg), observation
``{"rgb": (24, 32, 3) uint8, "goal": int, "odom": (x, y, yaw) float32 from the episode start,
"prev_action": int}``, ``reset(options={"new_trial": True})`` for a new layout, ``goal_names``,
``move_continuous`` and ``observe``; ``reset`` takes ``start`` / ``goal`` options as the Habitat
env's does (off with ``replay=False``). The image is a cheap function of the pose, so images differ
after every move. Registered as ``icrl_ros_test/TinyImageNav-v0`` by importing this module
(``gymnasium.make("tests.nodes.fixture_env:icrl_ros_test/TinyImageNav-v0")`` does that).
"""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np

ENV_ID = "icrl_ros_test/TinyImageNav-v0"
GOALS = ["chair", "table", "sofa"]


def _wrap(a: float) -> float:
    return math.atan2(math.sin(a), math.cos(a))


class TinyImageNavEnv(gym.Env):
    metadata = {"render_modes": []}

    def __init__(self, max_steps: int = 8, height: int = 24, width: int = 32, forward_m: float = 0.25,
                 turn_deg: float = 30.0, success_radius: float = 0.5, replay: bool = True) -> None:
        self.max_steps = max_steps
        self.replay = replay  # reset takes {"start": [x, z, yaw], "goal": name} (as Habitat's env does)
        self.size = (height, width)
        self.forward_m = forward_m
        self.turn = math.radians(turn_deg)
        self.success_radius = success_radius
        self.goal_names = list(GOALS)
        self.action_space = gym.spaces.Discrete(4)
        self.observation_space = gym.spaces.Dict({
            "rgb": gym.spaces.Box(0, 255, (height, width, 3), np.uint8),
            "goal": gym.spaces.Discrete(len(GOALS)),
            "odom": gym.spaces.Box(-np.inf, np.inf, (3,), np.float32),
            "prev_action": gym.spaces.Discrete(5),
        })
        self.rng = np.random.default_rng(0)
        self.objects = np.zeros((len(GOALS), 2))
        self.pose = np.zeros(3)  # world x, y, yaw
        self.start = np.zeros(3)
        self.goal = 0
        self.step_count = 0
        self.episode_index = -1
        self.prev_action = 4  # "none"
        self.path_length = 0.0
        self.geodesic = 1.0
        self.moved_continuous = 0.0
        self.obs_log: list[tuple[int, int, np.ndarray]] = []  # (episode, step, odom) of each observation handed out
        self._started = False

    # --- contract -------------------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        if seed is not None:
            self.rng = np.random.default_rng(seed)
        if seed is not None or not self._started or (options or {}).get("new_trial", False):
            self.objects = self.rng.uniform(-3, 3, size=(len(GOALS), 2))
            self.episode_index = -1
            self._started = True
        self.episode_index += 1
        self.pose = np.array([*self.rng.uniform(-2, 2, size=2), self.rng.uniform(-math.pi, math.pi)])
        self.goal = int(self.rng.integers(len(GOALS)))
        options = options or {}
        if self.replay and "start" in options:  # world (x, z, yaw) as info["agent_pose"] gives it
            x, z, yaw = (float(v) for v in options["start"])
            self.pose = np.array([x, -z, yaw])
        if self.replay and "goal" in options:
            self.goal = GOALS.index(options["goal"])
        self.start = self.pose.copy()
        self.step_count = 0
        self.prev_action = 4
        self.path_length = 0.0
        self.geodesic = max(self._distance() - self.success_radius, 1e-3)
        obs = self.observe()
        self.obs_log.append((self.episode_index, self.step_count, obs["odom"]))
        return obs, self._info(False)

    def step(self, action: int):
        action = int(action)
        assert self.action_space.contains(action), action
        before = self._distance()
        success = False
        if action == 0:
            success = self._distance() <= self.success_radius
        elif action == 1:
            self._move(self.forward_m, 0.0)
        elif action == 2:
            self._move(0.0, self.turn)
        else:
            self._move(0.0, -self.turn)
        self.step_count += 1
        self.prev_action = action
        terminated = action == 0
        truncated = not terminated and self.step_count >= self.max_steps
        reward = (before - self._distance()) - 0.01 + (2.5 if success else 0.0)
        obs = self.observe()
        if not (terminated or truncated):
            self.obs_log.append((self.episode_index, self.step_count, obs["odom"]))
        return obs, float(reward), terminated, truncated, self._info(success)

    def move_continuous(self, linear_m: float, angular_rad: float) -> bool:
        self._move(linear_m, angular_rad)
        self.moved_continuous += abs(linear_m)
        return True

    def observe(self) -> dict:
        return {"rgb": self._render(), "goal": self.goal, "odom": self.odom(), "prev_action": self.prev_action}

    # --- helpers --------------------------------------------------------------------------------
    def odom(self) -> np.ndarray:
        dx, dy = self.pose[:2] - self.start[:2]
        c, s = math.cos(self.start[2]), math.sin(self.start[2])
        return np.array([c * dx + s * dy, -s * dx + c * dy, _wrap(self.pose[2] - self.start[2])], np.float32)

    def _move(self, linear: float, angular: float) -> None:
        # turn half, drive, turn half: exact for pure moves, a fair arc for mixed ones
        yaw = self.pose[2] + angular / 2
        self.pose[0] += linear * math.cos(yaw)
        self.pose[1] += linear * math.sin(yaw)
        self.pose[2] = _wrap(self.pose[2] + angular)
        self.path_length += abs(linear)

    def _distance(self) -> float:
        return float(np.linalg.norm(self.objects[self.goal] - self.pose[:2]))

    def _render(self) -> np.ndarray:
        h, w = self.size
        img = np.empty((h, w, 3), np.uint8)
        img[..., 0] = int((self.pose[2] + math.pi) / (2 * math.pi) * 255)
        img[..., 1] = int((self.pose[0] + 5) * 25) % 256
        img[..., 2] = int((self.pose[1] + 5) * 25) % 256
        img[: h // 4, :, :] = 40 * (self.goal + 1)  # a band showing the goal
        return img

    def _info(self, success: bool) -> dict:
        spl = float(success) * self.geodesic / max(self.path_length, self.geodesic)
        return {
            "goal_name": GOALS[self.goal],
            "success": bool(success),
            "spl": spl,
            "geodesic_distance": self.geodesic,
            "agent_pose": (float(self.pose[0]), float(-self.pose[1]), float(self.pose[2])),
            "episode_step": self.step_count,
            "episode_index": self.episode_index,
        }


if ENV_ID not in gym.registry:
    gym.register(id=ENV_ID, entry_point=TinyImageNavEnv, disable_env_checker=True)
