"""RA-DT deployment: the bounded retrieval memory (whole-episode eviction, window = the
training windows, one-file snapshots), export -> bundle, ORT / torch runners vs the
training-side evaluation loop, snapshot / restore, and the real checkpoint when present."""

import json
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("faiss")

from icrl_ros.memory import SnapshotError, create_memory  # noqa: E402
from icrl_ros.families.radt.memory import SubTrajectoryMemory, returns_to_go  # noqa: E402
from icrl_ros.families.radt.model import RADTArgs, RADTPolicy, episode_windows  # noqa: E402
from icrl_ros.families.radt.deploy import key_projection  # noqa: E402

torch.set_num_threads(1)
ARGS = dict(n_obs=25, n_actions=5, max_episode_steps=12, grid_size=5, context=4, top_k=2, d_model=32, n_layers=2,
            n_heads=4, d_mlp=64, key_dim=32, dropout=0.0)


def memory(policy: RADTPolicy, **cfg) -> SubTrajectoryMemory:
    a = policy.args
    return create_memory("retrieval", kind="radt", n_layers=a.n_layers, n_heads=a.n_heads, head_dim=8,
                         key_proj=policy.key_proj.numpy(), context=a.context, horizon=a.max_episode_steps,
                         n_actions=a.n_actions, **cfg)


def play(mem: SubTrajectoryMemory, lengths: list[int], seed: int = 0) -> list[dict]:
    """Episodes of the given lengths through the deploy API (rewards arrive with the next
    step; an episode is stored at the next one's first step). Returns each episode's arrays."""
    g = np.random.default_rng(seed)
    eps = []
    for n in lengths:
        ep = {"obs": g.integers(0, 25, n), "action": g.integers(0, 5, n), "reward": (g.random(n) < 0.3).astype(np.float32)}
        for t in range(n):
            mem.record_reward(ep["reward"][t - 1] if t else 0.0)
            mem.observe(int(ep["obs"][t]), rtg=50.0)
            mem.record_action(int(ep["action"][t]))
        mem.record_reward(ep["reward"][-1])
        mem.end_episode()
        eps.append(ep)
    return eps


def test_memory_is_bounded_and_evicts_whole_oldest_episodes():
    policy = RADTPolicy(RADTArgs(**ARGS))
    mem = memory(policy, max_episodes=3)
    nbytes, live = mem.nbytes, []
    eps = play(mem, [12, 7, 12], seed=1)
    for n in (12, 5, 12, 12):
        eps += play(mem, [n], seed=len(eps))
        live.append(mem.live_bytes)
        assert mem.nbytes == nbytes and mem.live_bytes <= nbytes and mem.episodes == 3
    assert len(set(live)) == 1  # full from the 4th episode on: bytes stop growing
    kept = eps[-3:]  # the newest 3, in ring order, with their returns in the index
    order = (mem.added - 3 + np.arange(3)) % 3
    for slot, ep in zip(order, kept):
        n = len(ep["obs"])
        assert mem.length[slot] == n and np.array_equal(mem.obs[slot, :n], ep["obs"])
        assert np.isclose(mem.rtg[slot, 0], ep["reward"].sum())
    per_ep = [len(range(0, len(e["obs"]), 4)) for e in kept]
    assert len(mem) == sum(per_ep) == mem.index.index.ntotal
    assert set(mem.index.values[:len(mem), 0]) == set(order.tolist())  # no entry points at an evicted episode
    with pytest.raises(Exception, match="max_episodes"):
        memory(policy, max_episodes=2, on_full="error").add_episodes(np.zeros((3, 12)), np.zeros((3, 12)),
                                                                     np.zeros((3, 12)))
    budget = memory(policy, max_episodes=None, budget_bytes=20_000)
    assert budget.nbytes <= 20_000 < budget.nbytes + budget.episode_bytes
    mem.reset()
    assert len(mem) == 0 and mem.tokens == 0 and mem.episodes == 0 and not mem.window["valid"].any()


def test_window_equals_the_training_windows():
    policy = RADTPolicy(RADTArgs(**ARGS))
    mem = memory(policy, max_episodes=4)
    g = np.random.default_rng(0)
    obs, act, rew = g.integers(0, 25, 12), g.integers(0, 5, 12), (g.random(12) < 0.5).astype(np.float32)
    ret, rtg = 0.0, np.zeros((1, 12), np.float32)
    for t in range(12):
        mem.record_reward(rew[t - 1] if t else 0.0)
        ret += rew[t - 1] if t else 0.0
        assert mem.episode_return == ret
        rtg[0, t] = 40.0 - ret
        win = mem.observe(int(obs[t]), rtg=40.0 - ret)
        want = episode_windows(obs[None], act[None], rew[None], rtg, np.array([t]), 4, 5)
        for n, w in want.items():
            assert np.array_equal(win[n], w), (t, n)
        mem.record_action(int(act[t]))
    assert np.allclose(returns_to_go(rew)[0], rew.sum())


def test_memory_snapshot_is_one_file_and_refusals_change_nothing(tmp_path):
    policy = RADTPolicy(RADTArgs(**ARGS))
    src = memory(policy, max_episodes=3)
    play(src, [12, 9, 12, 4])
    src.observe(3, rtg=10.0)  # mid-episode
    path = tmp_path / "mem.npz"
    src.snapshot(path, model_hash="abc")
    dst = memory(policy, max_episodes=3)
    play(dst, [5], seed=9)
    before = {n: t.clone() for n, t in dst.tensors().items()}
    raw = bytearray(path.read_bytes())
    raw[raw.find(b"\x93NUMPY") + 150] ^= 0xFF
    bad = tmp_path / "corrupt.npz"
    bad.write_bytes(bytes(raw))
    with pytest.raises(SnapshotError, match=r"corrupt\.npz"):
        dst.restore(bad)
    with pytest.raises(SnapshotError, match=r"mem\.npz: field 'memory\.max_episodes' is 3, this memory has 4"):
        memory(policy, max_episodes=4).restore(path)
    with pytest.raises(SnapshotError, match=r"mem\.npz: field 'model_hash'"):
        dst.restore(path, expect={"model_hash": "xyz"})
    arrays = dict(np.load(path))
    meta = json.loads(arrays["__meta__"].tobytes())
    meta["counters"]["index_count"] = 10**6
    arrays["__meta__"] = np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)
    np.savez(tmp_path / "counts.npz", **arrays)
    with pytest.raises(SnapshotError, match=r"counts\.npz: field 'counters\.index_count'"):
        dst.restore(tmp_path / "counts.npz")
    assert all(torch.equal(before[n], t) for n, t in dst.tensors().items()) and dst.counters()["episodes"] == 1
    dst.restore(path, expect={"model_hash": "abc"})
    assert dst.counters() == src.counters()
    q = np.random.default_rng(0).normal(size=(3, 32))
    assert all(np.array_equal(x, y) for x, y in zip(src.index.search(q, 6), dst.index.search(q, 6)))
    assert all(np.array_equal(src.query(50, 2)[n], dst.query(50, 2)[n]) for n in src.query(50, 2))


# -- bundles and runners -----------------------------------------------------------------------
RADT4 = Path(__file__).resolve().parents[3] / "checkpoints" / "darkroom_radt.pt"  # the shipped RA-DT


@pytest.fixture(scope="module")
def bundle_path(tmp_path_factory):
    from icrl_ros.training.export import env_metadata, export_bundle

    torch.manual_seed(0)
    policy = RADTPolicy(RADTArgs(**ARGS)).eval()
    for p in policy.parameters():  # random init is ~uniform over actions: widen it so retrieval visibly matters
        p.data.mul_(8.0)
    cfg = {"retrieve_l": 6, "utility_weight": 1.0, "target_return": 4.0, "env": {"id": "icrl_ros/Darkroom-v0"}}
    return export_bundle(policy, tmp_path_factory.mktemp("b") / "radt", config=cfg,
                         env=env_metadata("icrl_ros/Darkroom-v0"))


def test_export_writes_a_radt_bundle_with_retrieval_manifest(bundle_path):
    from icrl_ros.runtime import load_bundle
    from icrl_ros.runtime.selfcheck import check_sample

    b = load_bundle(bundle_path)
    m = b.manifest
    assert m.model.kind == "radt" and list(m.onnx.graphs) == ["policy"]
    assert m.memory.policy == "retrieval" and m.memory.config()["on_full"] == "evict_oldest"
    assert m.retrieval.l == 6 and m.retrieval.target_return == 4.0
    assert m.positions["window"] == 4 and m.positions["retrieved"] == 2 and m.positions["retrieved_len"] == 8
    assert m.observation.from_observation == ["obs"] and m.action.names[0] == "up"
    ins = {io["name"]: io["shape"] for io in m.onnx.graphs["policy"].inputs}
    assert ins["valid"] == ["batch", 4] and ins["retrieved_valid"] == ["batch", 2, 8]
    assert np.array_equal(key_projection(b), b.load_policy().key_proj.numpy())
    for backend in ("onnxruntime", "torch"):
        r = check_sample(b, backend)
        assert r["ok"] and r["max_logit_diff"] <= 1e-4, (backend, r)


def test_xy_embedding_knows_a_cell_by_its_row_and_column_and_exports(tmp_path):
    """``obs_embed: xy``: no per-cell table; a cell's vector is its row's plus its column's, so
    cells of one row differ only by their columns; the bundle's ONNX graph computes the same."""
    from icrl_ros.runtime import load_bundle
    from icrl_ros.runtime.selfcheck import check_sample
    from icrl_ros.training.export import env_metadata, export_bundle

    torch.manual_seed(1)
    policy = RADTPolicy(RADTArgs(**ARGS, obs_embed="xy")).eval()
    e = policy.embed
    assert e.obs is None and e.row.num_embeddings == e.col.num_embeddings == 5
    z = torch.zeros(3, dtype=torch.long)
    cells = torch.tensor([1 * 5 + 2, 1 * 5 + 4, 3 * 5 + 2])  # (1, 2), (1, 4), (3, 2)
    x = e(cells, z, torch.zeros(3), torch.zeros(3), z)
    def cell(r, c):  # the row's and column's vectors plus the linear (x, y) features, scaled to [0, 1]
        return e.row.weight[r] + e.col.weight[c] + e.coords(torch.tensor([r / 4, c / 4]))

    assert torch.allclose(x[0] - x[1], cell(1, 2) - cell(1, 4), atol=1e-6)
    assert torch.allclose(x[0] - x[2], cell(1, 2) - cell(3, 2), atol=1e-6)
    with pytest.raises(ValueError, match="obs_embed"):
        RADTArgs(**{**ARGS, "grid_size": 0}, obs_embed="xy")
    cfg = {"retrieve_l": 6, "utility_weight": 1.0, "target_return": 4.0, "env": {"id": "icrl_ros/Darkroom-v0"}}
    path = export_bundle(policy, tmp_path / "xy", config=cfg, env=env_metadata("icrl_ros/Darkroom-v0"))
    b = load_bundle(path)
    assert b.args.obs_embed == "xy"
    for backend in ("onnxruntime", "torch"):
        r = check_sample(b, backend)
        assert r["ok"] and r["max_logit_diff"] <= 1e-4, (backend, r)


def test_runners_match_the_evaluation_loop_step_for_step(bundle_path):
    """ORT and torch runners replay a rollout of the training-side evaluation loop (its index
    fills with the episodes; retrieval every step) with their own memory + faiss: <= 1e-4."""
    from icrl_ros.runtime import load_bundle, make_engine
    from icrl_ros.families.radt.runner import RADTRunner
    from icrl_ros.families.radt.deploy import replay as replay_radt
    from icrl_ros.runtime.selfcheck import exact_memory
    from icrl_ros.training.radt_eval import record_rollout

    b = load_bundle(bundle_path)
    policy = b.load_policy()
    rec = record_rollout(policy, 150, seed=3, target_return=4.0, retrieve_l=6)
    episodes = int(rec["episode_index"].max()) + 1
    assert episodes >= 10
    out = {}
    for backend in ("onnxruntime", "torch"):
        runner = RADTRunner(b, make_engine(b, backend, "cpu", threads=1), exact_memory(b, 150, episodes=episodes))
        out[backend] = replay_radt(runner, rec)
        assert np.abs(out[backend] - rec["logits"]).max() <= 1e-4, backend
        assert runner.memory.episodes == episodes - 1  # every finished episode went in
    # the check can fail: without retrieval (empty memory each step) the logits differ
    blind = RADTRunner(b, make_engine(b, "torch", "cpu"), exact_memory(b, 150, episodes=episodes))
    blind.memory.end_episode = blind.memory._clear_episode  # episodes are never stored
    assert np.abs(replay_radt(blind, rec) - rec["logits"]).max() > 1e-2


def test_from_bundle_act_info_bounded_bytes_and_snapshot_restore(bundle_path, tmp_path):
    from icrl_ros.runtime import PolicyRunner
    from icrl_ros.families.radt.runner import RADTRunner

    r = PolicyRunner.from_bundle(bundle_path, memory="retrieval", memory_budget_bytes=40_000)
    assert isinstance(r, RADTRunner) and r.memory_policy == "retrieval" and r.memory.nbytes <= 40_000
    cap = r.memory.max_episodes
    g = np.random.default_rng(0)
    live = []
    for e in range(cap + 4):
        r.begin_episode()
        for t in range(12):
            action, info = r.act({"obs": int(g.integers(0, 25)), "reward": float(g.random() < 0.3)})
            assert 0 <= action < 5 and info["latency_ms"] > 0 and info["memory_bytes"] == r.memory.nbytes
        live.append(r.memory.live_bytes)
    assert info["episode"] == cap + 3 and info["step"] == 11 and info["stored_episodes"] == cap
    assert live[cap:] == [live[cap]] * 4 and live[cap] <= r.memory.nbytes  # full: bytes stop growing
    assert r.memory.added == cap + 3 and r.memory.episodes == cap  # the oldest went
    # snapshot mid-episode, after begin_episode (the finished episode's last reward still to come)
    r.begin_episode()
    path = tmp_path / "radt.npz"
    r.greedy = False
    r.snapshot(path)
    twin = PolicyRunner.from_bundle(bundle_path, backend="torch", memory_budget_bytes=40_000)
    twin.greedy = False
    twin.restore(path)
    assert twin.episode_end_pending and twin.episode == r.episode
    for t in range(30):
        o = {"obs": int(g.integers(0, 25)), "reward": float(g.random() < 0.3)}
        a1, i1 = r.act(o)
        a2, i2 = twin.act(o)
        assert a1 == a2 and i1["retrieved_entries"] == i2["retrieved_entries"]
    lg = r.step(3, 1.0), twin.step(3, 1.0)
    assert torch.allclose(lg[0], lg[1], atol=1e-4)
    # refusals name the file and leave the runner as it was
    before = {n: t.clone() for n, t in twin.memory.tensors().items()}
    raw = bytearray(path.read_bytes())
    raw[raw.find(b"\x93NUMPY") + 150] ^= 0xFF
    (tmp_path / "corrupt.npz").write_bytes(bytes(raw))
    with pytest.raises(SnapshotError, match=r"corrupt\.npz"):
        twin.restore(tmp_path / "corrupt.npz")
    small = PolicyRunner.from_bundle(bundle_path, memory_budget_bytes=20_000)
    with pytest.raises(SnapshotError, match=r"radt\.npz: field 'memory\.max_episodes'"):
        small.restore(path)
    assert all(torch.equal(before[n], t) for n, t in twin.memory.tensors().items())
    with pytest.raises(ValueError, match=r"obs\['obs'\]"):
        r.act({"obs": 99})
    r.reset_trial()
    assert len(r.memory) == 0 and r.memory.episodes == 0 and not r.episode_end_pending
    r.close()


@pytest.mark.slow  # exports and verifies the shipped RA-DT (~20 s alone); the runners' parity runs in make test
@pytest.mark.skipif(not RADT4.is_file(), reason="checkpoints/darkroom_radt.pt not shipped")
def test_trained_checkpoint_exports_and_verifies(tmp_path):
    from icrl_ros.training import export

    assert export.main([str(RADT4), "--out", str(tmp_path / "b"), "--verify", "--verify-steps", "300"]) == 0
    res = export.verify_bundle(tmp_path / "b", 300)
    assert all(r["ok"] and r["max_logit_diff"] <= 1e-4 for r in res.values())
    # the bundle through ONNX Runtime in the evaluation loop (one retrieval index per trial) plays the
    # checkpoint's trials: the same tasks, sampling seeds and so the same returns
    from icrl_ros.training.evaluate import evaluate, evaluate_bundle

    a = evaluate(str(RADT4), "test", 3, 300, None, False, 5, "window")
    b = evaluate_bundle(str(tmp_path / "b"), "test", 3, 300, 5, None, False, 1.0)
    assert b["bundle"] and b["backend"] == "onnxruntime" and b["memory"] == "retrieval"
    assert [e["mean"] for e in a["episodes"]] == [e["mean"] for e in b["episodes"]]
    assert a["trial_return"] == b["trial_return"]
