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
