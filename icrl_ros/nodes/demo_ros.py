"""`make demo`: the shipped house bundle (house_relic_scan, ReLIC) searching an unseen MiniWorld house over ROS 2.

Starts two processes, as on a robot: ``sim_bridge_node`` (the house env, test split, fixed
seed, lockstep) and ``agent_node`` (the bundle on ONNX Runtime; activated through its lifecycle
once this process's recorder and camera watcher hear every topic the run starts with, so the recording
holds the whole run; autostart with ``--no-record``). They talk over
ROS 2 with DDS on loopback only (``ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST`` and a private
``ROS_DOMAIN_ID`` drawn from 100-200, set here before anything starts). This process watches
the bridge's episode events, the agent's status and the camera; it prints a line per episode
as it ends, then a per-episode table, and writes to ``--out``:

    icl_curve.png    success and SPL per in-context episode
    top_down.png     the house from above with every episode's trajectory
    camera.gif       the robot's camera (upscaled), captioned with episode / step / goal
    memory_epNN.png  per episode, the agent's memory after its last step beside the truth, drawn from the agent's
                     ~/memory topics and the bridge's true objects (icrl_ros.nodes.memory_picture)
    episodes.json    the table, plus the run's settings
    run.mcap         the run recorded (camera, odometry, scan, goal, events, actions, status; ROS 2 message
                     encoding, icrl_ros.nodes.recording); ``training/replay.py`` feeds it back through the policy
    logs/            the two nodes' output

    python training/demo_ros.py                                  # what `make demo` runs
    python training/demo_ros.py --episodes 2 --max-steps 20 --out /tmp/demo   # the test's short run
    python training/demo_ros.py --habitat    # the same house in habitat-sim (icrl_ros/training/habitat_bridge.py)

With ``--habitat`` the house the MiniWorld run would use is exported to a Habitat scene and served
by ``icrl_ros.sim.env_server`` from the Habitat chroot of ``../shared/habitat`` (root); the bridge
here drives it through ``icrl_ros/RemoteEnv-v0``, the agent is unchanged.

The default bundle (``bundles/house_relic_scan``) is a real ReLIC policy exported from a real
checkpoint: a student of the in-context house teacher (imitation, DAgger and PPO on this CPU, with
the object, place and route memories, a stop rule and a route-following head that reads the laser
scan the bridge publishes). Held out it finds the goal in a fifth of first episodes and about half
of episodes 10-20: one trial is one house, so a single run is an anecdote
beside that curve. ``--bundle bundles/house_memo_scan`` runs the Memo with the same head, ``--bundle
bundles/house_memo`` the Memo student without it (no laser), ``--bundle bundles/house_relic`` the ReLIC without it.
"""

from __future__ import annotations


import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from icrl_ros.nodes.shipped import DEFAULT_BUNDLE
from icrl_ros.training._cli import REPO_ROOT, fail

NAMESPACE = "/icrl_demo"
LOCAL_ONLY_UNSET = ("ROS_STATIC_PEERS", "ROS_LOCALHOST_ONLY", "ROS_DISCOVERY_SERVER", "ROS_SUPER_CLIENT",
                    "FASTRTPS_DEFAULT_PROFILES_FILE", "FASTDDS_DEFAULT_PROFILES_FILE", "CYCLONEDDS_URI")
SHIPPED_NOTES = {
    "house_relic_scan": ("is a ReLIC student of the house teacher (imitation, DAgger, PPO, object / place / route "
                         "memory, a stop rule, a route-following head reading the laser scan) that finds the goal more "
                         "often and faster in later episodes (held-out success 0.20 in episode 1, 0.47 over episodes "
                         "10-20; SPL 0.11 -> 0.40)",
                         "ReLIC student of the house teacher with a route-following head on the laser scan"),
    "house_memo_scan": ("is a Memo student of the house teacher (imitation, PPO, object / place / route memory, a "
                        "stop rule, a route-following head reading the laser scan) that finds the goal more often and "
                        "faster in later episodes (held-out success 0.22 in episode 1, 0.51 over episodes 10-20; SPL "
                        "0.13 -> 0.43)",
                        "Memo student of the house teacher with a route-following head on the laser scan"),
    "house_memo": ("is a Memo student of the house teacher (imitation, object and place memory, a stop rule, then "
                   "PPO) that finds the goal in a minority of episodes, more often in later ones (held-out success "
                   "0.33 in episode 1, 0.43 over episodes 10-20)",
                   "Memo student of the house teacher (imitation + PPO): finds the goal in a minority of episodes"),
    "house_relic": ("is a ReLIC student of the house teacher (imitation, DAgger, place memory, a stop rule, then PPO) "
                    "that finds the goal in a minority of episodes (held-out success 0.25 in episode 1, 0.40 over "
                    "episodes 10-20)",
                    "ReLIC student of the house teacher (imitation + PPO): finds the goal in a minority of episodes"),
}
"""What the demo says about a shipped bundle: (a line before the run, a line under the plots' title)."""


def shipped_note(bundle: Path) -> tuple[str, str] | None:
    """:data:`SHIPPED_NOTES` for a bundle of this checkout's ``bundles/``; None for any other bundle."""
    for name, note in SHIPPED_NOTES.items():
        if bundle.resolve() == (REPO_ROOT / "bundles" / name).resolve():
            return note
    return None


def loopback_ros_env(domain_id: int | None, log_dir: Path) -> dict[str, str]:
    """This process's environment with DDS confined to loopback on a private domain (inherited by the nodes)."""
    os.environ["ROS_AUTOMATIC_DISCOVERY_RANGE"] = "LOCALHOST"
    os.environ["ROS_DOMAIN_ID"] = str(domain_id if domain_id is not None else random.SystemRandom().randint(100, 200))
    for var in LOCAL_ONLY_UNSET:
        os.environ.pop(var, None)
    os.environ["ROS_LOG_DIR"] = str(log_dir)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ["PYTHONPATH"] = str(REPO_ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")
    return dict(os.environ)


def params_file(path: Path, params: dict) -> Path:
    """A ROS parameter file for every node name (``/**``)."""
    import yaml

    path.write_text(yaml.safe_dump({"/**": {"ros__parameters": params}}, sort_keys=False))
    return path


def start_lockstep_bridge(seed: int, max_steps: int, log_dir: Path) -> tuple[dict[str, str], subprocess.Popen]:
    """A sim bridge process on the house (test split, lockstep) in the demo's namespace, on a private loopback DDS
    domain: (that domain's environment, for the nodes that talk to it; the process). Its log: ``log_dir/bridge.log``."""
    env = loopback_ros_env(None, log_dir / "ros")
    bridge_file = params_file(log_dir / "bridge.yaml", {
        "env_kwargs": json.dumps({"split": "test"}), "seed": seed, "mode": "lockstep", "max_episode_steps": max_steps})
    proc = subprocess.Popen(
        [sys.executable, "-m", "icrl_ros.nodes.sim_bridge_node", "--ros-args", "-r", f"__ns:={NAMESPACE}",
         "--params-file", str(REPO_ROOT / "config" / "bridge.yaml"), "--params-file", str(bridge_file)],
        cwd=REPO_ROOT, env=env, stdout=open(log_dir / "bridge.log", "wb"), stderr=subprocess.STDOUT)
    return env, proc


def demo_agent_params(overrides: dict) -> dict:
    """The agent's parameters in this demo: config/agent.yaml with the demo's overrides (what replay runs)."""
    import yaml

    values = dict(yaml.safe_load((REPO_ROOT / "config" / "agent.yaml").read_text())["/**"]["ros__parameters"])
    return {**values, **overrides}


def start_node(module: str, files: list[Path], log: Path, env: dict[str, str]) -> subprocess.Popen:
    cmd = [sys.executable, "-m", f"icrl_ros.nodes.{module}", "--ros-args", "-r", f"__ns:={NAMESPACE}"]
    for f in files:
        cmd += ["--params-file", str(f)]
    return subprocess.Popen(cmd, cwd=REPO_ROOT, env=env, stdout=open(log, "wb"), stderr=subprocess.STDOUT)


# -- watching ---------------------------------------------------------------------------------------
def interrupt(procs, timeout: float = 20.0) -> None:
    """Stop processes as Ctrl-C does (SIGINT, so a node sends its zero command and exits), all at
    once; one still running ``timeout`` s later is killed. ``None`` entries are skipped."""
    procs = [p for p in procs if p is not None]
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
    for proc in procs:
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()


def recorded_start_topics(bundle: Path) -> list[str]:
    """The topics a replay of the run needs from its first message: the agent's inputs (the scan where the bundle
    reads one) and its actions."""
    import yaml

    manifest = yaml.safe_load((bundle / "manifest.yaml").read_text()) or {}
    reads = (manifest.get("observation") or {}).get("from_observation") or []
    scan = "scan" in reads or "scan_bands" in reads
    return ["episode_events", "goal", "odom", "camera/image_raw", "action", *(["scan"] if scan else [])]


class AgentActivation:
    """Configure the agent (its action publisher appears), wait until the recorder and the camera watcher are
    matched to every publisher of ``topics``, then activate it. A volatile topic's messages sent before a
    subscriber matches never reach it: activated at once, a loaded machine's recording could begin steps into
    the run, which no replay reproduces. ``poll()`` from the demo's loop; True once activation is requested
    (a failed configure shows in the agent's status, which the loop reports)."""

    def __init__(self, monitor: Any, recorder: Any, topics: list[str]) -> None:
        from lifecycle_msgs.msg import Transition
        from lifecycle_msgs.srv import ChangeState

        self.monitor, self.recorder, self.topics = monitor, recorder, topics
        self._request = lambda tid: ChangeState.Request(transition=Transition(id=tid))
        self._ids = (Transition.TRANSITION_CONFIGURE, Transition.TRANSITION_ACTIVATE)
        self.client = monitor.create_client(ChangeState, f"{NAMESPACE}/icrl_agent/change_state")
        self.configure = None

    def poll(self) -> bool:
        if self.configure is None:
            if self.client.service_is_ready():
                self.configure = self.client.call_async(self._request(self._ids[0]))
            return False
        if not self.configure.done() or not self.configure.result().success:
            return False
        if self.recorder.unmatched(self.topics) or self.monitor.camera.get_publisher_count() == 0:
            return False
        self.client.call_async(self._request(self._ids[1]))
        return True


def make_monitor(context_args=None):
    """A node recording episode events, the agent's per-episode status and camera frames."""
    from diagnostic_msgs.msg import DiagnosticArray
    from rclpy.node import Node
    from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
    from sensor_msgs.msg import Image
    from std_msgs.msg import String

    from icrl_ros.nodes.convert import stamp_to_seconds

    class DemoMonitor(Node):
        def __init__(self) -> None:
            super().__init__("demo_monitor", namespace=NAMESPACE)
            latched = QoSProfile(depth=200, reliability=ReliabilityPolicy.RELIABLE,
                                 durability=DurabilityPolicy.TRANSIENT_LOCAL)
            reliable = QoSProfile(depth=100, reliability=ReliabilityPolicy.RELIABLE)
            self.events: list[dict] = []
            self.agent: dict[int, dict] = {}  # episode -> the agent's last_episode_* figures
            self.status: dict[str, str] = {}
            self.frames: dict[float, np.ndarray] = {}  # camera stamp -> rgb
            self.create_subscription(String, "episode_events", self._on_event, latched)
            self.create_subscription(DiagnosticArray, "agent_status", self._on_status, reliable)
            self.camera = self.create_subscription(Image, "camera/image_raw", self._on_image, reliable)
            self._stamp = stamp_to_seconds

        def _on_event(self, msg) -> None:
            self.events.append(json.loads(msg.data))

        def _on_status(self, msg) -> None:
            s = {kv.key: kv.value for kv in msg.status[0].values}
            self.status = s
            if int(s.get("episodes_done", "0")) > 0 and int(s.get("last_episode", "-1")) >= 0:
                self.agent[int(s["last_episode"])] = s

        def _on_image(self, msg) -> None:
            stamp = self._stamp(msg.header.stamp)
            if stamp not in self.frames and msg.encoding == "rgb8":
                self.frames[stamp] = np.frombuffer(bytes(msg.data), np.uint8).reshape(msg.height, msg.width, 3)

        def ends(self, trial: int = 0) -> list[dict]:
            return [e for e in self.events if e["event"] == "episode_end" and e["trial"] == trial]

        def starts(self, trial: int = 0) -> list[dict]:
            return [e for e in self.events if e["event"] == "episode_start" and e["trial"] == trial]

    return DemoMonitor()


def episode_row(end: dict, agent: dict) -> dict:
    return {
        "episode": int(end["episode"]),
        "goal": end["goal"],
        "success": bool(end["success"]),
        "spl": float(end["spl"]),
        "steps": int(end["steps"]),
        "agent_steps": int(agent.get("last_episode_steps", 0)),
        "act_mean_ms": float(agent.get("last_episode_act_mean_ms", "nan")),
        "act_p99_ms": float(agent.get("last_episode_act_p99_ms", "nan")),
        "latency_mean_ms": float(agent.get("last_episode_latency_mean_ms", "nan")),
        "latency_p99_ms": float(agent.get("last_episode_latency_p99_ms", "nan")),
        "memory_tokens": int(agent.get("last_episode_memory_tokens", 0)),
        "memory_bytes": int(agent.get("last_episode_memory_bytes", 0)),
    }


def progress_line(row: dict, total: int) -> str:
    return (f"  episode {row['episode'] + 1}/{total} ended: {row['goal']:<12} "
            f"{'SUCCESS' if row['success'] else 'no success'}, SPL {row['spl']:.2f}, {row['steps']} steps, "
            f"act {row['act_mean_ms']:.2f} ms mean, memory {row['memory_tokens']} tokens")


def print_table(rows: list[dict]) -> None:
    head = (f"{'ep':>3} {'goal':<13} {'success':>7} {'SPL':>5} {'steps':>5} {'act mean':>9} {'act p99':>8} "
            f"{'in->out mean':>12} {'in->out p99':>11} {'mem tokens':>10} {'mem bytes':>11}")
    print(head)
    print("-" * len(head))
    for r in rows:
        print(f"{r['episode'] + 1:>3} {r['goal']:<13} {('yes' if r['success'] else 'no'):>7} {r['spl']:>5.2f} "
              f"{r['steps']:>5} {r['act_mean_ms']:>6.2f} ms {r['act_p99_ms']:>5.2f} ms {r['latency_mean_ms']:>9.2f} ms "
              f"{r['latency_p99_ms']:>8.2f} ms {r['memory_tokens']:>10} {r['memory_bytes']:>11,}")
    print("-" * len(head))
    succ = np.mean([r["success"] for r in rows]) if rows else 0.0
    spl = np.mean([r["spl"] for r in rows]) if rows else 0.0
    print(f"    success {succ:.0%} of {len(rows)} episodes, mean SPL {spl:.2f}, {sum(r['steps'] for r in rows)} steps "
          f"(act = the runner's own time; in->out = image received -> action published, inside the agent node)")


# -- pictures -----------------------------------------------------------------------------------------
def plot_curve(rows: list[dict], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    x = np.arange(1, len(rows) + 1)
    succ = np.array([float(r["success"]) for r in rows])
    spl = np.array([r["spl"] for r in rows])
    fig, ax = plt.subplots(figsize=(7, 4.1), dpi=110)
    ax.bar(x, succ, width=0.6, color="#9ecae1", label="success (0/1)")
    ax.plot(x, spl, "o-", color="#d62728", label="SPL")
    ax.plot(x, np.cumsum(succ) / x, "--", color="#3182bd", label="success rate so far")
    ax.set_xlabel("in-context episode (same house, memory kept)")
    ax.set_ylabel("success / SPL")
    ax.set_ylim(-0.05, 1.05)
    ax.set_xticks(x)
    ax.set_title(title, fontsize=9)
    # below the axes: inside, it covered episode 1's bar and SPL point
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.17), ncol=3, fontsize=8, frameon=False)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def plot_top_down(rows: list[dict], ends: list[dict], house_seed: int, path: Path, title: str) -> None:
    """The house from above: each episode's path and rings around its own goal's instances in
    one colour (objects in greys, boxes square), numbered starts, a 2 m scale bar."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    from icrl_ros.sim.house_layout import GOAL_NAMES, generate_layout
    from icrl_ros.sim.house_topdown import EPISODE_COLORS, Canvas, draw_episodes

    px_per_m, scale_m = 28.0, 2.0
    layout = generate_layout(house_seed)
    episodes = [(np.asarray(e.get("trajectory", []), np.float64).reshape(-1, 2), GOAL_NAMES.index(e["goal"]))
                for e in ends]
    img = draw_episodes(layout, episodes, px_per_m=px_per_m, scale_m=scale_m)
    to_px = Canvas(layout.bounds, px_per_m).px  # the map's world (x, z) -> pixel (col, row)
    h, w = img.shape[:2]
    fig, ax = plt.subplots(figsize=(w / 110 + 3.2, h / 110 + 0.9), dpi=110)
    ax.imshow(img)
    ax.set_axis_off()
    ax.text(8 + scale_m * px_per_m + 4, h - 8, f"{scale_m:g} m", fontsize=7, color="white", va="bottom")
    color = [np.array(EPISODE_COLORS[k % len(EPISODE_COLORS)]) / 255 for k in range(len(episodes))]
    for k, (traj, _) in enumerate(episodes):  # number each start: one-step episodes are only a dot
        if len(traj):
            col, row = to_px(traj[0, 0], traj[0, 1])
            ax.annotate(str(k + 1), (col, row), xytext=(5, 5), textcoords="offset points", fontsize=8,
                        fontweight="bold", color=color[k],
                        bbox={"boxstyle": "round,pad=0.1", "fc": "white", "ec": "none", "alpha": 0.8})

    def label(r: dict) -> str:
        steps = f"{r['steps']} step" + ("s" if r["steps"] != 1 else "")
        return f"{r['episode'] + 1}: {r['goal']} ({'found' if r['success'] else 'not found'}, {steps}, SPL {r['spl']:.2f})"
    handles = [Line2D([], [], color=color[k], lw=2.5, marker="o", ms=5, mfc="none", label=label(r))
               for k, r in enumerate(rows)]
    handles.append(Line2D([], [], ls="none", marker="o", ms=9, mfc="none", mec="black",
                          label="ring: that episode's goal objects (same colour)"))
    handles.append(Line2D([], [], ls="none", marker="s", ms=7, mfc="#969696", mec="#3c3c3c",
                          label="other objects (grey; boxes square)"))
    ax.legend(handles=handles, loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=7, frameon=False,
              title="episode: goal (path, dot = start)", title_fontsize=7)
    fig.suptitle(title, fontsize=8)
    fig.tight_layout()
    fig.savefig(path, bbox_inches="tight")
    plt.close(fig)


def gif_episodes(episodes: list[list[tuple[np.ndarray, str]]], max_frames: int) -> list[list]:
    """Whole episodes for the GIF within ``max_frames``: every episode if they fit, else the
    first, then the last ones, then the second, ... (never a part of an episode)."""
    order = [0, *range(len(episodes) - 1, 0, -1)]
    keep, total = set(), 0
    for k in order:
        if total + len(episodes[k]) > max_frames and keep:
            continue
        keep.add(k)
        total += len(episodes[k])
    return [episodes[k] if k in keep else [] for k in range(len(episodes))]


def write_gif(episodes: list[list[tuple[np.ndarray, str]]], path: Path, scale: int = 3, max_frames: int = 900,
              ms: int = 90) -> int:
    """Camera frames of whole episodes, captioned; a card names episodes left out for length."""
    from PIL import Image, ImageDraw

    chosen = gif_episodes(episodes, max_frames)
    images = []
    size = next((f[0].shape[:2] for ep in episodes for f in ep), (64, 64))
    skipped: list[int] = []

    def card(text: str) -> Image.Image:
        im = Image.new("RGB", (size[1] * scale, size[0] * scale + 16), (20, 20, 20))
        ImageDraw.Draw(im).text((6, size[0] * scale // 2), text, fill=(255, 255, 255))
        return im

    for k, ep in enumerate(chosen):
        if not ep:
            skipped.append(k + 1)
            continue
        if skipped:
            images += [card(f"(episodes {skipped[0]}-{skipped[-1]} left out)")] * 6
            skipped = []
        for rgb, caption in ep:
            h, w = rgb.shape[:2]
            big = np.repeat(np.repeat(rgb, scale, axis=0), scale, axis=1)
            canvas = np.full((h * scale + 16, w * scale, 3), 20, np.uint8)
            canvas[16:] = big
            im = Image.fromarray(canvas)
            ImageDraw.Draw(im).text((3, 2), caption, fill=(255, 255, 255))
            images.append(im)
    if images:
        images[0].save(path, save_all=True, append_images=images[1:], duration=ms, loop=0)
    return len(images)


# -- main -----------------------------------------------------------------------------------------------
def memory_pictures(watch, bundle: Path, table: list[dict], ends: list[dict], starts: dict, house_seed: int,
                    out: Path, habitat: bool) -> int:
    """``out/memory_epNN.png`` per episode: the memory at its end beside the truth (walls from the house layout,
    in the house frame of the trial's first start); each row of ``table`` gets ``memory``: the remembered
    categories and their distance to the nearest true instance (m), and of the steps whose route memory handed
    the policy a waypoint, how many had it across a wall from the robot. Returns how many were written."""
    if watch is None:
        return 0
    from icrl_ros.nodes.memory_picture import plot_memory, walls_in_house, waypoints_across_walls
    from icrl_ros.runtime.bundle import load_bundle
    from icrl_ros.sim.house_layout import generate_layout

    goal_names = list(load_bundle(bundle).manifest.observation.goal_names)
    first = starts.get(0, {}).get("start")
    walls = walls_in_house(generate_layout(house_seed), tuple(first)) if first is not None else None
    rows = {r["episode"]: r for r in table}
    n = 0
    for e in ends:
        k = int(e["episode"])
        t_start = starts.get(k, {}).get("stamp")
        if t_start is None or k not in rows:
            continue
        r = rows[k]
        title = (f"{bundle.name}, house {house_seed}{' (Habitat)' if habitat else ''}, episode {k + 1}: "
                 f"find {r['goal']}, "
                 f"{'found' if r['success'] else 'not found'} in {r['steps']} steps\nthe agent's memory after the "
                 f"episode's last step (its ~/memory topics) beside the truth (the bridge's true_objects, the walls)")
        snap = watch.snapshot(float(t_start), float(e["stamp"]))
        across = (waypoints_across_walls(watch, float(t_start), float(e["stamp"]), walls, snap["map_to_odom"])
                  if walls is not None else None)
        drawn = plot_memory(snap, out / f"memory_ep{k + 1:02d}.png", title, r["goal"], goal_names, walls, across)
        r["memory"] = {"remembered_m_to_truth": {c: (None if d is None else round(d, 2))
                                                 for c, d in drawn["remembered"].items()},
                       "sightings_drawn": drawn["sightings"], "route_points": drawn["route_points"],
                       **({"waypoints": across[0], "waypoints_across_a_wall": across[1]} if across else {})}
        n += 1
    return n


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bundle", default=str(REPO_ROOT / "bundles" / DEFAULT_BUNDLE),
                   help="export bundle directory (default: the agent node's shipped default)")
    p.add_argument("--backend", default="onnxruntime", choices=["onnxruntime", "torch", "tensorrt"])
    p.add_argument("--episodes", type=int, default=12, help="episodes of the trial (one house, memory kept)")
    p.add_argument("--max-steps", type=int, default=200, help="episode cap (the bridge truncates)")
    p.add_argument("--seed", type=int, default=0, help="bridge seed: picks the test-split house and the starts")
    p.add_argument("--sample-seed", type=int, default=0, help="agent's action-sampling seed")
    p.add_argument("--out", default=str(REPO_ROOT / "demo_out"))
    p.add_argument("--timeout", type=float, default=600.0, help="give up after this many seconds")
    p.add_argument("--domain-id", type=int, default=None, help="ROS_DOMAIN_ID (default: random in 100-200)")
    p.add_argument("--no-record", action="store_true",
                   help="do not record the run to OUT/run.mcap (camera, odometry, scan, goal, events, actions, status; "
                        "training/replay.py replays it)")
    p.add_argument("--habitat", action="store_true",
                   help="the same house in habitat-sim, served from the chroot of ../shared/habitat (root)")
    p.add_argument("--habitat-look", default="miniworld", choices=("miniworld", "unseen"),
                   help="--habitat: how the house is drawn: MiniWorld's textures and light, or textures and a light "
                        "no training house has (icrl_ros/sim/habitat_mesh.py LOOKS)")
    p.add_argument("--replay-episodes", metavar="EPISODES_JSON",
                   help="start the episodes where another run's did, with its goals (its episodes.json, e.g. a "
                        "MiniWorld run of the same --seed replayed in Habitat: paired episodes); the env's reset must "
                        "take start / goal options (Habitat's does)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.episodes < 1 or args.max_steps < 1:
        fail("--episodes and --max-steps must be >= 1")
    if args.habitat_look != "miniworld" and not args.habitat:
        fail("--habitat-look draws the Habitat house: give --habitat too")
    bundle = Path(args.bundle)
    replay = None
    if args.replay_episodes:
        try:
            replay = [{"start": r["start"], "goal": r["goal"]}
                      for r in json.loads(Path(args.replay_episodes).read_text())["episodes"]]
        except (OSError, ValueError, KeyError, TypeError) as e:
            fail(f"--replay-episodes {args.replay_episodes}: not the episodes.json of a run that recorded its starts "
                 f"({type(e).__name__}: {e}); rerun that demo with this version")
    if not (bundle / "manifest.yaml").is_file():
        fail(f"{bundle} is not an export bundle (no manifest.yaml); export one with training/export.py")
    out = Path(args.out)
    (out / "logs").mkdir(parents=True, exist_ok=True)
    for old in ("icl_curve.png", "top_down.png", "camera.gif", "episodes.json", "run.mcap",
                *(p.name for p in out.glob("memory_ep*.png"))):
        (out / old).unlink(missing_ok=True)
    env = loopback_ros_env(args.domain_id, out / "logs" / "ros")
    t0 = time.monotonic()
    sim_name = "Habitat (habitat-sim 0.2.2)" if args.habitat else "MiniWorld"
    print(f"== icrl_ros demo: {bundle.name} ({args.backend}) in an unseen {sim_name} house over ROS 2 ==")
    print(f"   DDS on loopback only, ROS_DOMAIN_ID={env['ROS_DOMAIN_ID']}, namespace {NAMESPACE}; "
          f"{args.episodes} episodes of at most {args.max_steps} steps, memory kept across them")
    note = shipped_note(bundle)
    if note:
        print(f"   note: the shipped {bundle.name} policy {note[0]}")

    tmp = Path(tempfile.mkdtemp(prefix="icrl_demo_"))
    bridge = {"env_id": "icrl_ros/MiniWorldHouse-v0", "env_kwargs": json.dumps({"split": "test"})}
    server = None
    if args.habitat:
        from icrl_ros.sim.house_layout import draw_house_seed
        from icrl_ros.training.habitat_bridge import export_house, start_server, stop_server

        house_seed = draw_house_seed(np.random.default_rng(args.seed), "test")  # the MiniWorld run's house
        export = export_house(house_seed, 40, out / "logs" / "habitat_server.log", args.habitat_look)
        server, remote = start_server(export, {"pose_frame": "house", "max_episode_steps": args.max_steps},
                                      out / "logs" / "habitat_server.log")
        print(f"   Habitat env server up after {time.monotonic() - t0:.1f} s at {remote['address']} (house {house_seed})")
        bridge = {"env_id": "icrl_ros/RemoteEnv-v0", "env_kwargs": json.dumps(remote),
                  "camera_fov_y_deg": 79.0, "camera_height_m": 0.9}
    if replay is not None:
        (tmp / "replay.json").write_text(json.dumps(replay))
        bridge["replay_episodes"] = str(tmp / "replay.json")
    bridge_params = params_file(tmp / "bridge.yaml", {
        **bridge, "seed": args.seed,
        "mode": "lockstep", "max_episode_steps": args.max_steps, "max_episodes": args.episodes,
        "episode_start_delay_s": 0.05})
    agent_overrides = {
        "bundle_path": str(bundle.resolve()), "backend": args.backend, "action_mode": "discrete",
        "autostart": args.no_record,  # recorded: activated once the recorder hears the run (AgentActivation)
        "action_selection": "", "sample_seed": args.sample_seed, "status_rate_hz": 2.0,  # "": the bundle's choice
        "input_timeout_s": 30.0, "memory_path": str((out / "memory.npz").resolve()),
        # the memory on ~/memory after every step, for the pictures (sent after the action: acting never waits)
        "introspection": True, "introspection_period_s": 0.0}
    agent_params = params_file(tmp / "agent.yaml", agent_overrides)
    import rclpy
    from rclpy.executors import SingleThreadedExecutor

    # The monitor subscribes before the nodes start and spins in its own thread, so it sees every camera frame
    # (the bridge keeps 5 in its history: a monitor that only spun between checks could fall behind and lose one).
    rclpy.init(domain_id=int(env["ROS_DOMAIN_ID"]))
    monitor = make_monitor()
    watch = None
    try:
        from icrl_ros.nodes.memory_picture import MemoryWatch

        watch = MemoryWatch(monitor)
    except ImportError as e:  # visualization_msgs missing: no memory pictures
        print(f"   no memory pictures: {e}")
    ex = SingleThreadedExecutor()
    ex.add_node(monitor)
    recorder = None
    if not args.no_record:  # subscribed before the nodes start: the whole run, latched goal and events included
        from icrl_ros.nodes.recording import make_recorder

        recorder = make_recorder(str(out / "run.mcap"), namespace=NAMESPACE, metadata={
            "source": "training/demo_ros.py", "agent_params": json.dumps(demo_agent_params(agent_overrides)),
            "bridge_seed": args.seed, "max_steps": args.max_steps, "episodes": args.episodes})
        ex.add_node(recorder)
    spinner = threading.Thread(target=ex.spin, name="demo_monitor", daemon=True)
    spinner.start()
    config = REPO_ROOT / "config"
    procs = {
        "agent": start_node("agent_node", [config / "agent.yaml", agent_params], out / "logs" / "agent.log", env),
        "bridge": start_node("sim_bridge_node", [config / "bridge.yaml", bridge_params], out / "logs" / "bridge.log",
                             env),
    }

    rows: dict[int, dict] = {}
    started = False
    activation = None if recorder is None else AgentActivation(monitor, recorder, recorded_start_topics(bundle))
    try:
        deadline = time.monotonic() + args.timeout
        while len(rows) < args.episodes:
            time.sleep(0.05)
            if activation is not None and activation.poll():
                activation = None
            for name, proc in procs.items():
                if proc.poll() is not None:
                    log = (out / "logs" / f"{name}.log").read_text(errors="replace")[-3000:]
                    fail(f"the {name} node exited with code {proc.returncode}; its log ends:\n{log}")
            if monitor.status.get("state") == "unconfigured" and monitor.status.get("last_error"):
                fail(f"the agent could not start the bundle {bundle}: {monitor.status['last_error']} "
                     f"(full log: {out / 'logs' / 'agent.log'})")
            if not started and monitor.status.get("state") == "active" and monitor.starts():
                started = True
                house = monitor.starts()[0].get("house_seed")
                print(f"   bridge and agent up after {time.monotonic() - t0:.1f} s; house seed {house} (test split)")
            ends = monitor.ends()
            for e in ends[: args.episodes]:
                k = int(e["episode"])
                if k not in rows and k in monitor.agent:
                    rows[k] = episode_row(e, monitor.agent[k])
                    print(progress_line(rows[k], args.episodes), flush=True)
            if time.monotonic() > deadline:
                fail(f"timed out after {args.timeout:.0f} s with {len(rows)} of {args.episodes} episodes; "
                     f"logs in {out / 'logs'}")
    finally:
        interrupt(procs.values())
        if server is not None:
            stop_server(server)
        ex.shutdown()
        spinner.join(timeout=5.0)
        monitor.destroy_node()
        if recorder is not None:
            recorder.close()  # after the nodes stopped: their last messages (the final zero, status) are in
            recorder.destroy_node()
        rclpy.try_shutdown()
    run_s = time.monotonic() - t0

    table = [rows[k] for k in sorted(rows)]
    ends = sorted(monitor.ends()[: args.episodes], key=lambda e: e["episode"])
    starts = {e["episode"]: e for e in monitor.starts()}
    for row in table:  # where it started (world x, z, yaw): what --replay-episodes takes
        if "start" in starts.get(row["episode"], {}):
            row["start"] = starts[row["episode"]]["start"]
    house_seed = int(ends[0]["house_seed"])
    print()
    print_table(table)
    title = (f"{bundle.name}: one trial in test-split house {house_seed}{' in Habitat' if args.habitat else ''} "
             f"({args.episodes} episodes, "
             f"<= {args.max_steps} steps each)")
    if note:
        title += f"\n{note[1]}"
    plot_curve(table, out / "icl_curve.png", title)
    plot_top_down(table, ends, house_seed, out / "top_down.png", title)
    frames = []
    stamps = sorted(monitor.frames)
    for e in ends:
        t_start = starts.get(e["episode"], {}).get("stamp", -1.0)
        t_end = e["stamp"]
        mine = [s for s in stamps if t_start <= s < t_end]
        frames.append([(monitor.frames[s], f"ep {e['episode'] + 1} step {i} find {e['goal']}")
                       for i, s in enumerate(mine)])
    n_gif = write_gif(frames, out / "camera.gif")
    n_mem = memory_pictures(watch, bundle, table, ends, starts, house_seed, out, args.habitat)
    summary = {"bundle": str(bundle), "backend": args.backend, "simulator": "habitat" if args.habitat else "miniworld",
               **({"habitat_look": args.habitat_look} if args.habitat else {}),
               "house_seed": house_seed, "split": "test",
               "seed": args.seed, "sample_seed": args.sample_seed, "max_steps": args.max_steps,
               "replay_episodes": args.replay_episodes,
               "run_seconds": round(run_s, 1), "episodes": table}
    (out / "episodes.json").write_text(json.dumps(summary, indent=1))
    recorded = ""
    if recorder is not None:
        counts = recorder.writer.counts
        recorded = (f"\nrecorded {out}/run.mcap ({sum(counts.values())} messages: "
                    + ", ".join(f"{t.rsplit('/', 1)[-1] if not t.endswith('image_raw') else 'camera'} {n}"
                                for t, n in counts.items() if n) + "); replay it with "
                    f"training/replay.py {out}/run.mcap --bundle {bundle}")
    print(f"\nwrote {out}/icl_curve.png, top_down.png, camera.gif ({n_gif} frames), "
          f"{f'memory_ep01..{n_mem:02d}.png, ' if n_mem else ''}episodes.json; "
          f"node logs in {out}/logs ({run_s:.0f} s){recorded}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
