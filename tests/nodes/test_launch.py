"""The launch files under the real launch system, driven with the real ``ros2`` command line.

The package is built with ``colcon build`` into a temporary workspace (a copy of the tracked
package files), ``install/setup.bash`` is sourced, and ``ros2 launch icrl_ros ...`` runs as a
user would start it; ``ros2 lifecycle``, ``ros2 param``, ``ros2 service call`` and ``ros2 topic
echo`` then drive it (through a ``ros2 daemon`` started and stopped by the fixture). The kit
(``ros2`` CLI, launch, colcon) is installed into this venv by ``../shared/ros2/install.sh``
(``ros2_kit`` fixture); without ``../shared`` the module is skipped with the reason. DDS stays
on loopback on the private domain conftest.py chose.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
import time

import pytest

from tests.nodes.ros_support import REPO, assert_loopback_env, require_house_bundle

PACKAGE_FILES = ["package.xml", "setup.py", "setup.cfg", "resource", "launch", "config", "bundles", "icrl_ros"]


class Workspace:
    def __init__(self, root, bindir: str) -> None:
        self.root = root
        self.env = dict(os.environ, AMENT_PREFIX_PATH=sys.prefix, PATH=bindir + os.pathsep + os.environ["PATH"],
                        ROS_LOG_DIR=str(root / "log" / "ros"), OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
        self.env.pop("FASTDDS_DEFAULT_PROFILES_FILE", None)  # the nodes choose the shipped one
        self.env.pop("PYTHONPATH", None)  # the package comes from the workspace, not the checkout
        # a private domain of its own (still 100-200): nodes of the other tests, including killed ones
        # DDS still lists until their lease ends, must not answer for /icrl_agent here
        self.env["ROS_DOMAIN_ID"] = str(int(os.environ["ROS_DOMAIN_ID"]) + 25)  # see tests/nodes/conftest.py

    def sh(self, command: str, timeout: float = 60.0, check: bool = True) -> str:
        """``command`` in bash after ``source install/setup.bash``; stdout + stderr."""
        out = subprocess.run(["bash", "-c", f"source {self.root}/install/setup.bash && {command}"],
                             env=self.env, capture_output=True, text=True, timeout=timeout, cwd=self.root)
        text = out.stdout + out.stderr
        if check:
            assert out.returncode == 0, f"$ {command}\n{text[-3000:]}"
        return text

    def launch(self, args: str, log_name: str) -> subprocess.Popen:
        log = open(self.root / f"{log_name}.log", "wb")
        return subprocess.Popen(["bash", "-c", f"source {self.root}/install/setup.bash && exec ros2 launch {args}"],
                                env=self.env, stdout=log, stderr=subprocess.STDOUT, cwd=self.root,
                                start_new_session=True)

    def stop(self, proc: subprocess.Popen, log_name: str) -> str:
        """Ctrl-C to ``ros2 launch`` (its process group, as a terminal does); its exit status and log."""
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGINT)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
        return (self.root / f"{log_name}.log").read_text(errors="replace")

    def wait_for(self, command: str, pattern: str, timeout: float = 60.0) -> str:
        deadline = time.monotonic() + timeout
        text = ""
        while time.monotonic() < deadline:
            try:
                text = self.sh(command, check=False, timeout=max(5.0, min(30.0, deadline - time.monotonic())))
            except subprocess.TimeoutExpired as e:  # a CLI call that waited on a node not up yet
                text = f"(timed out: {e})"
            if re.search(pattern, text, re.M):
                return text
            time.sleep(0.5)
        raise AssertionError(f"$ {command}: no {pattern!r} within {timeout} s; last output:\n{text[-2000:]}")


@pytest.fixture(scope="module")
def ws(ros2_kit, tmp_path_factory):
    assert_loopback_env()
    require_house_bundle()
    root = tmp_path_factory.mktemp("colcon_ws")
    src = root / "src" / "icrl_ros"
    src.mkdir(parents=True)
    files = subprocess.run(["git", "ls-files", "-z", *PACKAGE_FILES], cwd=REPO, capture_output=True,
                           check=True).stdout.decode().split("\0")
    files += ["config/fastdds_large_data.xml"]
    for name in filter(None, dict.fromkeys(files)):
        dest = src / name
        dest.parent.mkdir(parents=True, exist_ok=True)
        if os.path.isfile(os.path.join(REPO, name)):
            dest.write_bytes(open(os.path.join(REPO, name), "rb").read())
    w = Workspace(root, ros2_kit)
    out = subprocess.run(["colcon", "build", "--base-paths", "src", "--build-base", "build", "--install-base",
                          "install"], cwd=root, env=w.env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert (root / "install" / "icrl_ros" / "share" / "icrl_ros" / "config" / "fastdds_large_data.xml").is_file()
    w.sh("ros2 daemon start")
    try:
        yield w
    finally:
        w.sh("ros2 daemon stop", check=False)


def test_agent_launch_autostarts_once_and_obeys_the_operator(ws) -> None:
    proc = ws.launch("icrl_ros agent.launch.py", "agent")
    log = ""
    try:
        ws.wait_for("ros2 lifecycle get /icrl_agent", r"^active \[3\]", 90)
        # an operator's deactivate stays (autostart used to re-activate it 3 ms later)
        assert "Transitioning successful" in ws.sh("ros2 lifecycle set /icrl_agent deactivate")
        time.sleep(1.5)
        assert ws.sh("ros2 lifecycle get /icrl_agent").startswith("inactive [2]")
        # parameters as a ROS user types them: an integer for a double, applied live; a
        # configure-time one refused with the reason; describe without made-up bounds
        assert "Set parameter successful" in ws.sh("ros2 param set /icrl_agent control_rate_hz 20")
        assert "Double value is: 20.0" in ws.sh("ros2 param get /icrl_agent control_rate_hz")
        out = ws.sh("ros2 param set /icrl_agent camera_topic other/image", check=False)
        assert "Setting parameter failed" in out and "applies at configure" in out, out
        out = ws.sh("ros2 param describe /icrl_agent max_linear_speed input_timeout_s control_rate_hz")
        assert "e+300" not in out and ">= 0.0" in out and "Max value: 1000.0" in out, out
        out = ws.sh("ros2 param set /icrl_agent autostart true", check=False)
        assert "Setting parameter failed" in out and "read-only" in out, out
        # cleanup is allowed now; the status says unconfigured
        assert "Transitioning successful" in ws.sh("ros2 lifecycle set /icrl_agent cleanup")
        ws.wait_for("ros2 topic echo --once /agent_status diagnostic_msgs/msg/DiagnosticArray",
                    r"message: unconfigured", 30)
        # the operator configures again: autostart does not activate it behind their back
        assert "Transitioning successful" in ws.sh("ros2 lifecycle set /icrl_agent configure", timeout=90)
        time.sleep(1.5)
        assert ws.sh("ros2 lifecycle get /icrl_agent").startswith("inactive [2]")
        out = ws.sh("ros2 service call /icrl_agent/reset_memory std_srvs/srv/Trigger")
        assert "success=True" in out, out
        ws.wait_for("ros2 topic echo --once /diagnostics diagnostic_msgs/msg/DiagnosticArray",
                    r"icrl_agent: icrl_ros agent", 30)
    finally:
        log = ws.stop(proc, "agent")
    assert proc.returncode == 0, log[-3000:]
    assert "process has finished cleanly" in log, log[-3000:]
    assert log.count("activated: acting") == 1, log[-3000:]


@pytest.mark.slow  # ~25 s; the agent launch's autostart and parameters stay in make test
def test_agent_launch_fetch_profile_on_cpu_with_integer_params(ws) -> None:
    params = ws.root / "site.yaml"  # a user's params file: integers where doubles are declared
    params.write_text("/**:\n  ros__parameters:\n    max_linear_speed: 1\n    control_rate_hz: 20\n"
                      "    input_timeout_s: 1\n")
    proc = ws.launch(f"icrl_ros agent.launch.py robot:=fetch device:=cpu backend:=onnxruntime namespace:=/fetch "
                     f"params_file:={shlex.quote(str(params))}", "fetch")
    try:
        ws.wait_for("ros2 lifecycle get /fetch/icrl_agent", r"^active \[3\]", 90)
        assert "String value is: cpu" in ws.sh("ros2 param get /fetch/icrl_agent device")
        assert "Double value is: 1.0" in ws.sh("ros2 param get /fetch/icrl_agent max_linear_speed")
        # twist mode with no camera or odometry: the watchdog holds the base at zero on /cmd_vel
        out = ws.wait_for("ros2 topic echo --once /cmd_vel geometry_msgs/msg/Twist", r"linear:", 30)
        assert re.search(r"linear:\s+x: 0\.0", out), out
        ws.wait_for("ros2 topic echo --once /fetch/agent_status diagnostic_msgs/msg/DiagnosticArray",
                    r"inputs stale: robot stopped", 30)
    finally:
        log = ws.stop(proc, "fetch")
    assert proc.returncode == 0 and "deactivated" not in log, log[-3000:]
    assert "robot stopped, zero velocity sent" in log, log[-3000:]  # Ctrl-C: the last command is a zero


def test_sim_launch_runs_the_house_in_lockstep_on_sim_time(ws) -> None:
    proc = ws.launch("icrl_ros sim.launch.py", "sim")
    try:
        ws.wait_for("ros2 lifecycle get /icrl_agent", r"^active \[3\]", 120)
        ws.wait_for("ros2 topic echo --once /action std_msgs/msg/Int32", r"data: \d", 60)
        assert "Boolean value is: True" in ws.sh("ros2 param get /icrl_agent use_sim_time")
        out = ws.wait_for("ros2 topic echo --once /agent_status diagnostic_msgs/msg/DiagnosticArray",
                          r"key: actions\s+value: '[1-9]", 30)
        stamp = int(re.search(r"stamp:\s+sec: (\d+)", out).group(1))
        assert stamp < 1_000_000, f"status stamp {stamp}: not the bridge's /clock (sim time starts at 1 s)"
        out = ws.sh("ros2 service call /sim_bridge/new_trial std_srvs/srv/Trigger")
        assert "success=True" in out, out
    finally:
        log = ws.stop(proc, "sim")
    assert proc.returncode == 0, log[-3000:]
    assert log.count("process has finished cleanly") == 2, log[-3000:]


@pytest.mark.slow  # ~45 s; the topics' contents are checked over DDS in test_introspection.py (make test)
def test_sim_launch_introspection_shows_the_memory_to_the_ros2_cli(ws) -> None:
    """``introspection:=true``: the parameter as ``ros2 param describe`` shows it, and ``ros2 topic echo`` receives
    the route map, the sightings, the attention and the bridge's true objects (as a viewer would subscribe: the
    CLI's own QoS)."""
    proc = ws.launch("icrl_ros sim.launch.py introspection:=true", "introspection")
    try:
        ws.wait_for("ros2 lifecycle get /icrl_agent", r"^active \[3\]", 120)
        out = ws.sh("ros2 param describe /icrl_agent introspection")
        assert "Type: boolean" in out and "~/memory/sightings" in out and "Read at configure" in out, out
        assert "Boolean value is: True" in ws.sh("ros2 param get /icrl_agent introspection")
        out = ws.wait_for("ros2 topic echo --once --field info /icrl_agent/memory/route_map nav_msgs/msg/OccupancyGrid",
                          r"resolution: 0.25", 60)
        assert "width: 128" in out and "height: 128" in out, out
        out = ws.wait_for("ros2 topic echo --once /icrl_agent/memory/sightings visualization_msgs/msg/MarkerArray",
                          r"action: 3", 60)  # every array starts with a DELETEALL
        assert "frame_id: odom" in out, out[-2000:]
        out = ws.wait_for("ros2 topic echo --once --field layout /icrl_agent/memory/attention "
                          "std_msgs/msg/Float32MultiArray", r"head: object memory", 60)
        out = ws.wait_for("ros2 topic echo --once /true_objects visualization_msgs/msg/MarkerArray", r"ns: truth", 60)
        assert "frame_id: map" in out, out[-2000:]  # the bridge's truth, in the house frame
    finally:
        log = ws.stop(proc, "introspection")
    assert proc.returncode == 0, log[-3000:]


def _children(pid: int) -> list[int]:
    """The live (not zombie) processes whose parent is ``pid``, from /proc."""
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = open(f"/proc/{entry}/stat").read()
            except OSError:
                continue
            state, ppid = stat.rsplit(")", 1)[1].split()[:2]
            if int(ppid) == pid and state != "Z":
                out.append(int(entry))
    return out


def _alive(pid: int) -> bool:
    try:
        stat = open(f"/proc/{pid}/stat").read()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


@pytest.mark.parametrize("sig", ["SIGTERM", pytest.param("SIGKILL", marks=pytest.mark.slow)])
def test_sim_launch_stops_both_nodes_with_a_zero_twist_when_the_launch_is_signalled(ws, sig) -> None:
    """``kill`` / ``docker stop`` send SIGTERM to ``ros2 launch`` alone: both nodes used to go on running
    and driving. Now the launch shuts them down as on Ctrl-C, and (SIGKILL) they stop by themselves; the
    recorder (``record:=``) finishes its MCAP file either way."""
    import rclpy
    from geometry_msgs.msg import Twist
    from rclpy.executors import SingleThreadedExecutor

    from tests.nodes.ros_support import spin_for, spin_until

    ctx = rclpy.Context()
    rclpy.init(context=ctx, domain_id=int(ws.env["ROS_DOMAIN_ID"]))
    ex = SingleThreadedExecutor(context=ctx)
    node = rclpy.create_node("cmd_vel_probe", context=ctx)
    ex.add_node(node)
    got: list[tuple[float, float]] = []
    node.create_subscription(Twist, "/cmd_vel", lambda m: got.append((m.linear.x, m.angular.z)), 500)
    recording = ws.root / f"run_{sig}.mcap"
    proc = ws.launch(f"icrl_ros sim.launch.py mode:=realtime record:={recording}", f"sim_{sig}")
    nodes: list[int] = []
    try:
        # the agent drives the simulated base through cmd_vel (the real policy, the bridge in real time)
        driving = lambda: any(v != (0.0, 0.0) for v in got[-50:])  # noqa: E731
        assert spin_until(ex, lambda: driving() or proc.poll() is not None, 150) and driving(), \
            (ws.root / f"sim_{sig}.log").read_text(errors="replace")[-3000:]
        nodes = _children(proc.pid)
        assert len(nodes) == 3, nodes  # bridge, agent, recorder
        proc.send_signal(getattr(signal, sig))  # the launch process only, as kill and docker stop do
        # a node that ignores SIGINT gets SIGTERM after 5 s and SIGKILL after 10 s from the launch; the
        # log (which node needed what) is the diagnosis when one is still alive past that
        assert spin_until(ex, lambda: not any(map(_alive, nodes)), 20), \
            f"still running 20 s after {sig}: {[p for p in nodes if _alive(p)]} of {nodes}\n" + \
            (ws.root / f"sim_{sig}.log").read_text(errors="replace")[-3000:]
        spin_for(ex, 1.0)  # anything still in flight arrives
        proc.wait(timeout=10)
        log = (ws.root / f"sim_{sig}.log").read_text(errors="replace")
        assert got[-1] == (0.0, 0.0), got[-10:]
        assert any(v != (0.0, 0.0) for v in got), "the agent never drove"
        if sig == "SIGTERM":
            assert proc.returncode == 0, log[-3000:]
            assert "robot stopped, zero velocity sent" in log and log.count("process has finished cleanly") == 3, \
                log[-3000:]
        # the recorder finished its file (record:=): the drive is in it, readable by another reader
        from rosbags.highlevel import AnyReader

        with AnyReader([recording]) as reader:
            counts = {c.topic: c.msgcount for c in reader.connections}
        assert counts["/cmd_vel"] > 0 and counts["/camera/image_raw"] > 0 and counts["/odom"] > 0, counts
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
        for pid in filter(_alive, nodes):  # a failed test leaves no orphan driving
            os.kill(pid, signal.SIGKILL)
        ex.shutdown()
        node.destroy_node()
        rclpy.try_shutdown(context=ctx)
