"""Start the icrl_ros agent (a lifecycle node) and bring it to active once.

    ros2 launch icrl_ros agent.launch.py bundle:=/path/to/bundle robot:=fetch
    ros2 launch icrl_ros agent.launch.py robot:=fetch device:=cpu backend:=onnxruntime   # no GPU here
    ros2 launch icrl_ros agent.launch.py bundle:=... backend:=tensorrt namespace:=robot1
    ros2 launch icrl_ros agent.launch.py        # the shipped default bundle (house_relic_scan), as the node's empty bundle_path

Arguments
  bundle        export bundle directory; default: the node's (empty bundle_path: the shipped house_relic_scan)
  backend       onnxruntime | torch | tensorrt; empty = the profile's value
  device        cpu | cuda; empty = the profile's value (fetch: cuda)
  robot         sim (config/agent.yaml) | fetch (config/agent.yaml + config/fetch.yaml)
  params_file   an extra parameter file loaded last (overrides the robot profile)
  namespace     namespace of the node and its relative topics
  action_mode   discrete | twist; empty = the profile's value
  use_sim_time  follow /clock for stamps (sim.launch.py sets it; timers and the watchdog stay on
                steady time)
  autostart     configure, then activate after that configure succeeds; once: a later
                deactivate, cleanup or configure is the operator's and is never undone
  introspection true: publish the memory on ~/memory/sightings, route_map, route, looked_at, attention (docs/ros.md);
                empty = the profile's value (off)

SIGTERM to ``ros2 launch`` (``kill``, ``docker stop``) stops the node as Ctrl-C does (zero velocity,
exit); if the launch process is killed outright the node stops by itself (icrl_ros.nodes.launch_signals).

The console script selects the shipped Fast DDS profile (config/fastdds_large_data.xml) unless a
profiles file is set, so camera frames of any size arrive (docs/ros.md).
"""

import os

from ament_index_python.packages import get_package_share_directory
from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument, EmitEvent, OpaqueFunction, RegisterEventHandler
from launch.actions import UnregisterEventHandler
from launch.events import matches_action
from launch_ros.actions import LifecycleNode
from launch_ros.event_handlers import OnStateTransition
from launch_ros.events.lifecycle import ChangeState
from lifecycle_msgs.msg import Transition

from icrl_ros.nodes.launch_signals import node_env, shutdown_on_sigterm

PROFILES = {"sim": ["agent.yaml"], "fetch": ["agent.yaml", "fetch.yaml"]}
TRUE = ("true", "1", "yes")
FALSE = ("false", "0", "no")


def _agent(context, *args, **kwargs):
    arg = context.launch_configurations
    robot = arg["robot"]
    if robot not in PROFILES:
        raise RuntimeError(f"robot: {robot!r} is not one of {sorted(PROFILES)}")
    share = get_package_share_directory("icrl_ros")
    config = os.path.join(share, "config")
    parameters = [os.path.join(config, name) for name in PROFILES[robot]]
    if arg["params_file"]:
        parameters.append(arg["params_file"])
    # bundle:= empty leaves bundle_path to the profile / params_file (empty there = the node's shipped default,
    # icrl_ros.nodes.shipped), as backend, device and action_mode are left
    overrides = {"use_sim_time": arg["use_sim_time"].lower() in TRUE}
    for key, param in (("bundle", "bundle_path"), ("backend", "backend"), ("device", "device"),
                       ("action_mode", "action_mode")):
        if arg[key]:
            overrides[param] = arg[key]
    if arg["introspection"]:
        if arg["introspection"].lower() not in TRUE + FALSE:
            raise RuntimeError(f"introspection: {arg['introspection']!r} is not true or false")
        overrides["introspection"] = arg["introspection"].lower() in TRUE
    parameters.append(overrides)

    node = LifecycleNode(
        package="icrl_ros",
        executable="agent_node",
        name="icrl_agent",
        namespace=arg["namespace"],
        parameters=parameters,
        output="screen",
        additional_env=node_env(),  # the node stops if this launch process dies (SIGKILL)
    )
    actions = [node]
    if arg["autostart"].lower() in TRUE:
        # activate only after *the* configure succeeded (configuring -> inactive), once; a deactivate
        # (active -> deactivating -> inactive) is the operator's and must stay
        activate = RegisterEventHandler(OnStateTransition(
            target_lifecycle_node=node, start_state="configuring", goal_state="inactive", handle_once=True,
            entities=[EmitEvent(event=ChangeState(
                lifecycle_node_matcher=matches_action(node), transition_id=Transition.TRANSITION_ACTIVATE))]))
        # a failed first configure ends autostart too: the operator's own configure stays inactive
        give_up = OnStateTransition(
            target_lifecycle_node=node, start_state="configuring", goal_state="unconfigured", handle_once=True,
            entities=[UnregisterEventHandler(activate.event_handler)])
        configure = EmitEvent(event=ChangeState(
            lifecycle_node_matcher=matches_action(node), transition_id=Transition.TRANSITION_CONFIGURE))
        actions += [activate, RegisterEventHandler(give_up), configure]
    return actions


def generate_launch_description():
    return LaunchDescription([
        shutdown_on_sigterm(),  # kill / docker stop: the node stops the base and exits, as on Ctrl-C
        DeclareLaunchArgument("bundle", default_value="",
                              description="Export bundle directory (default: the node's shipped default, house_relic_scan)"),
        DeclareLaunchArgument("backend", default_value="", description="onnxruntime | torch | tensorrt"),
        DeclareLaunchArgument("device", default_value="", description="cpu | cuda (default: the profile's)"),
        DeclareLaunchArgument("robot", default_value="sim", choices=["sim", "fetch"], description="Parameter profile"),
        DeclareLaunchArgument("params_file", default_value="", description="Extra parameter file, loaded last"),
        DeclareLaunchArgument("namespace", default_value="", description="Node namespace"),
        DeclareLaunchArgument("action_mode", default_value="", description="discrete | twist"),
        DeclareLaunchArgument("use_sim_time", default_value="false", description="Follow /clock for stamps"),
        DeclareLaunchArgument("autostart", default_value="true",
                              description="Configure and activate once on start"),
        DeclareLaunchArgument("introspection", default_value="",
                              description="true: publish the route memory on ~/memory/* (empty: the profile's)"),
        OpaqueFunction(function=_agent),
    ])
