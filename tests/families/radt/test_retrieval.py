"""RA-DT retrieval index: exact cosine top-k vs brute force, re-ranking, eviction under the
budget, snapshot round trip, loud errors."""

import os

import numpy as np
import pytest

pytest.importorskip("faiss")

from icrl_ros.memory import MemoryBudgetError, SnapshotError  # noqa: E402
from icrl_ros.families.radt.retrieval import RetrievalIndex  # noqa: E402


def brute_force(keys: np.ndarray, q: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    kn = keys / np.linalg.norm(keys, axis=1, keepdims=True)
    qn = q / np.linalg.norm(q, axis=1, keepdims=True)
    sim = qn.astype(np.float64) @ kn.astype(np.float64).T
    top = np.argsort(-sim, axis=1)[:, :k]
    return top, np.take_along_axis(sim, top, 1)


def test_search_and_query_return_the_brute_force_top_k():
    rng = np.random.default_rng(0)
    keys = rng.normal(size=(2000, 32)).astype(np.float32) * rng.uniform(0.1, 10, size=(2000, 1)).astype(np.float32)
    q = rng.normal(size=(25, 32)).astype(np.float32)
    idx = RetrievalIndex(32, capacity=5000)
    ids = idx.add(keys, np.arange(2000) * 10, task=0, episode_return=rng.uniform(size=2000))
    assert ids.tolist() == list(range(2000))
    want_rows, want_scores = brute_force(keys, q, 10)
    scores, rows = idx.search(q, 10)
    assert np.array_equal(rows, want_rows)
    assert np.abs(scores - want_scores).max() <= 1e-5
    pure = RetrievalIndex(32, capacity=5000, utility_weight=0.0)
    pure.add(keys, np.arange(2000) * 10)
    got = pure.query(q, l=50, k=10)
    assert np.array_equal(got.ids, want_rows) and np.array_equal(got.values, want_rows * 10)
    assert np.abs(got.relevance - want_scores).max() <= 1e-5 and got.valid.all()


def unit(*xs):
    v = np.array(xs, dtype=np.float32)
    return v / np.linalg.norm(v)


def test_reranking_by_return_at_inference_and_task_at_training():
    idx = RetrievalIndex(2, capacity=10)
    # relevance to q = (1, 0): a > b > c > d
    idx.add(np.stack([unit(1, 0.1), unit(1, 0.5), unit(1, 1.0), unit(0.2, 1)]), [0, 1, 2, 3],
            task=[7, 3, 3, 7], episode_return=[3.0, 10.0, 0.0, 20.0])
    q = np.array([[1.0, 0.0]], np.float32)
    r = idx.query(q, l=4, k=4)  # inference: relevance' + return' (both min-max over the 4)
    rel = np.array([np.cos(np.arctan(x)) for x in (0.1, 0.5, 1.0, 5.0)])
    rel_n = (rel - rel.min()) / (rel.max() - rel.min())
    ret_n = np.array([3.0, 10.0, 0.0, 20.0]) / 20.0
    assert r.ids[0].tolist() == np.argsort(-(rel_n + ret_n), kind="stable").tolist()
    assert np.allclose(r.score[0], np.sort(rel_n + ret_n)[::-1], atol=1e-5)
    assert r.ids[0].tolist() == [1, 0, 3, 2]
    r = idx.query(q, l=4, k=2, task=3)  # training: same-task entries first, then by relevance
    assert r.ids[0].tolist() == [1, 2] and r.utility[0].tolist() == [1.0, 1.0]
    idx.utility_weight = 10.0
    assert idx.query(q, l=4, k=1).ids[0].tolist() == [3]  # d: least relevant, best return
    assert idx.query(q, l=3, k=1).ids[0].tolist() == [1]  # only the top-l are re-ranked: d is not among them
    heavy = RetrievalIndex(2, capacity=10, relevance_weight=1.0, utility_weight=0.1)
    heavy.add(np.stack([unit(1, 0.1), unit(1, 0.5)]), [0, 1], episode_return=[0.0, 10.0])
    assert heavy.query(q, l=2, k=1).ids[0].tolist() == [0]  # weights are honoured


def test_fewer_entries_than_k_and_empty_index():
    idx = RetrievalIndex(4, capacity=8, value_shape=(3,), value_dtype=np.float32)
    r = idx.query(np.ones((2, 4)), l=5, k=3)
    assert not r.valid.any() and (r.ids == -1).all() and r.values.shape == (2, 3, 3)
    idx.add(np.eye(4)[:2], np.ones((2, 3)), episode_return=[1.0, 2.0])
    r = idx.query(np.ones((1, 4)), l=5, k=3)
    assert r.valid[0].tolist() == [True, True, False] and (r.values[0, 2] == 0).all()


def test_eviction_keeps_the_index_within_its_budget():
    rng = np.random.default_rng(1)
    idx = RetrievalIndex(8, capacity=5)
    for i in range(4):
        idx.add(rng.normal(size=(3, 8)), [10 * i, 10 * i + 1, 10 * i + 2])
        assert len(idx) <= 5 and idx.index.ntotal == len(idx)
    assert idx.ids[:5].tolist() == [7, 8, 9, 10, 11]  # the oldest went first
    assert idx.values[:5].tolist() == [21, 22, 30, 31, 32]
    keys = rng.normal(size=(12, 8)).astype(np.float32)
    by_ret = RetrievalIndex(8, capacity=4, evict="lowest_return")
    by_ret.add(keys[:6], np.arange(6), episode_return=[5, 1, 7, 3, 9, 2])
    assert sorted(by_ret.returns[:4].tolist()) == [3, 5, 7, 9]
    by_ret.add(keys[6:8], [6, 7], episode_return=[0, 8])  # 0 is evicted on arrival, 3 makes room for 8
    assert sorted(by_ret.returns[:4].tolist()) == [5, 7, 8, 9]
    scores, rows = by_ret.search(keys[7], 1)  # the index still agrees with its metadata
    assert by_ret.values[rows[0, 0]] == 7 and scores[0, 0] > 0.999
    budget = RetrievalIndex(16, budget_bytes=10_000)
    assert budget.capacity == 10_000 // budget.entry_bytes
    budget.add(rng.normal(size=(500, 16)), np.arange(500))
    assert len(budget) == budget.capacity and budget.nbytes <= 10_000
    with pytest.raises(MemoryBudgetError, match="budget_bytes"):
        RetrievalIndex(16, budget_bytes=10)
    with pytest.raises(MemoryBudgetError, match="budget_bytes"):
        RetrievalIndex(16, capacity=1000, budget_bytes=10_000)


def test_snapshot_round_trip_gives_identical_results(tmp_path):
    rng = np.random.default_rng(2)
    idx = RetrievalIndex(16, capacity=300, value_shape=(4,), value_dtype=np.float32)
    idx.add(rng.normal(size=(350, 16)), rng.normal(size=(350, 4)), task=rng.integers(0, 5, 350),
            episode_return=rng.uniform(size=350))
    path = tmp_path / "index.npz"
    size = idx.snapshot(path, model_hash="abc", trial_id="t1")
    assert size == path.stat().st_size > 0 and os.listdir(tmp_path) == ["index.npz"]
    other = RetrievalIndex(16, capacity=300, value_shape=(4,), value_dtype=np.float32)
    meta = other.restore(path, expect={"model_hash": "abc"})
    assert meta["trial_id"] == "t1" and len(other) == 300 and other.next_id == 350
    q = rng.normal(size=(20, 16))
    for task in (None, 2):
        a, b = idx.query(q, l=50, k=4, task=task), other.query(q, l=50, k=4, task=task)
        for f in ("ids", "values", "relevance", "score", "valid"):
            assert np.array_equal(getattr(a, f), getattr(b, f)), f
    new = rng.normal(size=(5, 16))  # and they keep evolving the same way
    assert np.array_equal(idx.add(new, np.zeros((5, 4))), other.add(new, np.zeros((5, 4))))
    assert np.array_equal(idx.search(q, 7)[1], other.search(q, 7)[1])


def test_restore_refuses_bad_snapshots_and_leaves_the_index_untouched(tmp_path):
    rng = np.random.default_rng(3)
    src = RetrievalIndex(8, capacity=50)
    src.add(rng.normal(size=(20, 8)), np.arange(20))
    path = tmp_path / "i.npz"
    src.snapshot(path, model_hash="abc")
    dst = RetrievalIndex(8, capacity=50)
    dst.add(rng.normal(size=(3, 8)), [1, 2, 3])
    with pytest.raises(SnapshotError, match="model_hash"):
        dst.restore(path, expect={"model_hash": "other"})
    with pytest.raises(SnapshotError, match="index.dim"):
        RetrievalIndex(4, capacity=50).restore(path)
    with pytest.raises(SnapshotError, match="counters.count"):
        RetrievalIndex(8, capacity=10).restore(path)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    bad = tmp_path / "bad.npz"
    bad.write_bytes(bytes(data))
    with pytest.raises(SnapshotError):
        dst.restore(bad)
    assert len(dst) == 3 and dst.index.ntotal == 3 and dst.values[:3].tolist() == [1, 2, 3]


def test_dimension_mismatch_and_bad_inputs_are_loud():
    idx = RetrievalIndex(8, capacity=10)
    with pytest.raises(ValueError, match=r"keys: expected shape \(N, 8\).*got \[3, 7\]"):
        idx.add(np.zeros((3, 7)), [0, 1, 2])
    with pytest.raises(ValueError, match=r"query: expected shape \(N, 8\)"):
        idx.search(np.zeros((1, 9)), 3)
    with pytest.raises(ValueError, match="values"):
        idx.add(np.ones((3, 8)), [0, 1])
    with pytest.raises(ValueError, match="NaN"):
        idx.add(np.full((1, 8), np.nan), [0])
    with pytest.raises(ValueError, match="evict"):
        RetrievalIndex(8, capacity=10, evict="random")
    with pytest.raises(ValueError, match="k: "):
        idx.query(np.ones((1, 8)), l=2, k=3)


def test_query_excludes_given_ids_and_cuts_off_near_duplicates():
    rng = np.random.default_rng(3)
    keys = rng.normal(size=(200, 16)).astype(np.float32)
    idx = RetrievalIndex(16, capacity=400, utility_weight=0.0)
    idx.add(keys, np.arange(200))
    q = keys[:5] + 1e-3  # each query's best match is its own key
    assert idx.query(q, l=10, k=1).ids[:, 0].tolist() == [0, 1, 2, 3, 4]
    own = np.stack([np.arange(5), np.full(5, -1)], 1)  # (Q, m), -1 = no exclusion
    got = idx.query(q, l=10, k=3, exclude=own)
    assert not (got.ids == np.arange(5)[:, None]).any() and got.valid.all()
    want_rows, _ = brute_force(keys, q, 4)
    assert np.array_equal(got.ids, want_rows[:, 1:])  # the next best, in order
    cut = idx.query(q, l=10, k=3, max_relevance=0.99)
    assert np.array_equal(cut.ids, got.ids) and (cut.relevance <= 0.99).all()


def test_remove_by_id_and_row_state_round_trip():
    rng = np.random.default_rng(4)
    keys = rng.normal(size=(10, 8)).astype(np.float32)
    idx = RetrievalIndex(8, capacity=12)
    idx.add(keys, np.arange(10) * 10, episode_return=np.arange(10, dtype=np.float32))
    assert idx.remove([2, 3, 7, 99]) == 3  # 99: unknown, ignored
    assert len(idx) == idx.index.ntotal == 7
    assert idx.ids[:7].tolist() == [0, 1, 4, 5, 6, 8, 9] and idx.values[:7].tolist() == [0, 10, 40, 50, 60, 80, 90]
    assert idx.returns[:7].tolist() == [0, 1, 4, 5, 6, 8, 9] and (idx.ids[7:] == -1).all()
    scores, rows = idx.search(keys[5], 1)  # the faiss rows still agree with the metadata
    assert idx.ids[rows[0, 0]] == 5 and scores[0, 0] > 0.999
    assert idx.query(keys[3], l=7, k=7).ids[0].tolist().count(3) == 0  # removed: never retrieved
    # padded keys -> load_rows rebuilds an index with bit-identical scores
    other = RetrievalIndex(8, capacity=12)
    for a in ("values", "task", "returns", "ids"):
        getattr(other, a)[:] = getattr(idx, a)
    other.load_rows(idx.padded_keys(), len(idx), idx.next_id)
    q = rng.normal(size=(4, 8))
    assert all(np.array_equal(x, y) for x, y in zip(idx.search(q, 5), other.search(q, 5)))
    assert np.array_equal(idx.add(keys[:2], [1, 2]), other.add(keys[:2], [1, 2]))
