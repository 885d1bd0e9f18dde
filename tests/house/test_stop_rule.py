"""The house stop rule (icrl_ros/models/stop_rule.py): what it reads from a token, what it does to
the logits, and that training-side stepping, the deployed runner and the CLI all carry it."""

import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from icrl_ros.models import load_checkpoint
from icrl_ros.models.checkpoint import model_args_from_dict
from icrl_ros.models.config import normalise_model_dict
from icrl_ros.models.object_memory import STRUCT_DIM
from icrl_ros.models.stop_rule import MASKED, STOP_ACTION, StopRule
from icrl_ros.runtime.control import ControlStep
from icrl_ros.models.stepping import make_memory

pytestmark = pytest.mark.usefixtures("one_thread")

REPO = Path(__file__).resolve().parents[2]
SHIPPED = REPO / "checkpoints" / "house_relic.pt"
BUNDLE = REPO / "bundles" / "house_relic"


@pytest.fixture(scope="module")
def shipped():
    if not SHIPPED.is_file():
        pytest.skip(f"{SHIPPED} is missing")
    return load_checkpoint(SHIPPED)[0]


def test_stop_action_is_the_house_envs():
    from icrl_ros.sim.house import STOP

    assert STOP_ACTION == STOP


def test_goal_view_matches_the_frozen_heads(shipped):
    """P and distance read back from the token equal the heads' own for the goal category when it is
    the most likely one in view, and P is 0 when another category is likelier."""
    g = torch.Generator().manual_seed(0)
    B, C = 64, shipped.args.n_goals
    rgb = torch.randint(0, 256, (B, 1, 64, 64, 3), dtype=torch.uint8, generator=g)
    odom = torch.randn(B, 1, 3, generator=g) * torch.tensor([3.0, 3.0, 2.0])
    with torch.no_grad():
        feat = shipped.encoder.features(rgb)
        p, _, dist = shipped.encoder.heads.object_estimates(feat.float(), odom)
    top = p.argmax(-1)  # (B, 1)
    goal = torch.where(torch.arange(B)[:, None] % 2 == 0, top, (top + 1) % C)  # half: the goal is the top one
    inp = {"rgb": rgb, "odom": odom, "goal": goal, "prev_action": torch.zeros(B, 1, dtype=torch.long),
           "episode_step": torch.zeros(B, 1, dtype=torch.long)}
    with torch.no_grad():
        x = shipped.encoder(inp)[:, 0]
    rule = StopRule(0.5, 0.0, 0.6, C)
    p_rule, d_rule = rule.goal_view(x)
    is_top = (goal == top)[:, 0]
    want_p = p.gather(-1, goal[..., None])[:, 0, 0]
    want_d = dist.gather(-1, goal[..., None])[:, 0, 0]
    assert torch.allclose(p_rule[is_top], want_p[is_top], atol=1e-5)
    assert torch.allclose(d_rule[is_top], want_d[is_top], atol=1e-4)
    assert torch.all(p_rule[~is_top] == 0)


def _tokens(p, dist, goal=1, seen=1, n=4, d=16):
    """Tokens whose object-memory entries say: category ``seen`` with P ``p`` at ``dist`` m ahead."""
    x = torch.zeros(len(p), d)
    s = x[:, -STRUCT_DIM:]
    s[:, 0], s[:, 1], s[:, 2] = goal / n, seen / n, torch.tensor(p)
    s[:, 3] = torch.tensor(dist) / 5.0  # the sighting at (dist, 0), the robot at the origin (units of 5 m)
    return x


def test_gate_masks_only_unseen_stops_and_sure_forces_seen_ones():
    logits = torch.tensor([[2.0, 0.0, 0.0, 0.0]] * 4)
    x = _tokens([0.2, 0.7, 0.95, 0.95], [0.5, 0.5, 0.5, 1.5])
    out = StopRule(0.5, 0.0, 0.6, 4)(logits, x)
    assert out[0, STOP_ACTION] == MASKED and torch.equal(out[1:], logits[1:])
    assert torch.equal(out[0, 1:], logits[0, 1:])
    out = StopRule(0.5, 0.9, 0.6, 4)(torch.zeros(4, 4), x)
    assert out[2].argmax() == STOP_ACTION and torch.all(out[2, 1:] == MASKED)  # sure and near: stop
    assert torch.equal(out[3], torch.zeros(4)) and torch.equal(out[1], torch.zeros(4))  # far / unsure: as is
    other = _tokens([0.99], [0.3], goal=1, seen=2)  # a confident sighting of another category
    assert StopRule(0.5, 0.9, 0.6, 4)(torch.zeros(1, 4), other)[0, STOP_ACTION] == MASKED
    # whole trials (B, T, A) / (B, T, D), as PPO's update and the export check pass them: the same
    # as the steps one by one
    lg = torch.randn(4, 4, generator=torch.Generator().manual_seed(1))
    rule = StopRule(0.5, 0.9, 0.6, 4)
    assert torch.equal(rule(lg.view(2, 2, 4), x.view(2, 2, -1)).view(4, 4), rule(lg, x))


def test_rule_off_by_default_and_validated(shipped):
    assert StopRule.from_args(shipped.args.replace_section("house", stop_gate=0.0, stop_sure=0.0)) is None
    assert StopRule.from_args(shipped.args.replace_section("house", stop_gate=0.5)).gate == 0.5
    d = shipped.args.to_dict()
    with pytest.raises(ValueError, match="model.house.stop_gate"):
        model_args_from_dict({**d, "house": {**d["house"], "stop_gate": 1.5}})
    with pytest.raises(ValueError, match="object_memory"):
        model_args_from_dict({**d, "house": {**d["house"], "object_memory": False, "place_memory": False,
                                             "stop_sure": 0.9}})
    with pytest.raises(ValueError, match="given both flat and in model.house"):
        model_args_from_dict({**d, "stop_gate": 0.5})


def test_live_control_step_applies_the_models_rule(shipped):
    """A gate of 1 (no sigmoid reaches it) masks every stop in training-side stepping."""
    old = shipped.args.house.stop_gate
    shipped.args = shipped.args.replace_section("house", stop_gate=1.0)
    try:
        step = ControlStep.live(shipped, make_memory(shipped, 3, 8))
        inp = {"rgb": torch.zeros(3, 64, 64, 3, dtype=torch.uint8), "odom": torch.zeros(3, 3),
               "goal": torch.tensor([0, 1, 2]), "prev_action": torch.full((3,), 4), "episode_step": torch.zeros(3, dtype=torch.long),
               "episode_index": torch.zeros(3, dtype=torch.long)}
        logits, _ = step(inp)
        assert torch.all(logits[:, STOP_ACTION] == MASKED)
    finally:
        shipped.args = shipped.args.replace_section("house", stop_gate=old)


def test_deployed_runner_reads_the_rule_from_the_manifest(tmp_path):
    if not BUNDLE.is_dir():
        pytest.skip(f"{BUNDLE} is missing")
    from icrl_ros.runtime import PolicyRunner

    b = tmp_path / "gated"
    shutil.copytree(BUNDLE, b)
    m = yaml.safe_load((b / "manifest.yaml").read_text())
    m["model"]["args"] = normalise_model_dict(m["model"]["args"])
    m["model"]["args"]["house"]["stop_gate"] = 1.0
    (b / "manifest.yaml").write_text(yaml.safe_dump(m, sort_keys=False))
    runner = PolicyRunner.from_bundle(b)
    rules = [r for r in runner.control.rules if isinstance(r, StopRule)]  # the house extension's rule
    assert len(rules) == 1 and rules[0].gate == 1.0
    runner.begin_episode(goal=0)
    rng = np.random.default_rng(0)
    for _ in range(20):
        obs = {"rgb": rng.integers(0, 256, (64, 64, 3), dtype=np.uint8), "odom": np.zeros(3, np.float32)}
        action, _ = runner.act(obs)
        assert action != STOP_ACTION
    runner.close()


def test_cli_writes_a_copy_and_refuses_a_model_without_object_memory(tmp_path, capsys):
    from icrl_ros.training.stop_rule import main

    if not SHIPPED.is_file():
        pytest.skip(f"{SHIPPED} is missing")
    out = tmp_path / "gated.pt"
    shutil.copy(SHIPPED.parent / "house_encoder.pt", tmp_path / "house_encoder.pt")  # a shared-encoder checkpoint
    assert main([str(SHIPPED), "--gate", "0.5", "--sure", "0.9", "--out", str(out)]) == 0
    policy, blob = load_checkpoint(out)
    assert (policy.args.house.stop_gate, policy.args.house.stop_sure, policy.args.house.stop_sure_m) == (0.5, 0.9, 0.6)
    assert blob["config"]["model"]["house"]["stop_gate"] == 0.5
    with pytest.raises(SystemExit) as e:
        main([str(REPO / "checkpoints" / "darkroom_relic.pt"), "--gate", "0.5", "--out", str(tmp_path / "x.pt")])
    assert e.value.code != 0 and "object_memory" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main([str(SHIPPED), "--out", str(tmp_path / "y.pt")])  # nothing to set
    # teacher forcing scores the learnt logits: stepper_for(stop_rule=False) steps without the rule
    from icrl_ros.training.house_eval import stepper_for

    for rule in (True, False):
        st, _, desc = stepper_for(str(out), stop_rule=rule)
        st.reset(1, 4)
        assert any(isinstance(r, StopRule) for r in st.control.rules) == rule and desc.get("stop_rule_off", False) == (not rule)


def _small_gated_policy():
    from icrl_ros.house.config import HouseArgs
    from icrl_ros.models.config import ModelArgs
    from icrl_ros.models.stepping import build_policy

    torch.manual_seed(0)
    house = HouseArgs(goal_readout=True, object_memory=True, stop_gate=0.5, stop_sure=0.9)
    args = ModelArgs(kind="relic", n_obs=1, n_actions=4, max_episode_steps=20, n_goals=3, use_reward=False,
                     obs_type="image", visual_encoder="features", feature_dim=32, d_model=32, n_layers=2, n_heads=4,
                     d_mlp=64, sink="kv0", sections={"house": house})
    return build_policy(args).eval()


def test_export_reference_is_what_the_step_acts_on():
    """Export checks a bundle against the full-sequence forward: with a rule, the ruled logits,
    equal to what the cached step acts on (a random model masks most stops)."""
    from icrl_ros.training.export import record_rollout, reference_outputs

    policy = _small_gated_policy()
    inp = record_rollout(policy, 40, 20, seed=0)
    ref, _ = reference_outputs(policy, inp)
    step = ControlStep.live(policy, make_memory(policy, 1, 40))
    with torch.no_grad():
        got = torch.stack([step({k: v[:, i] for k, v in inp.items()})[0][0] for i in range(40)])
    assert np.allclose(ref[0], got.numpy(), atol=1e-4)
    assert (ref[0, :, STOP_ACTION] == MASKED).mean() > 0.5


@pytest.mark.slow  # ONNX export of three graphs, ~15 s alone; `make test-all` runs it
def test_exported_bundle_verifies_with_the_rule_on(tmp_path):
    """The same through ONNX Runtime and the torch engine: a gated bundle verifies."""
    from icrl_ros.training.export import export_bundle, verify_bundle

    policy = _small_gated_policy()
    env = {"goal_names": ["a", "b", "c"], "action_names": ["stop", "forward", "turn_left", "turn_right"]}
    out = export_bundle(policy, tmp_path / "b", env=env)
    res = verify_bundle(out, steps=60, episode_len=20)
    for backend, r in res.items():
        assert r["ok"], (backend, r)
