"""Runtime: engines and PolicyRunner against the torch full-sequence forward.

Parity (issue 4): over a 2,000-step rollout crossing episode and Memo segment
boundaries, ONNX Runtime and torch cached stepping match the full-sequence forward with
max |logit diff| <= 1e-4 (fp32); fp16 <= 2e-2 with the same greedy action on >= 99% of
steps. For every exact memory policy: full context, sink + window (against a windowed
full-sequence forward), Memo; streaming Memo (not exact by design) ORT vs torch.
"""

import contextlib
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch

from icrl_ros.memory import SnapshotError
from icrl_ros.models import ModelArgs, build_policy
from icrl_ros.models.core import sequence_mask
from icrl_ros.runtime import PolicyRunner, available_backends, build_memory, load_bundle, make_engine
from icrl_ros.runtime.selfcheck import compare, exact_memory, replay
from icrl_ros.training.export import export_bundle, record_rollout, reference_outputs
from tests.locks import file_lock

STEPS = 2000
EPISODE = 37  # episodes of 37 steps: 54 episode boundaries in 2,000 steps


def small_args(**kw) -> ModelArgs:
    base = dict(n_obs=30, n_actions=5, max_episode_steps=40, d_model=32, n_layers=2, n_heads=4, d_mlp=64,
                depth_dropout=0.0)
    base.update(kw)
    return ModelArgs.from_dict(base)


def decisive(policy):
    """Random weights give near-tied logits; scale the actor so actions are decisive
    (as after training) and greedy agreement is a meaningful fp16 check."""
    with torch.no_grad():
        policy.actor.weight.normal_(0, 0.5)
        for name, p in policy.named_parameters():
            if "sink" in name:
                p.normal_(0, 1.0)
    return policy


pytestmark = pytest.mark.usefixtures("one_thread")


@contextlib.contextmanager
def built_once(tmp_path_factory, worker_id: str, name: str):
    """A directory shared by `make test`'s xdist workers (the run's temp root) and whether it still has to be
    built: the first worker builds it while holding a lock, the other waits and reads it (the 2,000-step
    rollouts cost ~20 s of CPU each time)."""
    base = tmp_path_factory.getbasetemp()
    root = (base if worker_id == "master" else base.parent) / name
    root.mkdir(parents=True, exist_ok=True)
    with file_lock(root / ".lock"):
        done = root / ".done"
        yield root, not done.exists()
        done.touch()


SPECS = {
    "relic": dict(sink="kv0"),
    "relic_token_noiea": dict(sink="token", iea=False),
    "memo": dict(kind="memo", sink="kv", l_seg=16, l_sum=4),
}


@pytest.fixture(scope="module")
def bundles(tmp_path_factory, worker_id, one_thread):
    with built_once(tmp_path_factory, worker_id, "runtime_bundles") as (root, build):
        out = {name: root / name for name in [*SPECS, "relic_fp16", "memo_fp16"]}
        if build:
            torch.manual_seed(0)
            for name, kw in SPECS.items():
                policy = decisive(build_policy(small_args(**kw)).eval())
                export_bundle(policy, out[name], env={"action_names": ["up", "down", "left", "right", "stay"]})
            for name in ("relic", "memo"):
                export_bundle(load_bundle(out[name]).load_policy(), out[f"{name}_fp16"], precision="fp16")
    return out


@pytest.fixture(scope="module")
def rollouts(bundles, tmp_path_factory, worker_id):
    """One recorded 2,000-step rollout + torch full-sequence reference per model."""
    with built_once(tmp_path_factory, worker_id, "runtime_rollouts") as (root, build):
        if not build:
            return torch.load(root / "rollouts.pt", weights_only=False)
        out = {}
        for name in SPECS:
            policy = load_bundle(bundles[name]).load_policy()
            inp = record_rollout(policy, STEPS, EPISODE, seed=3)
            out[name] = (inp, *reference_outputs(policy, inp))
        torch.save(out, root / "rollouts.pt")
        return out


def run(bundle_path, backend, inp, memory=None, precision_check=None):
    bundle = load_bundle(bundle_path)
    mem = memory(bundle) if memory else exact_memory(bundle, STEPS)
    runner = PolicyRunner(bundle, make_engine(bundle, backend, "cpu", threads=1), mem)
    return replay(runner, inp), runner


# make test steps the ONNX Runtime engine (what the node runs); the torch engine's runs are in make test-all
@pytest.mark.parametrize("backend", ["onnxruntime", pytest.param("torch", marks=pytest.mark.slow)])
@pytest.mark.parametrize("model", ["relic", "relic_token_noiea", "memo"])
def test_fp32_stepping_matches_full_sequence_over_2000_steps(bundles, rollouts, model, backend):
    inp, ref_l, ref_v = rollouts[model]
    (logits, values), runner = run(bundles[model], backend, inp)
    r = compare(ref_l, ref_v, logits, values, "fp32")
    assert r["max_logit_diff"] <= 1e-4 and r["max_value_diff"] <= 1e-4, r
    if model == "memo":
        assert runner.memory.n_generated == STEPS // 16  # crossed 125 segment ends


@torch.no_grad()
def windowed_reference(policy, inp, window: int):
    """Full-sequence forward where each step sees only the newest ``window`` steps (+ sink)."""
    x = policy.encode(inp)
    ep = inp["episode_index"]
    T = ep.shape[1]
    t = torch.arange(T)
    band = t[None, :] >= t[:, None] - window  # the ring holds the W previous steps + the token itself
    mask = sequence_mask(ep, policy.args.iea)
    mask = mask & band
    if policy.n_prefix:
        mask = torch.nn.functional.pad(mask, (policy.n_prefix, 0), value=True)
        h, _, _ = policy.core(x, ep, mask, *policy.initial_cache(1))
    else:
        h, _, _ = policy.core(x, ep, mask)
    logits, values = policy.heads(h)
    return logits.double().numpy(), values.double().numpy()


@pytest.mark.parametrize("model", ["relic", "relic_token_noiea"])
def test_sink_window_stepping_matches_windowed_forward(bundles, rollouts, model):
    inp = rollouts[model][0]
    policy = load_bundle(bundles[model]).load_policy()
    W = 100
    ref_l, ref_v = windowed_reference(policy, inp, W)
    (logits, values), runner = run(bundles[model], "onnxruntime", inp, lambda b: build_memory(b, "window", window=W))
    r = compare(ref_l, ref_v, logits, values, "fp32")
    assert r["max_logit_diff"] <= 1e-4, r
    assert runner.memory.tokens == W + policy.n_prefix


def test_streaming_memo_onnxruntime_matches_torch_and_stays_bounded(bundles, rollouts):
    inp = rollouts["memo"][0]
    mem = lambda b: build_memory(b, "memo", max_sets=5, on_full="evict_oldest")  # noqa: E731
    (ort_l, ort_v), ort_runner = run(bundles["memo"], "onnxruntime", inp, mem)
    (pt_l, pt_v), _ = run(bundles["memo"], "torch", inp, mem)
    assert np.abs(ort_l - pt_l).max() <= 1e-4
    assert ort_runner.memory.tokens <= 5 * 4 + 16


@pytest.mark.parametrize("model", ["relic", "memo"])
def test_fp16_bundle_within_2e_2_and_99_percent_same_action(bundles, rollouts, model):
    inp, ref_l, ref_v = rollouts[model]
    (logits, values), runner = run(bundles[f"{model}_fp16"], "onnxruntime", inp)
    assert runner.memory.k.dtype == torch.float16
    r = compare(ref_l, ref_v, logits, values, "fp16")
    assert r["max_logit_diff"] <= 2e-2 and r["greedy_agreement"] >= 0.99, r


def _tensorrt_reason() -> str | None:
    try:
        import tensorrt  # noqa: F401
    except ImportError as e:
        return f"tensorrt is not importable here ({e}); this parity test runs on a TensorRT host"
    if not torch.cuda.is_available():
        return "tensorrt imports but no CUDA device is visible"
    return None


@pytest.mark.skipif(_tensorrt_reason() is not None, reason=str(_tensorrt_reason()))
@pytest.mark.parametrize("model", ["relic", "memo"])
def test_tensorrt_stepping_matches_full_sequence(bundles, rollouts, model):
    inp, ref_l, ref_v = rollouts[model]
    bundle = load_bundle(bundles[model])
    mem = exact_memory(bundle, STEPS, device="cuda")
    runner = PolicyRunner(bundle, make_engine(bundle, "tensorrt", "cuda", profile=(1, mem.slots), fp16=False), mem)
    logits, values = replay(runner, inp)
    r = compare(ref_l, ref_v, logits, values, "fp32")
    assert r["max_logit_diff"] <= 1e-4, r  # TF32 is off by default in TensorRT builds


def test_available_backends_lists_what_imports():
    have = available_backends()
    assert "torch" in have and "onnxruntime" in have
    assert ("tensorrt" in have) == (_tensorrt_reason() is None)


# -- PolicyRunner API --------------------------------------------------------------------------
def test_onnxruntime_threads_follow_omp_num_threads_unless_given(bundles, monkeypatch):
    """ORT does not read OMP_NUM_THREADS; the engine passes it on (its own default spins a thread per core)."""
    bundle = load_bundle(bundles["relic"])

    def intra(**kw) -> int:
        engine = make_engine(bundle, "onnxruntime", "cpu", **kw)
        return next(iter(engine.sessions.values())).get_session_options().intra_op_num_threads

    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    assert intra() == 1 and intra(threads=2) == 2
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    assert intra() == 2
    monkeypatch.delenv("OMP_NUM_THREADS")
    assert intra() == 0  # ORT's own choice
    runner = PolicyRunner.from_bundle(bundles["relic"], threads=2)  # what the agent node's `threads` sets
    assert next(iter(runner.engine.sessions.values())).get_session_options().intra_op_num_threads == 2


def test_runner_api_episodes_keep_memory_and_trials_clear_it(bundles):
    r = PolicyRunner.from_bundle(bundles["relic"], memory="window", memory_budget_bytes=200_000)
    assert r.manifest.action.names == ["up", "down", "left", "right", "stay"]
    r.reset_trial()
    r.begin_episode()
    infos = [r.act({"obs": i % 30})[1] for i in range(5)]
    assert set(infos[0]) >= {"latency_ms", "memory_tokens", "memory_bytes", "episode", "trial", "step"}
    assert [i["step"] for i in infos] == [0, 1, 2, 3, 4] and infos[-1]["memory_tokens"] == 5
    r.begin_episode()
    a, info = r.act({"obs": 3, "reward": 1.0})
    assert info["episode"] == 1 and info["step"] == 0 and info["memory_tokens"] == 6  # memory kept
    assert r.prev_action == a and r.prev_reward == 1.0
    trial = info["trial"]
    r.reset_trial()
    a, info = r.act({"obs": 3})  # implicit first episode
    assert info["trial"] == trial + 1 and info["episode"] == 0 and info["memory_tokens"] == 1
    assert info["memory_bytes"] <= 200_000
    with pytest.raises(ValueError, match="goal: unknown name 'kitchen'"):
        r.begin_episode("kitchen")
    with pytest.raises(ValueError, match="obs: missing key 'obs'"):
        r.act({"rgb": 1})


def test_runner_sampling_temperature(bundles):
    """Sampled actions come from softmax(logits / temperature): near 0 it is the argmax,
    at 1 (the default) the policy's own distribution."""
    def actions(greedy, temperature, steps=40):
        r = PolicyRunner.from_bundle(bundles["relic"], memory="full")
        r.greedy, r.temperature = greedy, temperature
        return [r.act({"obs": (7 * i) % 30})[0] for i in range(steps)]

    greedy = actions(True, 1.0)
    assert actions(False, 1e-3) == greedy
    assert actions(False, 1.0) != greedy


def test_runner_goal_names_and_image_observations(tmp_path):
    torch.manual_seed(0)
    args = small_args(obs_type="image", image_size=16, n_goals=3, n_actions=4)
    env = {"action_names": ["stop", "forward", "turn_left", "turn_right"], "goal_names": ["chair", "table", "sofa"],
           "forward_m": 0.25, "turn_deg": 30.0}
    path = export_bundle(build_policy(args).eval(), tmp_path / "img", env=env)
    r = PolicyRunner.from_bundle(path)
    m = r.manifest
    assert m.observation.image_size == [16, 16] and m.observation.goal_names == ["chair", "table", "sofa"]
    assert m.action.forward_m == 0.25 and m.action.turn_deg == 30.0
    r.reset_trial()
    r.begin_episode("table")
    obs = {"rgb": np.zeros((16, 16, 3), np.uint8), "odom": np.zeros(3, np.float32)}
    a, info = r.act(obs)
    assert 0 <= a < 4 and info["memory_tokens"] == 1
    with pytest.raises(ValueError, match="goal: unknown name 'bed'"):
        r.begin_episode("bed")
    with pytest.raises(ValueError, match=r"obs\['rgb'\]: shape \(8, 8, 3\)"):
        r.act({"rgb": np.zeros((8, 8, 3), np.uint8), "odom": np.zeros(3, np.float32)})


def test_models_without_reward_input_and_with_grid_coordinates(tmp_path):
    from icrl_ros.runtime.selfcheck import check_sample

    torch.manual_seed(0)
    args = small_args(grid_size=5, n_obs=25, use_reward=False)
    path = export_bundle(build_policy(args).eval(), tmp_path / "noreward")
    b = load_bundle(path)
    assert "prev_reward" not in b.manifest.observation.inputs
    assert check_sample(b)["ok"] and check_sample(b, "torch")["ok"]
    r = PolicyRunner.from_bundle(path)
    assert r.act({"obs": 3, "reward": 1.0})[1]["memory_tokens"] == 1  # a reward is accepted and unused


def test_budget_too_small_is_refused_with_the_field(bundles):
    with pytest.raises(ValueError, match="memory_budget_bytes"):
        PolicyRunner.from_bundle(bundles["relic"], memory="full", memory_budget_bytes=100)
    with pytest.raises(ValueError, match="does not apply to a relic model"):
        PolicyRunner.from_bundle(bundles["relic"], memory="memo")


@pytest.mark.parametrize("model,memory", [("relic", "window"), ("memo", "memo")])
def test_streaming_memory_bytes_are_constant(bundles, model, memory):
    cfg = {"window": 50} if memory == "window" else {"max_sets": 4}
    bundle = load_bundle(bundles[model])
    r = PolicyRunner(bundle, make_engine(bundle, "onnxruntime"), build_memory(bundle, memory, **cfg))
    r.begin_episode()
    sizes, tokens = set(), []
    for t in range(600):
        if t % 37 == 0:
            r.begin_episode()
        _, info = r.act({"obs": t % 30})
        sizes.add(info["memory_bytes"])
        tokens.append(info["memory_tokens"])
    assert len(sizes) == 1
    assert max(tokens[300:]) <= (50 if memory == "window" else 4 * 4 + 16)


# -- snapshots ---------------------------------------------------------------------------------
SCRIPT = textwrap.dedent("""
    import json, sys
    from icrl_ros.runtime import PolicyRunner
    r = PolicyRunner.from_bundle(sys.argv[1], memory=sys.argv[3])
    r.restore(sys.argv[2])
    out = []
    for o in json.loads(sys.argv[4]):
        a, info = r.act({"obs": o})
        out.append([a, info["episode"], info["step"], info["memory_tokens"]])
    print(json.dumps(out))
""")


@pytest.mark.parametrize("model,memory", [("relic", "window"), pytest.param("memo", "memo", marks=pytest.mark.slow)])
def test_snapshot_restore_in_a_new_process_gives_identical_actions(bundles, tmp_path, model, memory):
    r = PolicyRunner.from_bundle(bundles[model], memory=memory)
    r.begin_episode()
    for t in range(70):
        if t == 40:
            r.begin_episode()
        r.act({"obs": (7 * t) % 30, "reward": float(t % 3 == 0)})
    path = tmp_path / "mem.npz"
    r.snapshot(path)
    nxt = [(5 * t) % 30 for t in range(20)]
    here = []
    for o in nxt:
        a, info = r.act({"obs": o})
        here.append([a, info["episode"], info["step"], info["memory_tokens"]])
    repo = str(Path(__file__).resolve().parents[2])
    env = {**os.environ, "PYTHONPATH": repo}
    proc = subprocess.run([sys.executable, "-c", SCRIPT, str(bundles[model]), str(path), memory, json.dumps(nxt)],
                          capture_output=True, text=True, timeout=120, cwd=repo, env=env)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == here


def test_restore_refuses_other_models_and_memories_and_keeps_memory(bundles, tmp_path):
    other = PolicyRunner.from_bundle(bundles["relic_token_noiea"], memory="window")
    other.act({"obs": 1})
    foreign = tmp_path / "foreign.npz"
    other.snapshot(foreign)
    full = PolicyRunner.from_bundle(bundles["relic"], memory="full")
    full.act({"obs": 1})
    full_snap = tmp_path / "full.npz"
    full.snapshot(full_snap)

    r = PolicyRunner.from_bundle(bundles["relic"], memory="window")
    twin = PolicyRunner.from_bundle(bundles["relic"], memory="window")
    for t in range(30):
        r.act({"obs": t % 30})
        twin.act({"obs": t % 30})
    with pytest.raises(SnapshotError, match=r"foreign\.npz: field 'model_hash'"):
        r.restore(foreign)
    with pytest.raises(SnapshotError, match=r"full\.npz: field 'memory\.policy' is 'full', this memory has 'window'"):
        r.restore(full_snap)
    with pytest.raises(SnapshotError, match=r"missing\.npz: no such file"):
        r.restore(tmp_path / "missing.npz")
    # nothing was lost: r still acts exactly like its twin
    for t in range(10):
        assert r.act({"obs": t})[0] == twin.act({"obs": t})[0]
    assert r.act({"obs": 0})[1]["step"] == twin.act({"obs": 0})[1]["step"]


@pytest.mark.slow  # ~23 s: the benchmark script end to end (benchmarks are not tests); `make test-all` runs it
def test_benchmark_smoke(tmp_path, capsys):
    from icrl_ros.experiments import benchmark

    import importlib.util

    radt = importlib.util.find_spec("faiss") is not None  # RA-DT's retrieval index
    csv_path = tmp_path / "b.csv"
    assert benchmark.main(["--lengths", "512", "--steps", "4", "--policies", "full,memo_stream,hcam" + ",radt" * radt,
                           "--backends", "onnxruntime", "--batch", "2", "--batch-length", "256", "--batch-steps", "2",
                           "--bounded-steps", "1500", "--csv", str(csv_path)]) == 0
    out = capsys.readouterr().out
    assert "fill_synthetic" in out and "constant" in out and "VARYING" not in out
    rows = csv_path.read_text().splitlines()
    assert rows[0].startswith("backend,policy,batch,context") and len(rows) == 1 + 3 + radt + 3  # RA-DT: batch 1 only
    assert any(r.startswith("onnxruntime,hcam,1,512,") for r in rows)
    assert not radt or any(r.startswith("onnxruntime,radt,1,512,500,") for r in rows)  # 5 stored 100-step episodes
    assert (tmp_path / "b_bounded.csv").is_file()


def test_the_replay_tolerance_is_relative_to_a_steps_large_logits():
    """fp32: within 1e-4 of each logit, times the step's largest logit size where that exceeds 1 (float rounding
    of a route head's ~100s is ~1e-5 relative, and it lands on every logit of the step: the head adds to all);
    a step of small logits keeps the absolute 1e-4."""
    from icrl_ros.runtime.selfcheck import compare

    ref = np.array([[300.0, 0.5, -2.0], [0.9, 0.5, -0.7]])
    assert compare(ref, None, ref + [[0.02, 3e-4, -0.02], [0.0, 0.0, 0.0]], None, "fp32")["ok"]
    assert not compare(ref, None, ref + [[0.04, 0.0, 0.0], [0.0, 0.0, 0.0]], None, "fp32")["ok"]
    assert not compare(ref, None, ref + [[0.0, 0.0, 0.0], [0.0, 2e-4, 0.0]], None, "fp32")["ok"]
    assert not compare(ref, None, ref + [[0.0, 0.0, 0.0], [3e-4, 0.0, 0.0]], None, "fp32")["ok"]
