"""RA-DT retrieval index at scale: add, query, snapshot and restore a 1e6-entry index.

    .venv/bin/python experiments/index_benchmark.py --entries 1000000 --dim 128 --queries 1000 \\
        --top-l 50 --top-k 1 --threads 1 --csv runs/index_benchmark.csv

Random unit-normal keys (float32) with int64 values (sub-trajectory ids), task ids and
returns. Measures: add time (in batches), per-query latency of a single query (the
robot's case: one query per step) for the raw cosine top-l search and for the full
query (top-l + re-rank + top-k), p50 / p99 over ``--queries``; snapshot time and file
bytes, restore time (read + validate + deserialise), and that the restored index gives
identical results. Prints a table and writes a CSV (metric, value, unit).
"""

from __future__ import annotations

import argparse
import csv
import os
import tempfile
import time
from pathlib import Path

import numpy as np

from icrl_ros.families.radt.retrieval import RetrievalIndex


def percentiles(xs: list[float]) -> tuple[float, float]:
    a = np.asarray(xs) * 1e3
    return float(np.percentile(a, 50)), float(np.percentile(a, 99))


def main(argv: list[str] | None = None) -> list[tuple[str, float, str]]:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--entries", type=int, default=1_000_000)
    p.add_argument("--dim", type=int, default=128)
    p.add_argument("--queries", type=int, default=1000)
    p.add_argument("--top-l", type=int, default=50)
    p.add_argument("--top-k", type=int, default=1)
    p.add_argument("--batch", type=int, default=100_000, help="entries per add() call")
    p.add_argument("--threads", type=int, default=0, help="faiss OpenMP threads (0 = faiss default)")
    p.add_argument("--dir", default=None, help="where to write the snapshot (default: a temp dir)")
    p.add_argument("--csv", default="index_benchmark.csv")
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args(argv)

    import faiss

    if a.threads:
        faiss.omp_set_num_threads(a.threads)
    rng = np.random.default_rng(a.seed)
    rows: list[tuple[str, float, str]] = []
    idx = RetrievalIndex(a.dim, capacity=a.entries)
    rows += [("entries", a.entries, "count"), ("dim", a.dim, "count"), ("faiss_threads", faiss.omp_get_max_threads(),
                                                                       "count"),
             ("gpu", float(idx.use_gpu), "bool")]

    add_s = 0.0
    for start in range(0, a.entries, a.batch):
        n = min(a.batch, a.entries - start)
        keys = rng.standard_normal((n, a.dim), dtype=np.float32)
        vals = np.arange(start, start + n, dtype=np.int64)
        task = rng.integers(0, 80, n)
        ret = rng.uniform(0, 100, n).astype(np.float32)
        t0 = time.perf_counter()
        idx.add(keys, vals, task=task, episode_return=ret)
        add_s += time.perf_counter() - t0
    rows += [("add_total", add_s, "s"), ("add_per_1e5", add_s / a.entries * 1e5, "s")]

    qs = rng.standard_normal((a.queries, a.dim), dtype=np.float32)
    idx.search(qs[:5], a.top_l)  # warm-up
    t_search, t_query = [], []
    for q in qs:
        t0 = time.perf_counter()
        idx.search(q[None], a.top_l)
        t_search.append(time.perf_counter() - t0)
    for q in qs:
        t0 = time.perf_counter()
        idx.query(q[None], l=a.top_l, k=a.top_k)
        t_query.append(time.perf_counter() - t0)
    s50, s99 = percentiles(t_search)
    q50, q99 = percentiles(t_query)
    rows += [("search_p50", s50, "ms"), ("search_p99", s99, "ms"), ("query_rerank_p50", q50, "ms"),
             ("query_rerank_p99", q99, "ms")]
    t0 = time.perf_counter()
    idx.search(qs, a.top_l)
    rows += [("search_batched_per_query", (time.perf_counter() - t0) / a.queries * 1e3, "ms")]

    with tempfile.TemporaryDirectory(dir=a.dir) as d:
        path = Path(d) / "index.npz"
        t0 = time.perf_counter()
        size = idx.snapshot(path, trial_id="benchmark")
        rows += [("snapshot_write", time.perf_counter() - t0, "s"), ("snapshot_bytes", size, "bytes"),
                 ("index_nbytes", idx.nbytes, "bytes")]
        other = RetrievalIndex(a.dim, capacity=a.entries)
        t0 = time.perf_counter()
        other.restore(path)
        rows += [("restore", time.perf_counter() - t0, "s")]
        check = qs[:100]
        r1, r2 = idx.query(check, l=a.top_l, k=a.top_k), other.query(check, l=a.top_l, k=a.top_k)
        same = np.array_equal(r1.ids, r2.ids) and np.array_equal(r1.score, r2.score)
        rows += [("restore_identical_results", float(same), "bool")]

    width = max(len(r[0]) for r in rows)
    print(f"{'metric':<{width}}  {'value':>16}  unit")
    for name, value, unit in rows:
        v = f"{value:,.0f}" if unit in ("bytes", "count") else f"{value:.4g}"
        print(f"{name:<{width}}  {v:>16}  {unit}")
    os.makedirs(Path(a.csv).resolve().parent, exist_ok=True)
    with open(a.csv, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["metric", "value", "unit"])
        w.writerows(rows)
    print(f"wrote {a.csv}")
    return rows


if __name__ == "__main__":
    from icrl_ros.training._cli import run_main

    raise SystemExit(run_main(main))
