"""Grid-world meta-RL tasks: Darkroom (DPT / ReLIC) and Dark-Key-To-Door (AMAGO / Memo).

Both come in two forms:

* ``*VecEnv``: numpy batch stepping of ``num_envs`` independent trials, used by the
  trainer and the evaluator (no Python object per env, one vectorised step for all).
* a Gymnasium ``Env`` (registered ids in :mod:`icrl_ros.sim`) wrapping a one-env batch.

A *trial* fixes the task (goal; key, door and start) across episodes. ``reset_trial``
draws a new task; an episode end (``done``) auto-resets to the next episode of the same
trial and returns the new episode's first observation. Observations are discrete cell
indices ``x * size + y``. ``info["final_obs"]`` is the cell each env's step arrived in,
before any episode reset (Gymnasium's final observation): on a terminated Dark-Key-To-Door
episode it is the door, which the reset observation no longer shows.
"""

from __future__ import annotations

import numpy as np

# (dx, dy) per action.
_MOVES_5 = np.array([[0, 1], [0, -1], [-1, 0], [1, 0], [0, 0]], dtype=np.int64)  # up down left right stay
_MOVES_4 = _MOVES_5[:4]

SPLITS = ("train", "test", "all")


class VecTrialEnv:
    """Common interface of the batched trial environments."""

    name: str = ""
    size: int  # side of the square grid
    n_obs: int
    n_actions: int
    action_names: tuple[str, ...]
    max_episode_steps: int
    trial_steps: int  # the trial length evaluations use by default

    def __init__(self, num_envs: int, split: str = "train", seed: int | None = None) -> None:
        if num_envs <= 0:
            raise ValueError(f"num_envs must be positive, got {num_envs}")
        if split not in SPLITS:
            raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
        self.num_envs = num_envs
        self.split = split
        self.rng = np.random.default_rng(seed)
        self.episode_step = np.zeros(num_envs, dtype=np.int64)

    # -- to implement -------------------------------------------------------------
    def reset_trial(self, idx: np.ndarray | None = None) -> np.ndarray:
        raise NotImplementedError

    def step(self, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict]:
        raise NotImplementedError

    def observe(self) -> np.ndarray:
        """Current observation of every env (N,)."""
        raise NotImplementedError

    def begin_episode(self, idx: np.ndarray | None = None) -> np.ndarray:
        """Start a new episode of the current trial (same task) for the given envs."""
        raise NotImplementedError

    def oracle_trial_return(self, trial_steps: int) -> np.ndarray:
        """Return an agent that knows each env's task collects in ``trial_steps`` steps."""
        raise NotImplementedError

    def model_fields(self) -> dict:
        """ModelArgs fields this env determines."""
        return {"n_obs": self.n_obs, "n_actions": self.n_actions, "max_episode_steps": self.max_episode_steps,
                "grid_size": self.size}

    # -- shared helpers -----------------------------------------------------------
    def _index(self, idx: np.ndarray | None) -> np.ndarray:
        return np.arange(self.num_envs) if idx is None else np.asarray(idx, dtype=np.int64)

    def _check_actions(self, actions: np.ndarray) -> np.ndarray:
        a = np.asarray(actions, dtype=np.int64).reshape(-1)
        if a.shape[0] != self.num_envs:
            raise ValueError(f"expected {self.num_envs} actions, got {a.shape[0]}")
        if (a < 0).any() or (a >= self.n_actions).any():
            raise ValueError(f"actions must lie in [0, {self.n_actions}), got {a}")
        return a


class DarkroomVecEnv(VecTrialEnv):
    """10x10 room, start (0, 0), 100-step episodes, 5 actions, +1 per step on the goal.

    The 100 goal cells are shuffled with seed 0; the first 80 are the training goals and
    the last 20 the held-out goals (as in DPT and ReLIC).
    """

    name = "darkroom"
    size = 10
    n_actions = 5
    action_names = ("up", "down", "left", "right", "stay")
    max_episode_steps = 100
    trial_steps = 4000  # 40 in-context episodes

    def __init__(self, num_envs: int, split: str = "train", seed: int | None = None) -> None:
        super().__init__(num_envs, split, seed)
        self.n_obs = self.size * self.size
        order = np.random.RandomState(0).permutation(self.n_obs)
        self.goal_pool = {"train": order[:80], "test": order[80:], "all": order}[split]
        self.goal = np.zeros((num_envs, 2), dtype=np.int64)
        self.pos = np.zeros((num_envs, 2), dtype=np.int64)

    def set_tasks(self, goal_cells: np.ndarray) -> np.ndarray:
        """Start new trials with the given goal cell indices (one per env)."""
        cells = np.asarray(goal_cells, dtype=np.int64).reshape(self.num_envs)
        self.goal[:] = np.stack([cells // self.size, cells % self.size], axis=1)
        self.pos[:] = 0
        self.episode_step[:] = 0
        return self.observe()

    def reset_trial(self, idx: np.ndarray | None = None) -> np.ndarray:
        i = self._index(idx)
        cells = self.rng.choice(self.goal_pool, size=len(i))
        self.goal[i] = np.stack([cells // self.size, cells % self.size], axis=1)
        self.pos[i] = 0
        self.episode_step[i] = 0
        return self.observe()

    def observe(self) -> np.ndarray:
        return self.pos[:, 0] * self.size + self.pos[:, 1]

    def begin_episode(self, idx=None):
        i = self._index(idx)
        self.pos[i] = 0
        self.episode_step[i] = 0
        return self.observe()

    def step(self, actions):
        a = self._check_actions(actions)
        self.pos = np.clip(self.pos + _MOVES_5[a], 0, self.size - 1)
        reward = (self.pos == self.goal).all(axis=1).astype(np.float32)
        self.episode_step += 1
        done = self.episode_step >= self.max_episode_steps
        final = self.observe()
        self.pos[done] = 0
        self.episode_step[done] = 0
        return self.observe(), reward, done, {"terminated": np.zeros_like(done), "truncated": done.copy(),
                                              "final_obs": final}

    def oracle_episode_return(self) -> np.ndarray:
        d = np.abs(self.goal).sum(axis=1)  # shortest path from (0, 0)
        return np.minimum(self.max_episode_steps, self.max_episode_steps + 1 - d).astype(np.float64)

    def oracle_trial_return(self, trial_steps: int) -> np.ndarray:
        full, rest = divmod(trial_steps, self.max_episode_steps)
        d = np.abs(self.goal).sum(axis=1)
        partial = np.maximum(0, rest - np.maximum(d - 1, 0)) if rest else 0
        return full * self.oracle_episode_return() + partial


class DarkKeyToDoorVecEnv(VecTrialEnv):
    """9x9 dark room: +1 for reaching the key, +1 for reaching the door holding it.

    Key, door and start cell are drawn per trial (distinct cells); the episode ends at the
    door (with the key) or after 50 steps. The agent observes only its position.
    Tasks are split by a hash of (start, key, door): ~80% train, ~20% held out.
    """

    name = "dark_key_to_door"
    size = 9
    n_actions = 4
    action_names = ("up", "down", "left", "right")
    max_episode_steps = 50
    trial_steps = 500

    def __init__(self, num_envs: int, split: str = "train", seed: int | None = None) -> None:
        super().__init__(num_envs, split, seed)
        self.n_obs = self.size * self.size
        self.start = np.zeros((num_envs, 2), dtype=np.int64)
        self.key = np.zeros((num_envs, 2), dtype=np.int64)
        self.door = np.zeros((num_envs, 2), dtype=np.int64)
        self.pos = np.zeros((num_envs, 2), dtype=np.int64)
        self.has_key = np.zeros(num_envs, dtype=bool)

    def _is_test(self, cells: np.ndarray) -> np.ndarray:
        # A fixed hash of the (start, key, door) triple: 1 in 5 triples is held out.
        h = (cells[:, 0] * 7919 + cells[:, 1] * 104729 + cells[:, 2] * 1299709) % 5
        return h == 0

    def _draw(self, n: int) -> np.ndarray:
        out = np.zeros((0, 3), dtype=np.int64)
        while len(out) < n:
            cells = np.stack([self.rng.choice(self.n_obs, 3, replace=False) for _ in range(2 * n + 8)])
            if self.split != "all":
                test = self._is_test(cells)
                cells = cells[test] if self.split == "test" else cells[~test]
            out = np.concatenate([out, cells])
        return out[:n]

    def set_tasks(self, cells: np.ndarray) -> np.ndarray:
        """Start new trials with given (start, key, door) cell indices, shape [num_envs, 3]."""
        c = np.asarray(cells, dtype=np.int64).reshape(self.num_envs, 3)
        self._assign(np.arange(self.num_envs), c)
        return self.observe()

    def _assign(self, i: np.ndarray, c: np.ndarray) -> None:
        to_xy = lambda v: np.stack([v // self.size, v % self.size], axis=1)  # noqa: E731
        self.start[i], self.key[i], self.door[i] = to_xy(c[:, 0]), to_xy(c[:, 1]), to_xy(c[:, 2])
        self.pos[i] = self.start[i]
        self.has_key[i] = False
        self.episode_step[i] = 0

    def reset_trial(self, idx=None):
        i = self._index(idx)
        self._assign(i, self._draw(len(i)))
        return self.observe()

    def observe(self) -> np.ndarray:
        return self.pos[:, 0] * self.size + self.pos[:, 1]

    def begin_episode(self, idx=None):
        i = self._index(idx)
        self.pos[i] = self.start[i]
        self.has_key[i] = False
        self.episode_step[i] = 0
        return self.observe()

    def step(self, actions):
        a = self._check_actions(actions)
        self.pos = np.clip(self.pos + _MOVES_4[a], 0, self.size - 1)
        at_key = (self.pos == self.key).all(axis=1) & ~self.has_key
        self.has_key |= at_key
        at_door = (self.pos == self.door).all(axis=1) & self.has_key
        reward = (at_key.astype(np.float32) + at_door.astype(np.float32))
        self.episode_step += 1
        truncated = (self.episode_step >= self.max_episode_steps) & ~at_door
        done = at_door | truncated
        final = self.observe()
        self.pos[done] = self.start[done]
        self.has_key[done] = False
        self.episode_step[done] = 0
        return self.observe(), reward, done, {"terminated": at_door, "truncated": truncated, "final_obs": final}

    def oracle_trial_return(self, trial_steps: int) -> np.ndarray:
        d_key = np.abs(self.key - self.start).sum(axis=1)
        d_door = np.abs(self.door - self.key).sum(axis=1)
        length = d_key + d_door  # <= 32 < 50, so the oracle always finishes an episode
        full, rest = np.divmod(trial_steps, length)
        return (2 * full + (rest >= d_key)).astype(np.float64)
