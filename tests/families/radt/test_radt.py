"""RA-DT: model shapes and causality, training retrieval never returns the query's own
episode, the evaluation index starts empty and fills with the agent's episodes, checkpoint
round trip, loud configs, and a tiny collect -> train -> evaluate run."""

import numpy as np
import pytest
import torch

pytest.importorskip("faiss")

from icrl_ros.families.radt.memory import SubTrajectoryMemory, returns_to_go  # noqa: E402
from icrl_ros.models import load_checkpoint, save_checkpoint  # noqa: E402
from icrl_ros.families.radt.model import RADTArgs, RADTPolicy, as_tensors, episode_windows  # noqa: E402
from icrl_ros.sim import make_vec  # noqa: E402
from icrl_ros.training import radt_eval  # noqa: E402
from icrl_ros.training.radt_collect import collect, collect_teacher  # noqa: E402
from icrl_ros.training.radt_data import OfflineRetrievalBatches  # noqa: E402
from icrl_ros.training.train_radt import RADTTrainConfig  # noqa: E402

torch.set_num_threads(1)
ARGS = dict(n_obs=100, n_actions=5, max_episode_steps=100, grid_size=10, context=6, d_model=32, n_layers=2,
            n_heads=4, d_mlp=64, key_dim=16)


def random_inputs(B: int, C: int, k: int, seed: int = 0):
    g = np.random.default_rng(seed)
    win = {"obs": g.integers(0, 100, (B, C)), "prev_action": g.integers(0, 6, (B, C)),
           "prev_reward": g.integers(0, 2, (B, C)).astype(np.float32), "rtg": g.uniform(0, 90, (B, C)),
           "episode_step": g.integers(0, 100, (B, C)), "valid": np.ones((B, C), bool)}
    win["valid"][0, :2] = False  # a left-padded row
    shape = (B, k, 2 * C)
    ret = {"obs": g.integers(0, 100, shape), "action": g.integers(0, 5, shape),
           "reward": g.integers(0, 2, shape).astype(np.float32), "rtg": g.uniform(0, 90, shape),
           "episode_step": g.integers(0, 100, shape), "valid": g.random(shape) < 0.8}
    return win, ret


def test_forward_shapes_and_causal_mask():
    policy = RADTPolicy(RADTArgs(**ARGS, top_k=2)).eval()
    win, ret = random_inputs(3, 6, 2)
    logits = policy(as_tensors(win), as_tensors(ret))
    assert logits.shape == (3, 6, 5) and torch.isfinite(logits).all()
    # change every input of the future positions j > 2: logits at positions <= 2 must not move
    fut = {n: x.copy() for n, x in win.items()}
    g = np.random.default_rng(1)
    for n in ("obs", "prev_action", "episode_step"):
        fut[n][:, 3:] = g.integers(0, 5, fut[n][:, 3:].shape)
    fut["rtg"][:, 3:] += 50
    changed = policy(as_tensors(fut), as_tensors(ret))
    assert torch.allclose(changed[:, :3], logits[:, :3], atol=1e-6)
    assert not torch.allclose(changed[:, 3:], logits[:, 3:], atol=1e-4)  # the test can see a change
    # the retrieved context reaches the logits; an empty one (no valid slot) stays finite
    other = {n: x.copy() for n, x in ret.items()}
    other["obs"] = (other["obs"] + 7) % 100
    assert not torch.allclose(policy(as_tensors(win), as_tensors(other)), logits, atol=1e-4)
    ret["valid"][:] = False
    assert torch.isfinite(policy(as_tensors(win), as_tensors(ret))).all()


def test_no_rtg_model_reads_rewards_but_not_the_return_to_go():
    from icrl_ros.families.radt.graphs import graph_specs

    policy = RADTPolicy(RADTArgs(**ARGS, use_rtg=False)).eval()
    assert policy.embed.rtg is None and policy.embed_retrieved.rtg is None
    win, ret = random_inputs(2, 6, 1)
    logits = policy(as_tensors(win), as_tensors(ret))
    moved = {**win, "rtg": win["rtg"] + 40.0}
    assert torch.equal(policy(as_tensors(moved), as_tensors({**ret, "rtg": ret["rtg"] * 0})), logits)
    rewarded = {**ret, "reward": 1.0 - ret["reward"]}
    assert not torch.allclose(policy(as_tensors(win), as_tensors(rewarded)), logits, atol=1e-4)
    names = [io["name"] for io in graph_specs(policy)["policy"]["inputs"]]
    assert "prev_reward" in names and "retrieved_reward" in names
    assert not any(n.endswith("rtg") for n in names)
    full = [io["name"] for io in graph_specs(RADTPolicy(RADTArgs(**ARGS)))["policy"]["inputs"]]
    assert "rtg" in full and "retrieved_rtg" in full


def test_episode_windows_are_left_padded_and_shift_action_and_reward():
    obs = np.arange(10)[None] + 10
    action = np.arange(10)[None] % 5
    reward = (np.arange(10)[None] >= 7).astype(np.float32)
    w = episode_windows(obs, action, reward, returns_to_go(reward), np.array([2]), 4, n_actions=5)
    assert w["valid"].tolist() == [[False, True, True, True]]
    assert w["obs"][0, 1:].tolist() == [10, 11, 12]
    assert w["prev_action"][0, 1:].tolist() == [5, 0, 1]  # 5 = no previous action at the episode start
    assert w["rtg"][0, 1:].tolist() == [3.0, 3.0, 3.0]


def small_dataset(per_task: int = 4, tasks: int = 3, H: int = 40, seed: int = 0) -> dict:
    """Episodes that are each distinct (so the query's own episode is its best match)."""
    g = np.random.default_rng(seed)
    E = per_task * tasks
    return {"obs": g.integers(0, 100, (E, H)), "action": g.integers(0, 5, (E, H)),
            "reward": (g.random((E, H)) < 0.1).astype(np.float32), "task": np.repeat(np.arange(tasks), per_task)}


def test_training_retrieval_excludes_the_query_episode():
    policy = RADTPolicy(RADTArgs(**{**ARGS, "max_episode_steps": 40}))
    data = small_dataset()
    b = OfflineRetrievalBatches(policy, data, retrieve_l=100, query_dropout=0.0, similarity_cutoff=None,
                                dedup_threshold=None, min_retrieval_len=1, retrieval_dropout=0.0, seed=0)
    seen = 0
    for _ in range(20):
        win, ret, target, rows = b.sample(16)
        got = ret["slot"][:, 0]
        assert (got >= 0).all() and (got != rows).all()
        assert (data["task"][got] == data["task"][rows]).all()  # task re-ranking (l covers the index)
        seen += len(rows)
    # without the exclusion the own episode wins: the test can fail
    q = policy.trajectory_keys(data["obs"][:, :6], np.ones((len(data["obs"]), 6), bool))
    own = b.mem.retrieve(q, 8, 1, task=data["task"])["slot"][:, 0]
    assert (own == np.arange(len(q))).mean() > 0.9
    # the short-window rule draws another episode of the same task
    short = OfflineRetrievalBatches(policy, data, min_retrieval_len=100, retrieval_dropout=0.0, dedup_threshold=None)
    _, ret, _, rows = short.sample(32)
    assert (ret["slot"][:, 0] != rows).all() and (data["task"][ret["slot"][:, 0]] == data["task"][rows]).all()
    # failure retrieval: a zero-return episode of the same task, never the query's own
    data["reward"][::2] = 0
    zero = data["reward"].sum(1) == 0
    fails = OfflineRetrievalBatches(policy, data, failure_retrieval=1.0, min_retrieval_len=1, retrieval_dropout=0.0,
                                    dedup_threshold=None)
    _, ret, _, rows = fails.sample(64)
    got = ret["slot"][:, 0]
    assert zero[got].all() and (got != rows).all() and (data["task"][got] == data["task"][rows]).all()


def test_eval_index_starts_empty_and_fills_with_the_agents_episodes(monkeypatch):
    policy = RADTPolicy(RADTArgs(**ARGS)).eval()
    env = make_vec("icrl_ros/Darkroom-v0", 2, split="test", seed=0)
    env.set_tasks(env.goal_pool[:2])
    sizes: list[int] = []
    real = SubTrajectoryMemory.retrieve

    def spy(self, *a, **kw):
        sizes.append(len(self))
        return real(self, *a, **kw)

    monkeypatch.setattr(SubTrajectoryMemory, "retrieve", spy)
    out = radt_eval.run_radt_trials(policy, env, steps=300, seed=0)
    mems = out["memories"]
    per_ep = mems[0].keys_per_episode
    # no retrieval before the first episode ends (empty index), then 1 and 2 episodes' entries
    assert len(sizes) == 2 * 200 and sorted(set(sizes)) == [per_ep, 2 * per_ep]
    for i, mem in enumerate(mems):
        assert mem.episodes == 3 and len(mem) == 3 * per_ep
        stored = mem.rtg[:3, 0]  # each stored episode's return = what the trial reported
        assert np.allclose(stored, out["returns"][i])
        assert np.allclose(mem.index.returns[:len(mem)], np.repeat(stored, per_ep))


def test_checkpoint_round_trip(tmp_path):
    policy = RADTPolicy(RADTArgs(**ARGS)).eval()
    path = tmp_path / "radt.pt"
    save_checkpoint(path, policy, {"target_return": 90.0})
    back, blob = load_checkpoint(path)
    assert isinstance(back, RADTPolicy) and blob["model_args"]["kind"] == "radt"
    assert back.args == policy.args
    win, ret = random_inputs(2, 6, 1)
    assert torch.equal(back(as_tensors(win), as_tensors(ret)), policy(as_tensors(win), as_tensors(ret)))
    assert torch.equal(back.key_proj, policy.key_proj)  # the retrieval keys travel with the weights


def test_configs_fail_loudly():
    with pytest.raises(ValueError, match="model.context"):
        RADTArgs(**{**ARGS, "context": 0})
    with pytest.raises(ValueError, match="model.kind"):
        RADTArgs(**{**ARGS, "kind": "relic"})
    with pytest.raises(ValueError, match="unknown fields"):
        RADTArgs.from_dict({**ARGS, "sink": "kv"})
    cfg = RADTTrainConfig.load("config/train/darkroom_radt.yaml")
    assert cfg.model["context"] == 20
    with pytest.raises(ValueError, match="query_dropout"):
        RADTTrainConfig.load("config/train/darkroom_radt.yaml", ["query_dropout=1.5"])
    with pytest.raises(ValueError, match="unknown fields"):
        RADTTrainConfig.load(None, ["ppo.lr=1"])


def test_collect_train_evaluate_end_to_end(tmp_path):
    data = collect(episodes=3, learners=1, explore_episodes=2, eps_end=0.1, lr=0.2, gamma=0.9, seed=0)
    assert data["obs"].shape == (240, 100) and set(np.unique(data["task"])) <= set(range(100))
    path = tmp_path / "d.npz"
    np.savez_compressed(path, **data, env_id=np.array("icrl_ros/Darkroom-v0"), n_obs=100, n_actions=5)
    from icrl_ros.training import evaluate, train_radt

    run = tmp_path / "run"
    assert train_radt.main(["--config", "config/train/darkroom_radt.yaml", "--run-dir", str(run), "--set",
                            f"data={path}", "--set", "steps=3", "--set", "batch_size=8", "--set", "log_every=1",
                            "--set", "model.n_layers=1"]) == 0
    res = evaluate.evaluate(str(run / "checkpoints" / "final.pt"), "test", 2, 200, None, False, 0, "window")
    assert res["memory"] == "retrieval" and len(res["episodes"]) == 2 and res["episodes"][0]["n"] == 2

    # --resume: a run resumed from its step-2 checkpoint (latest.pt) ends where the unbroken run does
    common = ["--config", "config/train/darkroom_radt.yaml", "--set", f"data={path}", "--set", "batch_size=8",
              "--set", "model.n_layers=1", "--set", "checkpoint_every=2", "--set", "steps=4"]
    whole, part = tmp_path / "whole", tmp_path / "part"
    assert train_radt.main([*common, "--run-dir", str(whole)]) == 0
    latest = torch.load(whole / "checkpoints" / "latest.pt", weights_only=False)
    assert latest["train_steps"] == 2 and "optimizer" in latest
    assert train_radt.main([*common, "--run-dir", str(part), "--resume", str(whole / "checkpoints" / "latest.pt")]) == 0
    a, b = (torch.load(d / "checkpoints" / "final.pt", weights_only=False) for d in (whole, part))
    assert b["train_steps"] == 4 and all(torch.equal(a["state_dict"][k], b["state_dict"][k]) for k in a["state_dict"])
    with pytest.raises(SystemExit):  # nothing left to train
        train_radt.main([*common, "--run-dir", str(part), "--resume", str(part / "checkpoints" / "final.pt")])
    with pytest.raises(SystemExit):  # another model
        train_radt.main([*common, "--run-dir", str(part), "--set", "steps=6", "--set", "model.d_model=32",
                         "--resume", str(part / "checkpoints" / "final.pt")])


def test_teacher_histories_exploit_the_found_goal_and_keep_their_labels(tmp_path):
    data = collect_teacher(episodes=3, learners=2, epsilon=[0.0, 0.5], seed=0)
    E, H = data["obs"].shape
    assert (E, H) == (80 * 2 * 3, 100) and data["label"].shape == data["action"].shape == (E, H)
    ret = data["reward"].sum(1)
    clean, noisy = data["epsilon"] == 0.0, data["epsilon"] == 0.5
    assert clean.sum() == noisy.sum() == E // 2 and set(data["history"]) == {0, 1, 2}
    # epsilon 0: the teacher acted itself; the snake finds the goal in episode 1, and every later
    # episode walks straight there and stays (at least 100 - 18 rewarded steps on a 10 x 10 grid).
    # The start cell (0, 0) as the goal is the exception: the snake leaves it and never comes back.
    assert (data["action"][clean] == data["label"][clean]).all()
    clean &= data["task"] != 0
    assert (ret[clean & (data["history"] == 0)] > 0).all()
    assert (ret[clean & (data["history"] > 0)] >= 100 - 18).all()
    # epsilon 0.5: about half the executed actions are random (a fifth of them agree with the label)
    differ = (data["action"][noisy] != data["label"][noisy]).mean()
    assert 0.3 < differ < 0.5
    # the training targets are the labels where the dataset has them, the executed actions otherwise
    policy = RADTPolicy(RADTArgs(**{**ARGS, "context": 4}))
    for use, ref in ((True, data["label"]), (False, data["action"])):
        b = OfflineRetrievalBatches(policy, data, dedup_threshold=None, seed=1, use_labels=use)
        win, _, target, rows = b.sample(64)
        end = win["episode_step"][:, -1]
        assert (target[:, -1] == ref[rows, end]).all()
    # history retrieval: only the same learner's earlier episodes, nothing in its first episode
    b = OfflineRetrievalBatches(policy, data, retrieval_dropout=0.0, seed=2, retrieve_from="history")
    _, ret, _, rows = b.sample(256)
    got, first = ret["slot"][:, 0], data["history"][rows] == 0
    assert (got[first] == -1).all() and not ret["valid"][first].any()
    assert (got[~first] >= 0).all() and (got[~first] < rows[~first]).all()
    assert (data["learner"][got[~first]] == data["learner"][rows[~first]]).all()
    # the command line refuses bad values by name
    from icrl_ros.training import radt_collect

    for bad in (["--learner", "room", "--epsilon", "1.5"], ["--learner", "room", "--epsilon", "a,b"],
                ["--epsilon", "0.1"]):
        with pytest.raises(SystemExit):
            radt_collect.main([*bad, "--out", str(tmp_path / "x.npz")])
    assert not (tmp_path / "x.npz").exists()


def test_keys_are_state_histograms_under_a_fixed_rotation():
    a = RADTArgs(**{**ARGS, "key_dim": 128})
    p1, p2 = RADTPolicy(a), RADTPolicy(a)
    assert torch.equal(p1.key_proj, p2.key_proj)  # deterministic, no training needed
    g = np.random.default_rng(0)
    obs = g.integers(0, 100, (50, 20))
    valid = g.random((50, 20)) < 0.9
    keys = p1.trajectory_keys(obs, valid)
    hist = np.stack([np.bincount(o[v], minlength=100) for o, v in zip(obs, valid)]).astype(np.float64)
    cos = lambda x: (x / np.linalg.norm(x, axis=1, keepdims=True)) @ (x / np.linalg.norm(x, axis=1, keepdims=True)).T  # noqa: E731
    assert np.abs(cos(keys.astype(np.float64)) - cos(hist)).max() < 1e-4
