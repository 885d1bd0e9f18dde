"""RA-DT episodic memory: stored episodes + a :class:`RetrievalIndex` over their sub-trajectories.

Following RA-DT (Sec. 3.2.1, App. C.4), an episode of H steps gives H / C index entries:
the key embeds steps [t - C, t) for t = C, 2C, ..., the value is the sub-trajectory
[t - C, t + C) (the key's steps and their continuation, zero-padded past the episode end).
The index stores only (episode slot, start) pointers as values; :meth:`gather` turns them
into token arrays, so training over millions of steps does not copy sub-trajectories.

Each entry carries the episode's task and return for the re-ranking (task match in
training, return at inference). Bounded by ``max_episodes``: adding past it raises
:class:`MemoryFullError` (evaluation sizes it to the trial; a deployed runner would
evict whole episodes, not yet implemented).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from icrl_ros.memory.base import MemoryFullError
from icrl_ros.memory.retrieval import RetrievalIndex

Embed = Callable[[np.ndarray, np.ndarray], np.ndarray]
"""(obs (N, T), valid (N, T)) -> keys (N, d)."""


def returns_to_go(reward: np.ndarray) -> np.ndarray:
    """RTG_t = sum of rewards from t to the episode end, along the last axis."""
    return np.flip(np.cumsum(np.flip(reward, -1), -1), -1).astype(np.float32)


class SubTrajectoryMemory:
    def __init__(self, embed: Embed, key_dim: int, context: int, horizon: int, max_episodes: int,
                 relevance_weight: float = 1.0, utility_weight: float = 1.0) -> None:
        """``context`` C steps per key; episodes of ``horizon`` steps (shorter ones padded)."""
        if context <= 0 or horizon <= 0 or max_episodes <= 0:
            raise ValueError(f"context / horizon / max_episodes: must be > 0, got {context}, {horizon}, {max_episodes}")
        self.embed, self.C, self.H, self.max_episodes = embed, context, horizon, max_episodes
        self.key_ends = np.arange(context, horizon + context - 1, context).clip(max=horizon)  # t of each key
        self.keys_per_episode = len(self.key_ends)
        W = horizon + 2 * context  # padded width: any value window [start, start + 2C) fits
        self.obs = np.zeros((max_episodes, W), dtype=np.int64)
        self.action = np.zeros((max_episodes, W), dtype=np.int64)
        self.reward = np.zeros((max_episodes, W), dtype=np.float32)
        self.rtg = np.zeros((max_episodes, W), dtype=np.float32)
        self.length = np.zeros(max_episodes, dtype=np.int64)
        self.task = np.zeros(max_episodes, dtype=np.int64)
        self.entry_ids = np.full((max_episodes, self.keys_per_episode), -1, dtype=np.int64)
        self.episodes = 0
        self.index = RetrievalIndex(key_dim, capacity=max_episodes * self.keys_per_episode, value_shape=(2,),
                                    relevance_weight=relevance_weight, utility_weight=utility_weight)

    def __len__(self) -> int:
        """Index entries (sub-trajectories)."""
        return len(self.index)

    @property
    def nbytes(self) -> int:
        return self.index.nbytes + sum(a.nbytes for a in (self.obs, self.action, self.reward, self.rtg))

    def add_episodes(self, obs: np.ndarray, action: np.ndarray, reward: np.ndarray, task=0,
                     length: np.ndarray | None = None, keep: Callable | None = None) -> np.ndarray:
        """Store E episodes (E, T <= H) and index their sub-trajectories; returns their slots.
        ``length`` (E,) valid steps (default T); ``keep(keys, slots, ends) -> bool mask`` may
        drop entries before indexing (deduplication)."""
        obs, action, reward = np.atleast_2d(obs), np.atleast_2d(action), np.atleast_2d(reward)
        E, T = obs.shape
        if T > self.H:
            raise ValueError(f"episodes: {T} steps exceed the memory's horizon {self.H}")
        if self.episodes + E > self.max_episodes:
            raise MemoryFullError(f"SubTrajectoryMemory: {self.episodes} + {E} episodes exceed max_episodes="
                                  f"{self.max_episodes}")
        length = np.full(E, T) if length is None else np.asarray(length, dtype=np.int64)
        slots = np.arange(self.episodes, self.episodes + E)
        steps = np.arange(T)
        live = steps[None] < length[:, None]
        self.obs[slots, :T] = np.where(live, obs, 0)
        self.action[slots, :T] = np.where(live, action, 0)
        self.reward[slots, :T] = np.where(live, reward, 0)
        self.rtg[slots, :T] = returns_to_go(self.reward[slots, :T])
        self.length[slots], self.task[slots] = length, np.broadcast_to(np.asarray(task), (E,))
        self.episodes += E
        # keys: steps [end - C, end) of every episode, for every key end that the episode reached
        ends = np.broadcast_to(self.key_ends, (E, self.keys_per_episode))
        idx = (ends[..., None] - self.C + np.arange(self.C)).clip(min=0)  # (E, n, C)
        win_valid = (idx < length[:, None, None]) & (ends[..., None] - self.C + np.arange(self.C) >= 0)
        keys = self.embed(self.obs[slots[:, None, None], idx].reshape(-1, self.C), win_valid.reshape(-1, self.C))
        ok = (ends - self.C < length[:, None]).reshape(-1)  # the key window starts inside the episode
        ep_slot = np.repeat(slots, self.keys_per_episode)
        starts = (ends - self.C).reshape(-1)
        if keep is not None:
            ok &= keep(keys, ep_slot, ends.reshape(-1))
        values = np.stack([ep_slot, starts], 1)[ok]
        ids = self.index.add(keys[ok], values, task=self.task[ep_slot][ok],
                             episode_return=self.rtg[ep_slot, 0][ok])
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
        return {"obs": np.where(ok, self.obs[s, t], 0), "action": np.where(ok, self.action[s, t], 0),
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
