"""K/V storage dtypes through the deployed runtime: the int8 / fp16 core graphs (plain ONNX, run by
ONNX Runtime on the CPU) against fp32 on a recorded 1,000-step rollout, fp32 untouched by the option,
bundles with several cores, the runner override and the export command line's refusals."""

import subprocess
import sys

import numpy as np
import onnx
import pytest
import torch

from icrl_ros.models import ModelArgs, build_policy
from icrl_ros.runtime import PolicyRunner, build_memory, load_bundle, make_engine
from icrl_ros.runtime.bundle import BundleError
from icrl_ros.runtime.selfcheck import compare, exact_memory, replay
from icrl_ros.training.export import add_kv_dtypes, export_bundle, record_rollout, reference_outputs

STEPS = 1000
EPISODE = 37

pytestmark = pytest.mark.usefixtures("one_thread")


def small_policy(**kw):
    args = ModelArgs.from_dict({**dict(n_obs=30, n_actions=5, max_episode_steps=40, d_model=64, n_layers=2,
                                       n_heads=4, d_mlp=64, depth_dropout=0.0, sink="kv0"), **kw})
    policy = build_policy(args).eval()
    with torch.no_grad():  # decisive actions, as after training (random weights give near ties)
        policy.actor.weight.normal_(0, 0.5)
    return policy


@pytest.fixture(scope="module")
def bundle(tmp_path_factory, one_thread):
    torch.manual_seed(0)
    return export_bundle(small_policy(), tmp_path_factory.mktemp("kv") / "b", kv_dtypes=("fp16", "int8"))


@pytest.fixture(scope="module")
def rollout(bundle):
    policy = load_bundle(bundle).load_policy()
    inp = record_rollout(policy, STEPS, EPISODE, seed=5)
    return inp, *reference_outputs(policy, inp)


def replay_kv(path, kv_dtype, inp, backend="onnxruntime"):
    b = load_bundle(path).with_kv_dtype(kv_dtype)
    runner = PolicyRunner(b, make_engine(b, backend, "cpu", threads=1), exact_memory(b, STEPS))
    return replay(runner, inp), runner


def quantised_replays(path, inp, ref_l):
    """(kv_dtype, memory) of the fp16 and int8 runners of bundle ``path`` replayed on ``inp``, after checking their
    logits against fp32's ``ref_l``: changed (the memory really is stored in fewer bits) but close, the same
    greedy action on >= 98% of steps."""
    for kv_dtype, tol in (("fp16", 2e-3), ("int8", 5e-2)):
        (logits, _), runner = replay_kv(path, kv_dtype, inp)
        scale = np.maximum(1.0, np.abs(ref_l).max(-1, keepdims=True))
        diff = np.abs(logits - ref_l)
        assert 1e-6 < float(diff.max()) and float((diff / scale).max()) <= tol, (kv_dtype, float(diff.max()))
        assert float((logits.argmax(-1) == ref_l.argmax(-1)).mean()) >= 0.98
        assert runner.memory.kv_dtype == kv_dtype
        yield kv_dtype, runner.memory


def test_bundle_lists_its_cores_and_they_are_plain_onnx(bundle):
    b = load_bundle(bundle)
    assert b.kv_dtypes() == ["fp32", "fp16", "int8"] and b.kv_dtype == "fp32"
    ops = {n.op_type for n in onnx.load(str(b.with_kv_dtype("int8").graph_path("core"))).graph.node}
    assert "MatMulInteger" in ops
    for kv in ("fp32", "fp16", "int8"):
        m = onnx.load(str(b.with_kv_dtype(kv).graph_path("core")))
        assert {o.domain for o in m.opset_import} <= {"", "ai.onnx"}  # no custom op domain
        names = [i.name for i in m.graph.input]
        assert ("past_k_scale_0" in names) == (kv == "int8")


def test_fp32_is_unchanged_by_the_option(bundle, rollout):
    inp, ref_l, ref_v = rollout
    (l0, v0), _ = replay_kv(bundle, None, inp)
    (l1, v1), r1 = replay_kv(bundle, "fp32", inp)
    assert np.array_equal(l0, l1) and np.array_equal(v0, v1)  # bit-identical
    assert r1.memory.k.dtype == torch.float32 and r1.memory.core_inputs() == ()
    r = compare(ref_l, ref_v, l1, v1, "fp32")
    assert r["ok"], r


@pytest.mark.parametrize("kv_dtype,tol", [("fp16", 2e-3), ("int8", 5e-2)])
def test_quantised_memory_logits_stay_close_to_fp32(bundle, rollout, kv_dtype, tol):
    inp, ref_l, ref_v = rollout
    (logits, values), runner = replay_kv(bundle, kv_dtype, inp)
    diff = np.abs(logits - ref_l)
    scale = np.maximum(1.0, np.abs(ref_l).max(-1, keepdims=True))
    assert float((diff / scale).max()) <= tol, float(diff.max())
    assert float(diff.max()) > 1e-6  # the memory really is stored in fewer bits
    agree = float((logits.argmax(-1) == ref_l.argmax(-1)).mean())
    assert agree >= 0.98, agree
    assert runner.memory.kv_dtype == kv_dtype and runner.memory.tokens == STEPS


def test_int8_onnxruntime_matches_torch_engine(bundle, rollout):
    inp = {k: v[:, :300] for k, v in rollout[0].items()}
    (lo, _), _ = replay_kv(bundle, "int8", inp)
    (lt, _), _ = replay_kv(bundle, "int8", inp, backend="torch")
    scale = np.maximum(1.0, np.abs(lt).max(-1, keepdims=True))
    assert float((np.abs(lo - lt) / scale).max()) <= 1e-4  # the same integers; float rounding only


def test_runner_override_and_budget(bundle):
    budget = 2_000_000
    sizes = {}
    for kv in ("fp32", "fp16", "int8"):
        r = PolicyRunner.from_bundle(bundle, kv_dtype=kv, memory_budget_bytes=budget)
        assert r.memory.kv_dtype == kv and r.engine.kv_dtype == kv and r.memory.nbytes <= budget
        sizes[kv] = r.memory.slots
        obs = {"obs": 3}
        for _ in range(3):
            r.act(obs)
    assert sizes["int8"] > 3 * sizes["fp32"] and sizes["fp16"] > 1.9 * sizes["fp32"]


def test_a_missing_core_and_a_mismatch_are_refused(tmp_path, bundle):
    torch.manual_seed(1)
    plain = export_bundle(small_policy(), tmp_path / "plain")
    with pytest.raises(BundleError, match="core.int8' is missing.*--add-kv-dtypes int8"):
        PolicyRunner.from_bundle(plain, kv_dtype="int8")
    with pytest.raises(BundleError, match="kv_dtype: 'int4'"):
        load_bundle(bundle).with_kv_dtype("int4")
    b = load_bundle(bundle)
    with pytest.raises(ValueError, match="memory stores K / V as int8, the engine's core reads fp32"):
        PolicyRunner(b, make_engine(b, "onnxruntime"), build_memory(b.with_kv_dtype("int8")))


def test_add_kv_dtypes_to_an_existing_bundle_and_make_int8_the_default(tmp_path, rollout):
    torch.manual_seed(2)
    plain = export_bundle(small_policy(), tmp_path / "plain")
    out = add_kv_dtypes(plain, tmp_path / "int8", ["fp16"], default="int8")
    b = load_bundle(out)
    assert b.kv_dtype == "int8" and b.kv_dtypes() == ["int8", "fp16", "fp32"]
    assert b.manifest.memory.kv_dtype == "int8"
    r = PolicyRunner.from_bundle(out)
    assert r.memory.kv_dtype == "int8"
    # the fp32 core of the copy is the source's own file
    assert (out / b.manifest.onnx.graphs["core.fp32"].file).read_bytes() == (plain / "core.onnx").read_bytes()
    from icrl_ros.runtime.selfcheck import check_sample

    res = check_sample(b)
    assert res["ok"], res
    # the fp32 memory's bytes as the copy's budget: int8 holds ~3.5x the steps in them (its scales cost the rest)
    fp32 = PolicyRunner.from_bundle(plain).memory
    same = PolicyRunner.from_bundle(add_kv_dtypes(plain, tmp_path / "budget", ["int8"], default="int8",
                                                  budget_bytes=fp32.nbytes)).memory
    assert same.nbytes <= fp32.nbytes and same.slots >= 3 * fp32.slots, (same.slots, fp32.slots)
    from icrl_ros.runtime.runner import build_memory

    batched = build_memory(load_bundle(tmp_path / "budget"), batch=3)  # the budget is per trial (one robot's)
    assert batched.slots == same.slots and batched.nbytes <= 3 * fp32.nbytes
    with pytest.raises(ValueError, match="--budget-bytes: .* do not hold one step"):
        add_kv_dtypes(plain, tmp_path / "tiny", ["int8"], budget_bytes=10)
    assert not (tmp_path / "tiny").exists()


def test_export_cli_refuses_an_unknown_kv_dtype_in_one_line(tmp_path, bundle):
    for argv in ([str(bundle), "--add-kv-dtypes", "int4", "--out", str(tmp_path / "x")],
                 [str(bundle), "--add-kv-dtypes", "int8", "--kv-dtype", "bf8", "--out", str(tmp_path / "y")]):
        p = subprocess.run([sys.executable, "training/export.py", *argv], capture_output=True, text=True)
        assert p.returncode != 0
        assert p.stderr.strip().count("\n") == 0 and "Traceback" not in p.stderr, p.stderr
        assert "is not one of ['fp32', 'fp16', 'int8', 'int8_gqa']" in p.stderr


def test_node_parameter_takes_the_kv_dtypes_and_refuses_others():
    from icrl_ros.memory.quant import KV_DTYPES
    from icrl_ros.nodes.params import KV_DTYPES as NODE_KV, AgentParams

    assert set(NODE_KV) == {"", *KV_DTYPES}
    assert AgentParams.from_dict({"kv_dtype": "int8"}).kv_dtype == "int8"
    with pytest.raises(ValueError, match="kv_dtype"):
        AgentParams.from_dict({"kv_dtype": "int4"})


def test_a_manifest_naming_a_core_for_an_unknown_kv_dtype_is_refused(tmp_path, bundle):
    import shutil

    import yaml

    copy = tmp_path / "b"
    shutil.copytree(bundle, copy)
    doc = yaml.safe_load((copy / "manifest.yaml").read_text())
    doc["onnx"]["graphs"]["core.int4"] = doc["onnx"]["graphs"].pop("core.int8")
    (copy / "manifest.yaml").write_text(yaml.safe_dump(doc))
    with pytest.raises(BundleError, match="onnx.graphs.core.int4"):
        load_bundle(copy)
    doc["onnx"]["graphs"]["core.int8"] = doc["onnx"]["graphs"].pop("core.int4")
    doc["onnx"]["graphs"]["core.int8"]["inputs"] = doc["onnx"]["graphs"]["core.fp16"]["inputs"]  # wrong I/O
    (copy / "manifest.yaml").write_text(yaml.safe_dump(doc))
    with pytest.raises(BundleError, match="onnx.graphs.core.int8.inputs"):
        load_bundle(copy)


def test_memo_stores_its_summaries_and_segment_in_fewer_bits(tmp_path):
    """A Memo bundle's int8 / fp16 cores against fp32 over many segment ends: the summaries are written quantised,
    the summarize graph reads them decoded; a snapshot keeps the codes and restores the same next step."""
    torch.manual_seed(3)
    policy = small_policy(kind="memo", l_seg=16, l_sum=4)
    path = export_bundle(policy, tmp_path / "memo", kv_dtypes=("fp16", "int8"))
    assert load_bundle(path).kv_dtypes() == ["fp32", "fp16", "int8"]
    inp = record_rollout(policy, 400, EPISODE, seed=5)  # 25 segment ends
    for kv_dtype, mem in quantised_replays(path, inp, reference_outputs(policy, inp)[0]):
        assert mem.n_generated == 400 // 16
        assert mem.k.dtype == {"fp16": torch.float16, "int8": torch.uint8}[kv_dtype]
    r = PolicyRunner.from_bundle(path, kv_dtype="int8", selection="greedy")
    for k in range(40):  # two segment ends and a half-full segment
        r.act({"obs": np.int64(k % 30)})
    r.snapshot(tmp_path / "s.npz")
    r2 = PolicyRunner.from_bundle(path, kv_dtype="int8", selection="greedy")
    r2.restore(tmp_path / "s.npz")
    m1, m2 = r.memory, r2.memory
    assert m2.k.dtype == torch.uint8 and (m2.n_generated, m2.seg_count) == (m1.n_generated, m1.seg_count) == (2, 8)
    for name in ("k", "v", "k_scale", "v_scale", "valid"):
        assert torch.equal(getattr(m1, name), getattr(m2, name)), name
    for k in range(12):  # across the next segment end
        assert r.act({"obs": np.int64(k)})[0] == r2.act({"obs": np.int64(k)})[0]


@pytest.mark.slow  # ~12 s of exports and replays: make test-all (make test keeps the HCAM memory's own check)
def test_hcam_stores_its_chunks_in_fewer_bits(tmp_path):
    """An HCAM bundle's int8 / fp16 cores against fp32 over many chunks: the chunk store's contents are written
    quantised (8-bit codes with a scale per step) and the core decodes only the top-k chunks it gathers; the same
    budget holds more chunks; a snapshot keeps the codes and restores the same next step."""
    from icrl_ros.families.hcam.memory import chunk_bytes

    torch.manual_seed(4)
    policy = small_policy(kind="hcam", hcam_chunk=8, hcam_top_k=2, hcam_layers=[1])
    path = export_bundle(policy, tmp_path / "hcam", kv_dtypes=("fp16", "int8"))
    assert load_bundle(path).kv_dtypes() == ["fp32", "fp16", "int8"]
    inp = record_rollout(policy, 400, EPISODE, seed=5)  # 50 chunks
    for kv_dtype, mem in quantised_replays(path, inp, reference_outputs(policy, inp)[0]):
        assert mem.chunks == 50 and mem.k.dtype == torch.float32  # the window stays float
        assert mem.chunk_x.dtype == {"fp16": torch.float16, "int8": torch.uint8}[kv_dtype]
    D, C = policy.args.d_model, 8
    assert chunk_bytes(1, C, D, torch.float32) / chunk_bytes(1, C, D, torch.float32, kv_dtype="int8") > 2.5
    budget = 400_000
    sizes = {kv: PolicyRunner.from_bundle(path, kv_dtype=kv, memory_budget_bytes=budget).memory for kv in ("fp32", "int8")}
    assert all(m.nbytes <= budget for m in sizes.values()) and sizes["int8"].max_chunks > 2.5 * sizes["fp32"].max_chunks
    r = PolicyRunner.from_bundle(path, kv_dtype="int8", selection="greedy")
    for k in range(44):  # five chunks and a half-full one
        r.act({"obs": np.int64(k % 30)})
    r.snapshot(tmp_path / "s.npz")
    r2 = PolicyRunner.from_bundle(path, kv_dtype="int8", selection="greedy")
    r2.restore(tmp_path / "s.npz")
    m1, m2 = r.memory, r2.memory
    assert m2.chunk_x.dtype == torch.uint8 and m1.chunks == m2.chunks == 5
    for name in ("chunk_x", "chunk_x_scale", "chunk_key", "chunk_valid", "cur_x", "k", "v"):
        assert torch.equal(getattr(m1, name), getattr(m2, name)), name
    for k in range(12):  # across the next chunk end
        assert r.act({"obs": np.int64(k)})[0] == r2.act({"obs": np.int64(k)})[0]


# -- int8_gqa: static per-channel scales, read in place by ONNX Runtime's GroupQueryAttention kernel ---------------
@pytest.fixture(scope="module")
def gqa_bundle(tmp_path_factory, one_thread):
    torch.manual_seed(0)
    return export_bundle(small_policy(), tmp_path_factory.mktemp("gqa") / "b", kv_dtypes=("int8_gqa",))


def test_int8_gqa_core_runs_the_contrib_kernel_in_place_and_stays_close_to_fp32(gqa_bundle, bundle, rollout):
    """The int8_gqa core is one GroupQueryAttention node per layer over int8 codes with the bundle's calibrated
    scales (kv_static.npz); its present outputs alias the past inputs, so after a step the memory's own buffers
    hold the step in their scratch row and no output buffer holds a cache. Replayed on a trial the calibration
    never saw: close to fp32, the same as the torch engine's reference up to float rounding."""
    b = load_bundle(gqa_bundle).with_kv_dtype("int8_gqa")
    m = onnx.load(str(b.graph_path("core")))
    ops = [n for n in m.graph.node if n.op_type == "GroupQueryAttention"]
    assert len(ops) == 2 and all(n.domain == "com.microsoft" for n in ops)
    assert "MatMul" not in {n.op_type for n in m.graph.node if "past" in "".join(n.input)}  # the cache: the kernel only
    outs = b.specs["core"]["outputs"]
    assert [o.get("alias") for o in outs[3:]] == ["past_k_0", "past_k_1", "past_v_0", "past_v_1"]
    static = b.kv_static()
    assert static["k_scale"].shape == (2, 4, 16) and static["sink_k"].shape == (2, 4, 1, 16)
    assert b.model_hash == load_bundle(bundle).model_hash  # the same weights: the module's recorded rollout applies
    inp, ref_l, _ = rollout
    (lo, _), ro = replay_kv(gqa_bundle, "int8_gqa", inp)
    short = {k: x[:, :300] for k, x in inp.items()}  # the torch reference decodes the whole cache every step
    (lt, _), rt = replay_kv(gqa_bundle, "int8_gqa", short, backend="torch")
    scale = np.maximum(1.0, np.abs(ref_l).max(-1, keepdims=True))
    diff = np.abs(lo - ref_l) / scale
    assert 1e-6 < float(diff.max()) <= 5e-2, float(diff.max())
    assert float((lo.argmax(-1) == ref_l.argmax(-1)).mean()) >= 0.98
    # the kernel and its torch reference: float rounding, which now and then moves a code by one
    assert float((np.abs(lo[:, :300] - lt) / scale[:, :300]).max()) <= 1e-3
    for r, n in ((ro, STEPS), (rt, 300)):
        mem = r.memory
        assert mem.k.dtype == torch.int8 and mem.tokens == n + 1  # the sink row is pinned first
        assert mem.slots == STEPS + 2 and bool(mem.valid[:, -1].all())  # + the scratch row, always attended
        last = mem.n_prefix + mem.count - 1  # the last step's slot holds what the kernel wrote into the scratch row
        assert torch.equal(mem.k[:, :, :, last], mem.k[:, :, :, -1]) and torch.equal(mem.v[:, :, :, last], mem.v[:, :, :, -1])
    same = ro.memory.k[:, :, :, :301] == rt.memory.k[:, :, :, :301]  # the codes the kernel and torch wrote
    assert float(same.float().mean()) > 0.999


def test_int8_gqa_holds_four_times_the_steps_and_snapshots_its_codes(gqa_bundle, tmp_path):
    budget = 2_000_000
    mems = {kv: PolicyRunner.from_bundle(gqa_bundle, kv_dtype=kv, memory_budget_bytes=budget).memory
            for kv in ("fp32", "int8_gqa")}
    assert all(m.nbytes <= budget for m in mems.values())
    assert mems["int8_gqa"].steps_cap > 3.8 * mems["fp32"].steps_cap, {k: m.steps_cap for k, m in mems.items()}
    b = load_bundle(gqa_bundle).with_kv_dtype("int8_gqa")

    def windowed():  # the window rings: the oldest steps overwritten, the sink and scratch rows kept
        r = PolicyRunner(b, make_engine(b, "onnxruntime", "cpu", threads=1), build_memory(b, "window", window=16))
        r.configure_actions("greedy")
        return r

    r = windowed()
    for k in range(40):
        r.act({"obs": np.int64(k % 30)})
    assert r.memory.tokens == 17 and r.memory.slots == 18
    r.snapshot(tmp_path / "s.npz")
    r2 = windowed()
    r2.restore(tmp_path / "s.npz")
    for name in ("k", "v", "k_static", "v_static", "valid", "episode"):
        assert torch.equal(getattr(r.memory, name), getattr(r2.memory, name)), name
    for k in range(12):
        assert r.act({"obs": np.int64(k)})[0] == r2.act({"obs": np.int64(k)})[0]


def test_int8_gqa_is_refused_where_it_cannot_run(gqa_bundle, tmp_path):
    """TensorRT has no GroupQueryAttention; Memo's and HCAM's memories keep no scratch row; a bundle whose
    kv_static.npz is gone is refused when loaded."""
    from icrl_ros.memory import create_memory
    from icrl_ros.runtime.trt_engine import TensorRTEngine

    b = load_bundle(gqa_bundle).with_kv_dtype("int8_gqa")
    with pytest.raises(ValueError, match="GroupQueryAttention.*use kv_dtype 'int8'"):
        TensorRTEngine(b, "cuda")
    with pytest.raises(ValueError, match="int8_gqa.*full and window"):
        create_memory("memo", kind="memo", n_layers=1, n_heads=2, head_dim=4, l_seg=4, l_sum=2, max_sets=2,
                      kv_dtype="int8_gqa")
    with pytest.raises(ValueError, match="int8_gqa"):
        export_bundle(small_policy(kind="memo", l_seg=16, l_sum=4), tmp_path / "memo", kv_dtypes=("int8_gqa",))
    import shutil

    import yaml

    copy = tmp_path / "b"
    shutil.copytree(gqa_bundle, copy)
    doc = yaml.safe_load((copy / "manifest.yaml").read_text())
    del doc["files"]["kv_static.npz"]
    (copy / "manifest.yaml").write_text(yaml.safe_dump(doc))
    with pytest.raises(BundleError, match="kv_static.npz"):
        load_bundle(copy)


def test_add_int8_gqa_to_an_existing_bundle_calibrates_on_its_sample(tmp_path):
    torch.manual_seed(2)
    plain = export_bundle(small_policy(sink="none"), tmp_path / "plain")
    out = add_kv_dtypes(plain, tmp_path / "gqa", ["int8_gqa"], default="int8_gqa")
    b = load_bundle(out)
    assert b.kv_dtype == "int8_gqa" and (out / "kv_static.npz").is_file()
    assert b.kv_static()["sink_k"].shape[2] == 0  # no Sink-KV: no pinned row
    from icrl_ros.runtime.selfcheck import check_sample

    res = check_sample(b)  # 60 steps of a random-weight model, whose near-tied actions flip on small diffs
    assert res["max_logit_diff"] < res["tolerance"] and res["greedy_agreement"] >= 0.95, res


def test_int8_gqa_calibrates_on_a_memory_snapshot_of_real_trials(gqa_bundle, tmp_path, capsys):
    """export.py --kv-calibration: the static scales from the steps an fp32 memory holds (a snapshot after 120
    steps) instead of the bundle's sample; the sink rows stay the model's. A snapshot of another memory dtype, and
    a calibration without an int8_gqa core to calibrate, are refused in one line."""
    fp32 = PolicyRunner.from_bundle(gqa_bundle, kv_dtype="fp32", selection="greedy")
    for k in range(120):
        fp32.act({"obs": np.int64(k % 30)})
    fp32.snapshot(tmp_path / "fp32.npz")
    out = add_kv_dtypes(gqa_bundle, tmp_path / "calibrated", ["int8_gqa"], default="int8_gqa",
                        calibration=tmp_path / "fp32.npz")
    from icrl_ros.memory.quant import CALIBRATION_MARGIN, QMAX

    got, sample = load_bundle(out).kv_static(), load_bundle(gqa_bundle).kv_static()
    assert torch.equal(got["sink_k"], sample["sink_k"]) and not torch.equal(got["v_scale"], sample["v_scale"])
    m = fp32.memory
    steps = m.v[:, :, :, m.valid[0] & (m.episode[0] >= 0)]
    peak = torch.maximum(steps.abs().amax(dim=(1, 3)), got["sink_v"].abs().amax(dim=2))
    assert torch.allclose(got["v_scale"], peak * CALIBRATION_MARGIN / QMAX)
    r = PolicyRunner.from_bundle(out, selection="greedy")
    assert r.memory.kv_dtype == "int8_gqa" and torch.equal(r.memory.v_static[:, 0, :, 0], got["v_scale"])
    gqa = PolicyRunner.from_bundle(gqa_bundle, kv_dtype="int8_gqa")
    gqa.snapshot(tmp_path / "gqa.npz")
    from icrl_ros.training.export import main

    for extra, says in ((["--add-kv-dtypes", "int8_gqa", "--kv-calibration", str(tmp_path / "gqa.npz")],
                         "not an fp32 full / window"),
                        (["--add-kv-dtypes", "int8", "--kv-calibration", str(tmp_path / "fp32.npz")],
                         "calibrates an int8_gqa core")):
        with pytest.raises(SystemExit) as e:
            main([str(gqa_bundle), *extra, "--out", str(tmp_path / "x")])
        err = capsys.readouterr().err
        assert e.value.code != 0 and err.strip().count("\n") == 0 and says in err, err
