"""The cost of memory introspection: the agent's step with ``~/memory/*`` subscribed vs not, in one run.

    .venv/bin/python scripts/bench_introspection.py                      # house_relic_scan, 3 + 3 blocks of 40 steps
    .venv/bin/python scripts/bench_introspection.py --blocks 4 --block-steps 60 --out /tmp/introspection.json
    .venv/bin/python scripts/bench_introspection.py --period 0                    # the memory after every step

The house bridge (``sim_bridge_node``, MiniWorld house, test split, lockstep) runs in its own process and
the agent node (``introspection:=true``, the real bundle on ONNX Runtime) in this one, on a single-threaded
executor as its console script runs it. DDS stays on loopback on a private domain. After ``--warmup`` steps,
blocks of ``--block-steps`` steps alternate: **off** (nobody subscribes to ``~/memory/sightings`` or
``~/memory/route_map``) and **on** (a viewer process subscribes to both: a plain rclpy node, as RViz or
Foxglove would). Each step is labelled by the subscriber count the node itself saw at that step; steps
while a viewer was being discovered or leaving (one topic matched, not the other) are left out.

Per step: the acting callback's wall time and this thread's CPU time (image taken -> action published ->
memory published: ``AgentLoop.try_act``), the node's own in -> out latency (image in -> action out; the
memory goes out after the action) and, inside the step, the introspection hook alone (with nobody
subscribed: two ``get_subscription_count`` calls). Per block: this thread's CPU time over the block's
steps, every callback included (the 10 Hz check that sends a step held back by ``introspection_period_s``
runs outside the acting callback). Prints a table and the ratios on / off of the means.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]

VIEWER = """
import rclpy, signal, sys
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
from nav_msgs.msg import OccupancyGrid
from visualization_msgs.msg import MarkerArray
rclpy.init()
node = rclpy.create_node("introspection_viewer")
qos = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL)
got = {"sightings": 0, "route_map": 0, "markers": 0}
def on_markers(m):
    got["sightings"] += 1
    got["markers"] += len(m.markers)
def on_grid(g):
    got["route_map"] += 1
node.create_subscription(MarkerArray, sys.argv[1] + "/memory/sightings", on_markers, qos)
node.create_subscription(OccupancyGrid, sys.argv[1] + "/memory/route_map", on_grid, qos)
stop = []
signal.signal(signal.SIGINT, lambda *a: stop.append(1))
while not stop:
    rclpy.spin_once(node, timeout_sec=0.1)
print(got, flush=True)
"""


def summary(values) -> dict[str, float]:
    a = np.asarray(values, dtype=np.float64)
    return {"n": int(a.size), "mean": float(a.mean()), "p50": float(np.percentile(a, 50)),
            "p90": float(np.percentile(a, 90)), "max": float(a.max())}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bundle", default=str(REPO / "bundles" / "house_relic_scan"))
    p.add_argument("--blocks", type=int, default=3, help="blocks of each kind (off, on, off, on, ...)")
    p.add_argument("--block-steps", type=int, default=40, help="labelled steps per block")
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-steps", type=int, default=200, help="bridge episode cap")
    p.add_argument("--timeout", type=float, default=900.0)
    p.add_argument("--period", type=float, default=None,
                   help="the agent's introspection_period_s (default: the parameter's default)")
    p.add_argument("--out", default="", help="also write the samples and the summary here (JSON)")
    args = p.parse_args(argv)
    if not (Path(args.bundle) / "manifest.yaml").is_file():
        print(f"{args.bundle} is not an export bundle (no manifest.yaml)", file=sys.stderr)
        return 2

    from icrl_ros.nodes.demo_ros import NAMESPACE, interrupt, start_lockstep_bridge

    log_dir = Path(tempfile.mkdtemp(prefix="icrl_introspection_"))
    env, bridge = start_lockstep_bridge(args.seed, args.max_steps, log_dir)

    import rclpy
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.lifecycle import TransitionCallbackReturn
    from rclpy.parameter import Parameter

    from icrl_ros.nodes.agent_node import AgentNode

    rclpy.init(domain_id=int(env["ROS_DOMAIN_ID"]))
    agent = AgentNode(namespace=NAMESPACE, parameter_overrides=[
        Parameter("bundle_path", value=str(Path(args.bundle).resolve())), Parameter("introspection", value=True),
        Parameter("input_timeout_s", value=30.0), Parameter("action_selection", value="sample"),
        *([Parameter("introspection_period_s", value=args.period)] if args.period is not None else [])])
    ex = SingleThreadedExecutor()
    ex.add_node(agent)
    steps: list[dict] = []  # one per action: wall_ms, cpu_ms, hook_ms, hook_cpu_ms, viewers
    hook: list[float] = []

    loop = agent.loop
    try_act, publish_memory = loop.try_act, loop.io.memory

    def timed_memory(why: str) -> None:
        t, c = time.perf_counter(), time.thread_time()
        publish_memory(why)
        hook[:] = [(time.perf_counter() - t) * 1e3, (time.thread_time() - c) * 1e3]

    def timed_try_act() -> None:
        n = loop.counters["actions"]
        hook[:] = []
        t, c = time.perf_counter(), time.thread_time()
        try_act()
        wall, cpu = (time.perf_counter() - t) * 1e3, (time.thread_time() - c) * 1e3
        if loop.counters["actions"] > n and hook:
            counts = [pub.get_subscription_count() for pub in agent._memory_pubs]
            steps.append({"wall_ms": wall, "cpu_ms": cpu, "hook_ms": hook[0], "hook_cpu_ms": hook[1],
                          "in_out_ms": loop.latencies_ms[-1], "act_ms": loop.act_ms[-1],
                          "viewers": agent._memory_viewers, "viewers_after": sum(counts)})

    loop.try_act = timed_try_act  # before configure: the node's act trigger takes the attribute
    loop.io.memory = timed_memory
    viewer = None
    deadline = time.monotonic() + args.timeout
    load_start = os.getloadavg()

    def spin_until(pred, what: str) -> None:
        while not pred():
            ex.spin_once(timeout_sec=0.02)
            if bridge.poll() is not None:
                raise SystemExit(f"the bridge exited ({bridge.returncode}); log: {log_dir / 'bridge.log'}")
            if time.monotonic() > deadline:
                raise SystemExit(f"timed out waiting for {what}")

    def viewers() -> int:
        return sum(pub.get_subscription_count() for pub in agent._memory_pubs)

    blocks: list[tuple[str, int, int]] = []  # (kind, first step index, end)
    block_cpu: list[tuple[str, float, int]] = []  # (kind, this thread's CPU ms over the block, actions in it)
    viewer_out = []
    t0 = time.monotonic()
    try:
        if agent.trigger_configure() != TransitionCallbackReturn.SUCCESS or agent._memory_pubs is None:
            raise SystemExit(f"agent configure failed for {args.bundle} (or its model keeps no route memory)")
        agent.trigger_activate()
        spin_until(lambda: len(steps) >= args.warmup, "the warm-up steps")
        for b in range(2 * args.blocks):
            on = b % 2 == 1
            if on:
                viewer = subprocess.Popen([sys.executable, "-c", VIEWER, NAMESPACE + "/icrl_agent"], env=env,
                                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
                spin_until(lambda: viewers() == 2, "the viewer's subscriptions")
            first = len(steps)
            cpu0, acts0 = time.thread_time(), loop.counters["actions"]
            want = 2 if on else 0
            spin_until(lambda: sum(1 for s in steps[first:] if s["viewers"] == want == s["viewers_after"])
                       >= args.block_steps, f"block {b}")
            blocks.append(("on" if on else "off", first, len(steps)))
            block_cpu.append(("on" if on else "off", (time.thread_time() - cpu0) * 1e3, loop.counters["actions"] - acts0))
            if on:
                interrupt([viewer])
                viewer_out.append(viewer.stdout.read().strip())
                viewer = None
                spin_until(lambda: viewers() == 0, "the viewer to leave")
        wall = time.monotonic() - t0
        agent_period = agent.params.introspection_period_s
        episodes = agent.runner.episode + 1
        route = agent._memory_route
        drawn = sum(1 for c in range(route.n_cat) if route.remembered(0, c)[1] >= 0.05)
        stood = int(route.stood[0].sum())
        # the conversions alone on the final memory (no DDS): what the hook computes, apart from publishing
        from icrl_ros.nodes import introspection

        convert = {}
        origin, goal = loop.origin or (0.0, 0.0, 0.0), agent.runner.goal
        for name, fn in (("sightings", lambda: introspection.sightings(route, loop.goal_names, goal, origin, "odom")),
                         ("route_map", lambda: introspection.route_map(route, origin, "odom"))):
            times = []
            for _ in range(200):
                c = time.thread_time()
                fn()
                times.append((time.thread_time() - c) * 1e3)
            convert[name] = summary(times)
    finally:
        if viewer is not None:
            interrupt([viewer])
        interrupt([bridge])
        ex.shutdown()
        agent.destroy_node()
        rclpy.try_shutdown()
    load_end = os.getloadavg()

    def pick(kind: str) -> list[dict]:
        want = 2 if kind == "on" else 0
        return [s for k, a, z in blocks if k == kind for s in steps[a:z] if s["viewers"] == want == s["viewers_after"]]

    result = {"bundle": args.bundle, "blocks": args.blocks, "block_steps": args.block_steps, "seed": args.seed,
              "episodes": episodes, "categories_drawn_at_end": drawn, "cells_stood_at_end": stood,
              "load_start": load_start, "load_end": load_end, "cpus": os.cpu_count(), "wall_s": wall,
              "date": time.strftime("%Y-%m-%d %H:%M %Z"), "viewer": viewer_out, "convert_cpu_ms": convert}
    print(f"bundle {args.bundle}: {2 * args.blocks} alternating blocks (off, on, ...) of {args.block_steps} steps "
          f"after {args.warmup} warm-up, {len(steps)} steps in all, {episodes} episodes (house test split, seed "
          f"{args.seed}); at the end {drawn} categories drawn, {stood} cells stood on")
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, load average at start "
          f"{load_start[0]:.2f} / {load_start[1]:.2f} / {load_start[2]:.2f}, at end {load_end[0]:.2f} / "
          f"{load_end[1]:.2f} / {load_end[2]:.2f}; OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS')}; {result['date']}")
    print(f"viewer received: {viewer_out}")
    print("conversions alone on the final memory, CPU ms per call (200 calls): " + ", ".join(
        f"{k} mean {v['mean']:.3f} p50 {v['p50']:.3f}" for k, v in convert.items()))
    print()
    print(f"| {'measure (ms per step)':<58} | {'off n':>5} | {'off mean':>8} | {'off p50':>7} | {'on n':>4} | "
          f"{'on mean':>8} | {'on p50':>7} | {'on/off mean':>11} |")
    print(f"|{'-' * 60}|{'-' * 6}:|{'-' * 9}:|{'-' * 8}:|{'-' * 5}:|{'-' * 9}:|{'-' * 8}:|{'-' * 12}:|")
    for key, name in (("wall_ms", "step wall (image taken -> action -> memory published)"),
                      ("cpu_ms", "step CPU (this thread)"),
                      ("in_out_ms", "in -> out (image in -> action published)"),
                      ("act_ms", "PolicyRunner.act"),
                      ("hook_ms", "introspection hook wall (off: 2 subscriber counts)"),
                      ("hook_cpu_ms", "introspection hook CPU")):
        off, on = summary([s[key] for s in pick("off")]), summary([s[key] for s in pick("on")])
        result[key] = {"off": off, "on": on, "ratio_mean": on["mean"] / off["mean"] if off["mean"] else None}
        ratio = f"{on['mean'] / off['mean']:.3f}" if off["mean"] else "-"
        print(f"| {name:<58} | {off['n']:>5} | {off['mean']:>8.3f} | {off['p50']:>7.3f} | {on['n']:>4} | "
              f"{on['mean']:>8.3f} | {on['p50']:>7.3f} | {ratio:>11} |")
    per = {k: sum(c for kk, c, _ in block_cpu if kk == k) / max(sum(n for kk, _, n in block_cpu if kk == k), 1)
           for k in ("off", "on")}
    result["thread_cpu_per_step_ms"] = per
    print(f"| {'this thread, all callbacks, CPU per step (block totals)':<58} | "
          f"{sum(n for k, _, n in block_cpu if k == 'off'):>5} | {per['off']:>8.3f} | {'':>7} | "
          f"{sum(n for k, _, n in block_cpu if k == 'on'):>4} | {per['on']:>8.3f} | {'':>7} | "
          f"{per['on'] / per['off'] if per['off'] else float('nan'):>11.3f} |")
    period = agent_period
    print(f"(introspection_period_s {period})")
    result["introspection_period_s"] = period
    if args.out:
        Path(args.out).write_text(json.dumps({**result, "steps": steps, "block_index": blocks}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
