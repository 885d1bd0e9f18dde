"""package.xml: every key resolves with the real ``rosdep``, and every ROS package the nodes and
launch files import is declared.

No network index is reachable here, so ``rosdep`` (from PyPI) reads a local copy of the rosdistro
data: ``tests/nodes/data/rosdistro/`` holds the kilted index entry, the kilted distribution
repositories that release our ROS dependencies and the ``rosdep/base.yaml`` / ``python.yaml``
rules of our other keys, copied verbatim from ros/rosdistro by ``update.py`` there (the commit is
in each file's first line). A key that is not in the real data is not in the copy either, so
``rosdep install --simulate --from-paths . --ignore-src`` fails on it here as it would against
the full index (``rclpy_lifecycle`` did).
"""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DATA = os.path.join(REPO, "tests", "nodes", "data", "rosdistro")

# top-level Python modules that are ROS packages (ament / message packages) -> their package name
ROS_MODULES = {"rclpy", "rcl_interfaces", "builtin_interfaces", "lifecycle_msgs", "std_msgs", "std_srvs",
               "sensor_msgs", "geometry_msgs", "nav_msgs", "diagnostic_msgs", "rosgraph_msgs", "tf2_msgs",
               "visualization_msgs", "tf2_ros", "ament_index_python", "launch", "launch_ros", "composition_interfaces", "rclpy_lifecycle"}


def declared(text: str | None = None) -> dict[str, set[str]]:
    text = text if text is not None else open(os.path.join(REPO, "package.xml")).read()
    text = re.sub(r"<!--.*?-->", "", text, flags=re.S)
    out: dict[str, set[str]] = {}
    for tag, key in re.findall(r"<(\w*depend)>([^<]+)<", text):
        out.setdefault(tag, set()).add(key.strip())
    return out


def imported_ros_modules() -> set[str]:
    files = [os.path.join(REPO, "icrl_ros", "nodes", f) for f in os.listdir(os.path.join(REPO, "icrl_ros", "nodes"))
             if f.endswith(".py")]
    files += [os.path.join(REPO, "launch", f) for f in os.listdir(os.path.join(REPO, "launch")) if f.endswith(".py")]
    mods = set()
    for path in files:
        for node in ast.walk(ast.parse(open(path).read(), path)):
            if isinstance(node, ast.Import):
                mods |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                mods.add(node.module.split(".")[0])
    return mods & ROS_MODULES


def test_every_imported_ros_package_is_declared_and_nothing_unused() -> None:
    deps = declared()["exec_depend"]
    used = imported_ros_modules()
    assert used - deps == set(), f"imported but not in package.xml: {sorted(used - deps)}"
    ros_declared = deps & ROS_MODULES
    assert ros_declared - used == set(), f"declared but never imported: {sorted(ros_declared - used)}"
    assert "rclpy_lifecycle" not in deps  # rclpy.lifecycle is part of rclpy; not a rosdep key


def rosdep_simulate(rosdep: str, tmp_path, package_dir: str) -> subprocess.CompletedProcess:
    sources = tmp_path / "sources.list.d"
    sources.mkdir(exist_ok=True)
    (sources / "20-default.list").write_text(
        "".join(f"yaml file://{os.path.join(DATA, name)}\n" for name in ("base.yaml", "python.yaml")))
    env = dict(os.environ, ROSDEP_SOURCE_PATH=str(sources), ROS_HOME=str(tmp_path / "ros_home"),
               ROSDISTRO_INDEX_URL=f"file://{os.path.join(DATA, 'index-v4.yaml')}", ROS_DISTRO="kilted")
    update = subprocess.run([rosdep, "update", "--rosdistro", "kilted"], env=env, capture_output=True, text=True)
    assert update.returncode == 0, update.stdout + update.stderr
    return subprocess.run([rosdep, "install", "--simulate", "--from-paths", package_dir, "--ignore-src",
                           "--rosdistro", "kilted", "--os", "ubuntu:noble", "-y"],
                          env=env, capture_output=True, text=True)


@pytest.mark.slow  # ~25 s (rosdep's own resolution of every key); `make test-all` runs it
def test_rosdep_resolves_every_key(rosdep_tool, tmp_path) -> None:
    pkg = tmp_path / "src" / "icrl_ros"
    pkg.mkdir(parents=True)
    shutil.copy(os.path.join(REPO, "package.xml"), pkg / "package.xml")
    out = rosdep_simulate(rosdep_tool, tmp_path, str(tmp_path / "src"))
    text = out.stdout + out.stderr
    assert out.returncode == 0 and "Cannot locate" not in text, text
    for apt in ("ros-kilted-rclpy", "ros-kilted-launch-ros", "ros-kilted-tf2-msgs", "ros-kilted-ament-index-python"):
        assert apt in text, text
    assert "onnxruntime" in text and "gymnasium" in text  # pip keys

    # the same check fails on the key that used to be there
    (pkg / "package.xml").write_text(open(os.path.join(REPO, "package.xml")).read().replace(
        "<exec_depend>rclpy</exec_depend>", "<exec_depend>rclpy</exec_depend>\n  <exec_depend>rclpy_lifecycle</exec_depend>"))
    out = rosdep_simulate(rosdep_tool, tmp_path, str(tmp_path / "src"))
    assert out.returncode != 0 and "Cannot locate rosdep definition for [rclpy_lifecycle]" in out.stdout + out.stderr
