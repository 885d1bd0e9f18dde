"""The cost of memory introspection: the agent's step with ``~/memory/*`` subscribed vs not, in one run.

    .venv/bin/python scripts/bench_introspection.py                      # house_relic_scan, 3 + 3 blocks of 40 steps
    .venv/bin/python scripts/bench_introspection.py --blocks 4 --block-steps 60 --out /tmp/introspection.json
    .venv/bin/python scripts/bench_introspection.py --period 0                    # the memory after every step
    .venv/bin/python scripts/bench_introspection.py --plot cost.png --out cost.json   # and the figure
    .venv/bin/python scripts/bench_introspection.py --replot cost.json cost.png       # the figure again

The house bridge (``sim_bridge_node``, MiniWorld house, test split, lockstep) runs in its own process and
the agent node (``introspection:=true``, the real bundle on ONNX Runtime) in this one, on a single-threaded
executor as its console script runs it. DDS stays on loopback on a private domain. After ``--warmup`` steps,
blocks of ``--block-steps`` steps alternate: **off** (nobody subscribes to any ``~/memory`` topic) and **on**
(a viewer process subscribes to all of them: sightings, route map, route, looked-at floor, attention; a plain
rclpy node, as RViz or Foxglove would). Each step is labelled by the subscriber count the node itself saw at
that step; steps while a viewer was being discovered or leaving (some topics matched, not all) are left out.

Per step: the acting callback's wall time and this thread's CPU time (image taken -> action published ->
memory published: ``AgentLoop.try_act``), the node's own in -> out latency (image in -> action out; the
memory goes out after the action) and, inside the step, the introspection hook alone (with nobody
subscribed: one ``get_subscription_count`` call per topic). ``--plot`` draws every labelled step's CPU time
in run order, off and on blocks shaded, and the hook's CPU time. Per block: this thread's CPU time over the block's
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
import importlib, rclpy, signal, sys
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
rclpy.init()
node = rclpy.create_node("introspection_viewer")
qos = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL)
got = {}
for arg in sys.argv[2:]:  # name=package.msg.Type
    name, typ = arg.split("=")
    module, cls = typ.rsplit(".", 1)
    got[name] = 0
    def on(m, name=name):
        got[name] += 1
    node.create_subscription(getattr(importlib.import_module(module), cls), sys.argv[1] + "/memory/" + name, on, qos)
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
    p.add_argument("--plot", default="", help="also draw the steps' CPU time, off and on, to this PNG")
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
            counts = [pub.get_subscription_count() for pub in agent._memory_pubs.values()]
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
        return sum(pub.get_subscription_count() for pub in agent._memory_pubs.values())

    blocks: list[tuple[str, int, int]] = []  # (kind, first step index, end)
    block_cpu: list[tuple[str, float, int]] = []  # (kind, this thread's CPU ms over the block, actions in it)
    viewer_out = []
    t0 = time.monotonic()
    try:
        if agent.trigger_configure() != TransitionCallbackReturn.SUCCESS or agent._memory_pubs is None:
            raise SystemExit(f"agent configure failed for {args.bundle} (or its model keeps no route memory)")
        agent.trigger_activate()
        spin_until(lambda: len(steps) >= args.warmup, "the warm-up steps")
        n_topics = len(agent._memory_pubs)
        topic_types = [f"{name}={pub.msg_type.__module__.rsplit('._', 1)[0]}.{pub.msg_type.__name__}"
                       for name, pub in agent._memory_pubs.items()]
        for b in range(2 * args.blocks):
            on = b % 2 == 1
            if on:
                viewer = subprocess.Popen([sys.executable, "-c", VIEWER, NAMESPACE + "/icrl_agent", *topic_types],
                                          env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
                spin_until(lambda: viewers() == n_topics, "the viewer's subscriptions")
            first = len(steps)
            cpu0, acts0 = time.thread_time(), loop.counters["actions"]
            want = n_topics if on else 0
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
        topics = agent._memory_route
        route = topics.route
        drawn = sum(1 for c in range(route.n_cat) if route.remembered(0, c)[1] >= 0.05)
        stood = int(route.stood[0].sum())
        tokens = int(agent.runner.memory.tokens)
        # each topic's key and message alone on the final memory (no DDS): what the hook computes, apart from
        # publishing
        convert = {}
        ctx = {"origin": loop.origin or (0.0, 0.0, 0.0), "stamp": None, "goal": agent.runner.goal,
               "frame": "odom", "robot": loop.last_pose, "goal_names": loop.goal_names}
        for name in topics.types:
            def fn(name=name):
                topics._step = None  # as on a new step: nothing shared with the last call
                topics.key(name, ctx)
                topics.message(name, ctx)
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
        want = n_topics if kind == "on" else 0
        return [s for k, a, z in blocks if k == kind for s in steps[a:z] if s["viewers"] == want == s["viewers_after"]]

    result = {"bundle": args.bundle, "blocks": args.blocks, "block_steps": args.block_steps, "seed": args.seed,
              "episodes": episodes, "categories_drawn_at_end": drawn, "cells_stood_at_end": stood,
              "memory_tokens_at_end": tokens, "topics": list(topics.types),
              "load_start": load_start, "load_end": load_end, "cpus": os.cpu_count(), "wall_s": wall,
              "date": time.strftime("%Y-%m-%d %H:%M %Z"), "viewer": viewer_out, "convert_cpu_ms": convert}
    print(f"bundle {args.bundle}: {2 * args.blocks} alternating blocks (off, on, ...) of {args.block_steps} steps "
          f"after {args.warmup} warm-up, {len(steps)} steps in all, {episodes} episodes (house test split, seed "
          f"{args.seed}); at the end {drawn} categories drawn, {stood} cells stood on, {tokens} tokens in memory; "
          f"topics {', '.join(topics.types)}")
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, load average at start "
          f"{load_start[0]:.2f} / {load_start[1]:.2f} / {load_start[2]:.2f}, at end {load_end[0]:.2f} / "
          f"{load_end[1]:.2f} / {load_end[2]:.2f}; OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS')}; {result['date']}")
    print(f"viewer received: {viewer_out}")
    print("each topic's key + message alone on the final memory, CPU ms per call (200 calls): " + ", ".join(
        f"{k} mean {v['mean']:.3f} p50 {v['p50']:.3f}" for k, v in convert.items()))
    print()
    print(f"| {'measure (ms per step)':<58} | {'off n':>5} | {'off mean':>8} | {'off p50':>7} | {'on n':>4} | "
          f"{'on mean':>8} | {'on p50':>7} | {'on/off mean':>11} |")
    print(f"|{'-' * 60}|{'-' * 6}:|{'-' * 9}:|{'-' * 8}:|{'-' * 5}:|{'-' * 9}:|{'-' * 8}:|{'-' * 12}:|")
    for key, name in (("wall_ms", "step wall (image taken -> action -> memory published)"),
                      ("cpu_ms", "step CPU (this thread)"),
                      ("in_out_ms", "in -> out (image in -> action published)"),
                      ("act_ms", "PolicyRunner.act"),
                      ("hook_ms", "introspection hook wall (off: a subscriber count per topic)"),
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
    if args.plot:
        plot(steps, blocks, result, Path(args.plot))
    return 0


def plot(steps: list[dict], blocks: list[tuple[str, int, int]], result: dict, path: Path) -> None:
    """Every step's CPU time in run order with the off / on blocks shaded, and the hook's CPU time (log scale)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a1, a2) = plt.subplots(2, 1, figsize=(8.0, 5.6), dpi=110, sharex=True)
    idx = np.arange(len(steps))
    for kind, a, z in blocks:
        for ax in (a1, a2):
            ax.axvspan(a - 0.5, z - 0.5, color="#fdd49e" if kind == "on" else "#deebf7", lw=0, zorder=0)
    cpu = np.array([s["cpu_ms"] for s in steps])
    hook = np.array([s["hook_cpu_ms"] for s in steps])
    a1.plot(idx, cpu, ".", ms=2.5, color="black", zorder=2)
    for kind, colour in (("off", "#2171b5"), ("on", "#d94801")):
        mean = result["cpu_ms"][kind]["mean"]
        a1.axhline(mean, color=colour, lw=1.2, zorder=3,
                   label=f"{'nobody subscribed' if kind == 'off' else 'a viewer on every topic'}: mean {mean:.2f} ms")
    a1.set_ylabel("step CPU, ms (node thread)")
    a1.set_ylim(0, float(np.percentile(cpu, 99)) * 1.15)
    a1.legend(fontsize=7, loc="upper right")
    a2.semilogy(idx, np.maximum(hook, 1e-3), ".", ms=2.5, color="black", zorder=2)
    a2.set_ylabel("introspection hook CPU, ms")
    a2.set_title("hook: off = a subscriber count per topic; on = the memory sent (upper dots) or held back by "
                 "introspection_period_s (lower)", fontsize=7)
    a2.set_xlabel("step (blue: nobody subscribed; orange: a viewer on all ~/memory topics; white: a viewer joining "
                  "or leaving, not counted)", fontsize=8)
    r = result["cpu_ms"]["ratio_mean"]
    fig.suptitle(f"memory introspection cost, {result['bundle'].rsplit('/', 1)[-1]}, introspection_period_s "
                 f"{result['introspection_period_s']}: step CPU on / off = {r:.3f}; hook with nobody subscribed "
                 f"p50 {result['hook_cpu_ms']['off']['p50'] * 1e3:.0f} us\n{result['date']}, {result['cpus']} CPUs, "
                 f"load {result['load_start'][0]:.1f} -> {result['load_end'][0]:.1f}", fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--replot":  # --replot RUN.json OUT.png: the figure of a saved run
        saved = json.loads(Path(sys.argv[2]).read_text())
        plot(saved["steps"], [tuple(b) for b in saved["block_index"]], saved, Path(sys.argv[3]))
        sys.exit(0)
    sys.exit(main())
