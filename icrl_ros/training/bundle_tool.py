"""Inspect or self-check a deploy bundle.

    python training/bundle_tool.py inspect bundles/darkroom        # what it is, what it needs
    python training/bundle_tool.py check bundles/darkroom          # validate + replay the sample
    python training/bundle_tool.py check bundles/darkroom --backend torch

``check`` validates the bundle against its manifest (files, hashes, dims, opset, input
names / dtypes), then replays the recorded sample through the backend and compares with
the recorded torch outputs. Exit status 0 when everything passes; otherwise one line on
stderr saying what to fix, and status 1 (sample mismatch) or 2 (invalid bundle).
"""

from __future__ import annotations


import argparse

from icrl_ros.runtime import BundleError, available_backends, build_memory, load_bundle
from icrl_ros.runtime.manifest import V1_DEFAULTS
from icrl_ros.training._cli import fail


def inspect(path: str) -> int:
    b = load_bundle(path)
    m, a = b.manifest, b.args
    print(f"bundle    {b.path}  ({m.format} version {m.version}, precision {b.precision})")
    if m.migrated_from is not None:
        print(f"          written as version {m.migrated_from}: read with the defaults {V1_DEFAULTS}")
    print(f"model     {a.kind}: {a.n_layers} layers, d_model {a.d_model}, {a.n_heads} heads, MLP {a.d_mlp}, "
          f"{a.describe()}")
    print(f"hash      {b.model_hash}")
    obs = m.observation
    ins = ", ".join(f"{n} {v['dtype']}{v['shape']}" for n, v in obs.inputs.items())
    print(f"inputs    {ins}")
    print(f"obs keys  {obs.from_observation}" + (f"  image {obs.image_size}" if obs.image_size else ""))
    if obs.goal_names:
        print(f"goals     {obs.goal_names}")
    act = m.action
    extra = "".join(f", {k} {getattr(act, k)}" for k in ("forward_m", "turn_deg") if getattr(act, k) is not None)
    print(f"actions   {act.names}{extra}")
    choice = "greedy" if act.selection == "greedy" else f"sampled at temperature {act.temperature:g}"
    print(f"acting    default: {choice}")
    mem = m.memory
    print(f"memory    default {mem.policy}, budget {mem.budget_bytes}; "
          + "; ".join(f"{k}: {v}" for k, v in mem.sizes.items()))
    default = build_memory(b)
    print(f"          default memory: {default.slots} slots, {default.nbytes:,} bytes")
    print(f"positions {m.positions}")
    print(f"onnx      opset {m.onnx.opset}: " + ", ".join(g.file for g in m.onnx.graphs.values()))
    print("files     " + ", ".join(f"{n} ({r.bytes:,} B)" for n, r in m.files.items()))
    print(f"backends  available here: {available_backends()}")
    return 0


def check(path: str, backend: str) -> int:
    from icrl_ros.runtime.selfcheck import check_sample

    b = load_bundle(path)
    print(f"{b.path}: manifest, files, hashes, graphs ok")
    r = check_sample(b, backend)
    status = "ok" if r["ok"] else "FAIL"
    value = "" if b.kind == "radt" else f"max |value diff| {r['max_value_diff']:.3g}, "
    print(f"{b.path}: sample on {backend}: max |logit diff| {r['max_logit_diff']:.3g}, {value}"
          f"greedy agreement {r['greedy_agreement']:.2%} "
          f"(tolerance {r['tolerance']:g} x the step's largest |logit|, at least 1) {status}")
    if not r["ok"]:
        fail(f"{b.path}: the {backend} backend does not reproduce sample.npz; re-export the bundle", code=1)
    return 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("command", choices=("inspect", "check"))
    p.add_argument("bundle", help="bundle directory written by training/export.py")
    p.add_argument("--backend", default="onnxruntime", help="check: backend to replay the sample with")
    args = p.parse_args(argv)
    try:
        if args.command == "inspect":
            return inspect(args.bundle)
        return check(args.bundle, args.backend)
    except BundleError as e:
        fail(str(e))
    except ValueError as e:  # e.g. unknown backend
        fail(str(e))
    return 0


if __name__ == "__main__":
    from icrl_ros.training._cli import run_main

    raise SystemExit(run_main(main))
