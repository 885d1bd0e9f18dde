"""Per-step latency and memory of every memory policy and backend vs context length.

    python experiments/benchmark.py --csv bench.csv                      # everything (~15 min, 2 cores)
    python experiments/benchmark.py --quick                              # smoke run (1k / 8k, no bounded run)
    python experiments/benchmark.py --lengths 32768 --backends onnxruntime --policies full,memo

Model: the ExtObjNav size (4 layers, hidden 256, 8 heads, MLP 1024, Sink KV0; Memo
l_seg 256, l_sum 32; HCAM chunks of 16 steps, top 4, in every layer) with random weights, exported to a temporary bundle and run through
``PolicyRunner`` (encode -> core over the memory's static buffers -> commit -> heads).
The per-step encoder is the grid-world embedding unless ``--obs image`` (the small CNN on
64x64 RGB); its cost does not depend on the context.

Method: stepping 64k steps one at a time is too slow here, so each memory is filled to
N steps directly with random keys / values written through its own API
(``Memory.fill_synthetic``: the same slots, validity, ring pointer and summary-set
bookkeeping as N real steps), then real steps are timed from there: ``--steps`` for the
ReLIC memories, one whole Memo segment (l_seg steps, one summarisation included) for Memo.

Memory policies: ``full`` (every step), ``window`` (sink + 4096-step ring), ``memo``
(every summary set), ``memo_stream`` (newest 32 sets = 1024 summary tokens), ``hcam``
(16-step local window + every chunk of the context; ReLIC-style timed steps), ``radt``
(RA-DT at its Darkroom size: C = 20 window, top-1 of 40 steps, 3 layers, hidden 64, keys
128; every episode of the context stored, 100-step episodes, so N / 20 index entries;
a step = window + faiss top-50 query + re-ranking + gather + the policy graph, episode
ends add to the index; "query ms" is the faiss query + re-ranking + gather alone).
Bytes are the memory's allocated static buffers (K, V, validity, episode index; HCAM:
window + chunk store; RA-DT: episode ring + index at capacity); "live" counts only the
slots holding data.

Also: batch 20 at 8k (actions/s beside ReLIC's 732 actions/s on an A40), Memo / full
ratios at 32k, and a bounded run: 100,000 real steps with each streaming policy on a small
model recording bytes over time, extrapolated to 24 h (1M steps at 10 Hz).
"""

from __future__ import annotations


import argparse
import csv
import datetime
import math
import os
import platform
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from icrl_ros.families import FAMILIES
from icrl_ros.memory import trial_sizes
from icrl_ros.models import ModelArgs, build_policy
from icrl_ros.families.radt.model import RADTArgs, RADTPolicy
from icrl_ros.runtime import PolicyRunner, available_backends, build_memory, load_bundle, make_engine
from icrl_ros.families.radt.runner import RADTRunner
from icrl_ros.training._cli import fail
from icrl_ros.training.export import export_bundle

POLICIES = ("full", "window", "memo", "memo_stream", "hcam", "radt")
WINDOW = 4096
STREAM_SETS = 32
EPISODE_LEN = 500  # ExtObjNav episodes: episode index = step // 500 in the synthetic fill


def extobjnav_args(kind: str, obs: str) -> ModelArgs:
    extra = {"obs_type": "image", "image_size": 64, "n_goals": 6} if obs == "image" else {}
    memo = {"l_seg": 256, "l_sum": 32} if kind == "memo" else {}
    return ModelArgs.from_dict(dict(n_obs=1000, n_actions=4, max_episode_steps=EPISODE_LEN, kind=kind, d_model=256,
                                    n_layers=4, n_heads=8, d_mlp=1024, sink="kv0", depth_dropout=0.0, **memo, **extra))


def kind_of(policy: str) -> str:
    """The model kind a benchmarked memory policy runs on."""
    return "memo" if policy.startswith("memo") else policy if policy in ("hcam", "radt") else "relic"


def radt_policy() -> RADTPolicy:
    """RA-DT at the size of the trained Darkroom model (config/train/darkroom_radt.yaml)."""
    return RADTPolicy(RADTArgs(n_obs=100, n_actions=5, max_episode_steps=100, grid_size=10, context=20, top_k=1,
                               d_model=64, n_layers=3, n_heads=4, d_mlp=256, dropout=0.0, key_dim=128)).eval()


def small_args(kind: str) -> ModelArgs:
    memo = {"l_seg": 64, "l_sum": 8} if kind == "memo" else {}
    return ModelArgs.from_dict(dict(n_obs=100, n_actions=5, max_episode_steps=100, kind=kind, d_model=64, n_layers=2,
                                    n_heads=8, d_mlp=256, sink="kv0", depth_dropout=0.0, **memo))


def memory_for(bundle, policy: str, n: int, extra_steps: int, batch: int):
    a = bundle.args
    if policy == "radt":  # every episode of the context (+ the timed ones): no eviction
        return build_memory(bundle, "retrieval", max_episodes=math.ceil((n + extra_steps) / a.max_episode_steps) + 1)
    if policy == "window":
        return build_memory(bundle, "window", batch=batch, window=WINDOW)
    if policy == "memo_stream":
        return build_memory(bundle, "memo", batch=batch, max_sets=STREAM_SETS, on_full="evict_oldest")
    # full, memo, hcam: everything of the context and the timed steps, no eviction
    return build_memory(bundle, policy, batch=batch, **trial_sizes(policy, a, n + extra_steps))


def random_inputs(runner: PolicyRunner, g: torch.Generator) -> dict[str, torch.Tensor]:
    out = {}
    B = runner.batch
    for name, io in runner.spec.items():
        shape = [B, *io["shape"][1:]]
        if name == "obs":
            out[name] = torch.randint(0, runner.args.n_obs, shape, generator=g)
        elif name == "goal":
            out[name] = torch.randint(0, runner.args.n_goals, shape, generator=g)
        elif name == "prev_action":
            out[name] = torch.randint(0, runner.args.n_actions + 1, shape, generator=g)
        elif name == "episode_step":
            out[name] = torch.randint(0, EPISODE_LEN, shape, generator=g)
        elif io["dtype"] == "uint8":
            out[name] = torch.randint(0, 256, shape, generator=g, dtype=torch.uint8)
        else:
            out[name] = torch.rand(shape, generator=g)
    return out


def time_radt_steps(bundle, engine, n: int, steps: int, warmup: int, seed: int = 0) -> tuple:
    """RA-DT: store ``n`` steps of whole random episodes, then time real steps from an
    episode start (window, faiss query, graph; episode ends add to the index)."""
    g = torch.Generator().manual_seed(seed)
    mem = memory_for(bundle, "radt", n, steps + warmup, 1)
    runner = RADTRunner(bundle, engine, mem)
    t0 = time.perf_counter()
    mem.fill_synthetic(n, g)
    fill_s = time.perf_counter() - t0
    rng = np.random.default_rng(seed)
    H, a = bundle.args.max_episode_steps, bundle.args
    lat, query = [], []
    for i in range(warmup + steps):
        if i % H == 0:
            runner.begin_episode()
        t1 = time.perf_counter()
        runner.step(int(rng.integers(0, a.n_obs)), float(rng.random() < 0.1), int(rng.integers(0, a.n_actions)))
        dt = (time.perf_counter() - t1) * 1e3
        t2 = time.perf_counter()
        mem.query(runner.retrieve_l, a.top_k)  # the same query again, alone
        if i >= warmup:
            lat.append(dt)
            query.append((time.perf_counter() - t2) * 1e3)
    return mem, np.array(lat), fill_s, float(np.percentile(query, 50))


def time_steps(bundle, engine, policy: str, n: int, steps: int, warmup: int, batch: int, seed: int = 0) -> dict:
    """Fill a fresh memory to ``n`` steps, then time ``steps`` real steps (after ``warmup``)."""
    if policy == "radt":
        mem, lat, fill_s, query_ms = time_radt_steps(bundle, engine, n, steps, warmup, seed)
        return row_of(mem, lat, [], 1, n, fill_s, query_ms)
    g = torch.Generator().manual_seed(seed)
    mem = memory_for(bundle, policy, n, steps + warmup, batch)
    runner = PolicyRunner(bundle, engine, mem)  # (starts a trial: fill after this)
    t0 = time.perf_counter()
    mem.fill_synthetic(max(0, n - warmup), g, episode_len=EPISODE_LEN)
    fill_s = time.perf_counter() - t0
    inp = random_inputs(runner, g)
    lat, summ = [], []
    for i in range(warmup + steps):
        t = n - warmup + i
        ep = torch.full((batch,), t // EPISODE_LEN, dtype=torch.long)
        before = getattr(mem, "n_generated", 0)
        t1 = time.perf_counter()
        runner.step(inp, ep)
        dt = (time.perf_counter() - t1) * 1e3
        if i >= warmup:
            lat.append(dt)
            if getattr(mem, "n_generated", 0) != before:
                summ.append(dt)
    row = row_of(mem, np.array(lat), summ, batch, n, fill_s)
    del runner, mem
    return row


def row_of(mem, lat: np.ndarray, summ: list[float], batch: int, n: int, fill_s: float,
           query_ms: float = float("nan")) -> dict:
    return {"batch": batch, "context": n, "tokens": mem.tokens, "slots": mem.slots, "bytes": mem.nbytes,
            "live_bytes": mem.live_bytes, "p50_ms": float(np.percentile(lat, 50)),
            "p99_ms": float(np.percentile(lat, 99)), "mean_ms": float(lat.mean()), "max_ms": float(lat.max()),
            "summarize_ms": float(max(summ)) if summ else float("nan"), "query_ms": query_ms, "timed_steps": len(lat),
            "actions_per_s": batch * 1e3 / float(lat.mean()), "fill_s": fill_s}


def bounded_run(bundle, engine, policy: str, steps: int, record_every: int = 1000, seed: int = 0) -> dict:
    """Real steps through ``PolicyRunner.act`` (episodes of 100 steps), bytes and latency over time."""
    if policy == "window":
        mem = build_memory(bundle, "window", window=512)
    else:
        mem = build_memory(bundle, "memo", max_sets=16, on_full="evict_oldest")
    runner = PolicyRunner(bundle, engine, mem)
    rng = np.random.default_rng(seed)
    obs = rng.integers(0, bundle.args.n_obs, steps)
    rew = (rng.random(steps) < 0.1).astype(np.float32)
    series, lat = [], np.empty(steps)
    runner.reset_trial()
    for t in range(steps):
        if t % 100 == 0:
            runner.begin_episode()
        _, info = runner.act({"obs": int(obs[t]), "reward": float(rew[t])})
        lat[t] = info["latency_ms"]
        if (t + 1) % record_every == 0 or t == 0:
            series.append({"policy": policy, "step": t + 1, "bytes": info["memory_bytes"],
                           "tokens": info["memory_tokens"], "episode": info["episode"],
                           "p50_ms_block": float(np.percentile(lat[max(0, t + 1 - record_every):t + 1], 50))})
    position = (mem.pos_base() + mem.seg_count) if policy != "window" else runner.episode
    return {"series": series, "lat": lat, "position": position}


def fmt_bytes(b: float) -> str:
    return f"{b / 2**20:8.1f} MiB" if b >= 2**20 else f"{b / 2**10:8.1f} KiB"


def print_header() -> None:
    print(f"{'backend':<12}{'policy':<12}{'batch':>5}{'context':>8}{'tokens':>8}{'cache bytes':>14}{'live bytes':>14}"
          f"{'p50 ms':>9}{'p99 ms':>9}{'mean ms':>9}{'summ ms':>9}{'query ms':>9}{'act/s':>9}")


def print_table(rows: list[dict]) -> None:
    for r in rows:
        summ = "" if math.isnan(r["summarize_ms"]) else f"{r['summarize_ms']:.1f}"
        query = "" if math.isnan(r["query_ms"]) else f"{r['query_ms']:.3f}"
        print(f"{r['backend']:<12}{r['policy']:<12}{r['batch']:>5}{r['context']:>8}{r['tokens']:>8}"
              f"{fmt_bytes(r['bytes']):>14}{fmt_bytes(r['live_bytes']):>14}{r['p50_ms']:>9.2f}{r['p99_ms']:>9.2f}"
              f"{r['mean_ms']:>9.2f}{summ:>9}{query:>9}{r['actions_per_s']:>9.0f}", flush=True)


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--lengths", default="1024,8192,32768,65536", help="context lengths (steps)")
    p.add_argument("--backends", help="comma-separated (default: every available CPU backend)")
    p.add_argument("--policies", default=",".join(POLICIES), help=f"subset of {POLICIES}")
    p.add_argument("--steps", type=int, default=64, help="timed steps per ReLIC row (Memo: one segment)")
    p.add_argument("--warmup", type=int, default=4)
    p.add_argument("--threads", type=int, default=1, help="intra-op threads (torch and ORT)")
    p.add_argument("--device", default="cpu")
    p.add_argument("--precision", choices=("fp32", "fp16"), default="fp32")
    p.add_argument("--obs", choices=("discrete", "image"), default="discrete")
    p.add_argument("--batch", type=int, default=20, help="batched case: envs per step (0 = skip)")
    p.add_argument("--batch-length", type=int, default=8192)
    p.add_argument("--batch-steps", type=int, default=16)
    p.add_argument("--bounded-steps", type=int, default=100_000, help="bounded run length (0 = skip)")
    p.add_argument("--csv", help="write the table here (and the bounded series to <stem>_bounded.csv)")
    p.add_argument("--quick", action="store_true", help="1k and 8k only, 16 steps, no batch / bounded run")
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.quick:
        args.lengths, args.steps, args.batch, args.bounded_steps = "1024,8192", 16, 0, 0
    try:
        lengths = [int(x) for x in args.lengths.split(",") if x]
    except ValueError:
        fail(f"--lengths: {args.lengths!r} is not a comma-separated list of integers")
    policies = [p for p in args.policies.split(",") if p]
    bad = [p for p in policies if p not in POLICIES]
    if bad:
        fail(f"--policies: unknown {bad}; choose from {list(POLICIES)}")
    have = [b for b in available_backends() if b != "tensorrt" or args.device.startswith("cuda")]
    backends = args.backends.split(",") if args.backends else have
    missing = [b for b in backends if b not in have]
    if missing:
        fail(f"--backends: {missing} not available here (available: {have})")
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    load = os.getloadavg()
    print(f"# icrl_ros runtime benchmark, {datetime.datetime.now().isoformat(timespec='seconds')}")
    print(f"# machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, load average "
          f"{load[0]:.2f} / {load[1]:.2f} / {load[2]:.2f} at start; torch {torch.__version__}; threads {args.threads}; "
          f"device {args.device}; precision {args.precision}")
    print("# model: ExtObjNav size (4 layers, hidden 256, 8 heads, MLP 1024, sink KV0; Memo l_seg 256, l_sum 32; "
          f"HCAM chunk 16, top-4), random weights, {args.obs} encoder")
    print("# method: each memory is filled to the context length with random keys/values through its own API "
          "(fill_synthetic), then real steps are timed from there (ReLIC: "
          f"{args.steps} steps; Memo: one {256}-step segment incl. its summarisation)")
    print(f"# policies: full = every step; window = sink + {WINDOW}-step ring; memo = every summary set; "
          f"memo_stream = newest {STREAM_SETS} sets ({STREAM_SETS * 32} summary tokens); hcam = 16-step window + "
          "every 16-step chunk; radt = RA-DT at its Darkroom size (C 20, top-1 of 40 steps, 3 layers, hidden 64, "
          "fp32) with every 100-step episode of the context stored (N/20 index entries), step incl. the faiss "
          "top-50 query (query ms: the query + re-ranking + gather alone)")
    rows: list[dict] = []
    print_header()
    with tempfile.TemporaryDirectory() as tmp:
        bundles = {}
        for kind in FAMILIES:
            if kind not in {kind_of(p) for p in policies}:
                continue
            policy = radt_policy() if kind == "radt" else build_policy(extobjnav_args(kind, args.obs)).eval()
            precision = "fp32" if kind == "radt" else args.precision  # RA-DT bundles are fp32 only
            bundles[kind] = load_bundle(export_bundle(policy, Path(tmp) / kind, precision=precision))
        for backend in backends:
            engines = {k: make_engine(b, backend, args.device, threads=args.threads) for k, b in bundles.items()
                       if backend != "tensorrt"} if backend != "tensorrt" else {}
            for n in lengths:
                for pol in policies:
                    kind = kind_of(pol)
                    b = bundles[kind]
                    eng = engines.get(kind) or make_engine(b, backend, args.device, profile=(1, 1 if kind == "radt" else memory_for(
                        b, pol, n, args.steps + args.warmup, 1).slots))
                    steps = b.args.l_seg if kind == "memo" else args.steps
                    row = {"backend": backend, "policy": pol, **time_steps(b, eng, pol, n, steps, args.warmup, 1)}
                    rows.append(row)
                    print_table([row])
            if args.batch:
                for pol in [p for p in policies if p != "radt"]:  # RA-DT's runner is batch 1
                    kind = kind_of(pol)
                    b = bundles[kind]
                    eng = engines.get(kind) or make_engine(b, backend, args.device)
                    row = {"backend": backend, "policy": pol,
                           **time_steps(b, eng, pol, args.batch_length, args.batch_steps, 2, args.batch)}
                    rows.append(row)
                    print_table([row])
            for eng in engines.values():
                del eng

    print("\n# Memo vs full context at 32k (same backend, batch 1)")
    for backend in backends:
        get = {r["policy"]: r for r in rows if r["backend"] == backend and r["context"] == 32768 and r["batch"] == 1}
        if "full" in get and "memo" in get:
            f, m = get["full"], get["memo"]
            print(f"{backend}: cache bytes full/memo {f['bytes'] / m['bytes']:.2f}x allocated "
                  f"({f['bytes'] / 2**20:.1f} vs {m['bytes'] / 2**20:.1f} MiB), {f['live_bytes'] / m['live_bytes']:.2f}x live "
                  f"({f['tokens']} vs {m['tokens']} tokens); step p50 {f['p50_ms'] / m['p50_ms']:.2f}x faster "
                  f"({f['p50_ms']:.2f} vs {m['p50_ms']:.2f} ms), mean incl. summarisation "
                  f"{f['mean_ms'] / m['mean_ms']:.2f}x ({f['mean_ms']:.2f} vs {m['mean_ms']:.2f} ms)")
    for backend in backends:
        for r in rows:
            if r["backend"] == backend and r["batch"] > 1:
                print(f"{backend} {r['policy']}: batch {r['batch']} at {r['context']} context: "
                      f"{r['actions_per_s']:.0f} actions/s (ReLIC paper: 732 actions/s, batch 20, 8k, one A40)")

    bounded = []
    if args.bounded_steps:
        print(f"\n# bounded run: {args.bounded_steps:,} real steps per streaming policy on a small model "
              "(2 layers, hidden 64, 8 heads; window 512 steps; Memo l_seg 64, l_sum 8, newest 16 sets), "
              "onnxruntime, PolicyRunner.act, 100-step episodes")
        for pol in ("window", "memo_stream"):
            kind = "memo" if pol == "memo_stream" else "relic"
            policy = build_policy(small_args(kind)).eval()
            with tempfile.TemporaryDirectory() as tmp:
                b = load_bundle(export_bundle(policy, Path(tmp) / kind))
                eng = make_engine(b, "onnxruntime", "cpu", threads=args.threads)
                t0 = time.perf_counter()
                res = bounded_run(b, eng, "window" if pol == "window" else "memo", args.bounded_steps)
                wall = time.perf_counter() - t0
            s, lat = res["series"], res["lat"]
            warm = [x for x in s if x["step"] >= args.bounded_steps // 10]
            sizes = {x["bytes"] for x in warm}
            toks = {x["tokens"] for x in warm}
            first, last = lat[: len(lat) // 10], lat[-(len(lat) // 10):]
            mean = float(lat.mean())
            steps_24h = 10 * 86400
            print(f"{pol}: bytes {fmt_bytes(s[0]['bytes']).strip()} at step 1, "
                  f"{'constant' if len(sizes) == 1 else 'VARYING'} {fmt_bytes(max(sizes)).strip()} after step "
                  f"{args.bounded_steps // 10:,} ({len(warm)} samples), tokens {min(toks)}..{max(toks)}; "
                  f"latency p50 first 10% {np.percentile(first, 50):.3f} ms, last 10% {np.percentile(last, 50):.3f} ms, "
                  f"p99 {np.percentile(lat, 99):.3f} ms; wall {wall:.0f} s; RoPE position at the end {res['position']:,}")
            print(f"  24 h at 10 Hz ({steps_24h:,} steps; 1M steps = 27.8 h): memory stays {fmt_bytes(max(sizes)).strip()} "
                  f"(no term grows with steps); compute {mean * steps_24h / 1e3:.0f} s of 86,400 s "
                  f"({mean / 100:.2%} duty at 10 Hz); RoPE position after 1M steps "
                  f"{(res['position'] * 10**6) // args.bounded_steps:,}")
            bounded.extend(s)
        for pol in ("window", "memo_stream"):
            big = [r for r in rows if r["policy"] == pol and r["batch"] == 1]
            if big:
                worst = max(big, key=lambda r: r["p99_ms"])
                print(f"  ExtObjNav size ({pol}, from the table): {fmt_bytes(max(r['bytes'] for r in big)).strip()} at every "
                      f"context length measured; worst p99 {worst['p99_ms']:.2f} ms ({worst['backend']}, {worst['context']}) "
                      f"-> 24 h at 10 Hz needs {worst['mean_ms'] * 864000 / 1e3:.0f} s of compute "
                      f"({worst['mean_ms'] / 100:.1%} duty)")

    if args.csv:
        path = Path(args.csv)
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)
        if bounded:
            with open(path.with_name(path.stem + "_bounded.csv"), "w", newline="") as f:
                w = csv.DictWriter(f, fieldnames=list(bounded[0]))
                w.writeheader()
                w.writerows(bounded)
        print(f"\n# wrote {path}" + (f" and {path.with_name(path.stem + '_bounded.csv')}" if bounded else ""))
    load = os.getloadavg()
    print(f"# load average at end {load[0]:.2f} / {load[1]:.2f} / {load[2]:.2f}")
    return 0


if __name__ == "__main__":
    from icrl_ros.training._cli import run_main

    raise SystemExit(run_main(main))
