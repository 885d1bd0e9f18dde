"""RA-DT offline training data: the episode dataset, its retrieval index, and batches.

:class:`OfflineRetrievalBatches` stores every dataset episode in a
:class:`~icrl_ros.families.radt.memory.SubTrajectoryMemory` (slot = dataset row), indexes
their sub-trajectories (deduplicated), and samples training batches as RA-DT's Algorithm 2:

* a window of C steps of a random episode, ending at a random step;
* its query key (the policy's fixed ``trajectory_keys``) with query dropout;
* the top-k retrieved sub-trajectories of *other* episodes: top-l by cosine, similarity
  cut-off, re-ranked by relevance + task match; a window shorter than ``min_retrieval_len``
  gets a random sub-trajectory of another episode of the same task instead (App. C.4);
* with probability ``retrieval_dropout`` no retrieved context at all (our addition: the
  first in-context episode starts from an empty index, so the model must have seen that);
* with probability ``failure_retrieval`` a random sub-trajectory of a zero-return episode of
  the same task (our addition: a failed episode is what an evaluation trial mostly holds
  before its first success, and similarity retrieval on the dataset rarely returns one,
  so without it the DT never learns to steer away from a route that failed).

The target of every window step is the dataset's ``action`` (what was executed, which is also
what the window and the retrieved context show), or its ``label`` when the dataset has one
and ``use_labels`` is on: a teacher's action where the executed one was a random exploration
step (``radt_collect.py --learner room --epsilon ...``), so the DT sees noisy histories but
learns only the teacher's choices.

``retrieve_from``: ``dataset`` (the above, RA-DT's recipe) or ``history``: a window retrieves
only from the *earlier episodes of its own learner* (``learner`` / ``history`` arrays of the
dataset), re-ranked by relevance + episode return, exactly what an evaluation trial's memory
holds and how it ranks; a learner's first episode retrieves nothing. The short-window and
failure draws do not apply there (an evaluation trial has neither).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from icrl_ros.families.radt.memory import SubTrajectoryMemory
from icrl_ros.families.radt.model import RADTPolicy, episode_windows
from icrl_ros.families.radt.retrieval import _minmax

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
                 failure_retrieval: float = 0.0, seed: int = 0, use_labels: bool = True,
                 retrieve_from: str = "dataset") -> None:
        a = policy.args
        self.policy, self.C, self.k, self.n_actions = policy, a.context, a.top_k, a.n_actions
        self.l, self.query_dropout, self.cutoff = retrieve_l, query_dropout, similarity_cutoff
        self.min_len, self.retrieval_dropout, self.failure_retrieval = min_retrieval_len, retrieval_dropout, failure_retrieval
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
        self.label = data["label"].astype(np.int64) if use_labels and "label" in data else None
        self.utility_weight = utility_weight
        self.history_first = None
        if retrieve_from == "history":
            self._index_histories(data)
        elif retrieve_from != "dataset":
            raise ValueError(f"retrieve_from: 'dataset' or 'history', got {retrieve_from!r}")
        # same-task episode lists (all / zero-return) for the random draws
        self.task_values = np.unique(task)
        failed = data["reward"].sum(1) == 0
        self.task_rows = [np.flatnonzero(task == t) for t in self.task_values]
        self.failed_rows = [np.flatnonzero((task == t) & failed) for t in self.task_values]

    def _index_histories(self, data: dict[str, np.ndarray]) -> None:
        """``history`` retrieval: every episode's keys (E, n, d) and, per row, the row of its
        learner's first episode (rows must come grouped by learner in history order, as
        radt_collect.py writes them)."""
        if "learner" not in data or "history" not in data:
            raise ValueError("retrieve_from=history: the dataset needs 'learner' and 'history' arrays "
                             "(collect it with training/radt_collect.py)")
        learner, hist = data["learner"].astype(np.int64), data["history"].astype(np.int64)
        first = np.arange(self.E) - hist
        if (first < 0).any() or not (learner[first.clip(min=0)] == learner).all() or \
                not (hist[first.clip(min=0)] == 0).all():
            raise ValueError("retrieve_from=history: rows must be grouped by learner in history order")
        m, C = self.mem, self.C
        ends = m.key_ends
        idx = (ends[:, None] - C + np.arange(C)).clip(min=0)  # (n, C) steps of each key window
        ok = (ends[:, None] - C + np.arange(C)) >= 0
        keys = np.concatenate([
            m.embed(m.obs[lo:lo + 512][:, idx].reshape(-1, C), np.broadcast_to(ok, (min(512, self.E - lo), *ok.shape))
                    .reshape(-1, C) & (idx < m.length[lo:lo + 512, None, None]).reshape(-1, C))
            for lo in range(0, self.E, 512)])
        keys = keys / np.maximum(np.linalg.norm(keys, axis=1, keepdims=True), 1e-12)
        self.history_keys = keys.reshape(self.E, len(ends), -1).astype(np.float32)
        self.history_first = first
        self.episode_return = m.rtg[:, 0].copy()

    def _retrieve_history(self, queries: np.ndarray, rows: np.ndarray) -> dict[str, np.ndarray]:
        """Top-k sub-trajectories of each row's earlier same-learner episodes, as an evaluation
        memory ranks them: top-l by cosine, then min-max relevance + utility_weight x min-max return."""
        n = self.history_keys.shape[1]
        vals = np.zeros((len(rows), self.k, 2), dtype=np.int64)
        ok = np.zeros((len(rows), self.k), dtype=bool)
        qn = queries / np.maximum(np.linalg.norm(queries, axis=1, keepdims=True), 1e-12)
        for i, r in enumerate(rows):
            lo = self.history_first[r]
            if lo == r:
                continue  # the learner's first episode: an empty memory
            rel = (self.history_keys[lo:r] @ qn[i]).reshape(-1)  # (episodes * n,)
            top = np.argsort(-rel, kind="stable")[:self.l]
            ep, key = lo + top // n, top % n
            valid = np.ones((1, len(top)), dtype=bool)
            score = (_minmax(rel[top][None], valid) + self.utility_weight
                     * _minmax(self.episode_return[ep][None].astype(np.float32), valid))[0]
            best = np.argsort(-score, kind="stable")[:self.k]
            vals[i, :len(best), 0] = ep[best]
            vals[i, :len(best), 1] = self.mem.key_ends[key[best]] - self.C
            ok[i, :len(best)] = True
        out = self.mem.gather(vals, ok)
        out["slot"] = np.where(ok, vals[..., 0], -1)
        return out

    @property
    def entries(self) -> int:
        return len(self.mem)

    def _pool(self, row: int, pools: list[np.ndarray]) -> np.ndarray:
        """The episodes of ``pools`` for ``row``'s task, ``row`` itself excluded."""
        pool = pools[np.searchsorted(self.task_values, self.task[row])]
        return pool[pool != row]

    def _random_from(self, rows: np.ndarray, pools: list[np.ndarray]) -> dict[str, np.ndarray]:
        """Random key windows (Q, k, 2C) of other episodes of each row's task from ``pools``."""
        vals = np.zeros((len(rows), self.k, 2), dtype=np.int64)
        ok = np.zeros((len(rows), self.k), dtype=bool)
        for i, r in enumerate(rows):
            pool = self._pool(r, pools)
            if len(pool):
                vals[i, :, 0] = self.rng.choice(pool, self.k)
                vals[i, :, 1] = self.rng.choice(self.mem.key_ends, self.k) - self.C
                ok[i] = True
        out = self.mem.gather(vals, ok)
        out["slot"] = np.where(ok, vals[..., 0], -1)
        return out

    def sample(self, batch: int) -> tuple[dict, dict, np.ndarray, np.ndarray]:
        """(window (B, C) arrays, retrieved (B, k, 2C) arrays with ``slot``, target actions (B, C),
        dataset rows (B,))."""
        rows = self.rng.integers(self.E, size=batch)
        end = self.rng.integers(self.H, size=batch)
        m = self.mem
        win = episode_windows(m.obs[rows], m.action[rows], m.reward[rows], m.rtg[rows], end, self.C, self.n_actions)
        j = end[:, None] - self.C + 1 + np.arange(self.C)
        target = (m.action if self.label is None else self.label)[rows[:, None], j.clip(min=0)]
        qvalid = win["valid"] & (self.rng.random(win["valid"].shape) >= self.query_dropout)
        qvalid[:, -1] = True  # the newest step always takes part in the query
        queries = self.policy.trajectory_keys(win["obs"], qvalid)
        if self.history_first is not None:
            ret = self._retrieve_history(queries, rows)
        else:
            short = end + 1 < self.min_len
            fail = ~short & (self.rng.random(batch) < self.failure_retrieval)
            fail &= np.array([len(self._pool(r, self.failed_rows)) > 0 for r in rows])
            ret = m.retrieve(queries, self.l, self.k, task=self.task[rows], exclude_slots=rows,
                             max_relevance=self.cutoff)
            for sel, pools in ((short, self.task_rows), (fail, self.failed_rows)):
                if sel.any():
                    rnd = self._random_from(rows[sel], pools)
                    for n in ret:
                        ret[n][sel] = rnd[n]
        drop = self.rng.random(batch) < self.retrieval_dropout
        ret["valid"][drop] = False
        ret["slot"][drop] = -1
        return win, ret, target, rows
