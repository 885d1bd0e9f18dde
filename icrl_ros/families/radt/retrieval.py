"""RA-DT retrieval memory: an episodic vector index of past sub-trajectories on faiss.

Keys are sub-trajectory embeddings (N, d) float32, L2-normalised on entry, in a flat
inner-product index, so inner product = cosine similarity and the search is exact
(``IndexFlatIP`` on CPU; ``GpuIndexFlatIP`` when faiss-gpu sees a GPU). Values are
fixed-shape arrays (sub-trajectory ids, or the sub-trajectories themselves), stored
beside per-entry metadata: task id, episode return, insertion id.

Retrieval (RA-DT, Schmied et al. 2024, Sec. 3.2):

1. ``search``: the top-l keys by cosine similarity to the query (relevance ``s_rel``);
2. re-rank the l candidates by ``w_rel * s_rel' + w_util * s_u'`` where ``'`` is min-max
   normalisation to [0, 1] over the candidates, and the utility ``s_u`` is task match
   (1 if the entry's task equals the query's; the paper's training mode, used when
   ``task`` is given) or the entry's episode return (inference mode, ``task=None``);
3. keep the top-k (ties keep the relevance order).

Bounded: ``capacity`` entries (or as many as ``budget_bytes`` holds), all buffers
preallocated; past the bound the oldest entries (``evict="oldest"``) or those with the
lowest episode return (``evict="lowest_return"``, oldest first among equals) go.
Snapshots follow :mod:`icrl_ros.memory.snapshot`: one ``.npz`` (the faiss index
serialised to bytes + values + metadata), written atomically, SHA-256 per array, no
pickle, validated completely before anything changes.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from icrl_ros.memory.base import MemoryBudgetError
from icrl_ros.memory.snapshot import SnapshotError, read_snapshot, write_snapshot

FORMAT = "icrl_ros.retrieval_index/1"
EVICT = ("oldest", "lowest_return")


def _faiss():
    try:
        import faiss
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError("RetrievalIndex needs faiss: pip install faiss-cpu (or faiss-gpu)") from e
    return faiss


@dataclass
class Retrieved:
    """Top-k of a query batch (Q queries): arrays (Q, k); ``valid`` False where the index
    held fewer than k entries (ids -1, values zero)."""

    ids: np.ndarray
    values: np.ndarray
    relevance: np.ndarray
    """Cosine similarity to the query."""
    utility: np.ndarray
    """Raw utility: task match (0 / 1) or the episode return."""
    score: np.ndarray
    """The re-ranking score the top-k was chosen by."""
    task: np.ndarray
    episode_return: np.ndarray
    valid: np.ndarray


def _minmax(x: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """Per row min-max normalisation to [0, 1] over the valid entries (constant rows -> 0)."""
    lo = np.where(valid, x, np.inf).min(1, keepdims=True)
    hi = np.where(valid, x, -np.inf).max(1, keepdims=True)
    span = hi - lo
    out = np.where(span > 0, (x - lo) / np.where(span > 0, span, 1.0), 0.0)
    return np.where(valid, out, 0.0)


class RetrievalIndex:
    def __init__(self, dim: int, capacity: int | None = None, value_shape: tuple[int, ...] = (),
                 value_dtype=np.int64, evict: str = "oldest", relevance_weight: float = 1.0,
                 utility_weight: float = 1.0, budget_bytes: int | None = None, use_gpu: bool | None = None) -> None:
        """``dim`` key size; ``capacity`` entries (None: as many as ``budget_bytes`` holds);
        values of ``value_shape`` / ``value_dtype`` per entry; ``use_gpu`` None = when
        faiss reports a GPU."""
        faiss = _faiss()
        if dim <= 0:
            raise ValueError(f"dim: must be > 0, got {dim}")
        if evict not in EVICT:
            raise ValueError(f"evict: {evict!r} is not one of {list(EVICT)}")
        if relevance_weight < 0 or utility_weight < 0:
            raise ValueError(f"relevance_weight / utility_weight: must be >= 0, got {relevance_weight}, "
                             f"{utility_weight}")
        self.dim, self.value_shape, self.value_dtype = dim, tuple(value_shape), np.dtype(value_dtype)
        self.evict, self.relevance_weight, self.utility_weight = evict, relevance_weight, utility_weight
        if capacity is None:
            if budget_bytes is None:
                raise ValueError("capacity: give capacity or budget_bytes")
            capacity = budget_bytes // self.entry_bytes
            if capacity < 1:
                raise MemoryBudgetError(f"budget_bytes: {budget_bytes:,} bytes do not hold one entry "
                                        f"({self.entry_bytes:,} bytes) of RetrievalIndex")
        if capacity <= 0:
            raise ValueError(f"capacity: must be > 0, got {capacity}")
        if budget_bytes is not None and capacity * self.entry_bytes > budget_bytes:
            raise MemoryBudgetError(f"budget_bytes: RetrievalIndex with {capacity:,} entries needs "
                                    f"{capacity * self.entry_bytes:,} bytes, budget is {budget_bytes:,}")
        self.capacity, self.budget_bytes = capacity, budget_bytes
        self.use_gpu = faiss.get_num_gpus() > 0 if use_gpu is None else use_gpu
        self._gpu_res = faiss.StandardGpuResources() if self.use_gpu else None
        self.index = self._place(faiss.IndexFlatIP(dim))
        # metadata aligned with the index rows (row order = insertion order, kept on eviction)
        self.values = np.zeros((capacity, *self.value_shape), dtype=self.value_dtype)
        self.task = np.zeros(capacity, dtype=np.int64)
        self.returns = np.zeros(capacity, dtype=np.float32)
        self.ids = np.full(capacity, -1, dtype=np.int64)
        self.count = 0
        self.next_id = 0

    # -- sizes --------------------------------------------------------------------
    @staticmethod
    def entry_size(dim: int, value_shape: tuple[int, ...] = (), value_dtype=np.int64) -> int:
        """Bytes one entry costs: key (float32) + value + task + return + id."""
        return 4 * dim + int(np.prod(value_shape, dtype=np.int64)) * np.dtype(value_dtype).itemsize + 8 + 4 + 8

    @property
    def entry_bytes(self) -> int:
        return self.entry_size(self.dim, self.value_shape, self.value_dtype)

    @property
    def nbytes(self) -> int:
        """Bytes held: metadata buffers (preallocated) + the keys in the index."""
        return (self.values.nbytes + self.task.nbytes + self.returns.nbytes + self.ids.nbytes
                + 4 * self.dim * self.count)

    def __len__(self) -> int:
        return self.count

    # -- faiss placement ------------------------------------------------------------
    def _place(self, cpu_index):
        if not self.use_gpu:
            return cpu_index
        return _faiss().index_cpu_to_gpu(self._gpu_res, 0, cpu_index)

    def _cpu_index(self):
        return _faiss().index_gpu_to_cpu(self.index) if self.use_gpu else self.index

    def _keys(self, x, name: str) -> np.ndarray:
        x = np.asarray(x, dtype=np.float32)
        if x.ndim == 1:
            x = x[None]
        if x.ndim != 2 or x.shape[1] != self.dim:
            raise ValueError(f"{name}: expected shape (N, {self.dim}) (index dim {self.dim}), got {list(x.shape)}")
        if not np.isfinite(x).all():
            raise ValueError(f"{name}: contains NaN or inf")
        x = np.ascontiguousarray(x).copy()
        _faiss().normalize_L2(x)  # cosine = inner product of unit vectors
        return x

    # -- writes -------------------------------------------------------------------
    def add(self, keys, values, task=0, episode_return=0.0) -> np.ndarray:
        """Add N entries: keys (N, dim), values (N, *value_shape), task (N,) or scalar,
        episode_return (N,) or scalar. Evicts past the capacity; returns the ids of the new
        entries that were kept (all N unless the batch alone overflows the capacity or, with
        ``lowest_return``, some of them rank lowest)."""
        k = self._keys(keys, "keys")
        n = k.shape[0]
        vals = np.asarray(values, dtype=self.value_dtype)
        if vals.shape != (n, *self.value_shape):
            raise ValueError(f"values: expected shape {[n, *self.value_shape]}, got {list(vals.shape)}")
        task = np.broadcast_to(np.asarray(task, dtype=np.int64), (n,))
        ret = np.broadcast_to(np.asarray(episode_return, dtype=np.float32), (n,))
        if n > self.capacity:  # only the last `capacity` of the batch can stay (oldest-first eviction)
            if self.evict == "oldest":
                k, vals, task, ret = k[-self.capacity:], vals[-self.capacity:], task[-self.capacity:], ret[-self.capacity:]
                self.next_id += n - self.capacity
                n = self.capacity
        ids = np.arange(self.next_id, self.next_id + n, dtype=np.int64)
        self.next_id += n
        over = self.count + n - self.capacity
        if over > 0:
            keep = self._evict(over, ret, ids)  # some new entries may be among the lowest-return ones
            k, vals, task, ret, ids = k[keep], vals[keep], task[keep], ret[keep], ids[keep]
            n = len(ids)
        a, b = self.count, self.count + n
        self.index.add(k)
        self.values[a:b], self.task[a:b], self.returns[a:b], self.ids[a:b] = vals, task, ret, ids
        self.count = b
        return ids

    def _evict(self, over: int, new_ret: np.ndarray, new_ids: np.ndarray) -> np.ndarray:
        """Make room: drop ``over`` of (stored + incoming) entries by the eviction rule.
        Removes the stored ones; returns the mask of incoming entries to keep."""
        c = self.count
        keep_new = np.ones(len(new_ids), dtype=bool)
        if self.evict == "oldest":
            drop = np.arange(min(over, c))
        else:  # lowest return first, oldest first among equals
            rets = np.concatenate([self.returns[:c], new_ret])
            ids = np.concatenate([self.ids[:c], new_ids])
            order = np.lexsort((ids, rets))[:over]
            drop = order[order < c]
            keep_new[order[order >= c] - c] = False
        if len(drop):
            self._remove_rows(drop)
        return keep_new

    def _remove_rows(self, rows: np.ndarray) -> None:
        faiss = _faiss()
        keep = np.ones(self.count, dtype=bool)
        keep[rows] = False
        cpu = self._cpu_index()
        cpu.remove_ids(faiss.IDSelectorBatch(rows.astype(np.int64)))  # flat index: compacts, keeps order
        self.index = self._place(cpu) if self.use_gpu else cpu
        n = int(keep.sum())
        for arr in (self.values, self.task, self.returns, self.ids):
            arr[:n] = arr[:self.count][keep]
        self.ids[n:] = -1
        self.count = n

    def remove(self, ids) -> int:
        """Remove the entries with these ids (unknown ids are ignored; order of the rest kept);
        returns how many were removed. A memory that stores whole episodes evicts with it."""
        rows = np.flatnonzero(np.isin(self.ids[:self.count], np.asarray(ids, dtype=np.int64)))
        if len(rows):
            self._remove_rows(rows)
        return len(rows)

    def reset(self) -> None:
        """Empty the index (a new trial at inference starts from an empty index)."""
        self.index.reset()
        self.ids[:] = -1
        self.count = 0

    # -- state as fixed-shape arrays (a memory's snapshot holds them beside its own) -------
    def padded_keys(self) -> np.ndarray:
        """The stored unit keys (capacity, dim) float32 in row order, zeros past ``count``."""
        keys = np.zeros((self.capacity, self.dim), dtype=np.float32)
        if self.count:
            keys[:self.count] = self._cpu_index().reconstruct_n(0, self.count)
        return keys

    def load_rows(self, keys: np.ndarray, count: int, next_id: int) -> None:
        """Rebuild the faiss index from ``keys[:count]`` (unit keys as :meth:`padded_keys`
        returns them, added as they are: no re-normalisation, so scores are bit-identical);
        the metadata arrays must already hold the same rows."""
        cpu = _faiss().IndexFlatIP(self.dim)
        if count:
            cpu.add(np.ascontiguousarray(keys[:count], dtype=np.float32))
        self.index = self._place(cpu)
        self.ids[count:] = -1
        self.count, self.next_id = count, next_id

    # -- reads --------------------------------------------------------------------
    def search(self, q, l: int) -> tuple[np.ndarray, np.ndarray]:
        """Top-l by cosine similarity: scores (Q, l) float32, rows (Q, l) int64 (-1 = none)."""
        if l <= 0:
            raise ValueError(f"l: must be > 0, got {l}")
        qn = self._keys(q, "query")
        if self.count == 0:
            return np.full((len(qn), l), -np.inf, np.float32), np.full((len(qn), l), -1, np.int64)
        scores, rows = self.index.search(qn, l)
        scores = np.where(rows >= 0, scores, -np.inf).astype(np.float32)
        return scores, rows

    def _search_filtered(self, q, l: int, exclude, max_relevance: float | None) -> tuple[np.ndarray, np.ndarray]:
        """``search`` without the excluded ids and the too-similar candidates (see ``query``)."""
        m = 0 if exclude is None else np.asarray(exclude).shape[-1]
        rel, rows = self.search(q, 2 * l + m if max_relevance is not None else l + m)
        drop = rows < 0
        if exclude is not None:
            ex = np.asarray(exclude, dtype=np.int64).reshape(len(rel), m)
            ids = self.ids[np.where(rows >= 0, rows, 0)]
            drop |= (ids[:, :, None] == np.where(ex >= 0, ex, -2)[:, None, :]).any(-1)
        if max_relevance is not None:
            drop |= rel > max_relevance
        keep = np.argsort(drop, axis=1, kind="stable")[:, :l]  # kept candidates first, relevance order
        rel, rows, drop = (np.take_along_axis(x, keep, 1) for x in (rel, rows, drop))
        return np.where(drop, -np.inf, rel).astype(np.float32), np.where(drop, -1, rows)

    def query(self, q, l: int = 50, k: int = 1, task=None, exclude=None,
              max_relevance: float | None = None) -> Retrieved:
        """Top-l by relevance, re-ranked by relevance + utility, top-k (see the module doc).
        ``task`` (Q,) or scalar: training-mode utility (task match); None: episode return.

        Training-time retrieval regularisation (RA-DT App. C.4): ``exclude`` (Q, m) entry ids
        that are no candidates for their query (-1 = none; the query's own trajectory);
        ``max_relevance`` drops candidates more similar than this (similarity cut-off). Either
        one searches ``2 l + m`` candidates and keeps the best ``l`` that remain."""
        if not 0 < k <= l:
            raise ValueError(f"k: must be in [1, l={l}], got {k}")
        if exclude is None and max_relevance is None:
            rel, rows = self.search(q, l)
        else:
            rel, rows = self._search_filtered(q, l, exclude, max_relevance)
        Q = rel.shape[0]
        valid = rows >= 0
        r = np.where(valid, rows, 0)
        ret, tsk = self.returns[r], self.task[r]
        if task is not None:
            qt = np.broadcast_to(np.asarray(task, dtype=np.int64).reshape(-1, 1), (Q, 1))
            util = (tsk == qt).astype(np.float32)
            util_n = util
        else:
            util = ret.astype(np.float32)
            util_n = _minmax(util, valid)
        score = self.relevance_weight * _minmax(rel, valid) + self.utility_weight * util_n
        score = np.where(valid, score, -np.inf)
        top = np.argsort(-score, axis=1, kind="stable")[:, :k]  # candidates come in relevance order
        take = lambda x: np.take_along_axis(x, top, 1)  # noqa: E731
        sel_rows, sel_valid = take(r), take(valid)
        vals = self.values[sel_rows]
        vals[~sel_valid] = 0
        return Retrieved(ids=np.where(sel_valid, self.ids[sel_rows], -1), values=vals, relevance=take(rel),
                         utility=np.where(sel_valid, take(util), 0.0), score=take(score), task=take(tsk),
                         episode_return=take(ret), valid=sel_valid)

    # -- snapshot -----------------------------------------------------------------
    def config(self) -> dict:
        return {"dim": self.dim, "capacity": self.capacity, "value_shape": list(self.value_shape),
                "value_dtype": self.value_dtype.str, "evict": self.evict}

    def snapshot(self, path: str | Path, **meta) -> int:
        """Write the index atomically (``meta``: model hash, trial id ...); returns the file size."""
        faiss = _faiss()
        c = self.count
        blob = faiss.serialize_index(self._cpu_index())  # uint8 array
        arrays = {"index": blob, "values": self.values[:c], "task": self.task[:c], "returns": self.returns[:c],
                  "ids": self.ids[:c]}
        write_snapshot(path, {n: torch.from_numpy(np.ascontiguousarray(a)) for n, a in arrays.items()},
                       {"kind": FORMAT, "index": self.config(), "counters": {"count": c, "next_id": self.next_id},
                        **meta})
        return Path(path).stat().st_size

    def restore(self, path: str | Path, expect: dict | None = None) -> dict:
        """Load a snapshot after validating all of it (config, counts, SHA-256, the
        deserialised index); on any error raises :class:`SnapshotError` naming the field
        and leaves the index untouched. Returns the snapshot's metadata."""
        faiss = _faiss()
        arrays, meta = read_snapshot(path)

        def refuse(field: str, msg: str) -> SnapshotError:
            return SnapshotError(f"snapshot {path}: field '{field}' {msg}")

        if meta.get("kind") != FORMAT:
            raise refuse("kind", f"is {meta.get('kind')!r}, expected {FORMAT!r}")
        for key, want in (expect or {}).items():
            if meta.get(key) != want:
                raise refuse(key, f"is {meta.get(key)!r}, this runner has {want!r}")
        saved = meta.get("index")
        if not isinstance(saved, dict):
            raise refuse("index", "is missing")
        for key, want in self.config().items():
            if key != "capacity" and saved.get(key) != want:
                raise refuse(f"index.{key}", f"is {saved.get(key)!r}, this index has {want!r}")
        counters = meta.get("counters") or {}
        c, next_id = counters.get("count"), counters.get("next_id")
        if not isinstance(c, int) or not 0 <= c <= self.capacity:
            raise refuse("counters.count", f"is {c!r}, this index holds at most {self.capacity}")
        if not isinstance(next_id, int) or next_id < c:
            raise refuse("counters.next_id", f"is {next_id!r}, expected an int >= count")
        specs = meta.get("tensors", {})
        want_shapes = {"values": (c, *self.value_shape), "task": (c,), "returns": (c,), "ids": (c,)}
        for name in ("index", *want_shapes):
            if name not in arrays or name not in specs:
                raise refuse(f"tensors.{name}", "is missing")
            a = arrays[name]
            if spec_digest(a) != specs[name].get("sha256"):
                raise refuse(f"tensors.{name}", "fails its SHA-256 check (file corrupt)")
            if name in want_shapes and a.shape != want_shapes[name]:
                raise refuse(f"tensors.{name}", f"has shape {list(a.shape)}, expected {list(want_shapes[name])}")
        if arrays["values"].dtype != self.value_dtype:
            raise refuse("tensors.values", f"has dtype {arrays['values'].dtype}, this index has {self.value_dtype}")
        try:
            cpu = faiss.deserialize_index(np.ascontiguousarray(arrays["index"], dtype=np.uint8))
        except RuntimeError as e:
            raise refuse("tensors.index", f"is not a faiss index ({e})") from e
        if cpu.d != self.dim or cpu.ntotal != c or cpu.metric_type != faiss.METRIC_INNER_PRODUCT:
            raise refuse("tensors.index", f"holds {cpu.ntotal} vectors of dim {cpu.d}, expected {c} of dim {self.dim} "
                         "(inner product)")
        # everything checked: adopt
        self.index = self._place(cpu)
        self.values[:c], self.task[:c], self.returns[:c], self.ids[:c] = (
            arrays["values"], arrays["task"], arrays["returns"], arrays["ids"])
        self.ids[c:] = -1
        self.count, self.next_id = c, next_id
        return meta


def spec_digest(a: np.ndarray) -> str:
    """SHA-256 of an array's bytes (as :mod:`icrl_ros.memory.snapshot` writes it)."""
    return hashlib.sha256(np.ascontiguousarray(a).view(np.uint8).reshape(-1)).hexdigest()
