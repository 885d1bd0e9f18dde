"""The localisation-noise and odometry-drift model (icrl_ros/sim/pose_noise.py): its statistics, the
fused pose a robot stack computes, and the observer that evaluation hands the policy."""

from __future__ import annotations

import math

import numpy as np
import pytest

from icrl_ros.geometry import compose_pose, fused_pose, relative_pose, wrap_angle
from icrl_ros.sim.pose_noise import (
    LocalisationNoise, OdometryDrift, PoseErrors, PoseNoise, PoseObserver,
)


def test_localisation_error_is_bounded_slowly_varying_and_of_the_asked_size():
    spec = LocalisationNoise(error_m=0.15, error_deg=3.0, tau_s=20.0, bound=2.0)
    n = PoseNoise(spec, None, np.random.default_rng(3))
    n.reset((1.0, 2.0, 0.5))
    errs = []
    for _ in range(40_000):
        n.advance((1.0, 2.0, 0.5), 1.0)
        x, y, yaw = n.localised
        errs.append((x - 1.0, y - 2.0, wrap_angle(yaw - 0.5)))
    e = np.array(errs)
    r = np.hypot(e[:, 0], e[:, 1])
    assert 0.13 < math.sqrt((r ** 2).mean()) < 0.17  # RMS position error ~0.15 m
    assert 2.4 < math.degrees(math.sqrt((e[:, 2] ** 2).mean())) < 3.2  # ~3 degrees (less the clipped tails)
    assert r.max() <= 0.30 + 1e-9 and np.abs(e[:, 2]).max() <= math.radians(6.0) + 1e-9  # bound: 2 x RMS
    assert abs(e[:, 0].mean()) < 0.02 and abs(e[:, 1].mean()) < 0.02  # no bias
    lag1 = np.corrcoef(e[:-1, 0], e[1:, 0])[0, 1]
    assert abs(lag1 - math.exp(-1 / 20.0)) < 0.02  # slowly varying: correlation time tau_s
    assert np.allclose(n.odom, (1.0, 2.0, 0.5))  # no drift asked: odometry is the true pose


def test_odometry_drift_scale_bias_and_heading_walk():
    # scale only: a straight 100 m drive reads 99 or 101 m
    n = PoseNoise(None, OdometryDrift(scale=0.01), np.random.default_rng(0))
    n.reset((0.0, 0.0, 0.0))
    for k in range(1, 401):
        n.advance((0.25 * k, 0.0, 0.0), 1.0)
    assert abs(abs(n.odom[0]) - 100.0) == pytest.approx(1.0, abs=1e-6) and abs(n.odom[1]) < 1e-9
    # bias only: a robot standing still for a minute turns by one degree in its odometry
    n = PoseNoise(None, OdometryDrift(bias_deg_per_min=1.0), np.random.default_rng(1))
    n.reset((0.0, 0.0, 0.0))
    for _ in range(60):
        n.advance((0.0, 0.0, 0.0), 1.0)
    assert abs(math.degrees(n.odom[2])) == pytest.approx(1.0, abs=1e-9)
    # heading walk: variance heading_noise^2 x (radians turned + metres driven), however the motion is cut up
    finals = {1: [], 12: []}
    for pieces in finals:
        for s in range(600):
            n = PoseNoise(None, OdometryDrift(heading_noise=0.02), np.random.default_rng([pieces, s]))
            n.reset((0.0, 0.0, 0.0))
            for k in range(1, pieces + 1):  # turn 3 rad in total
                n.advance((0.0, 0.0, 3.0 * k / pieces), 0.0)
            finals[pieces].append(wrap_angle(n.odom[2] - 3.0))
    for pieces, v in finals.items():
        assert np.std(v) == pytest.approx(0.02 * math.sqrt(3.0), rel=0.12), pieces


def test_fused_pose_is_the_map_odom_correction_applied_to_odometry():
    rng = np.random.default_rng(5)
    for _ in range(50):
        map_from_odom = tuple(rng.uniform(-3, 3, 3))  # a fixed map -> odom transform
        odom_fix, odom_now = tuple(rng.uniform(-5, 5, 3)), tuple(rng.uniform(-5, 5, 3))
        map_fix, map_now = compose_pose(map_from_odom, odom_fix), compose_pose(map_from_odom, odom_now)
        got = fused_pose(map_fix, odom_fix, odom_now)
        assert np.allclose(got[:2], map_now[:2], atol=1e-9) and abs(wrap_angle(got[2] - map_now[2])) < 1e-9


def _walk(rng, steps):
    x = y = th = 0.0
    out = [(x, y, th)]
    for _ in range(steps):
        a = rng.integers(3)
        if a == 0:
            x, y = x + 0.25 * math.cos(th), y + 0.25 * math.sin(th)
        else:
            th = wrap_angle(th + (0.52 if a == 1 else -0.52))
        out.append((x, y, th))
    return np.array(out, np.float32)


def test_observer_clean_is_the_true_pose_drift_grows_localiser_stays_bounded():
    rng = np.random.default_rng(7)
    walks = [_walk(rng, 1500) for _ in range(4)]
    seeds = [[211, i] for i in range(4)]

    def run(errors):
        obs = PoseObserver(errors, seeds)
        got = [obs.reset(np.stack([w[0] for w in walks]))]
        for t in range(1, 1501):
            got.append(obs.step(np.stack([w[t] for w in walks])))
        return np.stack(got, 1), obs

    clean, _ = run(PoseErrors())
    assert np.allclose(clean, np.stack(walks), atol=1e-5)
    drift, o = run(PoseErrors(drift=OdometryDrift(0.01, 0.01, 1.0)))
    err = np.hypot(*(drift[..., :2] - np.stack(walks)[..., :2]).transpose(2, 0, 1))
    assert err[:, :100].mean() < err[:, -100:].mean() and err[:, -100:].mean() > 1.0  # grows: metres after 25 min
    loc, o = run(PoseErrors(loc=LocalisationNoise(0.15, 3.0)))
    err = np.hypot(*(loc[..., :2] - np.stack(walks)[..., :2]).transpose(2, 0, 1))
    # relative to a noisy origin, both ends carry <= 0.3 m and the origin's heading error (6 deg at most) turns
    # the rest: bounded whatever the time
    assert err.max() < 0.6 + math.radians(6) * np.hypot(*np.stack(walks)[..., :2].transpose(2, 0, 1)).max()
    assert max(max(e) for e in o.errors_m) <= 0.3 + 1e-6
    # the same seeds give the same errors: runs are paired
    again, _ = run(PoseErrors(loc=LocalisationNoise(0.15, 3.0)))
    assert np.array_equal(loc, again)


def test_localiser_fixes_every_n_steps_carry_odometry_in_between():
    walk = _walk(np.random.default_rng(2), 60)
    errors = PoseErrors(loc=LocalisationNoise(0.15, 3.0), drift=OdometryDrift(0.05, 0.0, 0.0), fix_every=10)
    obs = PoseObserver(errors, [[1, 0]])
    obs.reset(walk[:1])
    n = obs.noise[0]
    fix = (n.localised, n.odom)
    for t in range(1, 61):
        got = obs.step(walk[t:t + 1])[0]
        if t % 10 == 0:
            fix = (n.localised, n.odom)  # a fix: the localiser's pose itself
            assert np.allclose(got, relative_pose(obs._origin[0], n.localised), atol=1e-5)
        else:  # between fixes: the last fix composed with the (drifting) odometry since it
            want = relative_pose(obs._origin[0], fused_pose(fix[0], fix[1], n.odom))
            assert np.allclose(got, want, atol=1e-5)
            assert not np.allclose(got, relative_pose(obs._origin[0], n.localised), atol=1e-3)
    assert obs.errors_m[0] and max(obs.errors_m[0]) < 1.0


@pytest.mark.parametrize("text,cls", [("0.1", LocalisationNoise), ("a,b", LocalisationNoise), ("-1,3", LocalisationNoise),
                                      ("0.01,0.01", OdometryDrift), ("1.5,0,0", OdometryDrift),
                                      ("0.01,nan,1", OdometryDrift)])
def test_bad_specs_are_refused_with_a_message(text, cls):
    with pytest.raises(ValueError, match="noise|drift"):
        cls.parse(text)


def test_evaluate_cli_mistakes_are_one_line(capsys):
    from icrl_ros.training import evaluate

    for argv in (["bundles/house_relic_scan", "--loc-noise", "0.1"],
                 ["bundles/house_relic_scan", "--loc-every", "3", "--odom-drift", "0.01,0,0"],
                 ["bundles/house_relic_scan", "--step-s", "2"]):
        with pytest.raises(SystemExit) as e:
            evaluate.main(argv)
        assert e.value.code == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("error:")
