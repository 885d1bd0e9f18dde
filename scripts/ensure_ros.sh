#!/usr/bin/env bash
# Make rclpy and the message packages the ROS 2 nodes use importable from a Python.
#
#   scripts/ensure_ros.sh [PYTHON]        (default: python3; the Makefile passes .venv/bin/python)
#
# If `import rclpy` already works (a sourced ROS 2 install: /opt/ros/<distro>/setup.bash), this
# installs nothing, so a real ROS install is never shadowed. Otherwise it installs the ROS 2
# Kilted PyPI wheels (rclpy + Fast DDS + the message packages) into that Python's environment.
#
# About the wheels: their native libraries live in <venv>/lib and <site-packages>/ros_*.libs.
# They pull in `ros-wheels-bootstrapper`, whose .pth file re-executes the interpreter once at
# start-up with LD_LIBRARY_PATH pointing there (guard variable _ROS_WHEELS_BOOTSTRAP_COMPLETE).
# RMW_IMPLEMENTATION may stay unset: rmw_fastrtps_cpp is the only middleware installed and the
# default. DDS stays on the host only with ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST and a private
# ROS_DOMAIN_ID (tests/nodes/conftest.py sets both); this script starts no node.
set -euo pipefail

PY="${1:-python3}"
KILTED=(
    "ros-kilted-rclpy[fastrtps]==9.1.2"
    "ros-kilted-std-msgs==5.5.1"
    "ros-kilted-std-srvs==5.5.1"
    "ros-kilted-sensor-msgs==5.5.1"
    "ros-kilted-geometry-msgs==5.5.1"
    "ros-kilted-nav-msgs==5.5.1"
    "ros-kilted-diagnostic-msgs==5.5.1"
    "ros-kilted-rosgraph-msgs==2.3.0"
    "ros-kilted-lifecycle-msgs==2.3.0"
    "ros-kilted-visualization-msgs==5.5.1"
)
# Modules the nodes import (rclpy.lifecycle ships inside rclpy).
CHECK="import rclpy, rclpy.lifecycle, std_msgs.msg, std_srvs.srv, sensor_msgs.msg, geometry_msgs.msg, nav_msgs.msg, diagnostic_msgs.msg, rosgraph_msgs.msg, lifecycle_msgs.msg, visualization_msgs.msg"

# Importing only loads libraries; no DDS participant exists until rclpy.init().
# The guard is cleared so the wheels' bootstrapper (if any) sets the library path afresh.
try_import() { env -u _ROS_WHEELS_BOOTSTRAP_COMPLETE "$PY" -c "$1" >/dev/null 2>&1; }

if try_import "import rclpy"; then
    where=$(env -u _ROS_WHEELS_BOOTSTRAP_COMPLETE "$PY" -c "import os, rclpy; print(os.path.dirname(rclpy.__file__))")
    if try_import "$CHECK"; then
        echo "ensure_ros: rclpy found at $where; nothing to install"
    elif "$PY" -m pip show -q ros-kilted-rclpy >/dev/null 2>&1; then
        # rclpy from the Kilted wheels (an older venv): add the message wheels added since
        echo "ensure_ros: rclpy from the Kilted wheels at $where; installing the missing message wheels"
        "$PY" -m pip install -q "${KILTED[@]}"
        try_import "$CHECK" || { env -u _ROS_WHEELS_BOOTSTRAP_COMPLETE "$PY" -c "$CHECK" >&2; exit 1; }
    else
        echo "ensure_ros: rclpy found at $where but a message package is missing;" \
             "install it with your ROS distribution (e.g. apt install ros-\$ROS_DISTRO-nav-msgs" \
             "ros-\$ROS_DISTRO-diagnostic-msgs ros-\$ROS_DISTRO-std-srvs ros-\$ROS_DISTRO-visualization-msgs); installing nothing" >&2
    fi
    exit 0
fi

echo "ensure_ros: no rclpy for $PY; installing the ROS 2 Kilted wheels"
"$PY" -m pip install -q "${KILTED[@]}"

if ! try_import "$CHECK"; then
    echo "ensure_ros: the wheels installed but '$CHECK' still fails:" >&2
    env -u _ROS_WHEELS_BOOTSTRAP_COMPLETE "$PY" -c "$CHECK" >&2 || true
    exit 1
fi
echo "ensure_ros: rclpy ready ($(env -u _ROS_WHEELS_BOOTSTRAP_COMPLETE "$PY" -c 'import rclpy, os; print(os.path.dirname(rclpy.__file__))'))"
