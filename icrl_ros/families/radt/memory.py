"""RA-DT episodic memory: stored episodes + a :class:`RetrievalIndex` over their sub-trajectories.

Following RA-DT (Sec. 3.2.1, App. C.4), an episode of H steps gives H / C index entries:
the key embeds steps [t - C, t) for t = C, 2C, ..., the value is the sub-trajectory
[t - C, t + C) (the key's steps and their continuation, zero-padded past the episode end).
The index stores only (episode slot, start) pointers as values; :meth:`gather` turns them
into token arrays, so training over millions of steps does not copy sub-trajectories.

Each entry carries the episode's task and return for the re-ranking (task match in
training, return at inference; :meth:`end_episode` takes the return from outside for a
robot that gets no reward).

A step's ``obs`` is a grid cell (int64) or, for image models, a feature vector of
``obs_shape`` (F,) float32 (:class:`~icrl_ros.families.radt.model.ObsFeatures`: the step's learnt
embedding + its fixed key inputs), so an image step costs 4F bytes, never its pixels.

Bounded: ``max_episodes`` episode slots (or as many as ``budget_bytes`` holds), every
buffer preallocated (episode arrays, the index's metadata; the faiss index holds at most
``max_episodes * keys_per_episode`` keys). Past the bound ``on_full`` decides: ``error``
(training and evaluation size the memory to the data: :class:`MemoryFullError`),
``evict_oldest`` (deployment: the oldest *whole* episodes leave, their index entries
with them; slots are a ring), ``reset`` (forget every stored episode).

Deployment (:class:`~icrl_ros.families.radt.runner.RADTRunner`) also keeps the current
episode here, so one snapshot file holds everything a step reads:

* the window: the last C tokens of the current episode (WINDOW_KEYS, each (1, C), left
  padded exactly as :func:`~icrl_ros.families.radt.model.episode_windows` pads), a shift register;
* the current episode record (its first H steps), stored with its return by
  :meth:`end_episode` (an episode boundary); :meth:`reset` forgets everything (a new trial).

Per step: :meth:`observe` (push the step's token), :meth:`query` (retrieve top-k for the
window), :meth:`record_action`; the reward of that action arrives with the next step
(:meth:`record_reward`), so an episode is stored once its last reward is known.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial

import numpy as np
import torch
from torch import Tensor

from icrl_ros.memory.base import DEFAULT_STEPS, Memory, MemoryBudgetError, MemoryFullError, check_on_full
from icrl_ros.families.radt.retrieval import RetrievalIndex

Embed = Callable[[np.ndarray, np.ndarray], np.ndarray]
"""(obs (N, T), valid (N, T)) -> keys (N, d)."""

WINDOW_FIELDS = (("obs", np.int64), ("prev_action", np.int64), ("prev_reward", np.float32), ("rtg", np.float32),
                 ("episode_step", np.int64), ("valid", np.bool_))
"""The window's arrays (RA-DT WINDOW_KEYS) and their dtypes."""


def returns_to_go(reward: np.ndarray) -> np.ndarray:
    """RTG_t = sum of rewards from t to the episode end, along the last axis."""
    return np.flip(np.cumsum(np.flip(reward, -1), -1), -1).astype(np.float32)


def _masked_mean(x: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """Mean over T of x (N, T, d) at the valid steps (N, T) -> (N, d) float32 (zeros if none)."""
    w = np.asarray(valid, dtype=np.float32)
    s = np.einsum("nt,ntd->nd", w, x)
    return (s / np.maximum(w.sum(1, keepdims=True), 1.0)).astype(np.float32)


def feature_keys(proj: np.ndarray, offset: int, obs: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """Keys (N, key_dim) float32 of image sub-trajectories: features obs (N, T, F) whose
    values from ``offset`` on are the steps' fixed key inputs; the mean of the valid steps'
    key inputs times ``proj`` (key inputs, key_dim) (= the mean of the projected steps)."""
    return _masked_mean(np.asarray(obs, dtype=np.float32)[..., offset:], valid) @ proj


def projected_keys(proj: np.ndarray, obs: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """Keys (N, key_dim) float32 of sub-trajectories obs (N, T) with validity (N, T) under a
    fixed projection ``proj`` (n_obs, key_dim) of one-hot states: the mean of the valid
    steps' projected states (zeros if none). RA-DT's ``trajectory_keys``."""
    return _masked_mean(proj[np.asarray(obs, dtype=np.int64)], valid)


class SubTrajectoryMemory(Memory):
    policy = "retrieval"  # type: ignore[assignment]

    def __init__(self, embed: Embed, key_dim: int, context: int, horizon: int, max_episodes: int | None = None,
                 relevance_weight: float = 1.0, utility_weight: float = 1.0, *, on_full: str = "error",
                 budget_bytes: int | None = None, n_obs: int = 0, n_actions: int = 0,
                 obs_shape: tuple[int, ...] = (), obs_dtype=np.int64) -> None:
        """``context`` C steps per key; episodes of ``horizon`` steps (shorter ones padded);
        ``max_episodes`` stored episodes (None: as many as ``budget_bytes`` holds).
        ``n_obs`` / ``n_actions`` are needed by the deploy API only (synthetic fill; the
        window's "no previous action" index). ``obs_shape`` / ``obs_dtype``: one step's obs
        (grid: a cell, () int64; image: features, (F,) float32)."""
        if context <= 0 or horizon <= 0:
            raise ValueError(f"context / horizon: must be > 0, got {context}, {horizon}")
        self.embed, self.C, self.H = embed, context, horizon
        self.on_full = check_on_full(on_full)
        self.n_obs, self.n_actions, self.batch, self.budget_bytes = n_obs, n_actions, 1, budget_bytes
        self.obs_shape, self.obs_dtype = tuple(obs_shape), np.dtype(obs_dtype)
        obs_bytes = self.obs_dtype.itemsize * math.prod(self.obs_shape)
        self.key_ends = np.arange(context, horizon + context - 1, context).clip(max=horizon)  # t of each key
        self.keys_per_episode = len(self.key_ends)
        self.W = horizon + 2 * context  # padded width: any value window [start, start + 2C) fits
        entry = RetrievalIndex.entry_size(key_dim, (2,), np.int64)
        self.episode_bytes = (self.W * (obs_bytes + 8 + 4 + 4) + 8 + 8 + 8 * self.keys_per_episode
                              + self.keys_per_episode * entry)
        """Bytes one stored episode costs: obs, action (int64), reward / rtg (float32) of
        W steps, length, task, entry ids, and its index entries."""
        fixed = (horizon * (obs_bytes + 8 + 4)
                 + context * (obs_bytes + sum(np.dtype(d).itemsize for n, d in WINDOW_FIELDS if n != "obs")))
        if max_episodes is None:
            if budget_bytes is None:
                raise ValueError("max_episodes: give max_episodes or memory_budget_bytes")
            max_episodes = max(0, budget_bytes - fixed) // self.episode_bytes
            if max_episodes < 1:
                raise MemoryBudgetError(f"memory_budget_bytes: {budget_bytes:,} bytes do not hold the current "
                                        f"episode and one stored episode of SubTrajectoryMemory; need "
                                        f"{fixed + self.episode_bytes:,}")
        if max_episodes <= 0:
            raise ValueError(f"max_episodes: must be > 0, got {max_episodes}")
        if budget_bytes is not None and fixed + max_episodes * self.episode_bytes > budget_bytes:
            raise MemoryBudgetError(f"memory_budget_bytes: SubTrajectoryMemory with {max_episodes} episodes needs "
                                    f"{fixed + max_episodes * self.episode_bytes:,} bytes, budget is "
                                    f"{budget_bytes:,}; raise the budget or lower max_episodes")
        self.max_episodes = max_episodes
        E, W = max_episodes, self.W
        self.obs = np.zeros((E, W, *self.obs_shape), dtype=self.obs_dtype)
        self.action = np.zeros((E, W), dtype=np.int64)
        self.reward = np.zeros((E, W), dtype=np.float32)
        self.rtg = np.zeros((E, W), dtype=np.float32)
        self.length = np.zeros(E, dtype=np.int64)
        self.task = np.zeros(E, dtype=np.int64)
        self.entry_ids = np.full((E, self.keys_per_episode), -1, dtype=np.int64)
        self.index = RetrievalIndex(key_dim, capacity=E * self.keys_per_episode, value_shape=(2,),
                                    relevance_weight=relevance_weight, utility_weight=utility_weight)
        # the current episode (deploy API)
        self.cur_obs = np.zeros((horizon, *self.obs_shape), dtype=self.obs_dtype)
        self.cur_action = np.zeros(horizon, dtype=np.int64)
        self.cur_reward = np.zeros(horizon, dtype=np.float32)
        self.window = {n: np.zeros((1, context, *self.obs_shape) if n == "obs" else (1, context),
                                   dtype=self.obs_dtype if n == "obs" else d) for n, d in WINDOW_FIELDS}
        self.episodes = 0  # stored episodes
        self.added = 0  # episodes stored since the trial start (slot of episode n: n % max_episodes)
        self._clear_episode()

    @classmethod
    def from_projection(cls, key_proj: np.ndarray, context: int, horizon: int, n_actions: int,
                        obs_features: int = 0, **kwargs) -> SubTrajectoryMemory:
        """A memory whose keys are :func:`projected_keys` under ``key_proj`` (n_obs, key_dim),
        or with ``obs_features`` F > 0 (image models) :func:`feature_keys` of (F,) float32
        features whose last ``key_proj.shape[0]`` values are the key inputs."""
        proj = np.ascontiguousarray(key_proj, dtype=np.float32)
        if obs_features:
            embed = partial(feature_keys, proj, obs_features - proj.shape[0])
            return cls(embed, proj.shape[1], context, horizon, n_actions=n_actions, obs_shape=(obs_features,),
                       obs_dtype=np.float32, **kwargs)
        return cls(partial(projected_keys, proj), proj.shape[1], context, horizon, n_obs=proj.shape[0],
                   n_actions=n_actions, **kwargs)

    @classmethod
    def create(cls, dims: dict, model: dict, cfg: dict, common: dict) -> SubTrajectoryMemory:
        """Not a KV cache: ``cfg`` carries the model's ``key_proj``, ``context``, ``horizon``,
        ``n_actions``, ``obs_features`` (image models) and the re-ranking weights; ``dims``, the
        dtype and the device do not apply (numpy + faiss on the CPU)."""
        return cls.from_projection(
            cfg["key_proj"], cfg["context"], cfg["horizon"], cfg["n_actions"], obs_features=cfg.get("obs_features", 0),
            max_episodes=cfg.get("max_episodes"),
            relevance_weight=cfg.get("relevance_weight", 1.0), utility_weight=cfg.get("utility_weight", 1.0),
            on_full=cfg.get("on_full", "evict_oldest"), budget_bytes=common.get("budget_bytes"))

    @classmethod
    def bundle_defaults(cls, args) -> dict:
        """DEFAULT_STEPS steps' worth of whole episodes (Darkroom: 82 > a 40-episode trial)."""
        return {"max_episodes": math.ceil(DEFAULT_STEPS / args.max_episode_steps), "on_full": "evict_oldest"}

    @classmethod
    def trial_sizes(cls, args, steps: int, schedule: list[int] | None = None) -> dict:
        """One stored episode per step at most."""
        return {"max_episodes": steps, "on_full": "error"}

    def __len__(self) -> int:
        """Index entries (sub-trajectories)."""
        return len(self.index)

    # -- sizes --------------------------------------------------------------------------
    @property
    def nbytes(self) -> int:
        """Bytes of everything the memory may hold (constant): its arrays + the index at capacity."""
        own = sum(a.nbytes for n, a in self._arrays().items() if not n.startswith("index_"))
        return own + self.index.capacity * self.index.entry_bytes

    @property
    def live_bytes(self) -> int:
        """Bytes of the current episode + the stored episodes (grows until the bound, then flat)."""
        return self.nbytes - (self.max_episodes - self.episodes) * self.episode_bytes

    @property
    def slots(self) -> int:
        """Steps the store can hold (max_episodes x H)."""
        return self.max_episodes * self.H

    @property
    def tokens(self) -> int:
        """Steps of the stored episodes."""
        return int(self.length.sum())

    # -- episodes -----------------------------------------------------------------------
    def _free_oldest(self, n: int) -> None:
        """Evict the ``n`` oldest stored episodes (their index entries with them)."""
        first = self.added - self.episodes
        slots = (first + np.arange(n)) % self.max_episodes
        self.index.remove(self.entry_ids[slots].reshape(-1))
        self.entry_ids[slots], self.length[slots] = -1, 0
        self.episodes -= n

    def add_episodes(self, obs: np.ndarray, action: np.ndarray, reward: np.ndarray, task=0,
                     length: np.ndarray | None = None, keep: Callable | None = None,
                     returns: np.ndarray | None = None) -> np.ndarray:
        """Store E episodes (E, T <= H) and index their sub-trajectories; returns their slots.
        ``length`` (E,) valid steps (default T); ``keep(keys, slots, ends) -> bool mask`` may
        drop entries before indexing (deduplication); ``returns`` (E,): the re-ranking utility
        (default: the sum of ``reward``). Past ``max_episodes``: ``on_full``."""
        action, reward = np.atleast_2d(action), np.atleast_2d(reward)
        obs = np.asarray(obs).reshape(*action.shape, *self.obs_shape)
        E, T = action.shape
        if T > self.H:
            raise ValueError(f"episodes: {T} steps exceed the memory's horizon {self.H}")
        over = self.episodes + E - self.max_episodes
        if over > 0:
            if self.on_full == "error" or E > self.max_episodes:
                raise MemoryFullError(f"SubTrajectoryMemory: {self.episodes} + {E} episodes exceed max_episodes="
                                      f"{self.max_episodes}")
            self._free_oldest(self.episodes if self.on_full == "reset" else over)
        length = np.full(E, T) if length is None else np.asarray(length, dtype=np.int64)
        slots = (self.added + np.arange(E)) % self.max_episodes
        steps = np.arange(T)
        live = steps[None] < length[:, None]
        for arr in (self.obs, self.action, self.reward, self.rtg):
            arr[slots] = 0
        self.obs[slots, :T] = np.where(live.reshape(live.shape + (1,) * len(self.obs_shape)), obs, 0)
        self.action[slots, :T] = np.where(live, action, 0)
        self.reward[slots, :T] = np.where(live, reward, 0)
        self.rtg[slots, :T] = returns_to_go(self.reward[slots, :T])
        self.length[slots], self.task[slots] = length, np.broadcast_to(np.asarray(task), (E,))
        self.episodes += E
        self.added += E
        # keys: steps [end - C, end) of every episode, for every key end that the episode reached
        ends = np.broadcast_to(self.key_ends, (E, self.keys_per_episode))
        idx = (ends[..., None] - self.C + np.arange(self.C)).clip(min=0)  # (E, n, C)
        win_valid = (idx < length[:, None, None]) & (ends[..., None] - self.C + np.arange(self.C) >= 0)
        keys = self.embed(self.obs[slots[:, None, None], idx].reshape(-1, self.C, *self.obs_shape),
                          win_valid.reshape(-1, self.C))
        ok = (ends - self.C < length[:, None]).reshape(-1)  # the key window starts inside the episode
        ep_slot = np.repeat(slots, self.keys_per_episode)
        starts = (ends - self.C).reshape(-1)
        if keep is not None:
            ok &= keep(keys, ep_slot, ends.reshape(-1))
        values = np.stack([ep_slot, starts], 1)[ok]
        utility = self.rtg[slots, 0] if returns is None else np.broadcast_to(np.asarray(returns, np.float32), (E,))
        ids = self.index.add(keys[ok], values, task=self.task[ep_slot][ok],
                             episode_return=np.repeat(utility, self.keys_per_episode)[ok])
        flat_ids = np.full(E * self.keys_per_episode, -1, dtype=np.int64)
        flat_ids[ok] = ids
        self.entry_ids[slots] = flat_ids.reshape(E, -1)
        return slots

    def gather(self, values: np.ndarray, valid: np.ndarray) -> dict[str, np.ndarray]:
        """Token arrays (Q, k, 2C) of the retrieved (slot, start) pointers ``values`` (Q, k, 2)."""
        slot, start = values[..., 0], values[..., 1]
        t = start[..., None] + np.arange(2 * self.C)  # (Q, k, 2C)
        s = slot[..., None]
        ok = valid[..., None] & (t < self.length[s])
        return {"obs": np.where(ok.reshape(ok.shape + (1,) * len(self.obs_shape)), self.obs[s, t], 0), "action": np.where(ok, self.action[s, t], 0),
                "reward": np.where(ok, self.reward[s, t], 0), "rtg": np.where(ok, self.rtg[s, t], 0),
                "episode_step": np.where(ok, t, 0), "valid": ok}

    def retrieve(self, queries: np.ndarray, l: int, k: int, task=None, exclude_slots: np.ndarray | None = None,
                 max_relevance: float | None = None) -> dict[str, np.ndarray]:
        """Top-k sub-trajectories (Q, k, 2C) per query key (Q, d): top-l by cosine, re-ranked by
        relevance + utility (``task`` given: task match; None: episode return). Training-time
        regularisation: ``exclude_slots`` (Q,) episodes not to retrieve from (the query's own),
        ``max_relevance`` similarity cut-off."""
        exclude = None if exclude_slots is None else self.entry_ids[np.asarray(exclude_slots)]
        got = self.index.query(queries, l=l, k=k, task=task, exclude=exclude, max_relevance=max_relevance)
        out = self.gather(got.values, got.valid)
        out["slot"] = np.where(got.valid, got.values[..., 0], -1)
        return out

    # -- the current episode (deploy API) -------------------------------------------------
    def _clear_episode(self) -> None:
        self.cur_len, self.last_action, self.last_reward, self.episode_return = 0, self.n_actions, 0.0, 0.0
        for n, a in self.window.items():  # the padding of episode_windows
            a[:] = self.n_actions if n == "prev_action" else 0

    def observe(self, obs: int | np.ndarray, rtg: float) -> dict[str, np.ndarray]:
        """Push the current step's token (its cell or features, the previous action and reward, the
        return-to-go, the step) into the window; returns the window (WINDOW_KEYS, (1, C))."""
        t = self.cur_len
        if t < self.H:
            self.cur_obs[t] = obs
        token = {"obs": obs, "prev_action": self.last_action, "prev_reward": self.last_reward, "rtg": rtg,
                 "episode_step": t, "valid": True}
        for n, a in self.window.items():
            a[0, :-1] = a[0, 1:]
            a[0, -1] = token[n]
        return self.window

    def query(self, l: int, k: int) -> dict[str, np.ndarray]:
        """Top-k stored sub-trajectories (each (1, k, 2C)) for the window, re-ranked by return; all
        invalid (zeros) while nothing is stored, without searching."""
        if not len(self):
            shape = (1, k, 2 * self.C)
            return {"obs": np.zeros(shape + self.obs_shape, self.obs_dtype), "action": np.zeros(shape, np.int64),
                    "reward": np.zeros(shape, np.float32), "rtg": np.zeros(shape, np.float32),
                    "episode_step": np.zeros(shape, np.int64), "valid": np.zeros(shape, bool)}
        q = self.embed(self.window["obs"], self.window["valid"])
        out = self.retrieve(q, l, k)
        del out["slot"]
        return out

    def record_action(self, action: int) -> None:
        """The action taken at the step last observed (closes that step)."""
        if self.cur_len < self.H:
            self.cur_action[self.cur_len] = action
        self.last_action, self.last_reward = int(action), 0.0
        self.cur_len += 1

    def record_reward(self, reward: float) -> None:
        """The reward of the last recorded action (arrives with the next observation)."""
        if self.cur_len == 0:
            return  # nothing acted yet in this episode: no action to credit
        if self.cur_len <= self.H:
            self.cur_reward[self.cur_len - 1] = reward
        self.last_reward = float(reward)
        self.episode_return += float(reward)

    def end_episode(self, return_: float | None = None) -> None:
        """An episode boundary: store the current episode (its first H steps, with its
        return, or ``return_`` when given: the utility told from outside) if it has steps,
        and start an empty one."""
        n = min(self.cur_len, self.H)
        if n:
            self.add_episodes(self.cur_obs[:n][None], self.cur_action[:n][None], self.cur_reward[:n][None],
                              returns=None if return_ is None else [return_])
        self.cur_obs[:], self.cur_action[:], self.cur_reward[:] = 0, 0, 0
        self._clear_episode()

    def set_last_return(self, return_: float) -> bool:
        """Set the re-ranking utility of the newest stored episode (a return told after the
        episode was stored); False when no episode is stored."""
        if not self.episodes:
            return False
        ids = self.entry_ids[(self.added - 1) % self.max_episodes]
        rows = np.flatnonzero(np.isin(self.index.ids[:len(self.index)], ids[ids >= 0]))
        self.index.returns[rows] = return_
        return True

    def reset(self) -> None:
        """A new trial: every stored episode, the index and the current episode are forgotten."""
        self.index.reset()
        self.entry_ids[:], self.length[:] = -1, 0
        self.episodes = self.added = 0
        self.cur_obs[:], self.cur_action[:], self.cur_reward[:] = 0, 0, 0
        self._clear_episode()

    def fill_synthetic(self, steps: int, generator: torch.Generator | None = None, episode_len: int | None = None
                       ) -> None:
        """Store ``steps`` steps of random full-horizon episodes (random cells, actions and 0/1
        rewards) through :meth:`add_episodes` (eviction included), as after that many steps."""
        seed = int(torch.randint(0, 2**31 - 1, (1,), generator=generator)) if generator is not None else 0
        rng = np.random.default_rng(seed)
        H = episode_len or self.H
        for start in range(0, steps // H, 64):
            E = min(64, steps // H - start)
            obs = (rng.standard_normal((E, H, *self.obs_shape)).astype(self.obs_dtype) if self.obs_shape
                   else rng.integers(0, max(1, self.n_obs), (E, H)))
            self.add_episodes(obs, rng.integers(0, max(1, self.n_actions), (E, H)),
                              (rng.random((E, H)) < 0.1).astype(np.float32))

    # -- snapshot contract ----------------------------------------------------------------
    def _arrays(self) -> dict[str, np.ndarray]:
        idx = self.index
        return {"obs": self.obs, "action": self.action, "reward": self.reward, "rtg": self.rtg,
                "length": self.length, "task": self.task, "entry_ids": self.entry_ids, "cur_obs": self.cur_obs,
                "cur_action": self.cur_action, "cur_reward": self.cur_reward,
                **{f"window_{n}": a for n, a in self.window.items()},
                "index_values": idx.values, "index_task": idx.task, "index_returns": idx.returns, "index_ids": idx.ids}

    def tensors(self) -> dict[str, Tensor]:
        """Every array (views, no copies) + the index's keys (a padded copy)."""
        out = {n: torch.from_numpy(a) for n, a in self._arrays().items()}
        out["index_keys"] = torch.from_numpy(self.index.padded_keys())
        return out

    def config(self) -> dict:
        return {"policy": self.policy, "key_dim": self.index.dim, "context": self.C, "horizon": self.H,
                "max_episodes": self.max_episodes, "keys_per_episode": self.keys_per_episode,
                "n_actions": self.n_actions}

    def counters(self) -> dict:
        return {"episodes": self.episodes, "added": self.added, "cur_len": self.cur_len,
                "last_action": self.last_action, "last_reward": self.last_reward,
                "episode_return": self.episode_return, "index_count": len(self.index),
                "index_next_id": self.index.next_id}

    def _check_counters(self, c: dict) -> str | None:
        for key in ("episodes", "added", "cur_len", "last_action", "index_count", "index_next_id"):
            if not isinstance(c.get(key), int) or c[key] < 0:
                return key
        for key in ("last_reward", "episode_return"):
            if not isinstance(c.get(key), (int, float)) or not math.isfinite(c[key]):
                return key
        limits = {"episodes": min(self.max_episodes, c["added"]), "last_action": self.n_actions,
                  "index_count": self.index.capacity, "index_next_id": None}
        for key, hi in limits.items():
            if hi is not None and c[key] > hi:
                return key
        return "index_next_id" if c["index_next_id"] < c["index_count"] else None

    def _adopt(self, tensors: dict[str, Tensor], counters: dict) -> None:
        for name, a in self._arrays().items():
            a[...] = tensors[name].numpy()
        self.episodes, self.added, self.cur_len = counters["episodes"], counters["added"], counters["cur_len"]
        self.last_action, self.last_reward = counters["last_action"], float(counters["last_reward"])
        self.episode_return = float(counters["episode_return"])
        self.index.load_rows(tensors["index_keys"].numpy(), counters["index_count"], counters["index_next_id"])
