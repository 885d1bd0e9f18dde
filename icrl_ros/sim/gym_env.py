"""Gymnasium view of a one-env batch of a :class:`VecTrialEnv`.

``reset()`` keeps the current task (a new episode of the same trial) unless
``options={"new_trial": True}`` or a seed is given, or no trial has started yet; this is how
in-context learning is exposed through the standard Gymnasium API.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np

from icrl_ros.sim.gridworlds import VecTrialEnv


class TrialEnv(gym.Env):
    metadata = {"render_modes": []}

    def __init__(self, vec_cls: type[VecTrialEnv], split: str = "train") -> None:
        self._env = vec_cls(1, split=split)
        self.observation_space = gym.spaces.Discrete(self._env.n_obs)
        self.action_space = gym.spaces.Discrete(self._env.n_actions)
        self._started = False
        self._obs = 0

    @property
    def vec_env(self) -> VecTrialEnv:
        return self._env

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        if seed is not None:
            self._env.rng = np.random.default_rng(seed)
        if seed is not None or not self._started or (options or {}).get("new_trial", False):
            self._obs = int(self._env.reset_trial()[0])
            self._started = True
        else:
            self._obs = int(self._env.begin_episode()[0])
        return self._obs, {"episode_step": int(self._env.episode_step[0])}

    def step(self, action):
        obs, reward, done, info = self._env.step(np.array([action]))
        self._obs = int(obs[0])
        return self._obs, float(reward[0]), bool(info["terminated"][0]), bool(info["truncated"][0]), {}
