"""Habitat ExtObjNav through the same bridge + agent (run inside the Habitat docker image).

    ros2 launch icrl_ros habitat.launch.py bundle:=/path/to/bundle

habitat-sim is not on PyPI for this Python: use docker/Dockerfile.habitat. The env id must be
the one registered by icrl_ros.sim's Habitat backend; its keyword arguments (habitat-lab config,
scene dataset, split) go in env_kwargs as JSON.

Arguments: bundle, backend, env_id, env_kwargs, mode, seed, namespace (as sim.launch.py).
"""

import os

from ament_index_python.packages import get_package_share_directory
from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument, IncludeLaunchDescription
from launch.launch_description_sources import PythonLaunchDescriptionSource
from launch.substitutions import LaunchConfiguration


def generate_launch_description():
    share = get_package_share_directory("icrl_ros")
    names = ["bundle", "backend", "env_id", "env_kwargs", "mode", "seed", "namespace"]
    return LaunchDescription([
        DeclareLaunchArgument("bundle", description="Export bundle directory"),
        DeclareLaunchArgument("backend", default_value=""),
        DeclareLaunchArgument("env_id", default_value="icrl_ros/HabitatExtObjNav-v0",
                              description="Gymnasium id of the Habitat backend in icrl_ros.sim"),
        DeclareLaunchArgument("env_kwargs", default_value='{"split": "val"}',
                              description="JSON keyword arguments for the Habitat env"),
        DeclareLaunchArgument("mode", default_value="lockstep", choices=["lockstep", "realtime"]),
        DeclareLaunchArgument("seed", default_value="0"),
        DeclareLaunchArgument("namespace", default_value=""),
        IncludeLaunchDescription(
            PythonLaunchDescriptionSource(os.path.join(share, "launch", "sim.launch.py")),
            launch_arguments={n: LaunchConfiguration(n) for n in names}.items(),
        ),
    ])
