"""The family registry (icrl_ros/families/, one folder per family) is the one place a model kind is told apart."""

from dataclasses import dataclass

import numpy as np
import pytest
import torch

from icrl_ros.families import FAMILIES, Family, family_of, register_family, unregister_family
from icrl_ros.families.relic import positions as relic_positions
from icrl_ros.memory import KIND_POLICIES, MEMORY_POLICIES, memory_class
from icrl_ros.families.memo.config import MemoArgs
from icrl_ros.families.memo.model import MemoPolicy
from icrl_ros.models import ICLPolicy, ModelArgs, build_policy


def test_every_kind_has_a_family_and_its_memories_exist():
    assert set(FAMILIES) == {"relic", "memo", "hcam", "radt"}
    for kind, fam in FAMILIES.items():
        cfg = fam.config_class()  # each family's arguments: ModelArgs or a subclass for the cached-step ones
        assert hasattr(cfg, "from_dict") and (issubclass(cfg, ModelArgs) == fam.cached_step)
        assert fam.kind == kind and fam.memories and set(fam.memories) <= set(MEMORY_POLICIES)
        assert KIND_POLICIES[kind] == tuple(fam.memories)
        assert isinstance(fam.policy_class(), type)
        for name in fam.memories:  # each memory class builds itself and lives where its family says
            assert memory_class(name) is fam.memory_class(name) and hasattr(memory_class(name), "create")
        graphs = fam.graph_module()
        assert callable(graphs.graph_specs) and callable(graphs.graph_modules)
        # a family outside the cached step brings its runner and its bundle's extras (RA-DT)
        assert bool(fam.runner) == bool(fam.deploy) == (not fam.cached_step)
        if fam.deploy:
            dep = fam.deploy_module()
            for hook in ("bundle_layout", "build_memory", "exact_sizes", "check_sample", "manifest_sections",
                         "sample_length", "write_files", "verify"):
                assert callable(getattr(dep, hook)), hook


def test_the_shared_runtime_and_exporter_name_no_family():
    """Bundle checks, memories, self-checks and export ask the family's modules (``Family.deploy``)."""
    import pathlib
    import re

    root = pathlib.Path(__file__).resolve().parents[1] / "icrl_ros"
    files = [*sorted((root / "runtime").glob("*.py")), root / "training" / "export.py"]
    pattern = re.compile(r"import .*\b(RADT\w*|SubTrajectoryMemory)\b|families\.(radt|memo|hcam|relic)\b.* import"
                         r"|key_projection\(|kind=\"radt\"")
    hits = [f"{f.relative_to(root)}:{i}" for f in files for i, line in enumerate(f.read_text().splitlines(), 1)
            if pattern.search(line)]
    assert not hits, hits


def test_family_of_a_name_arguments_or_policy():
    args = MemoArgs(n_obs=4, n_actions=3, max_episode_steps=9, d_model=16, n_layers=1, n_heads=2, d_mlp=32, l_seg=6,
                    l_sum=3, sink="none")
    policy = build_policy(args)
    assert isinstance(policy, MemoPolicy) and isinstance(policy, family_of("memo").policy_class())
    assert family_of(args) is family_of(policy) is family_of("memo") and family_of("memo").segments
    assert not family_of("radt").cached_step and family_of("hcam").chunk_store
    with pytest.raises(ValueError, match="unknown 'lstm'"):
        family_of("lstm")


# --- a family registered from this file: its own arguments class, policy, memory name; nothing else edited ---

@dataclass
class ToyArgs(ModelArgs):
    """A toy family's arguments: ReLIC's plus a field and a rule of its own."""

    kind: str = "toy"
    actor_gain: float = 1.0

    def validate(self) -> None:
        super().validate()
        if self.actor_gain <= 0:
            raise ValueError(f"model.actor_gain: must be > 0, got {self.actor_gain}")


class ToyPolicy(ICLPolicy):
    """ReLIC whose actor starts at ``actor_gain`` times torch's initial scale."""

    def __init__(self, args: ToyArgs) -> None:
        super().__init__(args)
        with torch.no_grad():
            self.actor.weight.mul_(args.actor_gain)


@pytest.fixture
def toy_family():
    fam = register_family(Family(kind="toy", policy=f"{__name__}:ToyPolicy", config=f"{__name__}:ToyArgs",
                                 memories={"toy_full": "icrl_ros.memory.kv_cache:FullContextMemory"},
                                 graphs="icrl_ros.families.relic.graphs", positions=relic_positions))
    try:
        yield fam
    finally:
        unregister_family("toy")


def test_a_family_registered_from_a_test_file_trains_exports_and_runs(toy_family, tmp_path):
    """One registration line: the config dispatches on its kind and keeps its own field through a checkpoint,
    the cached step equals the whole-sequence pass, the bundle runs in the runner with the family's memory."""
    from icrl_ros.models import load_checkpoint, save_checkpoint
    from icrl_ros.runtime import PolicyRunner, load_bundle
    from icrl_ros.training.export import export_bundle
    from tests.helpers import cached_rollout, random_trial

    d = dict(kind="toy", n_obs=6, n_actions=3, max_episode_steps=8, d_model=16, n_layers=1, n_heads=2, d_mlp=32,
             depth_dropout=0.0, actor_gain=4.0)
    args = ModelArgs.from_dict(d)
    assert type(args) is ToyArgs and args.actor_gain == 4.0 and family_of(args) is toy_family
    with pytest.raises(ValueError, match="model.actor_gain"):
        ModelArgs.from_dict({**d, "actor_gain": -1.0})
    with pytest.raises(ValueError, match="a field of toy models, not of a relic model"):
        ModelArgs.from_dict({**d, "kind": "relic"})  # actor_gain is the toy family's alone
    torch.manual_seed(0)
    policy = build_policy(args).eval()
    assert isinstance(policy, ToyPolicy)
    save_checkpoint(tmp_path / "toy.pt", policy, {"note": "toy"})
    loaded, _ = load_checkpoint(tmp_path / "toy.pt")
    assert isinstance(loaded, ToyPolicy) and loaded.args == args

    trial = random_trial(args, 2, 20, episode_len=7, seed=1)
    with torch.no_grad():
        full = policy.forward_sequence(trial)[0]
        cached, _ = cached_rollout(policy, trial)
    assert (full - cached).abs().max() <= 1e-5

    bundle = export_bundle(policy, tmp_path / "bundle", env={"action_names": ["a", "b", "c"]})
    b = load_bundle(bundle)
    assert b.kind == "toy" and type(b.args) is ToyArgs and b.args.actor_gain == 4.0
    runner = PolicyRunner.from_bundle(bundle)
    assert type(runner.memory).__name__ == "FullContextMemory"
    runner.begin_episode()
    for k in range(5):
        runner.act({"obs": np.int64(k % 6)})
    runner.close()
