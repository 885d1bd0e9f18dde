#!/usr/bin/env bash
# Container entrypoint: source ROS 2 and the workspace, then `ros2 launch icrl_ros <file> <args>`.
#   first argument: the launch file (agent.launch.py, sim.launch.py, habitat.launch.py)
#   the rest: launch arguments, e.g. bundle:=/bundle robot:=fetch backend:=tensorrt
set -eo pipefail
source "/opt/ros/${ROS_DISTRO:-kilted}/setup.bash"
source /ws/install/setup.bash
launch_file="${1:-agent.launch.py}"
shift || true
exec ros2 launch icrl_ros "${launch_file}" "$@"
