"""Fixtures shared by the test packages (tests/nodes has its own conftest for ROS)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def one_thread():
    """Small models on a shared 2-core machine: torch's intra-op threads only contend. A module
    opts in with ``pytestmark = pytest.mark.usefixtures("one_thread")``."""
    import torch  # here, not at the top: the Habitat chroot's tests run without torch

    prev = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(prev)


# `make test` runs two pytest-xdist workers (`-n 2 --dist loadgroup --no-loadscope-reorder`). The
# tests that start DDS participants, ROS processes or the Habitat chroot share one group, so they
# run one after another in one worker, on that worker's private ROS_DOMAIN_ID, as in a plain
# `pytest` run. Every other file is a group of its own (its module fixtures are built once), except
# the few long house-training tests, which go one by one. Groups are handed out in this order: the
# ROS group and the long tests first, so that neither worker is left with a long tail.
SERIAL_DIRS = ("nodes", "habitat")
SPLIT_FILES = ("training/test_house_training.py",)


def pytest_collection_modifyitems(config, items):
    import os

    here = os.path.dirname(__file__)

    def group(item) -> tuple[int, str]:
        rel = os.path.relpath(str(item.path), here).replace(os.sep, "/")
        if rel.split("/")[0] in SERIAL_DIRS:
            return 0, "ros"
        if rel in SPLIT_FILES:
            return 1, item.nodeid
        return 2, rel

    keyed = [(group(item), n, item) for n, item in enumerate(items)]
    keyed.sort(key=lambda k: (k[0][0], k[1]))
    items[:] = [item for _, _, item in keyed]
    for (_, name), _, item in keyed:
        item.add_marker(pytest.mark.xdist_group(name))
