"""A test node that records what the nodes under test publish and feeds them inputs."""

from __future__ import annotations

import json
from collections import defaultdict
from typing import Any

from diagnostic_msgs.msg import DiagnosticArray
from geometry_msgs.msg import Twist
from nav_msgs.msg import Odometry
from rclpy.node import Node
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
from rosgraph_msgs.msg import Clock
from sensor_msgs.msg import CameraInfo, Image
from std_msgs.msg import Float32, Int32, String

from icrl_ros.nodes.convert import quaternion_from_yaw, stamp_to_seconds

LATCHED = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL)


class Probe(Node):
    """Subscribes to every output topic; ``got[topic]`` lists the messages in arrival order."""

    def __init__(self, context, namespace: str = "", subscribe: bool = True) -> None:
        super().__init__("probe", context=context, namespace=namespace)
        self.got: dict[str, list[Any]] = defaultdict(list)
        self.on_action = None  # optional hook called with each Int32 action
        if subscribe:
            for topic, kind, qos in [
                ("camera/image_raw", Image, 10), ("camera/camera_info", CameraInfo, 10), ("odom", Odometry, 50),
                ("goal", String, LATCHED), ("reward", Float32, 50), ("episode_events", String, LATCHED),
                ("action", Int32, 50), ("cmd_vel", Twist, 200), ("agent_status", DiagnosticArray, 10),
            ]:
                self.create_subscription(kind, topic, self._recorder(topic), qos)
            self.create_subscription(Clock, "/clock", self._recorder("/clock"), 50)
        self.pub_action = self.create_publisher(Int32, "action", 10)
        self.pub_image = self.create_publisher(Image, "camera/image_raw", 10)
        self.pub_odom = self.create_publisher(Odometry, "odom", 10)
        self.pub_goal = self.create_publisher(String, "goal", LATCHED)
        self.pub_events = self.create_publisher(String, "episode_events", LATCHED)

    def _recorder(self, topic: str):
        def record(msg: Any) -> None:
            self.got[topic].append(msg)
            if topic == "action" and self.on_action is not None:
                self.on_action(msg)
        return record

    # --- views ----------------------------------------------------------------------------------
    def image_stamps(self) -> list[float]:
        """Distinct image stamps in arrival order (republished observations collapse)."""
        out: list[float] = []
        for m in self.got["camera/image_raw"]:
            s = stamp_to_seconds(m.header.stamp)
            if not out or s != out[-1]:
                out.append(s)
        return out

    def events(self) -> list[dict[str, Any]]:
        return [json.loads(m.data) for m in self.got["episode_events"]]

    def status(self) -> dict[str, str]:
        if not self.got["agent_status"]:
            return {}
        return {kv.key: kv.value for kv in self.got["agent_status"][-1].status[0].values}

    # --- inputs ---------------------------------------------------------------------------------
    def send_odom(self, x: float, y: float, yaw: float, stamp: float) -> None:
        msg = Odometry()
        msg.header.stamp.sec = int(stamp)
        msg.header.stamp.nanosec = int(round((stamp - int(stamp)) * 1e9))
        msg.pose.pose.position.x, msg.pose.pose.position.y = x, y
        o = msg.pose.pose.orientation
        o.x, o.y, o.z, o.w = quaternion_from_yaw(yaw)
        self.pub_odom.publish(msg)

    def send_image(self, stamp: float, height: int = 12, width: int = 20, encoding: str = "rgb8",
                   step: int | None = None, data: bytes | None = None, value: int = 100) -> None:
        channels = {"rgb8": 3, "bgr8": 3, "rgba8": 4, "bgra8": 4, "mono8": 1}.get(encoding, 3)
        step = width * channels if step is None else step
        if data is None:
            data = bytes([value % 256]) * (step * height)
        msg = Image(height=height, width=width, encoding=encoding, step=step, data=data)
        msg.header.stamp.sec = int(stamp)
        msg.header.stamp.nanosec = int(round((stamp - int(stamp)) * 1e9))
        self.pub_image.publish(msg)
