"""ROS 2 side: agent and simulator-bridge nodes, message conversion, the action executor.

Only this package imports rclpy, and only in the node modules (``agent_node``,
``sim_bridge_node``, ``ros_params``); :mod:`convert` and :mod:`action_executor` are pure numpy /
Python and import without ROS.
"""

from icrl_ros.nodes.action_executor import ActionExecutor, ActionKind, ExecutorConfig
from icrl_ros.nodes.convert import InputError

__all__ = ["ActionExecutor", "ActionKind", "ExecutorConfig", "InputError"]
