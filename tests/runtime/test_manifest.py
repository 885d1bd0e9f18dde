"""The typed bundle manifest (icrl_ros.runtime.manifest): round trip, refusals naming the file
and the field, version 1 manifests (the committed bundles), and the action-choice defaults the
runner and training/evaluate.py take from it unless told otherwise."""

import copy
import logging
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import yaml

from icrl_ros.models import ModelArgs, build_policy
from icrl_ros.runtime import BundleError, PolicyRunner, load_bundle
from icrl_ros.runtime.manifest import VERSION, Manifest, ManifestError, field_docs
from icrl_ros.training.export import export_bundle

REPO = Path(__file__).resolve().parents[2]
SHIPPED = REPO / "bundles" / "house_relic" / "manifest.yaml"  # exported with version 2
V1 = Path(__file__).resolve().parents[1] / "fixtures" / "manifest_v1_house_memo.yaml"
"""The manifest of the house Memo bundle shipped before version 2 (kept when that bundle was re-exported)."""


pytestmark = pytest.mark.usefixtures("one_thread")


def tiny_policy():
    torch.manual_seed(0)
    args = ModelArgs(n_obs=10, n_actions=3, max_episode_steps=10, d_model=16, n_layers=1, n_heads=2, d_mlp=32,
                     depth_dropout=0.0)
    return build_policy(args).eval()


@pytest.fixture(scope="module")
def bundle(tmp_path_factory, one_thread):
    return export_bundle(tiny_policy(), tmp_path_factory.mktemp("m") / "tiny")


@pytest.fixture(scope="module")
def greedy_bundle(tmp_path_factory, one_thread):
    return export_bundle(tiny_policy(), tmp_path_factory.mktemp("m") / "greedy", selection="greedy", temperature=0.5,
                         memory={"policy": "window", "budget_bytes": None, "window": {"window": 16},
                                 "full": {"capacity": 64, "on_full": "evict_oldest"}})


def raw(path: Path) -> dict:
    return yaml.safe_load(Path(path).read_text())


# -- round trip ------------------------------------------------------------------------------------
def test_export_writes_the_current_version_and_it_round_trips(bundle):
    text = (bundle / "manifest.yaml").read_text()
    m = Manifest.load(bundle)
    assert m.version == VERSION and m.migrated_from is None
    assert m.action.selection == "sample" and m.action.temperature == 1.0  # the exporter's defaults
    assert m.to_dict() == yaml.safe_load(text) and m.to_yaml() == text  # byte for byte what export wrote
    assert Manifest.from_dict(m.to_dict()) == m
    assert Manifest.from_json(m.to_json()) == m
    assert Manifest.from_yaml(m.to_yaml()) == m
    assert load_bundle(bundle).manifest == m
    assert m.memory.policy == "full" and m.memory.config() == {"capacity": 8192, "on_full": "evict_oldest"}
    assert m.observation.frame == "episode" and m.observation.image_size is None
    assert "image_size" not in m.to_dict()["observation"]  # optional fields stay out of the file when unset


def test_save_round_trip_and_no_dict_access(bundle, tmp_path):
    m = Manifest.load(bundle)
    m.action.temperature = 0.7
    m.save(tmp_path)
    assert Manifest.load(tmp_path / "manifest.yaml").action.temperature == 0.7
    with pytest.raises(TypeError):  # one way to read it: the attributes (the dict view's readers moved over)
        m["memory"]


def test_every_field_is_documented():
    docs = field_docs()
    assert {"version", "action.selection", "action.temperature", "memory.policy", "memory.sizes",
            "observation.pose_frame", "files", "onnx.graphs"} <= set(docs)
    assert all(docs.values()), [k for k, v in docs.items() if not v]


# -- refusals --------------------------------------------------------------------------------------
def _del(path):
    def f(m):
        *head, last = path.split("/")
        cur = m
        for part in head:
            cur = cur[part]
        del cur[last]
    return f


def _set(path, value):
    def f(m):
        *head, last = path.split("/")
        cur = m
        for part in head:
            cur = cur[part]
        cur[last] = value
    return f


@pytest.mark.parametrize("edit,field,needle", [
    (_del("dims/n_heads"), "dims.n_heads", "is missing"),
    (_del("precision"), "precision", "is missing"),
    (_del("action/selection"), "action.selection", "is missing (required from version 2)"),
    (_set("action/temperature", "hot"), "action.temperature", "is 'hot', expected float"),
    (_set("action/temperature", 0), "action.temperature", "expected > 0"),
    (_set("action/selection", "best"), "action.selection", "expected one of ['sample', 'greedy']"),
    (_set("dims/n_layers", 1.5), "dims.n_layers", "expected int"),
    (_set("dims/n_layers", True), "dims.n_layers", "expected int"),
    (_set("version", 3), "version", f"is 3, this runtime reads <= {VERSION}"),
    (_set("version", "2"), "version", "expected an integer >= 1"),
    (_set("format", "other/1"), "format", "expected 'icrl_ros.bundle/1'"),
    (_set("colour", "red"), "colour", "is unknown"),
    (_set("action/speed", 1.0), "action.speed", "is unknown"),
    (_set("observation/goal_names", ["a", 3]), "observation.goal_names[1]", "expected str"),
    (_set("memory/full", 8192), "memory.full", "expected mapping"),
    (_set("files/core.onnx", "abc"), "files.core.onnx", "expected mapping"),
    (_del("files/core.onnx/sha256"), "files.core.onnx.sha256", "is missing"),
    (_set("onnx/graphs/core/file", "other.onnx"), "onnx.graphs.core.file", "is not listed in 'files'"),
    (_set("action/names", ["a"]), "action.names", "has 1 names, the model has 3 actions"),
])
def test_bad_manifests_are_refused_naming_file_and_field(bundle, tmp_path, edit, field, needle):
    m = raw(bundle / "manifest.yaml")
    edit(m)
    path = tmp_path / "manifest.yaml"
    path.write_text(yaml.safe_dump(m, sort_keys=False))
    with pytest.raises(ManifestError) as e:
        Manifest.load(path)
    msg = str(e.value)
    assert isinstance(e.value, ValueError)
    assert msg.startswith(f"{path}: field '{field}'"), msg
    assert needle in msg, msg


def test_load_bundle_refuses_with_a_bundle_error_naming_the_file(bundle, tmp_path):
    import shutil

    b = tmp_path / "copy"
    shutil.copytree(bundle, b)
    m = raw(b / "manifest.yaml")
    m["action"]["temperature"] = "hot"
    (b / "manifest.yaml").write_text(yaml.safe_dump(m, sort_keys=False))
    with pytest.raises(BundleError, match=r"copy/manifest.yaml: field 'action.temperature' is 'hot'"):
        PolicyRunner.from_bundle(b)


def test_not_yaml_and_not_a_mapping(tmp_path):
    path = tmp_path / "manifest.yaml"
    path.write_text("model: [unclosed\n")
    with pytest.raises(ManifestError, match=f"{path}: not valid YAML"):
        Manifest.load(path)
    path.write_text("- 1\n")
    with pytest.raises(ManifestError, match=f"{path}: field '<root>' is not a mapping"):
        Manifest.load(path)
    with pytest.raises(ManifestError, match="cannot read the manifest"):
        Manifest.load(tmp_path / "missing.yaml")


# -- version 1 (the committed bundles) ---------------------------------------------------------------
def test_committed_version_1_manifests_load_with_the_documented_defaults(caplog):
    assert raw(V1)["version"] == 1 and "selection" not in raw(V1)["action"]
    with caplog.at_level(logging.WARNING, logger="icrl_ros.runtime.manifest"):
        m = Manifest.load(V1)
    assert m.migrated_from == 1 and m.version == VERSION
    assert (m.action.selection, m.action.temperature) == ("sample", 1.0)
    assert "version 1 manifest read as version 2" in caplog.text and str(V1) in caplog.text
    # everything else as written; nothing but the new fields and the version differ
    expect = raw(V1)
    expect["version"] = VERSION
    expect["action"].update(selection="sample", temperature=1.0)
    assert m.to_dict() == expect
    assert m.memory.policy == "memo"


def test_a_version_1_bundle_loads_whole(bundle, tmp_path):
    """Files, hashes and graphs of a bundle whose manifest is version 1 still validate."""
    import shutil

    old = tmp_path / "v1"
    shutil.copytree(bundle, old)
    m = raw(old / "manifest.yaml")
    m["version"] = 1
    del m["action"]["selection"], m["action"]["temperature"]
    (old / "manifest.yaml").write_text(yaml.safe_dump(m, sort_keys=False))
    b = load_bundle(old)
    assert b.manifest.migrated_from == 1 and (b.manifest.action.selection, b.manifest.action.temperature) == (
        "sample", 1.0)
    shipped = raw(SHIPPED)  # the shipped default records how it was evaluated
    assert shipped["version"] == VERSION and (shipped["action"]["selection"], shipped["action"]["temperature"]) == (
        "sample", 1.0)


def test_version_1_fields_present_are_kept_and_later_fields_are_optional(bundle):
    m = raw(bundle / "manifest.yaml")
    v1 = copy.deepcopy(m)
    v1["version"] = 1
    del v1["action"]["selection"], v1["action"]["temperature"]
    assert Manifest.from_dict(v1).action.selection == "sample"
    v1["action"]["selection"] = "greedy"
    assert Manifest.from_dict(v1).action.selection == "greedy"


# -- one set of defaults ------------------------------------------------------------------------------
def test_runner_takes_the_recorded_action_choice_and_memory(bundle, greedy_bundle):
    r = PolicyRunner.from_bundle(bundle)
    assert (r.greedy, r.temperature, r.memory_policy) == (False, 1.0, "full")  # sample, as evaluated
    g = PolicyRunner.from_bundle(greedy_bundle)
    assert (g.greedy, g.temperature, g.memory_policy) == (True, 0.5, "window")
    assert g.memory.window == 16


def test_explicit_arguments_override_the_recorded_defaults(greedy_bundle):
    r = PolicyRunner.from_bundle(greedy_bundle, selection="sample", temperature=2.0, memory="full")
    assert (r.greedy, r.temperature, r.memory_policy) == (False, 2.0, "full")
    r.configure_actions()  # None: back to the bundle's
    assert (r.greedy, r.temperature) == (True, 0.5)
    r.configure_actions(temperature=0.25)  # one override, the other the bundle's
    assert (r.greedy, r.temperature) == (True, 0.25)
    with pytest.raises(ValueError, match="selection: 'best'"):
        r.configure_actions("best")
    with pytest.raises(ValueError, match="temperature: must be > 0"):
        r.configure_actions(temperature=0.0)


def test_evaluate_takes_the_bundles_action_choice_unless_told(greedy_bundle, bundle):
    from icrl_ros.training.evaluate import acting

    none = SimpleNamespace(selection=None, temperature=None)
    g, s = load_bundle(greedy_bundle), load_bundle(bundle)
    assert acting(none, g) == (True, 0.5)
    assert acting(none, s) == (False, 1.0)
    assert acting(none) == (False, 1.0)  # a checkpoint: sampling at temperature 1
    assert acting(SimpleNamespace(selection="sample", temperature=None), g) == (False, 0.5)
    assert acting(SimpleNamespace(selection=None, temperature=2.0), g) == (True, 2.0)


def test_export_cli_records_the_action_choice(tmp_path):
    from icrl_ros.models import save_checkpoint
    from icrl_ros.training import export as export_cli

    ckpt = tmp_path / "c.pt"
    save_checkpoint(ckpt, tiny_policy(), {"env": {"id": "icrl_ros/Darkroom-v0"}})
    out = tmp_path / "b"
    assert export_cli.main([str(ckpt), "--out", str(out), "--greedy", "--memory", "window", "--window", "32"]) == 0
    m = load_bundle(out).manifest
    assert (m.action.selection, m.memory.policy, m.memory.config()["window"]) == ("greedy", "window", 32)
    with pytest.raises(SystemExit):
        export_cli.main([str(ckpt), "--out", str(tmp_path / "c"), "--temperature", "0"])


def test_agent_params_default_to_the_bundle():
    from icrl_ros.nodes.params import AgentParams

    p = AgentParams()
    assert p.action_selection == "" and p.sample_temperature == 0.0  # "" / 0 = the manifest's
    AgentParams.from_dict({"action_selection": "greedy", "sample_temperature": 0.5})
    with pytest.raises(ValueError, match="action_selection"):
        AgentParams.from_dict({"action_selection": "best"})


def test_agent_node_takes_the_bundles_choice_unless_its_parameters_say(greedy_bundle):
    pytest.importorskip("rclpy")
    from icrl_ros.nodes.agent_node import AgentNode
    from icrl_ros.nodes.params import AgentParams

    r = PolicyRunner.from_bundle(greedy_bundle, selection="sample", temperature=3.0)
    AgentNode._configure_actions(None, r, AgentParams())  # the node's defaults: the bundle's
    assert (r.greedy, r.temperature) == (True, 0.5)
    AgentNode._configure_actions(None, r, AgentParams(action_selection="sample", sample_temperature=2.0))
    assert (r.greedy, r.temperature) == (False, 2.0)
