"""Helpers for the ROS 2 tests: loopback-only checks, skipping without rclpy, spinning."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from functools import lru_cache

import pytest

from icrl_ros.nodes.shipped import DEFAULT_BUNDLE


def assert_loopback_env() -> None:
    """Refuse to start DDS unless discovery is loopback-only on a private domain."""
    assert os.environ.get("ROS_AUTOMATIC_DISCOVERY_RANGE") == "LOCALHOST", "DDS must stay on this machine"
    assert 100 <= int(os.environ.get("ROS_DOMAIN_ID", "-1")) <= 200, "use a private ROS_DOMAIN_ID"
    assert not os.environ.get("ROS_STATIC_PEERS"), "no static peers in tests"


@lru_cache(maxsize=1)
def ros_import_error() -> str:
    """Empty when rclpy and the message packages import; else why the ROS tests are skipped."""
    try:
        import diagnostic_msgs.msg  # noqa: F401
        import geometry_msgs.msg  # noqa: F401
        import nav_msgs.msg  # noqa: F401
        import rclpy  # noqa: F401
        import rclpy.lifecycle  # noqa: F401
        import rosgraph_msgs.msg  # noqa: F401
        import sensor_msgs.msg  # noqa: F401
        import std_msgs.msg  # noqa: F401
        import std_srvs.srv  # noqa: F401
    except ImportError as e:
        return (f"ROS 2 tests need rclpy and its message packages ({type(e).__name__}: {e}); "
                "install them with scripts/ensure_ros.sh .venv/bin/python or source a ROS 2 install")
    return ""


def require_ros() -> None:
    """Skip the calling test module when rclpy is unavailable."""
    if ros_import_error():
        pytest.skip(ros_import_error(), allow_module_level=True)


def spin_until(executor, predicate: Callable[[], bool], timeout: float, step: float = 0.02) -> bool:
    """Spin ``executor`` until ``predicate()`` or ``timeout`` seconds; returns the predicate."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        executor.spin_once(timeout_sec=step)
    return predicate()


def spin_for(executor, seconds: float, step: float = 0.02) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        executor.spin_once(timeout_sec=step)


REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HOUSE_BUNDLE = os.path.join(REPO, "bundles", DEFAULT_BUNDLE)
"""The shipped default bundle for the MiniWorld house (what an empty ``bundle_path`` resolves to)."""


def require_bundle(name: str) -> str:
    """The path of the shipped bundle ``bundles/<name>``; skips the test when it is missing."""
    path = os.path.join(REPO, "bundles", name)
    if not os.path.isfile(os.path.join(path, "manifest.yaml")):
        pytest.skip(f"{path} is missing: export checkpoints/{name}.pt with training/export.py")
    return path


def require_house_bundle() -> str:
    """The shipped default house bundle's path; skips the test when it is missing."""
    return require_bundle(DEFAULT_BUNDLE)


MEMO_BUNDLE = os.path.join(REPO, "bundles", "house_memo")
"""The shipped Memo bundle for the house (the default): for checks of Memo's summary memory."""


def require_memo_bundle() -> str:
    """The shipped Memo house bundle's path; skips the test when it is missing."""
    return require_bundle("house_memo")


def assert_action_steps(poses: list) -> None:
    """``poses``: (action, pose when it was decided) in order. Each of the first four actions must
    move the base as the house env does: forward 0.25 m straight on, a turn 30 deg in place."""
    import math

    from icrl_ros.nodes.convert import relative_pose

    for (action, before), (_, after) in zip(poses[:4], poses[1:5]):
        rel = relative_pose(before, after)
        if action == 1:
            assert abs(rel[0] - 0.25) <= 0.02 and abs(rel[1]) <= 0.01, rel
        else:
            sign = 1 if action == 2 else -1
            assert abs(math.degrees(rel[2]) - sign * 30.0) <= 2.0, math.degrees(rel[2])
            assert math.hypot(rel[0], rel[1]) <= 0.01
