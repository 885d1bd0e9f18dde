"""Fixtures for the Habitat contract tests (inside the chroot: ``tests/habitat/test_chroot.py``)."""

from __future__ import annotations

import pytest

SEEDS = (1, 3)  # a test-split and a train-split house
EPISODES = 6


@pytest.fixture(scope="session")
def export(tmp_path_factory):
    from icrl_ros.sim.habitat_scene import export_houses

    out = tmp_path_factory.mktemp("houses")
    info = export_houses(list(SEEDS), out, episodes_per_house=EPISODES, seed=0)
    return out, info


@pytest.fixture(scope="session")
def env(export):
    from icrl_ros.sim.habitat_env import HabitatExtObjNavEnv

    e = HabitatExtObjNavEnv.for_houses(export[0])
    yield e
    e.close()
