"""A localiser's pose over real rclpy / DDS on loopback (tests/nodes/conftest.py: LOCALHOST discovery, a private
domain): the bridge publishes a noisy map-frame pose beside drifting odometry from the shared model
(icrl_ros/sim/pose_noise.py), and the agent with pose_source pose_topic acts on the localiser's pose composed
with odometry, stops the base when that pose goes stale and drops back-dated ones."""

from __future__ import annotations

import math
import time

import pytest

from tests.nodes.ros_support import require_ros, spin_for, spin_until

require_ros()

from geometry_msgs.msg import PoseStamped, PoseWithCovarianceStamped, Twist  # noqa: E402
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy  # noqa: E402
from std_msgs.msg import Int32, String  # noqa: E402

from icrl_ros.geometry import compose_pose, wrap_angle  # noqa: E402
from icrl_ros.nodes.convert import (  # noqa: E402
    odometry_msg_to_pose, pose_msg_to_pose, quaternion_from_yaw, stamp_to_seconds,
)
from icrl_ros.nodes.sim_bridge_node import SimBridgeNode  # noqa: E402
from icrl_ros.sim.pose_noise import LocalisationNoise, OdometryDrift, PoseNoise  # noqa: E402
from tests.nodes.probe import Probe  # noqa: E402
from tests.nodes.test_agent_node import make_fake_agent  # noqa: E402
from rclpy.executors import SingleThreadedExecutor  # noqa: E402
from rclpy.parameter import Parameter  # noqa: E402

LATCHED_1 = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL)


def test_bridge_publishes_the_shared_models_noisy_localiser_pose_and_drifting_odometry(ros_context) -> None:
    """The house bridge with localisation error and odometry drift: the localiser pose stays within the model's
    bound of the true map pose, odometry drifts away from it, and both are exactly what the shared model gives
    for the true poses (seeded by [pose_noise_seed, trial])."""
    ex = SingleThreadedExecutor(context=ros_context)
    probe = Probe(ros_context)
    truth, loc = {}, {}
    probe.create_subscription(PoseStamped, "map_pose",
                              lambda m: truth.setdefault(stamp_to_seconds(m.header.stamp), pose_msg_to_pose(m)), 50)
    probe.create_subscription(PoseWithCovarianceStamped, "localiser_pose",
                              lambda m: loc.setdefault(stamp_to_seconds(m.header.stamp), (pose_msg_to_pose(m), m)),
                              LATCHED_1)
    params = {"env_id": "icrl_ros/MiniWorldHouse-v0", "env_kwargs": '{"split": "test"}', "seed": 5,
              "republish_period_s": 0.2, "loc_error_m": 0.15, "loc_error_deg": 3.0, "loc_tau_s": 5.0,
              "odom_scale_error": 0.05, "odom_heading_noise": 0.02, "odom_bias_deg_per_min": 30.0,
              "pose_noise_seed": 17}
    bridge = SimBridgeNode(context=ros_context, parameter_overrides=[Parameter(k, value=v) for k, v in params.items()])
    for n in (probe, bridge):
        ex.add_node(n)
    try:
        assert spin_until(ex, lambda: truth and loc and probe.got["odom"], 10)
        for a in [1, 1, 2, 1, 1, 3, 1, 1, 2, 2, 1, 1]:
            before = max(truth)
            probe.pub_action.publish(Int32(data=a))
            assert spin_until(ex, lambda: max(truth) > before and max(loc) >= max(truth)
                              and stamp_to_seconds(probe.got["odom"][-1].header.stamp) >= max(truth), 5)
        odom = {}
        for m in probe.got["odom"]:
            odom.setdefault(stamp_to_seconds(m.header.stamp), odometry_msg_to_pose(m))
        stamps = sorted(set(truth) & set(loc) & set(odom))
        assert len(stamps) >= 12 and loc[stamps[0]][1].header.frame_id == "map"
        cov = loc[stamps[0]][1].pose.covariance
        assert cov[0] == pytest.approx(0.15 ** 2 / 2) and cov[35] == pytest.approx(math.radians(3.0) ** 2)
        # the shared model on the true poses, stamp by stamp, gives exactly what the bridge published
        model = PoseNoise(LocalisationNoise(0.15, 3.0, 5.0), OdometryDrift(0.05, 0.02, 30.0))
        import numpy as np

        model.rng = np.random.default_rng([17, 0])
        model.reset(truth[stamps[0]])
        prev = stamps[0]
        loc_err, odom_err = [], []
        for s in stamps:
            if s != prev:
                model.advance(truth[s], s - prev)
                prev = s
            for got, want in ((loc[s][0], model.localised), (odom[s], model.odom)):
                assert got[:2] == pytest.approx(want[:2], abs=1e-6) and abs(wrap_angle(got[2] - want[2])) < 1e-6
            t = truth[s]
            loc_err.append(math.hypot(loc[s][0][0] - t[0], loc[s][0][1] - t[1]))
            odom_err.append(math.hypot(odom[s][0] - t[0], odom[s][1] - t[1]))
        assert max(loc_err) <= 0.3 + 1e-6 and max(loc_err) > 0.0  # noisy, within its bound
        assert odom_err[0] == 0.0 and odom_err[-1] > 0.02  # drift grows from the trial's start
    finally:
        ex.shutdown()
        bridge.destroy_node()
        probe.destroy_node()


MAP_FROM_ODOM = (3.0, -2.0, 0.5)


def test_agent_acts_on_the_localised_pose_stops_when_it_goes_stale_and_drops_back_dated_ones(ros_context,
                                                                                              tmp_path) -> None:
    """A base whose odometry reads 20% long; a localiser publishes the true map pose at 2 Hz, stamped 0.1 s late.
    The policy's pose follows the map, not the odometry; without localiser poses the base stops once odometry has
    travelled pose_max_travel_m, nothing acts and the memory is kept; a back-dated pose is counted and dropped."""
    ex = SingleThreadedExecutor(context=ros_context)
    probe = Probe(ros_context)
    pub_loc = probe.create_publisher(PoseWithCovarianceStamped, "localiser_pose", LATCHED_1)
    agent = make_fake_agent(ros_context, tmp_path, script=[1], action_mode="twist", pose_source="pose_topic",
                            pose_max_travel_m=0.6, input_timeout_s=5.0, settle_s=0.0)
    for n in (probe, agent):
        ex.add_node(n)
    true = [0.0, 0.0, 0.0]  # the base in the odometry frame, without the odometry's error
    history: list[tuple[float, tuple, tuple]] = []  # (stamp, true map pose, odometry's map pose)
    last_fix = [-math.inf]

    def send_fix(stamp: float, pose: tuple) -> None:
        msg = PoseWithCovarianceStamped()
        msg.header.stamp.sec, msg.header.stamp.nanosec = int(stamp), int(round((stamp - int(stamp)) * 1e9))
        msg.header.frame_id = "map"
        msg.pose.pose.position.x, msg.pose.pose.position.y = pose[0], pose[1]
        o = msg.pose.pose.orientation
        o.x, o.y, o.z, o.w = quaternion_from_yaw(pose[2])
        pub_loc.publish(msg)

    def drive(seconds: float, localiser: bool = True) -> None:
        t_end = time.monotonic() + seconds
        while time.monotonic() < t_end:
            cmd = probe.got["cmd_vel"][-1] if probe.got["cmd_vel"] else Twist()
            true[0] += cmd.linear.x * 0.05 * math.cos(true[2])
            true[1] += cmd.linear.x * 0.05 * math.sin(true[2])
            true[2] += cmd.angular.z * 0.05
            stamp = time.time()
            odom = (1.2 * true[0], 1.2 * true[1], true[2])  # the odometry reads 20% long
            probe.send_odom(*odom, stamp=stamp)
            history.append((stamp, compose_pose(MAP_FROM_ODOM, tuple(true)), compose_pose(MAP_FROM_ODOM, odom)))
            if localiser and stamp - last_fix[0] >= 0.5:
                late = [h for h in history if h[0] <= stamp - 0.1]
                if late:
                    send_fix(*late[-1][:2])
                    last_fix[0] = stamp
            probe.send_image(stamp=stamp)
            spin_for(ex, 0.05)

    def at(stamp: float) -> tuple:
        """(true map pose, the odometry's map pose) at ``stamp``."""
        return min(history, key=lambda h: abs(h[0] - stamp))[1:]

    try:
        agent.trigger_configure()
        agent.trigger_activate()
        spin_for(ex, 0.3)
        probe.pub_goal.publish(String(data="sofa"))
        drive(0.6, localiser=False)
        assert probe.got["action"] == [] and agent.runner.memory == []  # no localiser pose yet: waits

        def far() -> bool:  # the last step acted at > 0.5 m (true) from the start
            want = at(agent.loop.gate.last_acted)[0] if probe.got["action"] else history[0][1]
            return math.hypot(want[0] - history[0][1][0], want[1] - history[0][1][1]) > 0.5

        assert spin_until(ex, lambda: far() or drive(0.5), 30)
        assert len(probe.got["action"]) >= 2 and any(c.linear.x > 0.05 for c in probe.got["cmd_vel"])
        got = agent.loop.last_pose
        want, odom_map = at(agent.loop.gate.last_acted)
        # the localised pose: the map pose (within the 2 Hz fixes' share of the odometry error), not the odometry's
        assert math.hypot(got[0] - want[0], got[1] - want[1]) < 0.06, (got, want)
        assert math.hypot(odom_map[0] - want[0], odom_map[1] - want[1]) > 0.08
        assert agent.counters["stale_pose"] == 0

        # the localiser stops: the base stops once the odometry has travelled 0.6 m past the last pose
        n_actions, n_memory = len(probe.got["action"]), len(agent.runner.memory)
        assert spin_until(ex, lambda: agent.counters["stale_pose"] >= 1 or drive(0.5, localiser=False), 20)
        drive(0.5, localiser=False)
        assert all(c.linear.x == 0.0 and c.angular.z == 0.0 for c in probe.got["cmd_vel"][-5:])
        acted_stale = len(probe.got["action"]) - n_actions
        assert acted_stale <= 3  # the steps taken before the odometry had travelled 0.6 m past the last pose
        assert len(agent.runner.memory) == n_memory + acted_stale  # nothing else reached the memory
        assert spin_until(ex, lambda: int(probe.status().get("stale_pose", "0")) >= 1, 3)

        # a back-dated pose is counted and does not revive acting
        send_fix(*history[0][:2])
        drive(0.5, localiser=False)
        assert agent.counters["back_dated_poses"] == 1
        assert all(c.linear.x == 0.0 for c in probe.got["cmd_vel"][-5:])
        # a fresh one does, with the memory as it was
        n_actions = len(probe.got["action"])
        drive(3.0)
        assert len(probe.got["action"]) > n_actions and len(agent.runner.memory) > n_memory
    finally:
        ex.shutdown()
        agent.destroy_node()
        probe.destroy_node()
