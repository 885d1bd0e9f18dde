"""Where the shipped bundles live, and how ``bundle_path`` is resolved. Pure Python (no ROS).

A checkout has ``bundles/<name>/`` at the repository root; ``colcon build`` / ``pip install``
put the same directories under ``<prefix>/share/icrl_ros/bundles/<name>/`` (``setup.py``
``data_files``). ``bundle_path`` may be empty (the default bundle), absolute, ``~``-relative, or
relative: a relative path is tried against the working directory first, then against the
checkout root and the installed share directory, so ``bundles/house_memo`` works from anywhere.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

PACKAGE = "icrl_ros"
DEFAULT_BUNDLE = "house_relic_scan"
"""The shipped default: a ReLIC policy for the MiniWorld house with the object, place and route memories,
a stop rule and a route-following head that reads a laser scan (``sensor_msgs/LaserScan``; the sim
bridges publish one), a student of the in-context house teacher. Held out it finds the goal in 0.20 of
first episodes and 0.47 over episodes 10-20 (held out: 100 houses x 20 episodes). A robot without a laser runs
``house_memo`` (images and odometry only)."""


def checkout_root() -> Path | None:
    """The repository root when this package runs from a source checkout (not installed)."""
    root = Path(__file__).resolve().parents[2]
    return root if (root / "setup.py").is_file() and (root / PACKAGE / "nodes").is_dir() else None


def share_dirs() -> list[Path]:
    """Candidate ``share/icrl_ros`` directories: the ament index (ROS install), then the Python prefixes."""
    out: list[Path] = []
    try:  # a sourced ROS 2 workspace (the PyPI wheels ship ament_index_python without an index)
        from ament_index_python.packages import get_package_share_directory

        out.append(Path(get_package_share_directory(PACKAGE)))
    except (ImportError, LookupError, OSError):  # not installed, not in the index, AMENT_PREFIX_PATH unset
        pass
    for prefix in dict.fromkeys((sys.prefix, sys.base_prefix, os.path.expanduser("~/.local"))):
        out.append(Path(prefix) / "share" / PACKAGE)
    return out


def package_roots() -> list[Path]:
    """The checkout root (when running from one), then the installed share directories."""
    root = checkout_root()
    return list(dict.fromkeys(([root] if root is not None else []) + share_dirs()))


def default_bundle_path() -> str:
    """``bundles/<DEFAULT_BUNDLE>`` of the checkout, else of the installed share directory; '' if neither."""
    for root in package_roots():
        candidate = root / "bundles" / DEFAULT_BUNDLE
        if (candidate / "manifest.yaml").is_file():
            return str(candidate)
    return ""


def resolve_bundle_path(path: str) -> tuple[str, list[str]]:
    """``(resolved, tried)``: the bundle directory ``path`` names, or ``('', tried)`` when none exists.

    Empty ``path`` = the shipped default bundle. ``tried`` lists every candidate checked, for
    the error message.
    """
    if not path:
        return default_bundle_path(), [str(r / "bundles" / DEFAULT_BUNDLE) for r in package_roots()]
    p = Path(os.path.expanduser(path))
    if p.is_absolute():
        return (str(p) if p.exists() else ""), [str(p)]
    tried = []
    for root in dict.fromkeys([Path.cwd(), *package_roots()]):
        candidate = root / p
        tried.append(str(candidate))
        if candidate.exists():
            return str(candidate), tried
    return "", tried


__all__ = ["DEFAULT_BUNDLE", "checkout_root", "default_bundle_path", "package_roots", "resolve_bundle_path",
           "share_dirs"]
