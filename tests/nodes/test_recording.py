"""The ``icrl_record`` console script (icrl_ros.nodes.recording) in its own process: it records a namespace's
topics to MCAP until SIGINT, and the file reads back with another reader (rosbags) and rclpy's typesupport."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.nodes.ros_support import REPO, require_ros, spin_for, spin_until

require_ros()

from geometry_msgs.msg import Twist  # noqa: E402
from rclpy.executors import SingleThreadedExecutor  # noqa: E402
from std_msgs.msg import String  # noqa: E402

from tests.nodes.probe import Probe  # noqa: E402
from tests.nodes.test_agent_safety import _env, stop  # noqa: E402


@pytest.mark.parametrize("best_effort", ["", "cmd_vel,odom"])
def test_icrl_record_writes_what_was_published_until_sigint(ros_context, tmp_path, best_effort) -> None:
    ns = "/rec" + ("_be" if best_effort else "")
    path = tmp_path / "rec.mcap"
    ex = SingleThreadedExecutor(context=ros_context)
    probe = Probe(ros_context, namespace=ns, subscribe=False)
    pub_cmd = probe.create_publisher(Twist, "cmd_vel", 10)
    ex.add_node(probe)
    log = open(tmp_path / "rec.log", "wb")
    proc = subprocess.Popen([sys.executable, "-m", "icrl_ros.nodes.recording", "--ros-args", "-r", f"__ns:={ns}",
                             "-p", f"path:={path}", *(["-p", f"best_effort_topics:={best_effort}"] if best_effort
                                                        else [])], cwd=REPO, env=_env(), stdout=log, stderr=subprocess.STDOUT)
    try:
        probe.pub_goal.publish(String(data="chair"))  # latched: recorded even though sent before it subscribed
        # matched by both publishers (best effort: a message sent before the match is simply not delivered)
        assert spin_until(ex, lambda: pub_cmd.get_subscription_count() > 0
                          and probe.pub_odom.get_subscription_count() > 0, 30), \
            (tmp_path / "rec.log").read_text()
        spin_for(ex, 0.5)  # the match settles on both sides
        for k in range(20):
            msg = Twist()
            msg.linear.x = 0.01 * k
            pub_cmd.publish(msg)
            probe.send_odom(0.1 * k, 0.0, 0.0, stamp=10.0 + k)
            spin_for(ex, 0.02)
        spin_for(ex, 0.5)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=20) == 0, (tmp_path / "rec.log").read_text()
    finally:
        stop(proc)
        ex.shutdown()
        probe.destroy_node()
    from rclpy.serialization import deserialize_message
    from rosbags.highlevel import AnyReader

    from icrl_ros.nodes.recording import message_class

    got: dict[str, list] = {}
    with AnyReader([Path(path)]) as reader:
        for conn, _t, raw in reader.messages():
            got.setdefault(conn.topic, []).append(deserialize_message(raw, message_class(conn.msgtype)))
    # every message, once (in the order received: a reliable resend right after the match can come late)
    assert sorted(m.linear.x for m in got[f"{ns}/cmd_vel"]) == [0.01 * k for k in range(20)]
    assert sorted(m.pose.pose.position.x for m in got[f"{ns}/odom"]) == [0.1 * k for k in range(20)]
    assert [m.data for m in got[f"{ns}/goal"]] == ["chair"]
    assert f"wrote {path}" in (tmp_path / "rec.log").read_text()
