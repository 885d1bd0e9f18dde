"""ROS 2 test set-up: DDS stays on this machine.

Before anything imports rclpy: ``ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST`` (loopback discovery,
no multicast), a private ``ROS_DOMAIN_ID`` drawn per test session from 100-199 (per xdist worker, disjoint ranges), and every
variable that could point DDS at another host removed. ``ros_context`` refuses to start
rclpy unless those hold.
"""

from __future__ import annotations

import contextlib
import os
import tempfile

from tests.conftest import worker_ros_domain

# Set at import: pytest loads this conftest before any test module in tests/nodes.
os.environ["ROS_AUTOMATIC_DISCOVERY_RANGE"] = "LOCALHOST"
# Under pytest-xdist (`make test`: two workers) each worker draws from its own range (tests/conftest.py).
worker_ros_domain()
for _var in ("ROS_STATIC_PEERS", "ROS_LOCALHOST_ONLY", "ROS_DISCOVERY_SERVER", "ROS_SUPER_CLIENT",
             "FASTRTPS_DEFAULT_PROFILES_FILE", "FASTDDS_DEFAULT_PROFILES_FILE", "CYCLONEDDS_URI"):
    os.environ.pop(_var, None)
os.environ.setdefault("ROS_LOG_DIR", tempfile.mkdtemp(prefix="icrl_ros_roslog_"))

import pytest  # noqa: E402

from tests.nodes.ros_support import assert_loopback_env, ros_import_error  # noqa: E402


@pytest.fixture
def ros_context():
    """A fresh rclpy context on the private domain; shut down after the test."""
    if ros_import_error():
        pytest.skip(ros_import_error())
    import rclpy

    assert_loopback_env()
    ctx = rclpy.Context()
    rclpy.init(context=ctx, domain_id=int(os.environ["ROS_DOMAIN_ID"]))
    try:
        yield ctx
    finally:
        ctx.try_shutdown()


SHARED_ROS2 = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                           os.pardir, "shared", "ros2", "install.sh")


@pytest.fixture(scope="session")
def ros2_kit() -> str:
    """The real ``ros2`` CLI, ``ros2 launch`` and colcon in this test's venv: installed here by
    ``../shared/ros2/install.sh`` (idempotent, ~30 s the first time) when ``../shared`` exists,
    as on CI and the dev machines; skipped with the reason elsewhere. Returns the venv's bin/."""
    import shutil
    import subprocess
    import sys

    if ros_import_error():
        pytest.skip(ros_import_error())
    bindir = os.path.dirname(sys.executable)
    with venv_lock("ros2_kit"):  # two xdist workers must not install into one venv at once
        if not (os.path.exists(os.path.join(bindir, "ros2")) and os.path.exists(os.path.join(bindir, "colcon"))):
            script = os.path.normpath(SHARED_ROS2)
            if not os.path.isfile(script):
                pytest.skip(f"no ros2 CLI in {bindir} and no {script} to install it (the shared kit)")
            if sys.prefix == sys.base_prefix:
                pytest.skip(f"{sys.executable} is not a virtualenv: the kit goes only into the project's venv")
            out = subprocess.run(["bash", script, sys.prefix], capture_output=True, text=True)
            assert out.returncode == 0, f"{script} failed:\n{out.stdout[-2000:]}\n{out.stderr[-3000:]}"
    assert shutil.which("ros2", path=bindir) and shutil.which("colcon", path=bindir)
    return bindir


@contextlib.contextmanager
def venv_lock(name: str):
    """An exclusive file lock in the venv (pytest-xdist workers installing into it one at a time)."""
    import sys

    from tests.locks import file_lock

    with file_lock(os.path.join(sys.prefix, f".{name}.lock")):
        yield


@pytest.fixture(scope="session")
def rosdep_tool() -> str:
    """``rosdep`` (PyPI) in this venv; installed with pip when missing, skipped if that fails."""
    import subprocess
    import sys

    bindir = os.path.dirname(sys.executable)
    rosdep = os.path.join(bindir, "rosdep")
    if not os.path.exists(rosdep):
        out = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "rosdep"], capture_output=True, text=True)
        if out.returncode != 0 or not os.path.exists(rosdep):
            pytest.skip(f"rosdep is not installed and pip could not install it: {out.stderr[-500:]}")
    return rosdep
