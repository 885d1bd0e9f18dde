"""Start the icrl_ros agent (a lifecycle node) and bring it to active.

    ros2 launch icrl_ros agent.launch.py bundle:=/path/to/bundle robot:=fetch
    ros2 launch icrl_ros agent.launch.py bundle:=... backend:=tensorrt namespace:=robot1
    ros2 launch icrl_ros agent.launch.py        # the shipped house_memo bundle (a barely-trained demo policy)

Arguments
  bundle       export bundle directory; default: the shipped share/icrl_ros/bundles/house_memo
  backend      onnxruntime | torch | tensorrt; empty = the params file's value
  robot        sim (config/agent.yaml) | fetch (config/agent.yaml + config/fetch.yaml)
  params_file  an extra parameter file loaded last (overrides the robot profile)
  namespace    namespace of the node and its relative topics
  action_mode  discrete | twist; empty = the profile's value
  autostart    configure and activate on start (true) or wait for `ros2 lifecycle set`
"""

import os

from ament_index_python.packages import get_package_share_directory
from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument, EmitEvent, OpaqueFunction, RegisterEventHandler
from launch.events import matches_action
from launch_ros.actions import LifecycleNode
from launch_ros.event_handlers import OnStateTransition
from launch_ros.events.lifecycle import ChangeState
from lifecycle_msgs.msg import Transition

PROFILES = {"sim": ["agent.yaml"], "fetch": ["agent.yaml", "fetch.yaml"]}


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
    overrides = {"bundle_path": arg["bundle"] or os.path.join(share, "bundles", "house_memo")}
    for key in ("backend", "action_mode"):
        if arg[key]:
            overrides[key] = arg[key]
    parameters.append(overrides)

    node = LifecycleNode(
        package="icrl_ros",
        executable="agent_node",
        name="icrl_agent",
        namespace=arg["namespace"],
        parameters=parameters,
        output="screen",
    )
    actions = [node]
    if arg["autostart"].lower() in ("true", "1", "yes"):
        configure = EmitEvent(event=ChangeState(
            lifecycle_node_matcher=matches_action(node), transition_id=Transition.TRANSITION_CONFIGURE))
        activate = RegisterEventHandler(OnStateTransition(
            target_lifecycle_node=node, goal_state="inactive",
            entities=[EmitEvent(event=ChangeState(
                lifecycle_node_matcher=matches_action(node), transition_id=Transition.TRANSITION_ACTIVATE))]))
        actions += [activate, configure]
    return actions


def generate_launch_description():
    return LaunchDescription([
        DeclareLaunchArgument("bundle", default_value="",
                              description="Export bundle directory (default: share/icrl_ros/bundles/house_memo)"),
        DeclareLaunchArgument("backend", default_value="", description="onnxruntime | torch | tensorrt"),
        DeclareLaunchArgument("robot", default_value="sim", choices=["sim", "fetch"], description="Parameter profile"),
        DeclareLaunchArgument("params_file", default_value="", description="Extra parameter file, loaded last"),
        DeclareLaunchArgument("namespace", default_value="", description="Node namespace"),
        DeclareLaunchArgument("action_mode", default_value="", description="discrete | twist"),
        DeclareLaunchArgument("autostart", default_value="true", description="Configure and activate on start"),
        OpaqueFunction(function=_agent),
    ])
