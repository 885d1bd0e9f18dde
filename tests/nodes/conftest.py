"""ROS 2 test set-up: DDS stays on this machine.

Before anything imports rclpy: ``ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST`` (loopback discovery,
no multicast), a private ``ROS_DOMAIN_ID`` drawn per test session from 100-200, and every
variable that could point DDS at another host removed. ``ros_context`` refuses to start
rclpy unless those hold.
"""

from __future__ import annotations

import os
import random
import tempfile

# Set at import: pytest loads this conftest before any test module in tests/nodes.
os.environ["ROS_AUTOMATIC_DISCOVERY_RANGE"] = "LOCALHOST"
os.environ["ROS_DOMAIN_ID"] = str(random.SystemRandom().randint(100, 200))
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
