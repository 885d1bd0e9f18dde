"""A short `make demo` (training/demo_ros.py): bridge and agent processes over loopback DDS, the
shipped default bundle (it reads the bridge's laser scan), 2 episodes of at most 20 steps; the table, the plots and
the GIF; its recording (run.mcap) read back with another reader, and replayed (training/replay.py): the same bundle
takes every recorded action, another one parts (a diff table), CLI mistakes are one line."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np

from tests.nodes.ros_support import REPO, assert_loopback_env, require_house_bundle, require_ros

require_ros()


def test_short_demo_runs_two_episodes_and_writes_its_pictures(tmp_path) -> None:
    bundle = require_house_bundle()
    assert_loopback_env()
    out = tmp_path / "demo_out"
    env = dict(os.environ, OMP_NUM_THREADS="1")
    proc = subprocess.run(
        [sys.executable, "training/demo_ros.py", "--bundle", bundle, "--episodes", "2", "--max-steps", "20",
         "--out", str(out), "--timeout", "150", "--domain-id", os.environ["ROS_DOMAIN_ID"]],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=200)
    text = proc.stdout + proc.stderr
    assert proc.returncode == 0, text[-4000:]
    assert "DDS on loopback only" in text and "episode 2/2 ended" in text
    assert "act mean" in text and "mem tokens" in text  # the per-episode table

    summary = json.loads((out / "episodes.json").read_text())
    rows = summary["episodes"]
    assert [r["episode"] for r in rows] == [0, 1] and summary["split"] == "test"
    for r in rows:
        assert 1 <= r["steps"] <= 20 and r["agent_steps"] == r["steps"]  # one action per bridge step
        assert 0.0 <= r["spl"] <= 1.0 and r["act_mean_ms"] > 0 and r["memory_bytes"] > 0
    # memory carries from the first episode into the second
    assert rows[1]["memory_tokens"] == rows[0]["memory_tokens"] + rows[1]["steps"]

    import matplotlib.image as mpimg
    from PIL import Image

    for name in ("icl_curve.png", "top_down.png", "memory_ep01.png", "memory_ep02.png"):
        img = mpimg.imread(out / name)
        assert img.ndim == 3 and img.shape[0] > 200 and img.shape[1] > 300, (name, img.shape)
        assert float(np.std(img[..., :3])) > 0.05, f"{name} looks blank"
    gif = Image.open(out / "camera.gif")
    assert gif.n_frames == sum(r["steps"] for r in rows)  # one camera frame per step
    assert gif.size[0] >= 64 * 3
    assert (out / "logs" / "agent.log").stat().st_size > 0 and (out / "logs" / "bridge.log").stat().st_size > 0
    # the memory pictures pair each remembered category with the truth (the bridge's true objects, received)
    for r in rows:
        mem = r["memory"]["remembered_m_to_truth"]
        assert all(d is None or 0.0 <= d < 40.0 for d in mem.values()), mem

    check_recording(out / "run.mcap", rows)
    check_replay(out / "run.mcap", bundle, sum(r["steps"] for r in rows))
    check_laser_bundle_replay(out / "run.mcap", tmp_path, sum(r["steps"] for r in rows))


def check_recording(path, rows) -> None:
    """run.mcap read back by another reader (rosbags) and the messages decoded by ROS's own typesupport (rclpy)."""
    from pathlib import Path

    from rclpy.serialization import deserialize_message
    from rosbags.highlevel import AnyReader

    from icrl_ros.nodes.recording import message_class

    with AnyReader([Path(path)]) as reader:
        types = {c.topic: c.msgtype for c in reader.connections}
        ns = "/icrl_demo"
        assert types[f"{ns}/camera/image_raw"] == "sensor_msgs/msg/Image" and types[f"{ns}/odom"] == \
            "nav_msgs/msg/Odometry" and types[f"{ns}/scan"] == "sensor_msgs/msg/LaserScan"
        assert types[f"{ns}/action"] == "std_msgs/msg/Int32" and types[f"{ns}/goal"] == "std_msgs/msg/String"
        assert types[f"{ns}/agent_status"] == "diagnostic_msgs/msg/DiagnosticArray"
        assert types[f"{ns}/episode_events"] == "std_msgs/msg/String" and f"{ns}/cmd_vel" in types
        # the demo runs with introspection: the memory topics and the bridge's truth are in the recording
        assert types[f"{ns}/icrl_agent/memory/sightings"] == types[f"{ns}/true_objects"] == \
            "visualization_msgs/msg/MarkerArray"
        assert types[f"{ns}/icrl_agent/memory/attention"] == "std_msgs/msg/Float32MultiArray"
        assert types[f"{ns}/icrl_agent/memory/route"] == "nav_msgs/msg/Path"
        msgs: dict[str, list] = {}
        log_times: dict[str, list[int]] = {}
        for conn, t, raw in reader.messages():
            msgs.setdefault(conn.topic, []).append(deserialize_message(raw, message_class(conn.msgtype)))
            log_times.setdefault(conn.topic, []).append(t)
    steps = sum(r["steps"] for r in rows)
    assert len(msgs[f"{ns}/action"]) == steps  # every action the agent published
    attention = msgs[f"{ns}/icrl_agent/memory/attention"]
    assert len(attention) >= steps - 2  # introspection_period_s 0: after every step (the first may precede a viewer)
    last = np.array(attention[-1].data).reshape([d.size for d in attention[-1].layout.dim])
    assert last.shape == (3, 3) and np.allclose(last.sum(1), 1.0, atol=1e-5)  # 3 fixed heads x (2 episodes + sink)
    events = [json.loads(m.data) for m in msgs[f"{ns}/episode_events"]]
    assert [e["event"] for e in events].count("episode_end") == 2 and events[0]["event"] == "trial_start"
    assert [m.data for m in msgs[f"{ns}/goal"]][:2] == [r["goal"] for r in rows]
    images = msgs[f"{ns}/camera/image_raw"]
    assert len({(m.header.stamp.sec, m.header.stamp.nanosec) for m in images}) >= steps  # a frame per step
    assert images[0].encoding == "rgb8" and len(images[0].data) == images[0].height * images[0].step
    assert len(msgs[f"{ns}/odom"]) >= steps and len(msgs[f"{ns}/scan"]) >= steps
    assert msgs[f"{ns}/agent_status"] and msgs[f"{ns}/agent_status"][-1].status[0].values
    # in the order written (not the reader's time order): per topic, log times never go back, no sequence gap
    from mcap.reader import make_reader

    with open(path, "rb") as f:
        written: dict[str, list[tuple[int, int]]] = {}
        for _schema, channel, message in make_reader(f).iter_messages(log_time_order=False):
            written.setdefault(channel.topic, []).append((message.sequence, message.log_time))
    assert {t: len(v) for t, v in written.items() if v} == {t: len(v) for t, v in log_times.items()}
    for topic, seq_times in written.items():
        assert [q for q, _ in seq_times] == list(range(len(seq_times))), f"{topic}: sequence gaps"
        times = [t for _, t in seq_times]
        assert times == sorted(times), f"{topic}: log times go back"
    for topic in (f"{ns}/camera/image_raw", f"{ns}/odom", f"{ns}/scan"):
        stamps = [m.header.stamp.sec + 1e-9 * m.header.stamp.nanosec for m in msgs[topic]]
        assert stamps == sorted(stamps), f"{topic}: header stamps out of order"


def check_replay(path, bundle: str, steps: int) -> None:
    """training/replay.py on the demo's recording: the same bundle and seed take every recorded action; another
    bundle parts somewhere (exit 1, a diff table); a missing file or a non-bundle is one line, exit 2."""
    replay = [sys.executable, "training/replay.py", str(path)]
    out = subprocess.run([*replay, "--bundle", bundle], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert f"{steps} of {steps} actions agree: the replay reproduces every recorded action" in out.stdout, out.stdout
    late = recording_from_its_third_frame(path)
    out = subprocess.run([*replay[:2], str(late), "--bundle", bundle], cwd=REPO, capture_output=True, text=True,
                         timeout=300)
    assert "note: 2 recorded action(s) precede the recording's first camera frame" in out.stdout, out.stdout
    assert f"of {steps - 2} actions agree" in out.stdout, out.stdout  # the two are left out, not paired wrongly
    other = os.path.join(REPO, "bundles", "house_memo")
    out = subprocess.run([*replay, "--bundle", other, "--seed", "7"], cwd=REPO, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 1 and "recorded    replayed" in out.stdout and " NO" in out.stdout, out.stdout[-3000:]
    for args, what in (([sys.executable, "training/replay.py", str(path) + ".missing", "--bundle", bundle],
                        "no such recording"),
                       ([*replay, "--bundle", os.path.join(REPO, "bundles")], "not an export bundle")):
        out = subprocess.run(args, cwd=REPO, capture_output=True, text=True, timeout=120)
        assert out.returncode == 2 and what in out.stderr, out.stderr
        assert len(out.stderr.strip().splitlines()) == 1 and "Traceback" not in out.stderr, out.stderr


def check_laser_bundle_replay(path, tmp_path, steps: int) -> None:
    """A bundle whose frontier memory maps the laser's floor per band (``scan_bands``, model.house.frontier_from_scan)
    acts on every recorded frame of the demo: the bridge's LaserScan messages become its input as on the robot."""
    from tests.house.laser_bundle import export_laser_bundle

    laser = export_laser_bundle(tmp_path / "laser_bundle")
    out = subprocess.run([sys.executable, "training/replay.py", str(path), "--bundle", str(laser)], cwd=REPO,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode in (0, 1) and f"of {steps} actions agree" in out.stdout, out.stdout[-3000:] + out.stderr


def recording_from_its_third_frame(path):
    """A copy of the recording without the camera, odometry and scan logged before its second action: what a
    recorder matched late to the bridge (but not to the agent) writes."""
    from mcap.reader import make_reader

    from icrl_ros.nodes.recording import METADATA_NAME, McapWriter

    late = path.with_name("late.mcap")
    with open(path, "rb") as f:
        reader = make_reader(f)
        metadata = {m.name: dict(m.metadata) for m in reader.iter_metadata()}[METADATA_NAME]
        messages = list(reader.iter_messages(log_time_order=True))
    cut = [m.log_time for _s, c, m in messages if c.topic.endswith("/action")][1]
    writer = McapWriter(str(late), metadata)
    for schema, channel, message in messages:
        if message.log_time <= cut and channel.topic.endswith(("/camera/image_raw", "/odom", "/scan")):
            continue
        writer.write(channel.topic, schema.name, message.data, message.log_time, message.publish_time)
    writer.close()
    return late


def test_demo_with_a_broken_bundle_stops_at_once_with_the_agents_reason(tmp_path) -> None:
    """A bundle the agent cannot load ends the demo as soon as the agent reports why (one line, exit 2),
    not at the demo's timeout, and with no traceback."""
    import shutil
    import time

    bundle = require_house_bundle()
    assert_loopback_env()
    broken = tmp_path / "broken"
    shutil.copytree(bundle, broken)
    (broken / "core.onnx").write_bytes(b"not an onnx graph")
    t0 = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "training/demo_ros.py", "--bundle", str(broken), "--episodes", "1", "--out",
         str(tmp_path / "out"), "--timeout", "150", "--no-record", "--domain-id", os.environ["ROS_DOMAIN_ID"]],
        cwd=REPO, env=dict(os.environ, OMP_NUM_THREADS="1"), capture_output=True, text=True, timeout=200)
    last = proc.stderr.strip().splitlines()[-1]
    assert proc.returncode == 2 and "the agent could not start the bundle" in last and "SHA-256" in last, proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr and time.monotonic() - t0 < 90
