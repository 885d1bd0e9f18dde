"""The family registry (icrl_ros/families/, one folder per family) is the one place a model kind is told apart."""

import pytest

from icrl_ros.families import FAMILIES, family_of
from icrl_ros.memory import KIND_POLICIES, MEMORY_POLICIES, memory_class
from icrl_ros.families.memo.model import MemoPolicy
from icrl_ros.models import ModelArgs, build_policy
from icrl_ros.models.config import KINDS


def test_every_kind_has_a_family_and_its_memories_exist():
    assert set(FAMILIES) == set(KINDS) | {"radt"}
    for kind, fam in FAMILIES.items():
        assert fam.kind == kind and fam.memories and set(fam.memories) <= set(MEMORY_POLICIES)
        assert KIND_POLICIES[kind] == tuple(fam.memories)
        assert isinstance(fam.policy_class(), type)
        for name in fam.memories:  # each memory class builds itself and lives where its family says
            assert memory_class(name) is fam.memory_class(name) and hasattr(memory_class(name), "create")
        graphs = fam.graph_module()
        assert callable(graphs.graph_specs) and callable(graphs.graph_modules)


def test_family_of_a_name_arguments_or_policy():
    args = ModelArgs(kind="memo", n_obs=4, n_actions=3, max_episode_steps=9, d_model=16, n_layers=1, n_heads=2,
                     d_mlp=32, l_seg=6, l_sum=3, sink="none")
    policy = build_policy(args)
    assert isinstance(policy, MemoPolicy) and isinstance(policy, family_of("memo").policy_class())
    assert family_of(args) is family_of(policy) is family_of("memo") and family_of("memo").segments
    assert not family_of("radt").cached_step and family_of("hcam").chunk_store
    with pytest.raises(ValueError, match="unknown 'lstm'"):
        family_of("lstm")
