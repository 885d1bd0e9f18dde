"""Simulator bridge + agent: the agent tested against a simulated house before a robot.

    ros2 launch icrl_ros sim.launch.py                                  # the shipped default bundle (house_relic_scan)
    ros2 launch icrl_ros sim.launch.py bundle:=/path/to/bundle
    ros2 launch icrl_ros sim.launch.py bundle:=... mode:=realtime      # cmd_vel through the executor

Arguments
  bundle       export bundle directory; default: the node's shipped default (house_relic_scan)
  backend      onnxruntime | torch | tensorrt; empty = config/agent.yaml's value
  device       cpu | cuda; empty = config/agent.yaml's value (cpu)
  env_id       registered Gymnasium id (default: the MiniWorld house)
  env_kwargs   JSON keyword arguments for the env
  mode         lockstep (agent publishes Int32 actions) | realtime (agent drives cmd_vel)
  seed         first trial's seed
  namespace    namespace of both nodes
  introspection  true: the agent publishes its memory on ~/memory/sightings, route_map, route, looked_at and
               attention (docs/ros.md)
  rviz         true: also start RViz2 (where it is installed) with config/memory.rviz: the route map, the
               looked-at floor, the remembered sightings, the route, the bridge's true objects and the
               odometry (sets introspection:=true); config/memory.foxglove.json is the same view for Foxglove
  record       an MCAP file to record the run to (camera, odometry, scan, goal, events, actions, cmd_vel,
               status; icrl_ros.nodes.recording); empty = no recording

SIGTERM to ``ros2 launch`` (``kill``, ``docker stop``) stops both nodes as Ctrl-C does; if the launch
process is killed outright they stop by themselves (icrl_ros.nodes.launch_signals).

The agent runs with use_sim_time:=true (its stamps follow the bridge's /clock; its timers and
watchdog stay on steady time, so a paused simulator cannot stall them).
"""

import os

from ament_index_python.packages import get_package_share_directory
from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument, IncludeLaunchDescription, OpaqueFunction
from launch.launch_description_sources import PythonLaunchDescriptionSource
from launch_ros.actions import Node

from icrl_ros.nodes.launch_signals import node_env, shutdown_on_sigterm

MEMORY_TOPICS = ("sightings", "route_map", "route", "looked_at", "attention", "attention_image")
"""The agent's ~/memory topics (icrl_ros.nodes.introspection), remapped for RViz under a namespace."""


def _nodes(context, *args, **kwargs):
    arg = context.launch_configurations
    share = get_package_share_directory("icrl_ros")
    mode = arg["mode"]
    if mode not in ("lockstep", "realtime"):
        raise RuntimeError(f"mode: {mode!r} is not lockstep or realtime")
    bridge = Node(
        package="icrl_ros",
        executable="sim_bridge_node",
        name="sim_bridge",
        namespace=arg["namespace"],
        parameters=[
            os.path.join(share, "config", "bridge.yaml"),
            {"env_id": arg["env_id"], "env_kwargs": arg["env_kwargs"], "mode": mode, "seed": int(arg["seed"])},
        ],
        output="screen",
        additional_env=node_env(),  # the bridge stops if this launch process dies (SIGKILL)
    )
    rviz = arg["rviz"].lower() in ("true", "1", "yes")
    agent = IncludeLaunchDescription(
        PythonLaunchDescriptionSource(os.path.join(share, "launch", "agent.launch.py")),
        launch_arguments={
            "bundle": arg["bundle"],
            "backend": arg["backend"],
            "device": arg["device"],
            "robot": "sim",
            "use_sim_time": "true",
            "namespace": arg["namespace"],
            "action_mode": "discrete" if mode == "lockstep" else "twist",
            "introspection": "true" if rviz else arg["introspection"],
        }.items(),
    )
    actions = [bridge, agent]
    if rviz:  # the memory beside the robot; topics under a namespace are remapped onto the config's names
        ns = "/" + arg["namespace"].strip("/") if arg["namespace"].strip("/") else ""
        actions.append(Node(
            package="rviz2",
            executable="rviz2",
            name="rviz2",
            arguments=["-d", os.path.join(share, "config", "memory.rviz")],
            parameters=[{"use_sim_time": True}],  # the messages carry the bridge's /clock stamps
            remappings=[(f"/{t}", f"{ns}/{t}") for t in (*(f"icrl_agent/memory/{m}" for m in MEMORY_TOPICS),
                                                           "true_objects", "odom")] if ns else [],
            output="screen",
        ))
    if arg["record"]:  # the run to MCAP (icrl_ros.nodes.recording); Ctrl-C / SIGTERM finishes the file
        actions.append(Node(
            package="icrl_ros",
            executable="icrl_record",
            name="icrl_recorder",
            namespace=arg["namespace"],
            parameters=[{"path": os.path.abspath(os.path.expanduser(arg["record"]))}],
            output="screen",
            additional_env=node_env(),
        ))
    return actions


def generate_launch_description():
    return LaunchDescription([
        shutdown_on_sigterm(),  # kill / docker stop: both nodes stop (the agent's last command a zero), as on Ctrl-C
        DeclareLaunchArgument("bundle", default_value="",
                              description="Export bundle directory (default: the node's shipped default, house_relic_scan)"),
        DeclareLaunchArgument("backend", default_value="", description="onnxruntime | torch | tensorrt"),
        DeclareLaunchArgument("device", default_value="", description="cpu | cuda"),
        DeclareLaunchArgument("env_id", default_value="icrl_ros/MiniWorldHouse-v0", description="Gymnasium id"),
        DeclareLaunchArgument("env_kwargs", default_value="{}", description="JSON env keyword arguments"),
        DeclareLaunchArgument("mode", default_value="lockstep", choices=["lockstep", "realtime"]),
        DeclareLaunchArgument("seed", default_value="0"),
        DeclareLaunchArgument("namespace", default_value=""),
        DeclareLaunchArgument("introspection", default_value="",
                              description="true: the agent publishes its route memory on ~/memory/* (docs/ros.md)"),
        DeclareLaunchArgument("rviz", default_value="false",
                              description="true: RViz2 with config/memory.rviz (the agent's memory; needs rviz2)"),
        DeclareLaunchArgument("record", default_value="",
                              description="record the run to this MCAP file (training/replay.py replays it)"),
        OpaqueFunction(function=_nodes),
    ])
