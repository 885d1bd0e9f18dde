"""A camera in its own process: ``sensor_msgs/Image`` rgb8 frames at a fixed rate.

    python -m tests.nodes.camera_publisher --height 480 --width 640 --rate 30 --seconds 3 \
        --topic /ns/camera/image_raw [--reliable] [--no-profile] [--out sent.json]

Best-effort (sensor-data QoS, as camera drivers publish) unless ``--reliable``. It selects the
shipped Fast DDS profile as docs/ros.md tells a camera driver to (``--no-profile``: the
middleware's defaults). Each frame is stamped with the wall clock and differs from the last
(a counter in its first bytes). Prints and writes ``{"sent": N, "seconds": T}``. Used by the
tests and by ``scripts/bench_ros_camera.py``.
"""

from __future__ import annotations

import argparse
import json
import signal
import time


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--height", type=int, default=480)
    p.add_argument("--width", type=int, default=640)
    p.add_argument("--rate", type=float, default=30.0)
    p.add_argument("--seconds", type=float, default=3.0)
    p.add_argument("--topic", default="camera/image_raw")
    p.add_argument("--wait", type=float, default=0.5,
                   help="seconds after a subscriber matched (discovery settling) before the first frame")
    p.add_argument("--wait-max", type=float, default=20.0, help="give up waiting for a subscriber after this")
    p.add_argument("--reliable", action="store_true")
    p.add_argument("--no-profile", action="store_true")
    p.add_argument("--out", default="")
    args = p.parse_args()
    if not args.no_profile:
        from icrl_ros.nodes.dds import use_shipped_profile

        use_shipped_profile()
    import rclpy
    from rclpy.qos import QoSProfile, qos_profile_sensor_data
    from sensor_msgs.msg import Image

    stop = []
    signal.signal(signal.SIGTERM, lambda *a: stop.append(1))
    rclpy.init()
    node = rclpy.create_node("camera_publisher")
    qos = QoSProfile(depth=5) if args.reliable else qos_profile_sensor_data
    pub = node.create_publisher(Image, args.topic, qos)
    data = bytearray(args.height * args.width * 3)
    deadline = time.monotonic() + args.wait_max
    while pub.get_subscription_count() == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(args.wait)
    sent, t0 = 0, time.monotonic()
    while not stop and time.monotonic() - t0 < args.seconds:
        data[:8] = sent.to_bytes(8, "little")
        msg = Image(height=args.height, width=args.width, encoding="rgb8", step=args.width * 3, data=bytes(data))
        now = time.time()
        msg.header.stamp.sec, msg.header.stamp.nanosec = int(now), int((now % 1) * 1e9)
        msg.header.frame_id = "camera"
        pub.publish(msg)
        sent += 1
        time.sleep(max(0.0, t0 + sent / args.rate - time.monotonic()))
    result = {"sent": sent, "seconds": round(time.monotonic() - t0, 3)}
    print(json.dumps(result), flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f)
    node.destroy_node()
    rclpy.try_shutdown()


if __name__ == "__main__":
    main()
