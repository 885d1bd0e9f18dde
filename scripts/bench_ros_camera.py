"""Camera soak: agent_node (Fetch profile on CPU, the shipped bundle) fed by a camera in another process.

    .venv/bin/python scripts/bench_ros_camera.py --height 480 --width 640 --rate 30 --minutes 10
    .venv/bin/python scripts/bench_ros_camera.py --height 1080 --width 1920 --rate 30 --minutes 10
    .venv/bin/python scripts/bench_ros_camera.py --minutes 0.0833 --no-profile   # 150 frames, Fast DDS defaults

Three processes on loopback DDS (a private ROS_DOMAIN_ID in 100-200): the agent's console script
(``config/agent.yaml`` + ``config/fetch.yaml``, ``device:=cpu backend:=onnxruntime``, autostart,
``idle_after_stop:=false`` so the barely-trained shipped policy keeps acting), the camera
(``tests/nodes/camera_publisher.py``: rgb8, best effort, the shipped Fast DDS profile as
docs/ros.md tells a camera driver) and this process, which plays the base: odometry at 50 Hz on
``/odom``, the goal, and it records every ``/cmd_vel`` and the agent's status. Every 10 s the
agent's resident memory (VmRSS) is sampled. Prints a table and writes ``--out`` (JSON).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024.0
    return float("nan")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--height", type=int, default=480)
    p.add_argument("--width", type=int, default=640)
    p.add_argument("--rate", type=float, default=30.0)
    p.add_argument("--minutes", type=float, default=10.0)
    p.add_argument("--out", default="")
    p.add_argument("--fake-runner", action="store_true",
                   help="the tests' scripted runner (always forward, no network) instead of the shipped bundle: "
                        "separates the ROS side of the agent from the policy")
    p.add_argument("--no-profile", action="store_true",
                   help="neither the camera nor the agent uses the shipped large-data Fast DDS profile (the Fast DDS "
                        "defaults: what a camera driver started without it sends)")
    args = p.parse_args()

    env = dict(os.environ, ROS_AUTOMATIC_DISCOVERY_RANGE="LOCALHOST",
               ROS_DOMAIN_ID=str(random.SystemRandom().randint(100, 200)), OMP_NUM_THREADS="1",
               PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    for var in ("ROS_STATIC_PEERS", "FASTDDS_DEFAULT_PROFILES_FILE", "FASTRTPS_DEFAULT_PROFILES_FILE"):
        env.pop(var, None)
    if args.no_profile:
        env["ICRL_ROS_DDS_PROFILE"] = "0"  # the agent's console script leaves Fast DDS at its defaults
    os.environ.update({k: env[k] for k in ("ROS_AUTOMATIC_DISCOVERY_RANGE", "ROS_DOMAIN_ID")})
    os.environ.pop("FASTDDS_DEFAULT_PROFILES_FILE", None)
    from icrl_ros.nodes.demo_ros import interrupt
    from icrl_ros.nodes.dds import use_shipped_profile

    use_shipped_profile()  # this process only sends small messages; the same set-up as the others

    import rclpy
    from diagnostic_msgs.msg import DiagnosticArray
    from geometry_msgs.msg import Twist
    from nav_msgs.msg import Odometry
    from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy, qos_profile_sensor_data
    from std_msgs.msg import String

    seconds = args.minutes * 60.0
    logs = Path(args.out).with_suffix("") if args.out else Path("/tmp") / f"bench_camera_{args.width}x{args.height}"
    logs.mkdir(parents=True, exist_ok=True)
    module, extra = "icrl_ros.nodes.agent_node", []
    if args.fake_runner:
        import runpy

        write_fake_bundle = runpy.run_path(str(REPO / "tests" / "nodes" / "fake_runner.py"))["write_fake_bundle"]
        module = "tests.nodes.fake_agent_main"
        extra = ["-p", "bundle_path:=" + write_fake_bundle(str(logs / "fake_bundle"), script=[1], image_size=[64, 64],
                                                         goal_names=["red_box"])]
    agent_cmd = [sys.executable, "-m", module, "--ros-args",
                 "--params-file", str(REPO / "config" / "agent.yaml"), "--params-file", str(REPO / "config" / "fetch.yaml"),
                 "-p", "device:=cpu", "-p", "backend:=onnxruntime", "-p", "autostart:=true",
                 "-p", "idle_after_stop:=false", "-p", "status_rate_hz:=1.0", "-p", "camera_topic:=/camera/image_raw",
                 "-p", "memory_path:=" + str(logs / "memory"), *extra]
    agent = subprocess.Popen(agent_cmd, cwd=REPO, env=env, stdout=open(logs / "agent.log", "wb"),
                             stderr=subprocess.STDOUT)
    rclpy.init()
    node = rclpy.create_node("bench_base")
    cmd_times: list[float] = []
    cmd_nonzero = [0]
    status: list[dict[str, str]] = []

    def on_cmd(m: Twist) -> None:
        cmd_times.append(time.monotonic())
        cmd_nonzero[0] += int(m.linear.x != 0.0 or m.angular.z != 0.0)

    node.create_subscription(Twist, "/cmd_vel", on_cmd, 100)
    node.create_subscription(DiagnosticArray, "/agent_status",
                             lambda m: status.append({kv.key: kv.value for kv in m.status[0].values}), 10)
    odom_pub = node.create_publisher(Odometry, "/odom", qos_profile_sensor_data)
    goal_pub = node.create_publisher(String, "goal", QoSProfile(
        depth=1, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL))
    camera = None
    rss: list[tuple[float, float]] = []
    try:
        t_end = time.monotonic() + 120
        while not (status and status[-1].get("state") == "active"):
            rclpy.spin_once(node, timeout_sec=0.1)
            if time.monotonic() > t_end or agent.poll() is not None:
                raise SystemExit(f"agent never became active; see {logs / 'agent.log'}")
        goal_pub.publish(String(data="red_box"))
        before_camera = dict(status[-1])  # frames received are counted from here: every frame the camera sent
        camera = subprocess.Popen(
            [sys.executable, "-m", "tests.nodes.camera_publisher", "--height", str(args.height), "--width",
             str(args.width), "--rate", str(args.rate), "--seconds", str(seconds), "--topic", "/camera/image_raw",
             "--out", str(logs / "camera.json"), *(["--no-profile"] if args.no_profile else [])],
            cwd=REPO, env=env, stdout=open(logs / "camera.log", "wb"), stderr=subprocess.STDOUT)
        # wait for the first frame to arrive, then measure until the camera stops (without the profile
        # none may arrive: then the camera's end is the end)
        while not (status and int(status[-1].get("images_received", "0")) > 0):
            rclpy.spin_once(node, timeout_sec=0.05)
            if camera.poll() is not None:
                if camera.returncode != 0:
                    raise SystemExit(f"camera failed; see {logs / 'camera.log'}")
                break
        t0 = time.monotonic()
        start_status = dict(status[-1])
        n_cmd0 = len(cmd_times)
        next_odom, next_rss, k = t0, t0, 0
        while camera.poll() is None:
            now = time.monotonic()
            if now >= next_odom:
                k += 1
                msg = Odometry()
                stamp = time.time()
                msg.header.stamp.sec, msg.header.stamp.nanosec = int(stamp), int((stamp % 1) * 1e9)
                msg.header.frame_id, msg.child_frame_id = "odom", "base_link"
                msg.pose.pose.orientation.w = 1.0
                odom_pub.publish(msg)
                next_odom += 0.02
            if now >= next_rss:
                rss.append((round(now - t0, 1), rss_mb(agent.pid)))
                next_rss += 10.0
            rclpy.spin_once(node, timeout_sec=max(0.0, min(next_odom, next_rss) - time.monotonic()))
        t1 = time.monotonic()
        deadline = t1 + 3.0
        while time.monotonic() < deadline:  # the last status
            rclpy.spin_once(node, timeout_sec=0.1)
        rss.append((round(time.monotonic() - t0, 1), rss_mb(agent.pid)))
        end_status = dict(status[-1])
    finally:
        interrupt([camera, agent])
        node.destroy_node()
        rclpy.try_shutdown()

    sent = json.loads((logs / "camera.json").read_text())["sent"]
    times = np.array([t for t in cmd_times[n_cmd0:] if t0 <= t <= t1])
    periods_ms = np.diff(times) * 1e3 if len(times) > 1 else np.array([np.nan])
    d = lambda key: int(end_status[key]) - int(start_status.get(key, 0))  # noqa: E731
    received = int(end_status["images_received"]) - int(before_camera.get("images_received", 0))
    result = {
        "camera": f"{args.width}x{args.height} rgb8 at {args.rate:g} Hz, best effort, "
                  + ("Fast DDS defaults (no profile)" if args.no_profile else "the shipped large-data profile"),
        "seconds": round(t1 - t0, 1),
        "frames_sent": sent, "frames_received": received,
        "received_fraction": round(received / max(sent, 1), 4),
        "images_acted_on": d("actions"), "images_converted": d("images_converted"),
        "cmd_vel_messages": len(times), "cmd_vel_nonzero": cmd_nonzero[0],
        "cmd_vel_period_ms": {"p50": float(np.percentile(periods_ms, 50)), "p99": float(np.percentile(periods_ms, 99)),
                              "max": float(periods_ms.max())},
        "agent_latency_p50_ms": float(end_status["latency_p50_ms"]), "agent_latency_p99_ms": float(end_status["latency_p99_ms"]),
        "watchdog_trips": d("watchdog_trips"), "runner_errors": d("runner_errors"),
        "memory_bytes_policy": int(end_status["memory_bytes"]),
        "rss_mb": {"first": rss[0][1], "last": rss[-1][1], "max": max(r for _, r in rss), "samples": rss},
        "machine": f"{platform.node()} {os.cpu_count()} CPUs, {platform.platform()}",
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "load_average_end": os.getloadavg(),
    }
    print(f"camera {result['camera']}, {result['seconds']} s")
    print("| frames sent | received | acted on | converted | cmd_vel p50 / p99 / max ms | RSS first / last / max MB |")
    print("|---:|---:|---:|---:|---|---|")
    c, r = result["cmd_vel_period_ms"], result["rss_mb"]
    print(f"| {sent} | {result['frames_received']} ({100 * result['received_fraction']:.1f}%) | {result['images_acted_on']} | "
          f"{result['images_converted']} | {c['p50']:.1f} / {c['p99']:.1f} / {c['max']:.1f} | "
          f"{r['first']:.0f} / {r['last']:.0f} / {r['max']:.0f} |")
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
