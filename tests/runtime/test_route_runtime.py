"""A house model that reads the route memory (icrl_ros/memory/route.py): the control step writes its
``route`` input the same way in training-side stepping, the exported bundle and the deployed runner,
and the runner keeps the map through snapshots and forgets it with a new trial."""

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from icrl_ros.memory import SnapshotError
from icrl_ros.models import load_checkpoint
from icrl_ros.models.policy import ICLPolicy

pytestmark = pytest.mark.usefixtures("one_thread")

SHIPPED = Path(__file__).resolve().parents[2] / "checkpoints" / "house_relic.pt"


@pytest.fixture(scope="module")
def route_bundle(tmp_path_factory):
    """The shipped ReLIC with a route input whose weights matter (random, not the zero start)."""
    if not SHIPPED.is_file():
        pytest.skip(f"{SHIPPED} is missing")
    from icrl_ros.training.export import export_bundle

    shipped, config = load_checkpoint(SHIPPED)
    policy = ICLPolicy(replace(shipped.args, route_memory=True))
    policy.load_state_dict(shipped.state_dict(), strict=False)
    assert not policy.encoder.route.weight.any()  # a trained model gains the input as no input
    with torch.no_grad():
        policy.encoder.route.weight.normal_(0.0, 0.5, generator=torch.Generator().manual_seed(0))
    return export_bundle(policy, tmp_path_factory.mktemp("route") / "bundle", config=config)


def test_the_bundle_replays_training_stepping_with_the_route_it_wrote(route_bundle):
    from icrl_ros.runtime.bundle import load_bundle
    from icrl_ros.runtime.selfcheck import check_sample

    sample = np.load(route_bundle / "sample.npz")
    assert sample["route"].shape[-1] == 6 and (sample["route"][..., 0] == 1.0).any()  # the route fired in it
    report = check_sample(load_bundle(route_bundle))
    assert report["ok"], report


def test_the_runner_snapshots_its_map_and_a_new_trial_forgets_it(route_bundle, tmp_path):
    from icrl_ros.runtime import PolicyRunner

    runner = PolicyRunner.from_bundle(route_bundle)
    route = runner.control.route
    assert route is not None and "route" in runner._inputs
    g = np.random.default_rng(0)
    runner.begin_episode(0)
    for t in range(12):
        runner.act({"rgb": g.integers(0, 256, (64, 64, 3), dtype=np.uint8),
                    "odom": np.array([0.25 * t, 0.0, 0.0], np.float32)})
    stood = route.stood.copy()
    assert stood.sum() == 12 and route.sums.any()  # the track: one cell per 0.25 m step
    runner.snapshot(tmp_path / "s.npz")
    runner.reset_trial()
    assert not route.stood.any() and not route.sums.any()
    runner.restore(tmp_path / "s.npz")
    assert np.array_equal(route.stood, stood) and route.sums.any()

    with np.load(tmp_path / "s.npz") as z:  # a snapshot that lost the map (or came from before it)
        np.savez(tmp_path / "lost.npz", **{k: z[k] for k in z.files if k != "route_stood"})
    runner.reset_trial()
    with pytest.raises(SnapshotError, match="tensors.route_stood"):
        runner.restore(tmp_path / "lost.npz")
    assert not route.stood.any()  # a refusal leaves the memory as it was
