"""RA-DT offline training data: the episode dataset, its retrieval index, and batches.

:class:`OfflineRetrievalBatches` stores every dataset episode in a
:class:`~icrl_ros.memory.subtrajectories.SubTrajectoryMemory` (slot = dataset row), indexes
their sub-trajectories (deduplicated), and samples training batches as RA-DT's Algorithm 2:

* a window of C steps of a random episode, ending at a random step;
* its query key (the policy's fixed ``trajectory_keys``) with query dropout;
* the top-k retrieved sub-trajectories of *other* episodes: top-l by cosine, similarity
  cut-off, re-ranked by relevance + task match; a window shorter than ``min_retrieval_len``
  gets a random sub-trajectory of another episode of the same task instead (App. C.4);
* with probability ``retrieval_dropout`` no retrieved context at all (our addition: the
  first in-context episode starts from an empty index, so the model must have seen that).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from icrl_ros.memory.subtrajectories import SubTrajectoryMemory
from icrl_ros.models.radt import RADTPolicy, episode_windows

DATA_KEYS = ("obs", "action", "reward", "task")


def load_dataset(path: str | Path) -> dict[str, np.ndarray]:
    """An ``.npz`` written by ``training/radt_collect.py``; loud about missing arrays."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"data {path}: no such file (collect it with training/radt_collect.py)")
    with np.load(path) as z:
        missing = [k for k in DATA_KEYS if k not in z]
        if missing:
            raise ValueError(f"data {path}: missing arrays {missing}; has {sorted(z.files)}")
        return {k: z[k] for k in z.files}


def dedup_mask(keys: np.ndarray, task: np.ndarray, slot: np.ndarray, threshold: float) -> np.ndarray:
    """Greedy deduplication (RA-DT App. C.4) within each task: an entry is dropped when an
    earlier kept entry of another episode has cosine similarity above ``threshold``."""
    kn = keys / np.maximum(np.linalg.norm(keys, axis=1, keepdims=True), 1e-12)
    keep = np.ones(len(keys), dtype=bool)
    for t in np.unique(task):
        rows = np.flatnonzero(task == t)
        sim = kn[rows] @ kn[rows].T
        alive = np.ones(len(rows), dtype=bool)
        for i in range(len(rows)):
            if alive[i]:
                dup = (sim[i] > threshold) & (slot[rows] != slot[rows[i]])
                dup[:i + 1] = False
                alive &= ~dup
        keep[rows] = alive
    return keep


class OfflineRetrievalBatches:
    def __init__(self, policy: RADTPolicy, data: dict[str, np.ndarray], retrieve_l: int = 50,
                 utility_weight: float = 1.0, query_dropout: float = 0.2, similarity_cutoff: float | None = 0.98,
                 dedup_threshold: float | None = 0.98, min_retrieval_len: int = 10, retrieval_dropout: float = 0.1,
                 seed: int = 0) -> None:
        a = policy.args
        self.policy, self.C, self.k, self.n_actions = policy, a.context, a.top_k, a.n_actions
        self.l, self.query_dropout, self.cutoff = retrieve_l, query_dropout, similarity_cutoff
        self.min_len, self.retrieval_dropout = min_retrieval_len, retrieval_dropout
        self.rng = np.random.default_rng(seed)
        obs, task = data["obs"], data["task"].astype(np.int64)
        E, H = obs.shape
        self.E, self.H = E, H
        self.mem = SubTrajectoryMemory(policy.trajectory_keys, a.key_dim, a.context, H, E, utility_weight=utility_weight)
        keep = None
        if dedup_threshold is not None:
            keep = lambda keys, slots, ends: dedup_mask(keys, task[slots], slots, dedup_threshold)  # noqa: E731
        self.mem.add_episodes(obs, data["action"], data["reward"], task=task, keep=keep)
        self.task = task
        # same-task episode lists for the short-window rule
        order = np.argsort(task, kind="stable")
        self.task_values, first = np.unique(task[order], return_index=True)
        self.task_rows = np.split(order, first[1:])

    @property
    def entries(self) -> int:
        return len(self.mem)

    def _random_same_task(self, rows: np.ndarray) -> np.ndarray:
        """(slot, start) of a random key window of another episode of each row's task: (Q, k, 2)."""
        out = np.zeros((len(rows), self.k, 2), dtype=np.int64)
        for i, r in enumerate(rows):
            pool = self.task_rows[np.searchsorted(self.task_values, self.task[r])]
            for j in range(self.k):
                other = r
                while other == r and len(pool) > 1:
                    other = pool[self.rng.integers(len(pool))]
                out[i, j] = other, self.rng.choice(self.mem.key_ends) - self.C
        return out

    def sample(self, batch: int) -> tuple[dict, dict, np.ndarray, np.ndarray]:
        """(window (B, C) arrays, retrieved (B, k, 2C) arrays with ``slot``, target actions (B, C),
        dataset rows (B,))."""
        rows = self.rng.integers(self.E, size=batch)
        end = self.rng.integers(self.H, size=batch)
        m = self.mem
        win = episode_windows(m.obs[rows], m.action[rows], m.reward[rows], m.rtg[rows], end, self.C, self.n_actions)
        j = end[:, None] - self.C + 1 + np.arange(self.C)
        target = m.action[rows[:, None], j.clip(min=0)]
        qvalid = win["valid"] & (self.rng.random(win["valid"].shape) >= self.query_dropout)
        qvalid[:, -1] = True  # the newest step always takes part in the query
        queries = self.policy.trajectory_keys(win["obs"], qvalid)
        short = end + 1 < self.min_len
        ret = m.retrieve(queries, self.l, self.k, task=self.task[rows], exclude_slots=rows, max_relevance=self.cutoff)
        if short.any():
            vals = self._random_same_task(rows[short])
            rnd = m.gather(vals, np.ones(vals.shape[:2], dtype=bool))
            rnd["slot"] = vals[..., 0]
            for n in ret:
                ret[n][short] = rnd[n]
        drop = self.rng.random(batch) < self.retrieval_dropout
        ret["valid"][drop] = False
        ret["slot"][drop] = -1
        return win, ret, target, rows
