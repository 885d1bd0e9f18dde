"""Export CLI and bundle validation: what a bad bundle is refused with (file + field)."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import onnx
import pytest
import torch
import yaml

from icrl_ros.models import ModelArgs, build_policy, save_checkpoint
from icrl_ros.runtime import BundleError, PolicyRunner, load_bundle
from icrl_ros.runtime.bundle import sha256_file
from icrl_ros.training import bundle_tool
from icrl_ros.training import export as export_cli

REPO = Path(__file__).resolve().parents[2]


def small_args(**kw) -> ModelArgs:
    base = dict(n_obs=100, n_actions=5, max_episode_steps=100, d_model=32, n_layers=2, n_heads=4, d_mlp=64)
    base.update(kw)
    return ModelArgs.from_dict(base)


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory, one_thread):
    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("ckpt") / "final.pt"
    save_checkpoint(path, build_policy(small_args(sink="token")),
                    {"env": {"id": "icrl_ros/Darkroom-v0"}, "ppo": {"rollout_length": 512}})
    return path


@pytest.fixture(scope="module")
def bundle(checkpoint, tmp_path_factory):
    out = tmp_path_factory.mktemp("b") / "darkroom"
    assert export_cli.main([str(checkpoint), "--out", str(out)]) == 0
    return out


def copy_bundle(bundle: Path, tmp_path: Path) -> Path:
    dst = tmp_path / "copy"
    shutil.copytree(bundle, dst)
    return dst


def edit_manifest(path: Path, fn) -> None:
    m = yaml.safe_load((path / "manifest.yaml").read_text())
    fn(m)
    (path / "manifest.yaml").write_text(yaml.safe_dump(m, sort_keys=False))


def rehash(path: Path, name: str) -> None:
    edit_manifest(path, lambda m: m["files"][name].update(sha256=sha256_file(path / name)))


def test_export_cli_script_with_verify(checkpoint, tmp_path):
    out = tmp_path / "bundle"
    proc = subprocess.run([sys.executable, "training/export.py", str(checkpoint), "--out", str(out), "--verify",
                           "--verify-steps", "250", "--memory", "window", "--window", "64"],
                          capture_output=True, text=True, cwd=REPO, timeout=300,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr
    assert "verify onnxruntime: 250 steps, max |logit diff|" in proc.stdout and "FAIL" not in proc.stdout
    b = load_bundle(out)
    m = b.manifest
    assert m.action.names == ["up", "down", "left", "right", "stay"]  # from the Darkroom env
    assert m.memory.policy == "window" and m.memory.config()["window"] == 64
    assert m.model.trained_context == 512 and m.positions["rope"] == "episode_index"
    assert {"encoder.onnx", "core.onnx", "heads.onnx", "weights.pt", "sample.npz", "sink_cache.npz"} <= set(m.files)
    assert m.observation.inputs["obs"] == {"dtype": "int64", "shape": []}
    assert m.onnx.graphs["core"].inputs[3]["name"] == "past_k_0"


def test_export_fp16_verify_and_memo(tmp_path):
    torch.manual_seed(1)
    ckpt = tmp_path / "memo.pt"
    save_checkpoint(ckpt, build_policy(small_args(kind="memo", sink="none", l_seg=8, l_sum=2, n_actions=4)),
                    {"env": {"id": "icrl_ros/DarkKeyToDoor-v0"}})
    out = tmp_path / "memo16"
    assert export_cli.main([str(ckpt), "--out", str(out), "--fp16", "--verify", "--verify-steps", "120"]) == 0
    b = load_bundle(out)
    assert b.precision == "fp16" and "summarize" in b.manifest.onnx.graphs
    assert b.manifest.to_dict()["memory"] == {"policy": "memo", "budget_bytes": None,
                                    "memo": {"max_sets": 256, "on_full": "evict_oldest"}}
    assert b.manifest.action.names == ["up", "down", "left", "right"]


@pytest.mark.parametrize("argv,needle", [
    (["missing.pt", "--out", "x"], "missing.pt: cannot load the checkpoint"),
    (["CKPT", "--out", "OUT", "--memory", "memo"], "--memory memo: a relic model takes one of ['full', 'window']"),
    (["CKPT", "--out", "OUT", "--window", "0"], "--window: must be > 0"),
    (["CKPT", "--out", "OUT", "--action-names", "a,b"], "--action-names: 2 names given, the model has 5"),
    (["CKPT", "--out", "EXISTING"], "exists; pass --force"),
])
def test_export_cli_errors_are_one_line_and_nonzero(checkpoint, bundle, tmp_path, capsys, argv, needle):
    subst = {"CKPT": str(checkpoint), "OUT": str(tmp_path / "o"), "EXISTING": str(bundle)}
    with pytest.raises(SystemExit) as e:
        export_cli.main([subst.get(a, a) for a in argv])
    assert e.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and needle in err and "\n" not in err


def test_bundle_tool_inspect_and_check(bundle, capsys):
    assert bundle_tool.main(["inspect", str(bundle)]) == 0
    out = capsys.readouterr().out
    assert "relic: 2 layers" in out and "sink token" in out and "default memory: 8193 slots" in out
    assert bundle_tool.main(["check", str(bundle)]) == 0
    assert "sample on onnxruntime: max |logit diff|" in capsys.readouterr().out
    assert bundle_tool.main(["check", str(bundle), "--backend", "torch"]) == 0


def _corrupt_hash(b: Path) -> None:
    with open(b / "core.onnx", "ab") as f:
        f.write(b"\0")


def _opset(b: Path) -> None:
    edit_manifest(b, lambda m: m["onnx"].update(opset=18))


def _dims(b: Path) -> None:
    edit_manifest(b, lambda m: m["dims"].update(n_heads=8))


def _spec_names(b: Path) -> None:
    edit_manifest(b, lambda m: m["onnx"]["graphs"]["core"]["inputs"][2].update(name="valid"))


def _onnx_dtype(b: Path) -> None:
    model = onnx.load(str(b / "encoder.onnx"))
    for i in model.graph.input:
        if i.name == "prev_reward":
            i.type.tensor_type.elem_type = onnx.TensorProto.DOUBLE
    onnx.save(model, str(b / "encoder.onnx"))
    rehash(b, "encoder.onnx")


def _onnx_names(b: Path) -> None:
    torch.manual_seed(0)
    other = export_cli.export_bundle(build_policy(small_args(n_layers=1, sink="token")), b.parent / "one_layer")
    shutil.copy(other / "core.onnx", b / "core.onnx")
    rehash(b, "core.onnx")


def _missing(b: Path) -> None:
    (b / "heads.onnx").unlink()


def _format(b: Path) -> None:
    edit_manifest(b, lambda m: m.update(format="something/2"))


def _yaml(b: Path) -> None:
    (b / "manifest.yaml").write_text("model: [unclosed\n")


def _sink(b: Path) -> None:
    import numpy as np

    np.savez(b / "sink_cache.npz", k=np.zeros((2, 1, 4, 2, 8), np.float32), v=np.zeros((2, 1, 4, 1, 8), np.float32))
    rehash(b, "sink_cache.npz")


def _actions(b: Path) -> None:
    edit_manifest(b, lambda m: m["action"].update(names=["a", "b"]))


def _args(b: Path) -> None:
    edit_manifest(b, lambda m: m["model"]["args"].update(sink="kvv"))


@pytest.mark.parametrize("corrupt,needle", [
    (_corrupt_hash, "core.onnx: SHA-256 does not match manifest.yaml field 'files.core.onnx.sha256'"),
    (_opset, "onnx: field 'opset_import' is 17, manifest.yaml field 'onnx.opset' says 18"),
    (_dims, "manifest.yaml: field 'dims.n_heads' is 8, model.args gives 4"),
    (_spec_names, "manifest.yaml: field 'onnx.graphs.core.inputs' does not match model.args"),
    (_onnx_dtype, "encoder.onnx: field 'inputs.prev_reward.dtype' is onnx type 11, expected float32"),
    (_onnx_names, "core.onnx: field 'inputs' names are"),
    (_missing, "heads.onnx: listed in manifest.yaml field 'files' but missing"),
    (_format, "manifest.yaml: field 'format' is 'something/2'"),
    (_yaml, "manifest.yaml: not valid YAML"),
    (_sink, "sink_cache.npz: field 'k' has shape (2, 1, 4, 2, 8)"),
    (_actions, "manifest.yaml: field 'action.names' has 2 names, the model has 5 actions"),
    (_args, "manifest.yaml: field 'model.args' is invalid (model.sink"),
])
def test_bad_bundles_are_refused_naming_file_and_field(bundle, tmp_path, capsys, corrupt, needle):
    b = copy_bundle(bundle, tmp_path)
    corrupt(b)
    with pytest.raises(BundleError) as e:
        PolicyRunner.from_bundle(b)
    assert needle in str(e.value)
    assert isinstance(e.value, ValueError)
    with pytest.raises(SystemExit) as e:
        bundle_tool.main(["check", str(b)])
    assert e.value.code == 2 and needle in capsys.readouterr().err


def test_swapped_weights_are_refused_by_the_torch_backend(bundle, tmp_path):
    b = copy_bundle(bundle, tmp_path)
    torch.manual_seed(5)
    torch.save(build_policy(small_args(sink="token")).state_dict(), b / "weights.pt")
    rehash(b, "weights.pt")
    PolicyRunner.from_bundle(b)  # ONNX backends do not read weights.pt
    with pytest.raises(BundleError, match="weights.pt: weights do not match manifest.yaml field 'model.hash'"):
        PolicyRunner.from_bundle(b, backend="torch")


def test_tensorrt_backend_without_tensorrt_says_so(bundle):
    try:
        import tensorrt  # noqa: F401
        pytest.skip("tensorrt is installed here")
    except ImportError:
        pass
    with pytest.raises(ValueError, match="tensorrt|device"):
        PolicyRunner.from_bundle(bundle, backend="tensorrt", device="cuda")


def test_tensorrt_engine_cache_key_and_profiles(bundle):
    from icrl_ros.runtime.trt_engine import engine_key, profile_shapes

    b = load_bundle(bundle)
    shapes = profile_shapes(b.specs["core"], max_batch=2, cache=4097)
    assert shapes["mask"] == ([1, 4097], [2, 4097], [2, 4097])  # the cache length is the memory's, fixed
    assert shapes["past_k_0"] == ([1, 4, 4097, 8], [2, 4, 4097, 8], [2, 4, 4097, 8])
    assert "x" in shapes and "position" in shapes
    base = dict(trt_version="10.3", gpu="NVIDIA H100", onnx_sha="abc", profile={"mask": [1, 8]}, fp16=True)
    key = engine_key(**base)
    for field, other in [("trt_version", "10.4"), ("gpu", "NVIDIA A40"), ("onnx_sha", "abd"),
                         ("profile", {"mask": [1, 9]}), ("fp16", False)]:
        assert engine_key(**{**base, field: other}) != key, field


def test_one_layer_memo_keeps_every_graph_input(tmp_path):
    """A one-layer Memo's summarize never reads ``sum_valid`` (the last layer's keys and values do not depend
    on its mask), so the ONNX tracer pruned that input and the bundle was refused at load. Export must keep
    the signature its spec names, and the bundle must step and verify through ONNX Runtime."""
    torch.manual_seed(2)
    ckpt = tmp_path / "memo1.pt"
    save_checkpoint(ckpt, build_policy(small_args(kind="memo", sink="none", n_layers=1, l_seg=6, l_sum=3,
                                                  n_actions=4)), {"env": {"id": "icrl_ros/DarkKeyToDoor-v0"}})
    out = tmp_path / "memo1"
    assert export_cli.main([str(ckpt), "--out", str(out), "--verify", "--verify-steps", "40"]) == 0
    names = [i.name for i in onnx.load(str(out / "summarize.onnx")).graph.input]
    assert "sum_valid" in names
    runner = PolicyRunner.from_bundle(out)
    runner.reset_trial()
    runner.begin_episode()
    assert all(0 <= runner.act({"obs": t % 5})[0] < 4 for t in range(20))


def test_a_bundle_is_written_whole_or_not_at_all(tmp_path):
    """Export and the K / V copy write into a temporary folder beside the bundle: an error leaves the old bundle as
    it was and no temporary folder behind; success replaces it."""
    from icrl_ros.training.export import _bundle_folder

    out = tmp_path / "bundle"
    out.mkdir()
    (out / "manifest.yaml").write_text("old")
    with pytest.raises(RuntimeError):
        with _bundle_folder(out) as tmp:
            (tmp / "manifest.yaml").write_text("new")
            raise RuntimeError("trace failed")
    assert (out / "manifest.yaml").read_text() == "old" and list(tmp_path.iterdir()) == [out]
    with _bundle_folder(out) as tmp:
        (tmp / "manifest.yaml").write_text("new")
    assert (out / "manifest.yaml").read_text() == "new" and list(tmp_path.iterdir()) == [out]
