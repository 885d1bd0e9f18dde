"""The shipped house bundle the nodes default to (no ROS needed): it loads, it matches its own
checkpoint and its recorded sample, and a snapshot carries the action sampler's state (the
agent node samples actions by default, so a restored node must draw what the original would)."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from tests.nodes.ros_support import REPO, require_bundle, require_house_bundle


# make test checks the default (house_relic_scan) and its Memo counterpart (house_memo_scan); the earlier two in
# make test-all
@pytest.mark.parametrize("name,kind", [pytest.param("house_relic", "relic", marks=pytest.mark.slow),
                                       pytest.param("house_memo", "memo", marks=pytest.mark.slow),
                                       ("house_relic_scan", "relic"), ("house_memo_scan", "memo")])
def test_shipped_bundle_is_the_shipped_checkpoint_and_passes_its_self_check(name, kind) -> None:
    bundle = require_bundle(name)
    from icrl_ros.models import load_checkpoint
    from icrl_ros.runtime.bundle import load_bundle, model_hash

    b = load_bundle(bundle)
    assert b.manifest.model.kind == kind and b.manifest.precision == "fp32"
    assert b.manifest.observation.image_size == [64, 64]
    assert b.manifest.action.names == ["stop", "forward", "turn_left", "turn_right"]
    ckpt = os.path.join(REPO, "checkpoints", os.path.basename(bundle) + ".pt")
    if os.path.exists(ckpt):
        policy, _ = load_checkpoint(ckpt)
        assert model_hash(policy) == b.manifest.model.hash
    out = subprocess.run([sys.executable, "training/bundle_tool.py", "check", bundle], cwd=REPO,
                         capture_output=True, text=True, env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert out.returncode == 0, out.stdout[-1000:] + out.stderr[-1000:]


def test_snapshot_restores_the_action_sampler(tmp_path) -> None:
    from icrl_ros.runtime import PolicyRunner

    bundle = require_house_bundle()
    rng = np.random.default_rng(0)
    # (a scan too: the default reads one; a bundle without a scan input ignores it)
    obs = [{"rgb": rng.integers(0, 256, (64, 64, 3), dtype=np.uint8), "odom": rng.normal(size=3).astype(np.float32),
            "scan": rng.integers(0, 2, 12).astype(np.float32)} for _ in range(80)]
    a = PolicyRunner.from_bundle(bundle)
    a.greedy = False
    a.generator.manual_seed(7)
    a.begin_episode("cone")
    for o in obs[:70]:
        a.act(o)
    a.snapshot(tmp_path / "snap.npz")
    b = PolicyRunner.from_bundle(bundle)
    b.greedy = False  # fresh generator (seed 0): differs until the snapshot is restored
    assert not bool((b.generator.get_state() == a.generator.get_state()).all())
    b.restore(tmp_path / "snap.npz")
    assert bool((b.generator.get_state() == a.generator.get_state()).all())
    for o in obs[70:]:
        (x, ia), (y, ib) = a.act(o), b.act(o)
        assert x == y and abs(ia["value"] - ib["value"]) < 1e-6 and ia["memory_tokens"] == ib["memory_tokens"]
