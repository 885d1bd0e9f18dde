"""Habitat ExtObjNav backend: pose conventions everywhere, the env itself where habitat imports."""

import importlib.util
import math

import gymnasium as gym
import numpy as np
import pytest

import icrl_ros.sim  # noqa: F401  (registers the ids)
from icrl_ros.sim.habitat_env import import_habitat, yaw_of
from icrl_ros.geometry import episode_odometry

HAVE_HABITAT = importlib.util.find_spec("habitat") is not None and importlib.util.find_spec("habitat_sim") is not None


class _Quat:  # the two fields yaw_of reads from a numpy-quaternion
    def __init__(self, angle: float) -> None:
        self.w, self.y = math.cos(angle / 2), math.sin(angle / 2)


@pytest.mark.parametrize("angle", [0.0, 0.5, math.pi / 2, -2.0, 3.0])
def test_yaw_matches_the_forward_vector(angle: float) -> None:
    # habitat agent: rotation by `angle` about +Y turns the -z forward axis to (-sin a, 0, -cos a);
    # planar frame X = x, Y = -z, so the heading is atan2(cos a, -sin a)
    fx, fz = -math.sin(angle), -math.cos(angle)
    want = math.atan2(-fz, fx)
    assert abs(math.remainder(yaw_of(_Quat(angle)) - want, 2 * math.pi)) < 1e-9


def test_episode_odometry_axes() -> None:
    start = (1.0, 2.0, math.pi / 2)  # facing planar +Y = world -z
    ahead = episode_odometry(start, (1.0, 1.0, math.pi / 2))  # one metre along -z: forward
    left = episode_odometry(start, (0.0, 2.0, math.pi))  # one metre along -x: the agent's left
    np.testing.assert_allclose(ahead, [1.0, 0.0, 0.0], atol=1e-6)
    np.testing.assert_allclose(left, [0.0, 1.0, math.pi / 2], atol=1e-6)


def test_registered_without_habitat_installed() -> None:
    assert "icrl_ros/HabitatExtObjNav-v0" in gym.registry


@pytest.mark.skipif(HAVE_HABITAT, reason="habitat is installed: the error path does not apply")
def test_missing_habitat_says_where_to_get_it() -> None:
    with pytest.raises(ImportError, match="Dockerfile.habitat"):
        import_habitat()
    with pytest.raises(ImportError, match="habitat-sim"):
        gym.make("icrl_ros/HabitatExtObjNav-v0")


@pytest.mark.skipif(not HAVE_HABITAT, reason="habitat-sim / habitat-lab not importable (no PyPI wheel for this "
                                             "Python; run inside docker/Dockerfile.habitat with a scene dataset)")
def test_habitat_trial_keeps_the_scene_and_steps() -> None:
    env = gym.make("icrl_ros/HabitatExtObjNav-v0").unwrapped
    obs, info = env.reset(seed=0, options={"new_trial": True})
    assert env.observation_space.contains(obs), obs.keys()
    scene = info["scene"]
    np.testing.assert_allclose(obs["odom"], 0.0, atol=1e-4)
    obs, reward, terminated, truncated, info = env.step(1)  # forward
    assert np.isfinite(reward) and not terminated
    assert obs["odom"][0] > 0.0 or abs(obs["odom"][0]) < 1e-6  # forward, or blocked by a wall
    obs, *_ = env.step(2)
    assert abs(abs(float(obs["odom"][2])) - math.radians(30)) < 1e-3
    _, info = env.reset()
    assert info["scene"] == scene and info["episode_index"] == 1
    env.close()
