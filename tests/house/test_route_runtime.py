"""A house model that reads the route memory (icrl_ros/memory/route.py): the control step writes its
``route`` input the same way in training-side stepping, the exported bundle and the deployed runner,
and the runner keeps the map through snapshots and forgets it with a new trial."""

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
    policy = ICLPolicy(shipped.args.replace_section("house", route_memory=True))
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
    route = runner.control.states["route"]
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


@pytest.fixture(scope="module")
def scan_bundle(tmp_path_factory):
    """The shipped ReLIC with a route-following head that reads the route and the scan (random output weights)."""
    if not SHIPPED.is_file():
        pytest.skip(f"{SHIPPED} is missing")
    from icrl_ros.training.export import export_bundle

    shipped, config = load_checkpoint(SHIPPED)
    policy = ICLPolicy(shipped.args.replace_section("house", route_memory=True, route_skill=16, scan_input=True))
    policy.load_state_dict(shipped.state_dict(), strict=False)
    out = policy.route_skill[-1]
    assert not out.weight.any() and not out.bias.any()  # a trained model gains the head as no head
    with torch.no_grad():
        out.weight.normal_(0.0, 0.5, generator=torch.Generator().manual_seed(0))
    return export_bundle(policy, tmp_path_factory.mktemp("scan") / "bundle", config=config)


def test_the_route_skill_reads_the_scan_only_where_a_route_exists_and_the_bundle_replays_it(scan_bundle):
    from icrl_ros.runtime import PolicyRunner
    from icrl_ros.runtime.bundle import load_bundle
    from icrl_ros.runtime.selfcheck import check_sample

    bundle = load_bundle(scan_bundle)
    assert [io["name"] for io in bundle.specs["heads"]["inputs"]] == ["hidden", "route", "scan"]
    policy = bundle.load_policy()
    g = torch.Generator().manual_seed(1)
    inp = {"rgb_feat": torch.randn(4, 1, policy.args.feature_dim, generator=g), "odom": torch.randn(4, 1, 3, generator=g),
           "prev_action": torch.zeros(4, 1, dtype=torch.long), "episode_step": torch.zeros(4, 1, dtype=torch.long),
           "episode_index": torch.zeros(4, 1, dtype=torch.long), "goal": torch.zeros(4, 1, dtype=torch.long),
           "route": torch.randn(4, 1, 6, generator=g), "scan": torch.ones(4, 1, 12)}
    inp["route"][:2, :, 0], inp["route"][2:, :, 0] = 1.0, 0.0  # found in envs 0-1 only
    with torch.no_grad():
        moved = (policy.forward_sequence(inp)[0] - policy.forward_sequence(dict(inp, scan=torch.zeros(4, 1, 12)))[0])
    moved = moved.abs().amax((1, 2))
    assert (moved[:2] > 1e-3).all() and (moved[2:] == 0).all()  # gated by "found"
    sample = np.load(scan_bundle / "sample.npz")
    assert sample["scan"].shape[-1] == 12 and set(np.unique(sample["scan"])) <= {0.0, 1.0}
    assert (sample["route"][..., 0] == 1.0).any()  # the route (and so the head) fired in it
    report = check_sample(bundle)
    assert report["ok"], report
    runner = PolicyRunner.from_bundle(scan_bundle)
    runner.begin_episode(0)
    obs = {"rgb": np.zeros((64, 64, 3), np.uint8), "odom": np.zeros(3, np.float32)}
    with pytest.raises(ValueError, match="missing key 'scan'"):  # the bundle reads a scan: an observation without one
        runner.act(obs)
    runner.act({**obs, "scan": np.ones(12, np.float32)})
    from icrl_ros.training.house_eval import stepper_for

    assert stepper_for(str(scan_bundle))[1]["scan"] is True  # evaluate.py's env gives the bundle its scan


@pytest.fixture(scope="module")
def frontier_bundle(tmp_path_factory):
    """The shipped ReLIC with the frontier memory, a frontier input and a frontier-following head that reads the
    scan beside the route (random weights where a trained model gains them as zeros)."""
    if not SHIPPED.is_file():
        pytest.skip(f"{SHIPPED} is missing")
    from icrl_ros.training.export import export_bundle

    shipped, config = load_checkpoint(SHIPPED)
    policy = ICLPolicy(shipped.args.replace_section("house", route_memory=True, route_skill=16, scan_input=True,
                               frontier_memory=True, frontier_skill=16))
    policy.load_state_dict(shipped.state_dict(), strict=False)
    assert not policy.encoder.frontier.weight.any() and not policy.frontier_skill[-1].weight.any()
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for m in (policy.encoder.frontier, policy.frontier_skill[-1]):
            m.weight.normal_(0.0, 0.5, generator=g)
    return export_bundle(policy, tmp_path_factory.mktemp("frontier") / "bundle", config=config)


def test_the_frontier_head_acts_where_no_route_exists_and_the_bundle_replays_its_map(frontier_bundle, tmp_path):
    from icrl_ros.runtime import PolicyRunner
    from icrl_ros.runtime.bundle import load_bundle
    from icrl_ros.runtime.selfcheck import check_sample

    bundle = load_bundle(frontier_bundle)
    assert [io["name"] for io in bundle.specs["heads"]["inputs"]] == ["hidden", "route", "scan", "frontier"]
    policy = bundle.load_policy()
    g = torch.Generator().manual_seed(1)
    inp = {"rgb_feat": torch.randn(4, 1, policy.args.feature_dim, generator=g), "odom": torch.randn(4, 1, 3, generator=g),
           "prev_action": torch.zeros(4, 1, dtype=torch.long), "episode_step": torch.zeros(4, 1, dtype=torch.long),
           "episode_index": torch.zeros(4, 1, dtype=torch.long), "goal": torch.zeros(4, 1, dtype=torch.long),
           "route": torch.zeros(4, 1, 6), "scan": torch.ones(4, 1, 12), "frontier": torch.randn(4, 1, 6, generator=g)}
    inp["frontier"][:, :, 0] = torch.tensor([1.0, 1.0, 0.0, 1.0])[:, None]  # a way in envs 0, 1, 3
    inp["route"][3, :, 0] = 1.0  # env 3 has a way to its goal: the route head's turn
    policy.encoder.frontier.weight.data.zero_()  # the head alone (the input's token term moves every env)
    with torch.no_grad():
        moved = (policy.forward_sequence(inp)[0] - policy.forward_sequence(dict(inp, scan=torch.zeros(4, 1, 12)))[0])
    moved = moved.abs().amax((1, 2))
    assert (moved[:2] > 1e-3).all() and moved[2] == 0  # gated by the frontier's "found"
    sample = np.load(frontier_bundle / "sample.npz")
    assert sample["frontier"].shape[-1] == 6 and (sample["frontier"][..., 0] == 1.0).any()  # the way fired in it
    report = check_sample(bundle)
    assert report["ok"], report

    runner = PolicyRunner.from_bundle(frontier_bundle)
    front = runner.control.states["frontier"]
    runner.begin_episode(0)
    rng = np.random.default_rng(0)
    for t in range(8):
        runner.act({"rgb": rng.integers(0, 256, (64, 64, 3), dtype=np.uint8), "scan": np.ones(12, np.float32),
                    "odom": np.array([0.25 * t, 0.0, 0.0], np.float32)})
    looked = front.looked.copy()
    assert looked.sum() > 20  # the footprint and the view of every committed step
    runner.snapshot(tmp_path / "f.npz")
    runner.reset_trial()
    assert not front.looked.any()
    runner.restore(tmp_path / "f.npz")
    assert np.array_equal(front.looked, looked)


def test_a_laser_fed_bundle_maps_the_floor_the_scan_bands_give_and_plans_its_route_over_it(tmp_path):
    """model.house.frontier_from_scan + route_over_looked: the bundle reads a ``scan_bands`` observation, the token's
    band entries are those distances (not the heads' estimate from the image), the frontier map and the route
    state's own map grow as far as they say, and the exported graphs replay training's stepping."""
    from icrl_ros.models.encoders import FREE_BANDS
    from icrl_ros.runtime import PolicyRunner
    from icrl_ros.runtime.bundle import load_bundle
    from icrl_ros.runtime.selfcheck import check_sample
    from tests.house.laser_bundle import export_laser_bundle

    out = export_laser_bundle(tmp_path / "bundle")
    bundle = load_bundle(out)
    assert "scan_bands" in bundle.manifest.observation.from_observation
    assert check_sample(bundle)["ok"]
    rgb = np.random.default_rng(0).integers(0, 256, (64, 64, 3), dtype=np.uint8)
    looked = {}
    for near in (0.6, 3.0):  # the same image, the laser saying an obstacle 0.6 m or 3 m away in every band
        runner = PolicyRunner.from_bundle(out)
        runner.begin_episode(0)
        for t in range(2):
            runner.act({"rgb": rgb, "odom": np.zeros(3, np.float32),
                        "scan_bands": np.full(FREE_BANDS, near, np.float32)})
        states = runner.control.states
        looked[near] = int(states["frontier"].looked.sum())
        assert np.array_equal(states["route"].floor.looked, states["frontier"].looked)  # one map, kept twice
    assert looked[3.0] > 2 * looked[0.6], looked
