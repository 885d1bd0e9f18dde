"""Per-step latency inside ``agent_node`` with a real bundle, against the house bridge in lockstep.

The bridge (``sim_bridge_node``, MiniWorld house, test split) runs in its own process; the
agent node runs in this one (so its raw samples can be read), on its own executor, exactly as
its console script would. DDS stays on loopback (``ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST``,
a private ``ROS_DOMAIN_ID`` in 100-200). After ``--warmup`` steps, ``--steps`` steps are
timed:

    in -> out   the agent's image callback entered -> its action published (the node's
                ``latency_p50_ms`` / ``latency_p99_ms``: conversion, resize, odometry, runner,
                publish)
    act         ``PolicyRunner.act`` alone (encode, core over the memory, Memo summary, heads)
    round trip  action published -> the bridge's next observation received -> next action
                published (env step + render + DDS both ways), from consecutive actions

    python training/node_latency.py                       # 400 steps, bundles/house_memo, ORT
    python training/node_latency.py --steps 1000 --backend torch --csv /tmp/latency.csv
    python training/node_latency.py --bundle B --kv-dtype int8 --minutes 10 --out soak.json

``--minutes``: a soak instead of a step count. The loop runs as fast as the lockstep allows for that long
and every ``--every`` seconds records this process's resident memory (VmRSS: the agent node, its runner
and its memory; the bridge is another process), the memory's tokens and bytes, and the steps of that
interval: how many, and their in -> out and act percentiles.
"""

from __future__ import annotations


import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from icrl_ros.training._cli import REPO_ROOT, fail
from icrl_ros.nodes.demo_ros import NAMESPACE, interrupt, start_lockstep_bridge


def stats(ms: np.ndarray) -> dict[str, float]:
    return {"n": len(ms), "p50": float(np.percentile(ms, 50)), "p90": float(np.percentile(ms, 90)),
            "p99": float(np.percentile(ms, 99)), "mean": float(ms.mean()), "max": float(ms.max())}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bundle", default=str(REPO_ROOT / "bundles" / "house_memo"))
    p.add_argument("--backend", default="onnxruntime", choices=["onnxruntime", "torch", "tensorrt"])
    p.add_argument("--steps", type=int, default=400, help="timed lockstep steps")
    p.add_argument("--warmup", type=int, default=20, help="steps run before timing")
    p.add_argument("--max-steps", type=int, default=200, help="bridge episode cap")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--csv", default="", help="also write the raw samples here")
    p.add_argument("--timeout", type=float, default=600.0)
    p.add_argument("--kv-dtype", default="", help="the agent's kv_dtype parameter (default: the bundle's)")
    p.add_argument("--memory-budget-bytes", type=int, default=0,
                   help="the agent's memory_budget_bytes parameter (default 0: the bundle's memory size)")
    p.add_argument("--minutes", type=float, default=0.0, help="soak this long instead of --steps (see above)")
    p.add_argument("--every", type=float, default=60.0, help="--minutes: seconds between samples")
    p.add_argument("--out", default="", help="--minutes: write the samples here (JSON)")
    args = p.parse_args(argv)
    if args.minutes < 0 or not 5 <= args.every:
        fail("--minutes must be >= 0 and --every >= 5 s")
    if not 1 <= args.warmup or args.warmup + args.steps > 2000:
        fail("--warmup must be >= 1 and --warmup + --steps <= 2000 (the node keeps its last 2000 samples)")
    if not (Path(args.bundle) / "manifest.yaml").is_file():
        fail(f"{args.bundle} is not an export bundle (no manifest.yaml)")
    log_dir = Path(tempfile.mkdtemp(prefix="icrl_latency_"))
    env, bridge = start_lockstep_bridge(args.seed, args.max_steps, log_dir)

    import rclpy
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.lifecycle import TransitionCallbackReturn
    from rclpy.parameter import Parameter

    from icrl_ros.nodes.agent_node import AgentNode

    rclpy.init(domain_id=int(env["ROS_DOMAIN_ID"]))
    agent = AgentNode(namespace=NAMESPACE, parameter_overrides=[
        Parameter("bundle_path", value=str(Path(args.bundle).resolve())), Parameter("backend", value=args.backend),
        Parameter("input_timeout_s", value=30.0), Parameter("action_selection", value="sample"),
        *([Parameter("kv_dtype", value=args.kv_dtype)] if args.kv_dtype else []),
        *([Parameter("memory_budget_bytes", value=args.memory_budget_bytes)] if args.memory_budget_bytes else [])])
    ex = SingleThreadedExecutor()
    ex.add_node(agent)
    sent: list[float] = []  # monotonic time of each published action
    try:
        if agent.trigger_configure() != TransitionCallbackReturn.SUCCESS:
            fail(f"agent configure failed for {args.bundle}")
        publish = agent.pub_action.publish

        def timed_publish(msg) -> None:
            publish(msg)
            sent.append(time.monotonic())
        agent.pub_action.publish = timed_publish
        agent.trigger_activate()
        if args.minutes:
            return soak(args, agent, ex, bridge, log_dir)
        total = args.warmup + args.steps
        deadline = time.monotonic() + args.timeout
        t_start = None
        while agent.counters["actions"] < total:
            ex.spin_once(timeout_sec=0.05)
            if t_start is None and agent.counters["actions"] >= args.warmup:
                t_start = time.monotonic()
            if bridge.poll() is not None:
                fail(f"the bridge exited ({bridge.returncode}); log: {log_dir / 'bridge.log'}")
            if time.monotonic() > deadline:
                fail(f"timed out with {agent.counters['actions']} of {total} steps")
        wall = time.monotonic() - (t_start or time.monotonic())
        lat = np.array(list(agent.latencies_ms)[args.warmup:total])
        act = np.array(list(agent.act_ms)[args.warmup:total])
        rtt = np.diff(np.array(sent[args.warmup - 1:total])) * 1e3
        info = dict(agent.loop.last_info)
        episodes = agent.runner.episode + 1
    finally:
        interrupt([bridge])
        ex.shutdown()
        agent.destroy_node()
        rclpy.try_shutdown()

    rows = [("in -> out (agent node: image callback -> action published)", stats(lat)),
            ("act (PolicyRunner.act inside it)", stats(act)),
            ("node overhead (in -> out minus act)", stats(lat - act)),
            ("lockstep round trip (action -> next action: env step, render, DDS)", stats(rtt))]
    load = os.getloadavg()
    print(f"bundle {args.bundle} ({args.backend}), {args.steps} timed steps after {args.warmup} warm-up, "
          f"{episodes} episodes (house test split, seed {args.seed}, cap {args.max_steps} steps)")
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, load average "
          f"{load[0]:.2f} / {load[1]:.2f} / {load[2]:.2f}; OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS')}; "
          f"{time.strftime('%Y-%m-%d %H:%M %Z')}")
    print(f"memory at the end: {info.get('memory_tokens')} tokens, {info.get('memory_bytes', 0):,} bytes allocated; "
          f"{args.steps / wall:.1f} steps/s")
    print()
    cols = " | ".join(f"{c:>7}" for c in ("p50 ms", "p90 ms", "p99 ms", "mean ms", "max ms"))
    print(f"| {'measure':<70} | {'n':>4} | {cols} |")
    print(f"|{'-' * 72}|{'-' * 5}:|{'-' * 8}:|{'-' * 8}:|{'-' * 8}:|{'-' * 8}:|{'-' * 8}:|")
    for name, s in rows:
        print(f"| {name:<70} | {s['n']:>4} | {s['p50']:>7.2f} | {s['p90']:>7.2f} | {s['p99']:>7.2f} | "
              f"{s['mean']:>7.2f} | {s['max']:>7.2f} |")
    print("(the round trip includes the bridge's episode_start_delay_s = 0.05 s whenever an episode ends)")
    if args.csv:
        n = min(len(lat), len(act), len(rtt))
        np.savetxt(args.csv, np.stack([lat[:n], act[:n], rtt[:n]], 1), delimiter=",",
                   header="in_out_ms,act_ms,round_trip_ms", comments="", fmt="%.4f")
    return 0


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024.0
    return float("nan")


def soak(args, agent, ex, bridge, log_dir: Path) -> int:
    """Step the lockstep loop for ``args.minutes``; a sample every ``args.every`` s (see the module's doc)."""
    samples = []
    t0 = time.monotonic()
    end, next_sample, done = t0 + 60.0 * args.minutes, t0 + args.every, agent.counters["actions"]
    while time.monotonic() < end:
        ex.spin_once(timeout_sec=0.05)
        if bridge.poll() is not None:
            fail(f"the bridge exited ({bridge.returncode}); log: {log_dir / 'bridge.log'}")
        if time.monotonic() >= next_sample:
            n = agent.counters["actions"] - done
            done += n
            lat, act = np.array(list(agent.latencies_ms)[-n:] if n else [np.nan]), np.array(list(agent.act_ms)[-n:] if n else [np.nan])
            info = agent.loop.last_info
            samples.append({"t_s": round(time.monotonic() - t0, 1), "steps": n, "steps_total": done,
                            "rss_mb": round(rss_mb(), 1), "memory_tokens": info.get("memory_tokens"),
                            "memory_bytes": info.get("memory_bytes"),
                            "in_out_ms": {k: round(float(np.percentile(lat, q)), 2) for k, q in (("p50", 50), ("p99", 99))},
                            "act_ms": {k: round(float(np.percentile(act, q)), 2) for k, q in (("p50", 50), ("p99", 99))},
                            "load": os.getloadavg()[0]})
            s = samples[-1]
            print(f"{s['t_s']:>7.1f} s  {n:>5} steps ({n / args.every:.1f}/s)  RSS {s['rss_mb']:.0f} MB  memory "
                  f"{s['memory_tokens']} tokens, {s['memory_bytes']:,} B  in->out p50/p99 {s['in_out_ms']['p50']:.1f} / "
                  f"{s['in_out_ms']['p99']:.1f} ms  act {s['act_ms']['p50']:.1f} / {s['act_ms']['p99']:.1f} ms  "
                  f"load {s['load']:.1f}", flush=True)
            next_sample += args.every
    result = {"bundle": args.bundle, "backend": args.backend, "kv_dtype": args.kv_dtype or "the bundle's",
              "memory_budget_bytes": args.memory_budget_bytes or "the bundle's", "memory_slots": agent.runner.memory.slots,
              "minutes": args.minutes, "episodes": agent.runner.episode + 1, "samples": samples,
              "machine": f"{platform.node()}, {os.cpu_count()} CPUs", "date": time.strftime("%Y-%m-%d %H:%M %Z"),
              "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS")}
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
