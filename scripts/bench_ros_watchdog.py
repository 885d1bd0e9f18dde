"""Watchdog stop time: cut the camera, the odometry or both while the base drives; time to the zero.

    .venv/bin/python scripts/bench_ros_watchdog.py --cuts 20 --timeout 0.5

The agent runs its console script's real ``main()`` in its own process, Fetch profile
(``config/agent.yaml`` + ``config/fetch.yaml``: twist mode, 20 Hz control, ``input_timeout_s``
from ``--timeout``) with the scripted runner of the tests (``tests/nodes/fake_agent_main.py``:
always "forward"), so the base is commanded to drive when each cut begins. This process plays
the robot: odometry at 50 Hz and 640x480 camera frames at 15 Hz (the Fetch head camera's low
rate), with the base standing still so every step stays in progress. Per cut: drive 1.5 s (until
a non-zero ``cmd_vel`` arrives), stop publishing the cut input(s), and time from the last message
of the cut input sent to the first zero ``cmd_vel`` received. DDS on loopback, private domain.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import runpy
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cuts", type=int, default=20, help="cuts of each kind (camera, odometry, both)")
    p.add_argument("--timeout", type=float, default=0.5, help="input_timeout_s")
    p.add_argument("--out", default="")
    args = p.parse_args()
    os.environ.update(ROS_AUTOMATIC_DISCOVERY_RANGE="LOCALHOST", ROS_DOMAIN_ID=str(random.SystemRandom().randint(100, 200)))
    for var in ("ROS_STATIC_PEERS", "FASTDDS_DEFAULT_PROFILES_FILE", "FASTRTPS_DEFAULT_PROFILES_FILE"):
        os.environ.pop(var, None)
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    from icrl_ros.nodes.demo_ros import interrupt
    from icrl_ros.nodes.dds import use_shipped_profile

    # the test suite's fake bundle writer, read as a file (tests/ is not a package to import from here)
    write_fake_bundle = runpy.run_path(str(REPO / "tests" / "nodes" / "fake_runner.py"))["write_fake_bundle"]

    use_shipped_profile()  # the camera frames leave this process: the large segment
    tmp = Path(tempfile.mkdtemp(prefix="bench_watchdog_"))
    bundle = write_fake_bundle(str(tmp / "bundle"), script=[1])
    agent = subprocess.Popen(
        [sys.executable, "-m", "tests.nodes.fake_agent_main", "--ros-args",
         "--params-file", str(REPO / "config" / "agent.yaml"), "--params-file", str(REPO / "config" / "fetch.yaml"),
         "-p", f"bundle_path:={bundle}", "-p", "device:=cpu", "-p", "autostart:=true",
         "-p", f"input_timeout_s:={args.timeout}", "-p", "action_timeout_s:=1000.0", "-p", "idle_after_stop:=false",
         "-p", "camera_topic:=/camera/image_raw", "-p", "status_rate_hz:=2.0"],
        cwd=REPO, env=env, stdout=open(tmp / "agent.log", "wb"), stderr=subprocess.STDOUT)

    import rclpy
    from diagnostic_msgs.msg import DiagnosticArray
    from geometry_msgs.msg import Twist
    from nav_msgs.msg import Odometry
    from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy, qos_profile_sensor_data
    from sensor_msgs.msg import Image
    from std_msgs.msg import String

    rclpy.init()
    node = rclpy.create_node("bench_robot")
    cmds: list[tuple[float, float, float]] = []
    status: list[dict[str, str]] = []
    node.create_subscription(Twist, "/cmd_vel", lambda m: cmds.append((time.monotonic(), m.linear.x, m.angular.z)), 200)
    node.create_subscription(DiagnosticArray, "/agent_status",
                             lambda m: status.append({kv.key: kv.value for kv in m.status[0].values}), 10)
    odom_pub = node.create_publisher(Odometry, "/odom", qos_profile_sensor_data)
    cam_pub = node.create_publisher(Image, "/camera/image_raw", qos_profile_sensor_data)
    goal_pub = node.create_publisher(String, "goal", QoSProfile(
        depth=1, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL))
    frame = bytes(480 * 640 * 3)
    last_sent = {"camera": -1.0, "odometry": -1.0}
    next_at = {"camera": 0.0, "odometry": 0.0}
    period = {"camera": 1 / 15, "odometry": 1 / 50}

    def stamp_now(msg) -> None:
        t = time.time()
        msg.header.stamp.sec, msg.header.stamp.nanosec = int(t), int((t % 1) * 1e9)

    def run(seconds: float, send: set[str], until=None) -> bool:
        t_end = time.monotonic() + seconds
        while time.monotonic() < t_end:
            now = time.monotonic()
            for kind in send:
                if now >= next_at[kind]:
                    if kind == "odometry":
                        msg = Odometry()
                        msg.pose.pose.orientation.w = 1.0
                    else:
                        msg = Image(height=480, width=640, encoding="rgb8", step=640 * 3, data=frame)
                    stamp_now(msg)
                    (odom_pub if kind == "odometry" else cam_pub).publish(msg)
                    last_sent[kind] = time.monotonic()
                    next_at[kind] = max(next_at[kind] + period[kind], now)
            if until is not None and until():
                return True
            wake = min([next_at[k] for k in send] + [t_end])
            rclpy.spin_once(node, timeout_sec=max(0.0, min(wake - time.monotonic(), 0.01)))
        return until() if until is not None else True

    delays: dict[str, list[float]] = {"camera": [], "odometry": [], "both": []}
    misses = dict.fromkeys(delays, 0)
    try:
        if not run(120, set(), until=lambda: bool(status) and status[-1].get("state") == "active"):
            raise SystemExit(f"agent never active; see {tmp / 'agent.log'}")
        goal_pub.publish(String(data="sofa"))
        both = {"camera", "odometry"}
        for i in range(args.cuts):
            for cut in ("camera", "odometry", "both"):
                run(1.5, both)
                if not (cmds and cmds[-1][1] > 0.0):
                    if not run(5.0, both, until=lambda: bool(cmds) and cmds[-1][1] > 0.0):
                        raise SystemExit(f"not driving before cut {i} ({cut}); see {tmp / 'agent.log'}")
                n0 = len(cmds)
                keep = both - ({"camera", "odometry"} if cut == "both" else {cut})
                t_cut = max(last_sent[k] for k in (both if cut == "both" else {cut}))
                run(args.timeout + 0.4, keep)
                zero = next((t for t, v, w in cmds[n0:] if v == 0.0 and w == 0.0 and t >= t_cut), None)
                if zero is None:  # nothing within the window (a starved process): counted as a miss
                    misses[cut] += 1
                    late = [(round(t - t_cut, 3), v) for t, v, w in cmds[n0:]]
                    print(f"cut {i} ({cut}): no zero within {args.timeout + 0.4:.1f} s; cmd_vel received "
                          f"(s after the cut, v): {late}", flush=True)
                    continue
                delays[cut].append(zero - t_cut)
        trips = int(status[-1]["watchdog_trips"]) if status else -1
    finally:
        interrupt([agent])
        node.destroy_node()
        rclpy.try_shutdown()

    rows = {}
    for cut, d in delays.items():
        a = np.array(d or [np.nan]) * 1e3
        rows[cut] = {"n": len(a), "median_ms": float(np.median(a)), "p90_ms": float(np.percentile(a, 90)),
                     "max_ms": float(a.max()), "over_timeout": int((a > args.timeout * 1e3).sum()),
                     "no_zero_in_window": misses[cut]}
    result = {"input_timeout_s": args.timeout, "watchdog_trips": trips, "cuts": rows,
              "samples_ms": {k: [round(x * 1e3, 1) for x in v] for k, v in delays.items()},
              "machine": f"{platform.node()} {os.cpu_count()} CPUs", "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
              "load_average_end": os.getloadavg()}
    print(f"input_timeout_s {args.timeout}: last input sent -> first zero cmd_vel received")
    print("| cut | n | median ms | p90 ms | max ms | over the timeout | no zero in the window |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for cut, r in rows.items():
        print(f"| {cut} | {r['n']} | {r['median_ms']:.1f} | {r['p90_ms']:.1f} | {r['max_ms']:.1f} | {r['over_timeout']} "
              f"| {r['no_zero_in_window']} |")
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
