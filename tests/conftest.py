"""Fixtures shared by the test packages (tests/nodes has its own conftest for ROS)."""

from __future__ import annotations

import os
import random

import pytest

# Two test workers share the 2 cores: one intra-op thread each for torch and ONNX Runtime (whose default,
# a spinning thread per core, took the other worker's core), here and in the processes tests start.
os.environ.setdefault("OMP_NUM_THREADS", "1")


def worker_ros_domain() -> int:
    """The ``ROS_DOMAIN_ID`` of this test process, private to its pytest-xdist worker: worker w draws once
    from 100 + 50 w + [0, 25) (a test that needs a second domain of its own adds 25), so the two workers of
    `make test` never share a domain. Sets the variable when it is not already one of the worker's."""
    worker = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").lstrip("gw") or 0) % 2
    lo = 100 + 50 * worker
    current = int(os.environ.get("ROS_DOMAIN_ID", "-1"))
    if not lo <= current < lo + 25:
        os.environ["ROS_DOMAIN_ID"] = str(lo + random.SystemRandom().randint(0, 24))
    return int(os.environ["ROS_DOMAIN_ID"])


@pytest.fixture(scope="module")
def one_thread():
    """Small models on a shared 2-core machine: torch's intra-op threads only contend. A module
    opts in with ``pytestmark = pytest.mark.usefixtures("one_thread")``."""
    import torch  # here, not at the top: the Habitat chroot's tests run without torch

    prev = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(prev)


# `make test` runs two pytest-xdist workers (`-n 2 --dist loadgroup --no-loadscope-reorder`). Tests
# are handed out in collection order, so the order set here puts the long ones first: the longest test, the ROS / DDS /
# Habitat tests (their ROS_DOMAIN_ID ranges are disjoint per worker, tests/nodes/conftest.py), then the
# long house-training tests, then the rest, so that neither worker is left with a long tail. (Groups
# added here as xdist_group markers were not honoured by the workers, so none are set.)
FIRST_DIRS = ("nodes", "habitat")  # the ROS / DDS / Habitat tests: long, and waiting on processes
LONG_FILES = ("training/test_house_training.py",)
# the longest single test (the default house policy's in-context check, ~2.7 CPU-minutes): first of all,
# so that the other worker runs the rest beside it
LONGEST = ("test_default_house_policy_finds_goals_faster_with_its_memory",)


def _rank(item) -> int:
    rel = os.path.relpath(str(item.path), os.path.dirname(__file__)).replace(os.sep, "/")
    if item.name in LONGEST:
        return -1
    return 0 if rel.split("/")[0] in FIRST_DIRS else 1 if rel in LONG_FILES else 2


# Fixtures a test module builds once for both workers (tests/runtime/test_runtime.py's `built_once`): the first
# test that needs one keeps its place, the others go last, so the other worker does not wait on the lock while
# the first builds it (pytest-xdist's own groups no longer work with pytest 9).
SHARED = ("rollouts",)


def pytest_collection_modifyitems(config, items):
    first: set[str] = set()

    def rank(item) -> int:
        shared = [f for f in SHARED if f in getattr(item, "fixturenames", ())]
        if any(f in first for f in shared):
            return 3
        first.update(shared)
        return _rank(item)

    keyed = sorted(enumerate(items), key=lambda k: (rank(k[1]), k[0]))
    items[:] = [item for _, item in keyed]
