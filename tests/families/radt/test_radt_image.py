"""RA-DT on image observations: bundle graphs, ORT vs torch, bounded memory, the return hook."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.image_bundles import GOALS, IMAGE, export_image_bundle
from icrl_ros.families.radt.deploy import key_projection

pytest.importorskip("faiss")
pytest.importorskip("onnxruntime")


@pytest.fixture(scope="module")
def bundle_path(tmp_path_factory):
    prev = torch.get_num_threads()
    torch.set_num_threads(1)
    yield export_image_bundle("radt", tmp_path_factory.mktemp("radt_image") / "bundle")
    torch.set_num_threads(prev)


def obs(rng) -> dict:
    return {"rgb": rng.integers(0, 256, (IMAGE, IMAGE, 3), dtype=np.uint8),
            "odom": rng.normal(size=3).astype(np.float32)}


def test_graphs_take_features_and_no_reward(bundle_path) -> None:
    from icrl_ros.runtime import load_bundle

    b = load_bundle(bundle_path)
    a = b.args
    assert list(b.specs) == ["encoder", "policy"]
    assert [io["name"] for io in b.specs["encoder"]["inputs"]] == ["rgb", "odom", "goal"]
    names = [io["name"] for io in b.specs["policy"]["inputs"]]
    assert not {"prev_reward", "rtg", "retrieved_reward", "retrieved_rtg"} & set(names)
    obs_io = b.specs["policy"]["inputs"][0]
    assert obs_io["dtype"] == "float32" and obs_io["shape"] == ["batch", a.context, a.d_model + a.key_inputs]
    assert key_projection(b).shape == (3 * a.key_pool ** 2 + 4, a.key_dim)
    assert b.manifest.observation.image_size == [IMAGE, IMAGE]


@pytest.mark.parametrize("backend", ["onnxruntime", "torch"])
def test_backends_replay_the_torch_sample(bundle_path, backend) -> None:
    from icrl_ros.runtime import load_bundle
    from icrl_ros.runtime.selfcheck import check_sample

    b = load_bundle(bundle_path)
    assert int(b.sample()["episode_index"].max()) >= 3  # episode ends: retrieval had entries
    res = check_sample(b, backend)
    assert res["ok"] and res["max_logit_diff"] <= 1e-5, res


def test_memory_bounded_and_carried_across_episodes(bundle_path) -> None:
    from icrl_ros.runtime import PolicyRunner

    budget = 400_000
    r = PolicyRunner.from_bundle(bundle_path, memory_budget_bytes=budget)
    assert r.memory.nbytes <= budget and r.memory.max_episodes >= 1
    rng = np.random.default_rng(0)
    stored = []
    for ep in range(3 * r.memory.max_episodes):
        r.begin_episode(GOALS[ep % 3])
        for _ in range(5):
            _, info = r.act(obs(rng))
            assert info["memory_bytes"] <= budget
        stored.append(info["stored_episodes"])
    # every finished episode stays (nothing resets at an episode start) until the bound, then
    # the oldest whole episodes leave
    assert stored == [min(ep, r.memory.max_episodes) for ep in range(len(stored))]
    r.reset_trial()
    assert r.memory.episodes == 0 and len(r.memory) == 0


def test_told_returns_become_the_utility(bundle_path) -> None:
    from icrl_ros.runtime import PolicyRunner

    r = PolicyRunner.from_bundle(bundle_path)
    rng = np.random.default_rng(1)
    rets = r.memory.index.returns
    assert not r.end_episode(1.0)  # nothing acted yet
    r.begin_episode("chair")
    for _ in range(7):
        r.act(obs(rng))
    assert r.end_episode(2.5)  # before the next episode: stored with it at the next step
    r.begin_episode("table")
    r.act(obs(rng))
    n = len(r.memory)
    assert n > 0 and np.all(rets[:n] == 2.5)
    for _ in range(6):
        r.act(obs(rng))
    r.begin_episode("sofa")
    r.act(obs(rng))  # stored with the (zero) return of the rewards it saw
    assert r.end_episode(-1.0, episode=r.episode - 1)  # told late: the stored episode's utility changes
    assert np.all(rets[n:len(r.memory)] == -1.0) and np.all(rets[:n] == 2.5)
    assert not r.end_episode(3.0, episode=r.episode - 2)  # older episodes are not updated
