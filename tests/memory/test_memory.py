"""Conformance of every memory policy: bounded bytes, budgets, on-full behaviour, trial
reset, snapshot / restore (atomic, validated, refusals leave memory untouched)."""

import os

import numpy as np
import pytest
import torch

from icrl_ros.families.hcam.memory import HCAMMemory, chunk_bytes
from icrl_ros.families.memo.memory import MemoMemory
from icrl_ros.families.radt.memory import SubTrajectoryMemory
from icrl_ros.memory import (MEMORY_POLICIES, FullContextMemory, KVCache, MemoryBudgetError, MemoryFullError,
                             SinkWindowMemory, SnapshotError, create_memory, slot_bytes)

DIMS = dict(n_layers=2, n_heads=2, head_dim=4)
L, H, HD = 2, 2, 4
SIZE_KEY = {"full": "capacity", "window": "window", "memo": "max_sets", "hcam": "max_chunks",
            "retrieval": "max_episodes"}
KIND = {"memo": "memo", "hcam": "hcam", "retrieval": "radt"}
# RA-DT retrieval: 10 cells, keys of 4 dims, C = 2, 6-step episodes
RETRIEVAL = dict(key_proj=np.random.default_rng(0).normal(size=(10, 4)).astype(np.float32), context=2, horizon=6,
                 n_actions=3)
EPISODE = 5  # retrieval: steps per episode in drive()


def make(name: str, batch: int = 1, **cfg):
    cfg.setdefault(SIZE_KEY[name], 6)
    if name == "retrieval":
        pytest.importorskip("faiss")
        cfg = {**RETRIEVAL, **cfg}
    return create_memory(name, kind=KIND.get(name, "relic"), batch=batch, l_seg=4, l_sum=2, n_mem_layers=L, chunk=3,
                         top_k=2, **DIMS, **cfg)


def step_kv(t: int, batch: int = 1):
    """Distinct, recognisable keys/values for step t: every entry equals t."""
    k = torch.full((L, batch, H, 1, HD), float(t))
    return k, -k


def drive(mem, steps: int, t0: int = 0, episode: int = 0) -> None:
    """Commit ``steps`` steps (Memo: summarise with a stand-in summary at segment ends)."""
    for t in range(t0, t0 + steps):
        k, v = step_kv(t, mem.batch)
        ep = torch.full((mem.batch,), episode, dtype=torch.long)
        if isinstance(mem, MemoMemory):
            if mem.commit(k, v, ep):
                s = torch.full((L, mem.batch, H, mem.l_sum, HD), 1000.0 + t)
                mem.add_summary(s, -s)
        elif isinstance(mem, HCAMMemory):
            mem.commit(k, v, ep, torch.full((L, mem.batch, 1, H * HD), float(t)))
        elif isinstance(mem, SubTrajectoryMemory):  # one step of an EPISODE-step episode, rewarded on t % 3 == 0
            if t % EPISODE == 0:
                mem.end_episode()
            mem.observe(t % 10, rtg=float(t))
            mem.query(l=4, k=1)
            mem.record_action(t % 3)
            mem.record_reward(float(t % 3 == 0))
        else:
            mem.commit(k, v, ep)


def state(mem) -> dict:
    return {**{n: t.clone() for n, t in mem.tensors().items()}, **mem.counters()}


def same(a: dict, b: dict) -> bool:
    return all(torch.equal(a[k], b[k]) if isinstance(a[k], torch.Tensor) else a[k] == b[k] for k in a)


@pytest.mark.parametrize("name", sorted(MEMORY_POLICIES))
def test_bytes_never_change_and_trial_reset_clears(name):
    mem = make(name, on_full="evict_oldest") if name != "window" else make(name)
    before = mem.nbytes
    drive(mem, 50)
    assert mem.nbytes == before
    assert mem.tokens <= mem.slots
    mem.reset()
    assert mem.tokens == 0 and mem.nbytes == before


@pytest.mark.parametrize("name", sorted(MEMORY_POLICIES))
def test_budget_sizes_the_memory_and_is_never_exceeded(name):
    size_key = SIZE_KEY[name]
    budget = 40_000
    mem = make(name, budget_bytes=budget, **{size_key: None})
    assert mem.nbytes <= budget
    per_slot = slot_bytes(L, H, HD, torch.float32)
    step = {"memo": 2 * per_slot, "hcam": chunk_bytes(L, 3, H * HD, torch.float32),
            "retrieval": getattr(mem, "episode_bytes", 0)}.get(name, per_slot)
    assert mem.nbytes > budget - step  # the largest that fits
    drive(mem, 200) if name != "full" else None
    assert mem.nbytes <= budget
    with pytest.raises(MemoryBudgetError, match="memory_budget_bytes"):
        make(name, budget_bytes=100, **{size_key: None})
    with pytest.raises(MemoryBudgetError, match="memory_budget_bytes"):  # explicit size over the budget
        make(name, budget_bytes=budget, **{size_key: 10_000})


def test_budget_counts_the_batch():
    one = make("window", window=None, budget_bytes=50_000)
    four = make("window", batch=4, window=None, budget_bytes=50_000)
    assert four.window == one.window // 4 or four.window == (one.window + 1) // 4
    assert four.nbytes <= 50_000


def test_full_context_on_full_error_evict_reset():
    mem = make("full", capacity=4, on_full="error")
    drive(mem, 4)
    snap = state(mem)
    with pytest.raises(MemoryFullError, match="capacity 4"):
        drive(mem, 1, t0=4)
    assert same(state(mem), snap)

    mem = make("full", capacity=4, on_full="evict_oldest")
    drive(mem, 6)
    kept = sorted(mem.k[0, 0, 0, mem.valid[0], 0].tolist())
    assert kept == [2.0, 3.0, 4.0, 5.0]  # the newest 4 steps; 0 and 1 evicted

    mem = make("full", capacity=4, on_full="reset")
    drive(mem, 5)
    assert mem.tokens == 1 and mem.k[0, 0, 0, 0, 0] == 4.0


def test_window_is_a_ring_and_load_sequence_places_steps_like_stepping():
    mem = make("window", window=5)
    drive(mem, 13)
    assert sorted(mem.k[0, 0, 0, mem.valid[0], 0].tolist()) == [8.0, 9.0, 10.0, 11.0, 12.0]
    other = make("window", window=5)
    T = 13
    k = torch.arange(T, dtype=torch.float32).view(1, 1, 1, T, 1).expand(L, 1, H, T, HD).clone()
    other.load_sequence(k, -k, torch.zeros(1, T, dtype=torch.long))
    assert torch.equal(other.k, mem.k) and torch.equal(other.valid, mem.valid) and other.count == mem.count
    drive(mem, 3, t0=13)
    drive(other, 3, t0=13)
    assert torch.equal(other.k, mem.k)


def test_window_keeps_the_pinned_sink_token():
    mem = SinkWindowMemory(L, 1, H, HD, window=3, n_prefix=1)
    sink = torch.full((L, 1, H, 1, HD), -7.0)
    mem.set_prefix(sink, sink)
    drive(mem, 10)
    assert mem.k[0, 0, 0, 0, 0] == -7.0 and mem.valid[0, 0]
    mem.reset()
    assert mem.tokens == 1  # the sink stays across trials


def test_memo_accumulates_then_streams_errors_or_resets():
    mem = make("memo", max_sets=3, on_full="evict_oldest")  # l_seg 4, l_sum 2
    drive(mem, 4 * 3)
    assert mem.n_generated == 3 and mem.tokens == 6
    drive(mem, 4 * 5, t0=12)
    assert mem.n_generated == 8 and mem.tokens == 6  # streaming: newest 3 sets
    assert mem.pos_base() == 8 * 2  # positions keep counting across evictions
    kept = sorted(set(mem.k[0, 0, 0, mem.is_summary & mem.valid[0], 0].tolist()))
    assert kept == [1000.0 + t for t in (23, 27, 31)]

    mem = make("memo", max_sets=2, on_full="error")
    drive(mem, 8)
    with pytest.raises(MemoryFullError, match="2 summary sets"):
        drive(mem, 4, t0=8)

    mem = make("memo", max_sets=2, on_full="reset")
    drive(mem, 12)
    assert mem.n_generated == 0 and mem.tokens == 0


@pytest.mark.parametrize("name,steps", [("full", 5), ("window", 23), ("memo", 0), ("memo", 4), ("memo", 23)])
def test_fill_synthetic_matches_stepping_bookkeeping(name, steps):
    a = make(name, on_full="evict_oldest") if name != "window" else make(name)
    b = make(name, on_full="evict_oldest") if name != "window" else make(name)
    drive(a, steps)
    b.fill_synthetic(steps, torch.Generator().manual_seed(0), episode_len=10**9)
    assert torch.equal(a.valid, b.valid) and a.counters() == b.counters() and a.tokens == b.tokens


# -- snapshots -------------------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(MEMORY_POLICIES))
def test_snapshot_round_trip_is_exact_and_atomic(name, tmp_path):
    mem = make(name, on_full="evict_oldest") if name != "window" else make(name)
    drive(mem, 17)
    path = tmp_path / "mem.npz"
    mem.snapshot(path, model_hash="abc", trial_id="t1", steps=17)
    mem.snapshot(path, model_hash="abc", trial_id="t1", steps=17)  # replace in place
    assert os.listdir(tmp_path) == ["mem.npz"]  # no temp files left behind
    other = make(name, on_full="evict_oldest") if name != "window" else make(name)
    meta = other.restore(path, expect={"model_hash": "abc"})
    assert meta["trial_id"] == "t1" and meta["steps"] == 17
    assert same(state(other), state(mem))
    drive(mem, 9, t0=17)
    drive(other, 9, t0=17)
    assert same(state(other), state(mem))


def test_restore_refuses_mismatches_and_leaves_memory_untouched(tmp_path):
    src = make("full", capacity=6)
    drive(src, 3)
    path = tmp_path / "snap.npz"
    src.snapshot(path, model_hash="abc")

    dst = make("full", capacity=6)
    drive(dst, 5, t0=100)
    before = state(dst)
    with pytest.raises(SnapshotError, match=r"snap\.npz: field 'model_hash'"):
        dst.restore(path, expect={"model_hash": "xyz"})
    assert same(state(dst), before)

    bigger = make("full", capacity=8)
    with pytest.raises(SnapshotError, match=r"snap\.npz: field 'memory\.slots' is 6, this memory has 8"):
        bigger.restore(path)
    with pytest.raises(SnapshotError, match=r"field 'memory\.policy' is 'full', this memory has 'window'"):
        make("window", window=6).restore(path)
    half = FullContextMemory(L, 1, H, HD, capacity=6, dtype=torch.float16)
    with pytest.raises(SnapshotError, match=r"field 'memory\.dtype'"):
        half.restore(path)

    # a snapshot whose counters disagree with the memory
    arrays = dict(np.load(path))
    import json

    meta = json.loads(arrays["__meta__"].tobytes())
    meta["counters"]["count"] = 99
    arrays["__meta__"] = np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)
    bad = tmp_path / "bad_counter.npz"
    np.savez(bad, **arrays)
    with pytest.raises(SnapshotError, match=r"bad_counter\.npz: field 'counters\.count'"):
        dst.restore(bad)
    assert same(state(dst), before)


def test_restore_refuses_corrupt_and_missing_files(tmp_path):
    src = make("memo")
    drive(src, 9)
    path = tmp_path / "snap.npz"
    src.snapshot(path)
    dst = make("memo")
    drive(dst, 3, t0=50)
    before = state(dst)

    raw = bytearray(path.read_bytes())
    i = raw.find(b"\x93NUMPY") + 200  # inside the first array's data
    raw[i] ^= 0xFF
    corrupt = tmp_path / "corrupt.npz"
    corrupt.write_bytes(bytes(raw))
    with pytest.raises(SnapshotError, match=r"corrupt\.npz: field 'tensors\.|corrupt\.npz: not a readable"):
        dst.restore(corrupt)
    assert same(state(dst), before)

    truncated = tmp_path / "truncated.npz"
    truncated.write_bytes(path.read_bytes()[:300])
    with pytest.raises(SnapshotError, match=r"truncated\.npz"):
        dst.restore(truncated)
    with pytest.raises(SnapshotError, match=r"nope\.npz: no such file"):
        dst.restore(tmp_path / "nope.npz")
    garbage = tmp_path / "garbage.npz"
    garbage.write_bytes(b"not a zip at all")
    with pytest.raises(SnapshotError, match=r"garbage\.npz"):
        dst.restore(garbage)
    assert same(state(dst), before)


def test_kvcache_constructor_used_by_training_still_works():
    mem = KVCache(L, 2, H, HD, 5)  # full context, errors at the bound (PPO rollouts)
    drive(mem, 5)
    with pytest.raises(RuntimeError, match="KVCache full"):
        drive(mem, 1)
    assert isinstance(make("full"), FullContextMemory) and isinstance(make("window"), SinkWindowMemory)


def test_create_memory_names_unknown_and_mismatched_policies():
    with pytest.raises(ValueError, match="unknown policy 'ring'"):
        create_memory("ring", kind="relic", **DIMS)
    with pytest.raises(ValueError, match="does not apply to a memo model"):
        create_memory("window", kind="memo", window=4, **DIMS)
    with pytest.raises(ValueError, match="on_full"):
        make("full", on_full="grow")
