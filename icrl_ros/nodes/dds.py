"""The DDS set-up the nodes start with. Pure Python (no ROS import).

Fast DDS (the default middleware) moves data between processes on one host through shared
memory, in a segment the *publishing* process allocates: 512 kB by default, less than one
640x480 RGB frame (921,600 bytes). Larger best-effort messages then lose fragments and most
frames never arrive. ``config/fastdds_large_data.xml`` gives each participant a 64 MB segment
(ten 1080p frames). The console scripts select it before rclpy starts unless the user has chosen
a DDS set-up of their own (a profiles file, another middleware); a camera driver in another
process needs the same (docs/ros.md says how).
"""

from __future__ import annotations

import os
from collections.abc import MutableMapping

from icrl_ros.nodes.shipped import package_roots

PROFILE = "fastdds_large_data.xml"
PROFILE_VARS = ("FASTDDS_DEFAULT_PROFILES_FILE", "FASTRTPS_DEFAULT_PROFILES_FILE")


def shipped_profile() -> str:
    """``config/fastdds_large_data.xml`` of the checkout, else of share/icrl_ros; '' if neither."""
    for root in package_roots():
        path = root / "config" / PROFILE
        if path.is_file():
            return str(path)
    return ""


def use_shipped_profile(env: MutableMapping[str, str] | None = None) -> str:
    """Point Fast DDS at the shipped profile in ``env`` (default: this process's environment) and
    return its path; '' (nothing changed) when another middleware is selected, a profiles file is
    already set, or ``ICRL_ROS_DDS_PROFILE=0``."""
    env = os.environ if env is None else env
    rmw = env.get("RMW_IMPLEMENTATION", "")
    if rmw and not rmw.startswith("rmw_fastrtps"):
        return ""
    if any(env.get(v) for v in PROFILE_VARS) or env.get("ICRL_ROS_DDS_PROFILE", "1") == "0":
        return ""
    path = shipped_profile()
    if path:
        env["FASTDDS_DEFAULT_PROFILES_FILE"] = path
    return path


__all__ = ["PROFILE", "shipped_profile", "use_shipped_profile"]
