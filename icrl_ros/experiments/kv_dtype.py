"""Benchmark: the K/V storage dtypes of the full memory (fp32 / fp16 / int8 / int8_gqa) against each other.

    python experiments/kv_dtype.py speed --lengths 8192,32768,65536        # step time vs the read floor
    python experiments/kv_dtype.py formulations --length 32768             # one layer's cache read, 6 ways
    python experiments/kv_dtype.py parity-darkroom --bundle runs/kv/darkroom_fp32 --trials 20 --steps 1000
    python experiments/kv_dtype.py parity-house --bundle bundles/house_relic_scan --trials 4 --episodes 10
    python experiments/kv_dtype.py record-house --bundle bundles/house_relic_scan --out runs/kv/calib.npz
    python experiments/kv_dtype.py record-darkroom --bundle runs/kv/darkroom_fp32 --steps 1000 --out runs/kv/dr.npz

``speed``: the ExtObjNav-size ReLIC (4 layers, hidden 256, 8 heads of 32, Sink KV0; random
weights) exported once with a core per kv dtype, run through ``PolicyRunner`` (ONNX Runtime, CPU,
one thread) over a full memory filled to N steps (``Memory.fill_synthetic``: random keys / values
written through the memory's own API, quantised on the way in for int8 and int8_gqa), then ``--steps`` real steps
timed. Beside each row, in the same process and the same minute: the time one thread takes to
read the memory's K / V bytes (numpy int64 sum over the buffers: the bandwidth floor of a step
that reads the cache once), for that dtype and for the fp32 bytes of the same N.

``formulations``: one layer's read of an N-step cache (8 heads of 32) as standalone ONNX graphs
under ONNX Runtime, one thread: fp32 MatMul; fp16 and int8 cast to float32 then MatMul (scales on
the scores / weights); int8 dequantised first; int8 through ``MatMulInteger`` (the runtime's graph);
and int8 with static per-channel scales through ONNX Runtime's ``GroupQueryAttention`` contrib op
(an ONNX Runtime kernel that reads the 8-bit cache in place; not a standard ONNX op, so no TensorRT).

``parity-*``: recorded trials. The fp32 runner of ``--bundle`` acts in held-out tasks (Darkroom
goals / houses); the runners of every other storage dtype the bundle's family reads (ReLIC: fp16, int8,
int8_gqa; Memo: fp16, int8) are stepped on exactly the same inputs
(teacher forcing: each holds the fp32 trial in its own memory) and their logits compared step by
step: max and p99 |diff|, and how often the greedy action agrees. The bundle needs the cores
(``training/export.py BUNDLE --add-kv-dtypes fp16,int8,int8_gqa --out ...``; added to a temp copy here when
missing; int8_gqa's scales are then calibrated on the bundle's own sample).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from icrl_ros.memory.quant import KV_DTYPES
from icrl_ros.training._cli import fail



def uptime() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "n/a"


def read_floor_ms(tensors: list[torch.Tensor], repeats: int = 7) -> float:
    """Median ms for one thread to read every byte of ``tensors`` once (int64 sums)."""
    views = [t.numpy().reshape(-1).view(np.uint8)[: t.nbytes // 8 * 8].view(np.int64) for t in tensors]
    out = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for v in views:
            v.sum()
        out.append(time.perf_counter() - t0)
    return float(np.median(out) * 1e3)


# -- speed ---------------------------------------------------------------------------------------
def speed(lengths: list[int], steps: int, warmup: int, out: Path | None, bundle: str | None = None) -> list[dict]:
    """Per length: the three memories filled side by side, then ``steps`` rounds, each timing one step
    of every dtype and one read of every dtype's K / V bytes in turn (interleaved, so a burst of load
    from other processes hits every row alike); min and median per row. The model: ``bundle`` (it gets the
    cores it lacks, as ``export.py --add-kv-dtypes`` adds them), else ExtObjNav's size with random weights."""
    from icrl_ros.experiments.benchmark import EPISODE_LEN, extobjnav_args, random_inputs
    from icrl_ros.models import build_policy
    from icrl_ros.runtime import PolicyRunner, build_memory, load_bundle, make_engine
    from icrl_ros.training.export import export_bundle

    torch.manual_seed(0)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        if bundle:
            path = bundle_with_cores(bundle, tmp)
        else:
            path = export_bundle(build_policy(extobjnav_args("relic", "grid")).eval(), Path(tmp) / "b",
                                 kv_dtypes=tuple(KV_DTYPES[1:]))
        base = load_bundle(path)
        engines = {kv: make_engine(base.with_kv_dtype(kv), "onnxruntime", "cpu", threads=1) for kv in KV_DTYPES}
        for n in lengths:
            runners, bufs, inp = {}, {}, None
            for kv in KV_DTYPES:
                b = base.with_kv_dtype(kv)
                g = torch.Generator().manual_seed(n)
                mem = build_memory(b, "full", capacity=n + steps + warmup, on_full="error")
                runners[kv] = PolicyRunner(b, engines[kv], mem)
                mem.fill_synthetic(n - warmup, g, episode_len=EPISODE_LEN)
                inp = random_inputs(runners[kv], g) if inp is None else inp
                bufs[kv] = [t for k, t in mem.tensors().items() if k not in ("valid", "episode")]
            lat = {kv: [] for kv in KV_DTYPES}
            floor = {kv: [] for kv in KV_DTYPES}
            for i in range(warmup + steps):
                ep = torch.full((1,), (n - warmup + i) // EPISODE_LEN, dtype=torch.long)
                for kv in KV_DTYPES:
                    t0 = time.perf_counter()
                    runners[kv].step(inp, ep)
                    if i >= warmup:
                        lat[kv].append((time.perf_counter() - t0) * 1e3)
                        floor[kv].append(read_floor_ms(bufs[kv], repeats=1))
            load = uptime()
            for kv in KV_DTYPES:
                row = {"steps": n, "kv_dtype": kv, "slots": runners[kv].memory.slots,
                       "kv_bytes": sum(t.nbytes for t in bufs[kv]), "tokens": runners[kv].memory.tokens,
                       "min_ms": float(np.min(lat[kv])), "p50_ms": float(np.median(lat[kv])),
                       "floor_min_ms": float(np.min(floor[kv])), "floor_p50_ms": float(np.median(floor[kv])),
                       "load": load}
                rows.append(row)
            f32 = rows[-len(KV_DTYPES)]
            for r in rows[-len(KV_DTYPES):]:
                r["p50_vs_fp32"] = r["p50_ms"] / f32["p50_ms"]
                r["min_vs_fp32"] = r["min_ms"] / f32["min_ms"]
                r["min_vs_fp32_floor"] = r["min_ms"] / f32["floor_min_ms"]
                print(f"{n:>6,} {r['kv_dtype']:>8}  {r['kv_bytes'] / 2**20:7.1f} MiB  step min {r['min_ms']:7.2f} "
                      f"p50 {r['p50_ms']:7.2f} ms  read floor min {r['floor_min_ms']:6.2f} p50 {r['floor_p50_ms']:6.2f} ms"
                      f"  | vs fp32 step: min {r['min_vs_fp32']:.2f} p50 {r['p50_vs_fp32']:.2f}; "
                      f"vs fp32 floor (min) {r['min_vs_fp32_floor']:.2f}  load {load}", flush=True)
            del runners, bufs
    if out:
        out.write_text(json.dumps({"rows": rows, "cpus": os.cpu_count(), "machine": platform.machine()}, indent=1))
    return rows


# -- formulations --------------------------------------------------------------------------------
def formulations(n: int, repeats: int = 30) -> list[dict]:
    """One layer's cache read (scores + weighted sum, softmax between) as small ONNX graphs."""
    import onnxruntime as ort
    from onnx import TensorProto as T
    from onnx import helper as h

    H, hd = 8, 32
    F, U8, F16 = T.FLOAT, T.UINT8, T.FLOAT16
    rng = np.random.default_rng(0)
    K = rng.standard_normal((1, H, n, hd)).astype(np.float32)
    V = rng.standard_normal((1, H, n, hd)).astype(np.float32)
    q = (rng.standard_normal((1, H, 1, hd)) / hd ** 0.5).astype(np.float32)
    ks, vs = np.abs(K).max(-1) / 127, np.abs(V).max(-1) / 127
    Ku = (np.round(K / ks[..., None]) + 128).astype(np.uint8)
    Vu = (np.round(V / vs[..., None]) + 128).astype(np.uint8)
    inits = [h.make_tensor("z128", U8, [], [128]), h.make_tensor("z0", U8, [], [0]),
             h.make_tensor("c127", F, [], [127.0]), h.make_tensor("c255", F, [], [255.0]),
             h.make_tensor("c128", F, [], [128.0]), h.make_tensor("eps", F, [], [1e-30]),
             h.make_tensor("ax", T.INT64, [1], [2])]

    def quant(x: str, levels: str, center: bool) -> list:
        pre = [h.make_node("Abs", [x], [x + "a"])] if center else []
        src = x + "a" if center else x
        nodes = pre + [h.make_node("ReduceMax", [src], [x + "m"], axes=[-1], keepdims=1),
                       h.make_node("Max", [x + "m", "eps"], [x + "m2"]), h.make_node("Div", [x + "m2", levels], [x + "s"]),
                       h.make_node("Div", [x, x + "s"], [x + "d"]), h.make_node("Round", [x + "d"], [x + "r"])]
        if center:
            nodes.append(h.make_node("Add", [x + "r", "c128"], [x + "o"]))
        nodes.append(h.make_node("Cast", [x + "o" if center else x + "r"], [x + "u"], to=U8))
        return nodes

    unk, unv = h.make_node("Unsqueeze", ["ks", "ax"], ["ks4"]), h.make_node("Unsqueeze", ["vs", "ax"], ["vs4"])
    tail = [h.make_node("Softmax", ["s"], ["p"], axis=-1)]
    cases = {
        "fp32 MatMul": ([h.make_node("Transpose", ["K"], ["Kt"], perm=[0, 1, 3, 2]), h.make_node("MatMul", ["q", "Kt"], ["s"])]
                        + tail + [h.make_node("MatMul", ["p", "V"], ["y"])], dict(K=K, V=V)),
        "fp16 Cast + MatMul": ([h.make_node("Cast", ["K"], ["Kf"], to=F), h.make_node("Cast", ["V"], ["Vf"], to=F),
                                h.make_node("Transpose", ["Kf"], ["Kt"], perm=[0, 1, 3, 2]),
                                h.make_node("MatMul", ["q", "Kt"], ["s"])] + tail + [h.make_node("MatMul", ["p", "Vf"], ["y"])],
                               dict(K=K.astype(np.float16), V=V.astype(np.float16))),
        "int8 Cast + MatMul, scales on scores / weights": (
            [h.make_node("Cast", ["K"], ["Kf"], to=F), h.make_node("Sub", ["Kf", "c128"], ["Kc"]),
             h.make_node("Transpose", ["Kc"], ["Kt"], perm=[0, 1, 3, 2]), h.make_node("MatMul", ["q", "Kt"], ["s0"]), unk,
             h.make_node("Mul", ["s0", "ks4"], ["s"])] + tail
            + [unv, h.make_node("Mul", ["p", "vs4"], ["pw"]), h.make_node("Cast", ["V"], ["Vf"], to=F),
               h.make_node("Sub", ["Vf", "c128"], ["Vc"]), h.make_node("MatMul", ["pw", "Vc"], ["y"])],
            dict(K=Ku, V=Vu, ks=ks, vs=vs)),
        "int8 dequantise first": (
            [h.make_node("Cast", ["K"], ["Kf"], to=F), h.make_node("Sub", ["Kf", "c128"], ["Kc"]),
             h.make_node("Unsqueeze", ["ks", "ax3"], ["ks5"]), h.make_node("Mul", ["Kc", "ks5"], ["Kd"]),
             h.make_node("Transpose", ["Kd"], ["Kt"], perm=[0, 1, 3, 2]), h.make_node("MatMul", ["q", "Kt"], ["s"])] + tail
            + [h.make_node("Cast", ["V"], ["Vf"], to=F), h.make_node("Sub", ["Vf", "c128"], ["Vc"]),
               h.make_node("Unsqueeze", ["vs", "ax3"], ["vs5"]), h.make_node("Mul", ["Vc", "vs5"], ["Vd"]),
               h.make_node("MatMul", ["p", "Vd"], ["y"])], dict(K=Ku, V=Vu, ks=ks, vs=vs)),
        "int8 MatMulInteger (the runtime's core)": (
            quant("q", "c127", True) + [h.make_node("Transpose", ["qu"], ["quT"], perm=[0, 1, 3, 2]),
                                        h.make_node("MatMulInteger", ["K", "quT", "z128", "z128"], ["si"]),
                                        h.make_node("Cast", ["si"], ["sf"], to=F),
                                        h.make_node("Transpose", ["sf"], ["sfT"], perm=[0, 1, 3, 2]), unk,
                                        h.make_node("Mul", ["sfT", "ks4"], ["s1"]), h.make_node("Mul", ["s1", "qs"], ["s"])]
            + tail + [unv, h.make_node("Mul", ["p", "vs4"], ["pw"])] + quant("pw", "c255", False)
            + [h.make_node("MatMulInteger", ["pwu", "V", "z0", "z128"], ["yi"]), h.make_node("Cast", ["yi"], ["yf"], to=F),
               h.make_node("Mul", ["yf", "pws"], ["y"])], dict(K=Ku, V=Vu, ks=ks, vs=vs)),
    }
    inits.append(h.make_tensor("ax3", T.INT64, [1], [3]))
    ref = None
    rows = []
    sessions = {}
    types = {np.dtype(np.float32): F, np.dtype(np.float16): F16, np.dtype(np.uint8): U8}
    for name, (nodes, feed) in cases.items():
        feed = {"q": q, **feed}
        used = {i for nd in nodes for i in nd.input}
        g = h.make_graph(nodes, "read", [h.make_tensor_value_info(k, types[v.dtype], list(v.shape)) for k, v in feed.items()],
                         [h.make_tensor_value_info("y", F, None)], initializer=[i for i in inits if i.name in used])
        m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
        m.ir_version = 8
        so = ort.SessionOptions()
        so.intra_op_num_threads, so.inter_op_num_threads, so.log_severity_level = 1, 1, 3
        s = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"],
                                 disabled_optimizers=["MatMulScaleFusion"])
        y = s.run(None, feed)[0]
        ref = y if ref is None else ref
        cache = [torch.from_numpy(np.ascontiguousarray(v)) for k, v in feed.items() if k != "q"]
        sessions[name] = (lambda s=s, feed=feed: s.run(None, feed), cache, float(np.abs(y - ref).max()))
    run, cache, y = gqa_int8_read(q, K, V)
    sessions["int8 GroupQueryAttention, per-channel scales (ORT contrib op)"] = (run, cache, float(np.abs(y - ref).max()))
    ts = {name: [] for name in sessions}
    floors = {name: [] for name in sessions}
    for _ in range(repeats):  # interleaved rounds: load bursts hit every formulation alike
        for name, (run, cache, _) in sessions.items():
            t0 = time.perf_counter()
            run()
            ts[name].append((time.perf_counter() - t0) * 1e3)
            floors[name].append(read_floor_ms(cache, repeats=1))
    for name, (_, cache, err) in sessions.items():
        row = {"formulation": name, "min_ms": float(np.min(ts[name])), "p50_ms": float(np.median(ts[name])),
               "bytes": int(sum(c.nbytes for c in cache)), "floor_min_ms": float(np.min(floors[name])),
               "max_abs_diff_vs_fp32": err, "load": uptime()}
        rows.append(row)
        print(f"{name:48s} min {row['min_ms']:7.3f} p50 {row['p50_ms']:7.3f} ms  {row['bytes'] / 2**20:6.1f} MiB  "
              f"read floor min {row['floor_min_ms']:6.3f} ms  max|y - fp32| {err:.2e}  load {row['load']}", flush=True)
    return rows


def gqa_int8_read(q: np.ndarray, K: np.ndarray, V: np.ndarray):
    """The same read through ONNX Runtime's ``com.microsoft.GroupQueryAttention`` over an int8 cache with
    static per-channel scales (``k_quant_type`` / ``v_quant_type`` ``PER_CHANNEL``; the scales here are
    each channel's max |x| / 127 over the cache). The op writes the step's own key / value into the
    cache at ``seqlens_k`` and attends [0, seqlens_k]: the buffer has one scratch slot past the N
    steps, masked here by the additive bias so the result is the N-step read. Past and present are
    bound to the same buffers (in place, no copy of the cache). Returns (run, cache tensors, y)."""
    import onnxruntime as ort
    from onnx import TensorProto as T
    from onnx import helper as h

    _, H, n, hd = K.shape
    vi = h.make_tensor_value_info
    ks = (np.abs(K).max(2, keepdims=True) / 127).astype(np.float32)  # (1, H, 1, hd)
    vs = (np.abs(V).max(2, keepdims=True) / 127).astype(np.float32)
    codes = [np.zeros((1, H, n + 1, hd), np.int8) for _ in range(2)]
    for c, x, sc in ((codes[0], K, ks), (codes[1], V, vs)):
        c[:, :, :n] = np.clip(np.round(x / sc), -127, 127)
    node = h.make_node("GroupQueryAttention", ["q", "k", "v", "pk", "pv", "seqlens", "total", "", "", "", "bias", "",
                                                "ks", "vs"], ["y", "pk_out", "pv_out"], domain="com.microsoft",
                       num_heads=H, kv_num_heads=H, scale=1.0, k_quant_type="PER_CHANNEL",
                       v_quant_type="PER_CHANNEL", kv_cache_bit_width=8)
    ins = [vi(x, T.FLOAT, [1, 1, H * hd]) for x in "qkv"] + [vi(x, T.INT8, [1, H, n + 1, hd]) for x in ("pk", "pv")]
    ins += [vi("seqlens", T.INT32, [1]), vi("total", T.INT32, []), vi("bias", T.FLOAT, [1, 1, 1, n + 1]),
            vi("ks", T.FLOAT, [1, H, 1, hd]), vi("vs", T.FLOAT, [1, H, 1, hd])]
    outs = [vi("y", T.FLOAT, None), vi("pk_out", T.INT8, None), vi("pv_out", T.INT8, None)]
    m = h.make_model(h.make_graph([node], "read", ins, outs),
                     opset_imports=[h.make_opsetid("", 17), h.make_opsetid("com.microsoft", 1)])
    m.ir_version = 8
    so = ort.SessionOptions()
    so.intra_op_num_threads, so.inter_op_num_threads, so.log_severity_level = 1, 1, 3
    s = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
    bias = np.zeros((1, 1, 1, n + 1), np.float32)
    bias[..., n] = -1.0e4
    qf = np.ascontiguousarray(q.transpose(0, 2, 1, 3).reshape(1, 1, H * hd))
    feed = {"q": qf, "k": qf, "v": qf, "seqlens": np.array([n], np.int32), "total": np.array(n + 1, np.int32),
            "bias": bias, "ks": ks, "vs": vs}
    io = s.io_binding()
    for key, val in feed.items():
        io.bind_cpu_input(key, val)
    for (i, o), c in zip((("pk", "pk_out"), ("pv", "pv_out")), codes):
        buf = ort.OrtValue.ortvalue_from_numpy(c)
        io.bind_ortvalue_input(i, buf)
        io.bind_ortvalue_output(o, buf)
    io.bind_output("y")  # bound last: get_outputs()[-1]

    def run():
        s.run_with_iobinding(io)

    run()
    y = io.get_outputs()[-1].numpy().reshape(1, 1, H, hd).transpose(0, 2, 1, 3)
    return run, [torch.from_numpy(c) for c in codes], y


# -- parity --------------------------------------------------------------------------------------
def shadows_of(path: str) -> tuple[str, ...]:
    """The storage dtypes other than fp32 whose core the bundle's family has (ReLIC: fp16, int8, int8_gqa;
    Memo: fp16, int8)."""
    from icrl_ros.families import family_of
    from icrl_ros.runtime import load_bundle

    return tuple(kv for kv in family_of(load_bundle(path)).kv_dtypes if kv != "fp32")


def bundle_with_cores(path: str, tmp: str) -> str:
    from icrl_ros.runtime import load_bundle
    from icrl_ros.training.export import add_kv_dtypes

    have = load_bundle(path).kv_dtypes()
    if all(kv in have for kv in ("fp32", *shadows_of(path))):
        return path
    return str(add_kv_dtypes(path, Path(tmp) / "b", list(shadows_of(path))))


class Diffs:
    """Per-step |logit diff| of each shadow against fp32, and greedy agreement."""

    def __init__(self, shadows: tuple[str, ...]) -> None:
        self.shadows = shadows
        self.diff = {kv: [] for kv in shadows}
        self.agree = {kv: [] for kv in shadows}

    def add(self, ref: torch.Tensor, kv: str, logits: torch.Tensor) -> None:
        self.diff[kv].append((logits - ref).abs().max(-1).values.numpy())
        self.agree[kv].append((logits.argmax(-1) == ref.argmax(-1)).numpy())

    def summary(self) -> dict:
        out = {}
        for kv in self.shadows:
            d, a = np.concatenate(self.diff[kv]), np.concatenate(self.agree[kv])
            n = len(a)
            p = float(a.mean())
            out[kv] = {"steps": n, "max_abs_diff": float(d.max()), "p99_abs_diff": float(np.percentile(d, 99)),
                       "median_abs_diff": float(np.median(d)), "greedy_agreement": p,
                       "agreement_ci95": float(1.96 * np.sqrt(p * (1 - p) / n))}
        return out


def _shadow_runners(bundle_path: str, batch: int, memory_for) -> dict:
    from icrl_ros.runtime import PolicyRunner, load_bundle, make_engine

    out = {}
    for kv in shadows_of(bundle_path):
        b = load_bundle(bundle_path).with_kv_dtype(kv)
        out[kv] = PolicyRunner(b, make_engine(b, "onnxruntime", "cpu", threads=1), memory_for(b))
    return out


def parity_darkroom(bundle_path: str, trials: int, seed: int, steps: int | None = None) -> dict:
    from icrl_ros.runtime import PolicyRunner, load_bundle, make_engine
    from icrl_ros.runtime.selfcheck import exact_memory
    from icrl_ros.sim import make_vec
    from icrl_ros.training.evaluate import held_out_tasks, run_trials

    with tempfile.TemporaryDirectory() as tmp:
        path = bundle_with_cores(bundle_path, tmp)
        b = load_bundle(path).with_kv_dtype("fp32")  # the reference, whatever the bundle's default
        env = make_vec((b.manifest.created or {}).get("env_id"), trials, split="test", seed=seed)
        held_out_tasks(env, trials, seed)
        steps = steps or env.trial_steps
        mem = lambda bb: exact_memory(bb, steps, batch=trials)  # noqa: E731  (every step kept: no eviction)
        ref = PolicyRunner(b, make_engine(b, "onnxruntime", "cpu", threads=1), mem(b))
        shadows = _shadow_runners(path, trials, mem)
        diffs = Diffs(shadows_of(path))

        class Paired:
            memory, spec = ref.memory, ref.spec

            @staticmethod
            def step(inputs, episode):
                logits, value = ref.step(inputs, episode)
                for kv, r in shadows.items():
                    diffs.add(logits, kv, r.step(inputs, episode)[0])
                return logits, value

        out = run_trials(b, env, steps, seed=seed, runner=Paired)
    return {"bundle": bundle_path, "trials": trials, "steps_per_trial": steps, "seed": seed,
            "fp32_trial_return": float(out["trial_return"].mean()), **diffs.summary()}


def parity_house(bundle_path: str, trials: int, episodes: int, seed: int) -> dict:
    from icrl_ros.runtime import build_memory
    from icrl_ros.training.house_eval import BundleStepper, run_house_trials, stepper_for

    with tempfile.TemporaryDirectory() as tmp:
        path = bundle_with_cores(bundle_path, tmp)
        diffs = Diffs(shadows_of(path))

        class Paired(BundleStepper):
            def __init__(self, bundle: str) -> None:
                from icrl_ros.runtime import make_engine

                super().__init__(bundle)
                self.bundle = self.bundle.with_kv_dtype("fp32")  # the reference, whatever the bundle's default
                self.engine = make_engine(self.bundle, "onnxruntime", "cpu", threads=1)

            def reset(self, batch: int, steps: int) -> None:
                super().reset(batch, steps)
                self.shadows = _shadow_runners(path, batch, lambda b: build_memory(b, None, batch=batch))

            def logits(self, inp):
                ref = super().logits(inp)
                for kv, r in self.shadows.items():
                    diffs.add(ref, kv, r.step({n: inp[n] for n in self.names if n in inp}, inp["episode_index"])[0])
                return ref

            def forget(self) -> None:
                super().forget()
                for r in self.shadows.values():
                    r.control.forget()

        options = stepper_for(path, "onnxruntime", None)[1]  # the env the bundle reads (scan, pose frame)
        paired = Paired(path)
        act = paired.bundle.manifest.action
        out = run_house_trials(paired, trials, episodes, seed=seed, batch=trials, env_options=options,
                               greedy=act.selection == "greedy", temperature=act.temperature)
    return {"bundle": bundle_path, "trials": trials, "episodes": episodes, "seed": seed,
            "fp32_success": float(np.nanmean(out["success"])), **diffs.summary()}


def record_house(bundle_path: str, trials: int, episodes: int, seed: int, out: Path) -> dict:
    """The fp32 bundle's memory after ``trials`` trials of ``episodes`` episodes in *training* houses (the
    held-out ones stay unseen), written as a snapshot: what ``export.py BUNDLE --add-kv-dtypes int8_gqa
    --kv-calibration SNAPSHOT`` calibrates the static scales on."""
    from icrl_ros.training.house_eval import BundleStepper, run_house_trials, stepper_for

    stepper = BundleStepper(bundle_path)
    stepper.bundle = stepper.bundle.with_kv_dtype("fp32")
    options = stepper_for(bundle_path, "onnxruntime", None)[1]
    act = stepper.bundle.manifest.action
    res = run_house_trials(stepper, trials, episodes, seed=seed, split="train", batch=trials, env_options=options,
                           greedy=act.selection == "greedy", temperature=act.temperature)
    stepper.runner.snapshot(out)
    return {"bundle": bundle_path, "trials": trials, "episodes": episodes, "seed": seed, "split": "train",
            "steps_kept": int(stepper.runner.memory.valid.sum()), "success": float(np.nanmean(res["success"])),
            "snapshot": str(out)}


def record_grid(bundle_path: str, trials: int, steps: int | None, seed: int, out: Path) -> dict:
    """The fp32 bundle's memory after ``trials`` trials of a grid-world task on its *training* tasks (Darkroom
    goals the held-out evaluation never uses), written as a snapshot (as :func:`record_house`)."""
    from icrl_ros.runtime import PolicyRunner, load_bundle, make_engine
    from icrl_ros.runtime.selfcheck import exact_memory
    from icrl_ros.sim import make_vec
    from icrl_ros.training.evaluate import run_trials

    b = load_bundle(bundle_path).with_kv_dtype("fp32")
    env = make_vec((b.manifest.created or {}).get("env_id"), trials, split="train", seed=seed)
    env.rng = np.random.default_rng(seed)
    env.reset_trial()
    steps = steps or env.trial_steps
    runner = PolicyRunner(b, make_engine(b, "onnxruntime", "cpu", threads=1), exact_memory(b, steps, batch=trials))
    res = run_trials(b, env, steps, seed=seed, runner=runner)
    runner.snapshot(out)
    return {"bundle": bundle_path, "trials": trials, "steps": steps, "seed": seed, "split": "train",
            "steps_kept": int(runner.memory.valid.sum()), "trial_return": float(res["trial_return"].mean()),
            "snapshot": str(out)}


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="what", required=True)
    s = sub.add_parser("speed", help="step time per kv dtype at N steps of full context, beside the read floor")
    s.add_argument("--lengths", default="8192,32768,65536", help="comma-separated context lengths")
    s.add_argument("--steps", type=int, default=30, help="timed steps per row (default 30)")
    s.add_argument("--warmup", type=int, default=5)
    s.add_argument("--out", help="write the rows as JSON here")
    s.add_argument("--bundle", help="time this bundle's model (default: ExtObjNav's size, random weights)")
    f = sub.add_parser("formulations", help="one layer's cache read as standalone ONNX graphs")
    f.add_argument("--length", type=int, default=32768)
    for name, where in (("record-house", "training houses"), ("record-darkroom", "training goals")):
        r = sub.add_parser(name, help=f"an fp32 memory snapshot of the bundle on {where} "
                                      "(int8_gqa's calibration: export.py --kv-calibration)")
        r.add_argument("--bundle", required=True)
        r.add_argument("--trials", type=int, default=4)
        r.add_argument("--seed", type=int, default=0)
        r.add_argument("--out", required=True, help="the snapshot file to write")
        if name == "record-house":
            r.add_argument("--episodes", type=int, default=10)
        else:
            r.add_argument("--steps", type=int, help="steps per trial (default: the env's trial)")
    for name in ("parity-darkroom", "parity-house"):
        q = sub.add_parser(name, help="fp16 / int8 logits against fp32 on recorded trials")
        q.add_argument("--bundle", required=True)
        q.add_argument("--trials", type=int, default=20)
        q.add_argument("--seed", type=int, default=0)
        q.add_argument("--out", help="write the summary as JSON here")
        if name == "parity-house":
            q.add_argument("--episodes", type=int, default=10)
        else:
            q.add_argument("--steps", type=int, help="steps per trial (default: the env's trial, 4,000 for Darkroom)")
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(1)
    print(f"load average at start: {uptime()}", flush=True)
    if args.what == "speed":
        try:
            lengths = [int(x) for x in args.lengths.split(",") if x.strip()]
        except ValueError:
            fail(f"--lengths: {args.lengths!r} is not a comma-separated list of integers")
        if not lengths or min(lengths) <= args.warmup or args.steps < 1:
            fail("--lengths: each length must exceed --warmup, and --steps must be >= 1")
        if args.bundle and not Path(args.bundle).is_dir():
            fail(f"--bundle {args.bundle}: not a bundle directory")
        speed(lengths, args.steps, args.warmup, Path(args.out) if args.out else None, args.bundle)
    elif args.what == "formulations":
        if args.length < 1:
            fail(f"--length: must be >= 1, got {args.length}")
        formulations(args.length)
    else:
        if not Path(args.bundle).is_dir():
            fail(f"--bundle: {args.bundle} is not a bundle directory")
        if args.trials < 1:
            fail(f"--trials: must be >= 1, got {args.trials}")
        if args.what.startswith("record-"):
            res = (record_house(args.bundle, args.trials, args.episodes, args.seed, Path(args.out))
                   if args.what == "record-house" else record_grid(args.bundle, args.trials, args.steps, args.seed,
                                                                   Path(args.out)))
            print(json.dumps(res, indent=1))
            return 0
        if args.what == "parity-darkroom":
            if args.steps is not None and args.steps < 1:
                fail(f"--steps: must be >= 1, got {args.steps}")
            res = parity_darkroom(args.bundle, args.trials, args.seed, args.steps)
        else:
            res = parity_house(args.bundle, args.trials, args.episodes, args.seed)
        print(json.dumps(res, indent=1))
        if args.out:
            Path(args.out).write_text(json.dumps(res, indent=1))
    print(f"load average at end: {uptime()}", flush=True)
    return 0


if __name__ == "__main__":
    from icrl_ros.training._cli import run_main

    raise SystemExit(run_main(main))
