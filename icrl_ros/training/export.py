"""Export a trained checkpoint as a deploy bundle (what the ROS agent node loads).

    python training/export.py runs/darkroom/checkpoints/final.pt --out bundles/darkroom
    python training/export.py CKPT --out DIR --fp16 --verify            # fp16 graphs, checked
    python training/export.py CKPT --out DIR --memory window --window 4096
    python training/export.py runs/darkroom_hcam/checkpoints/final.pt --out DIR --max-chunks 512 --verify
    python training/export.py CKPT --out DIR --tensorrt                  # + engines (GPU host)
    python training/export.py runs/radt4/checkpoints/final.pt --out DIR --verify   # RA-DT (retrieval)
    python training/export.py CKPT --out DIR --kv-dtype int8 --kv-dtypes fp32    # 8-bit memory by default
    python training/export.py bundles/house_relic_scan --add-kv-dtypes int8,fp16 --out DIR  # add cores

Bundle directory::

    manifest.yaml        (icrl_ros.runtime.manifest.Manifest) model kind + args + hash, dims,
                         observation / action spec, default action selection + temperature,
                         memory policy + budget defaults, position scheme, precision,
                         ONNX opset and every graph's input / output names, dtypes, shapes,
                         SHA-256 of every file
    encoder.onnx core.onnx heads.onnx [summarize.onnx]   the graphs (icrl_ros.runtime.graphs;
                         HCAM's core takes the chunk store, top-k + gather inside)
    core.<kv>.onnx       ReLIC, Memo, HCAM: cores reading a memory stored in another K / V dtype (--kv-dtypes;
                         core.onnx reads the manifest's memory.kv_dtype, --kv-dtype)
    policy.onnx          RA-DT instead: window (C slots + validity) + k x 2C retrieved slots
                         (+ validity; the null slot inside) -> logits
    key_projection.npz   RA-DT: the fixed projection of the retrieval keys (the index lives
                         in the runner's memory, empty at a trial start)
    weights.pt           fp32 state dict (torch backend; the ONNX holds its own copy)
    sink_cache.npz       StreamingLLM sink token's keys/values (sink == "token" only)
    sample.npz           a recorded rollout: inputs, torch logits / values (bundle_tool check)
    engines/             TensorRT engines (--tensorrt; rebuilt on the target when stale)

``--verify`` replays a recorded rollout (``--verify-steps``, default 2000, crossing
episode, Memo segment and HCAM chunk boundaries) through ONNX Runtime and the torch engine with an
exact memory, prints the max |logit diff| against the torch full-sequence forward, and
exits 1 when it is over tolerance (fp32 1e-4; fp16 2e-2 and >= 99% same greedy action; relative to a
logit's size where that exceeds 1).
RA-DT: the reference is the training-side evaluation loop (``icrl_ros/training/radt_eval.py``, its
index filling with the rollout's episodes, retrieval every step) on a recorded rollout,
and the runners replay it (same actions) with their own memory and faiss retrieval.
"""

from __future__ import annotations


import argparse
import contextlib
import datetime
import math
import os
import shutil
import tempfile
from pathlib import Path

import numpy as np
import torch

from icrl_ros.memory import ON_FULL
from icrl_ros.memory.base import DEFAULT_STEPS
from icrl_ros.memory.quant import STATIC_KV_DTYPES
from icrl_ros.families import family_of, memory_policies
from icrl_ros.models import ICLPolicy, ModelArgs, load_checkpoint, make_memory
from icrl_ros.runtime import bundle as B
from icrl_ros.runtime import manifest as M
from icrl_ros.extensions import apply_rules, logit_rules, owned_inputs
from icrl_ros.runtime.control import ControlStep
from icrl_ros.runtime.selfcheck import TOLERANCE
from icrl_ros.runtime.graphs import (PRECISIONS, TRACKED_INPUTS, build_graphs, check_kv_support, dtype_name,
                                     export_onnx, graph_specs, snapshot_kv, static_kv_calibration, static_kv_from)
from icrl_ros.training._cli import fail

DEFAULT_OPSET = 17


def default_memory(args: ModelArgs, policy: str | None = None, budget_bytes: int | None = None) -> dict:
    """The manifest's ``memory`` section: default ``policy`` (the family's first), budget, and
    the default sizes of every policy that applies to the model's family (each memory class's
    ``bundle_defaults``: DEFAULT_STEPS steps' worth)."""
    fam = family_of(args)
    names = list(fam.memories)
    return {"policy": policy or names[0], "budget_bytes": budget_bytes,
            **{n: fam.memory_class(n).bundle_defaults(args) for n in names}}


# -- metadata --------------------------------------------------------------------------------
def env_metadata(env_id: str | None) -> dict:
    """Action names (+ step sizes) and goal names of a registered env, without building it."""
    if not env_id:
        return {}
    cls = None
    try:
        from icrl_ros.sim import VEC_ENVS

        cls = VEC_ENVS.get(env_id)
        if cls is None:
            import gymnasium as gym
            from gymnasium.envs.registration import load_env_creator

            ep = gym.spec(env_id).entry_point
            cls = load_env_creator(ep) if isinstance(ep, str) else ep
    except Exception:  # noqa: BLE001 - unknown or unimportable env: caller falls back to defaults
        return {}
    out = {}
    for attr in ("action_names", "goal_names"):
        if getattr(cls, attr, None) is not None:
            out[attr] = [str(x) for x in getattr(cls, attr)]
    if getattr(cls, "forward_step", None) is not None:
        out["forward_m"] = float(cls.forward_step)
    if getattr(cls, "turn_step", None) is not None:
        out["turn_deg"] = round(math.degrees(float(cls.turn_step)), 6)
    return out


def memory_section(memory: dict) -> M.Memory:
    """The manifest's typed ``memory`` from :func:`default_memory`'s dict (policy, budget, sizes)."""
    sizes = {k: dict(v) for k, v in memory.items() if k not in ("policy", "budget_bytes")}
    return M.Memory(policy=memory["policy"], budget_bytes=memory.get("budget_bytes"), sizes=sizes)


def build_manifest(policy: ICLPolicy, precision: str, opset: int, env: dict, memory: dict, config: dict,
                   sample_steps: int, selection: str = "sample", temperature: float = 1.0) -> M.Manifest:
    """The bundle's manifest before its graphs and files are added (``selection`` /
    ``temperature``: the action choice the bundle runs with by default)."""
    a = policy.args
    spec = policy.input_spec()
    obs = M.Observation(
        inputs={n: {"dtype": dtype_name(dt), "shape": list(shape)} for n, (shape, dt) in spec.items()},
        from_observation=[n for n in spec if n not in TRACKED_INPUTS + owned_inputs(a) and n != "goal"],
        goal_names=env.get("goal_names", [f"goal_{i}" for i in range(a.n_goals)])[: a.n_goals] if a.n_goals else [])
    if getattr(a, "obs_type", None) == "image":
        obs.image_size = [a.image_size, a.image_size]
        # The odometry frame the policy was trained with: "episode" (restarts at every episode
        # start) or "house" (one frame per trial: odometry since boot / the map frame).
        obs.pose_frame = ((config.get("env") or {}).get("options") or {}).get("pose_frame", "episode")
    action = M.Action(names=env.get("action_names", [f"action_{i}" for i in range(a.n_actions)]),
                      forward_m=env.get("forward_m"), turn_deg=env.get("turn_deg"), selection=selection,
                      temperature=float(temperature))
    fam = family_of(a)
    positions = fam.positions(a)  # each family's numbering of steps (icrl_ros/families/<kind>/__init__.py)
    deploy = fam.deploy_module()
    sections = deploy.manifest_sections(a, config) if deploy is not None else {}  # RA-DT: retrieval
    import onnx

    return M.Manifest(
        format=M.FORMAT, version=M.VERSION,
        created={"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                 "torch": str(torch.__version__), "onnx": str(onnx.__version__), "env_id": (config.get("env") or {}).get("id")},
        model=M.ModelInfo(kind=a.kind, args=a.to_dict(), hash=B.model_hash(policy), n_prefix=getattr(policy, "n_prefix", 0),
                          trained_context=(config.get("ppo") or {}).get("rollout_length")),
        dims=M.Dims(n_layers=a.n_layers, n_heads=a.n_heads, head_dim=a.head_dim, d_model=a.d_model, n_actions=a.n_actions),
        observation=obs, action=action, memory=memory_section(memory), positions=positions, **sections,
        precision=precision, onnx=M.Onnx(opset=opset, graphs={}),
        sample=M.Sample(file=B.SAMPLE, steps=sample_steps, tolerance=1e-4 if precision == "fp32" else 2e-2),
        files={})


# -- rollouts ---------------------------------------------------------------------------------
def random_observations(policy: ICLPolicy, steps: int, g: torch.Generator) -> dict[str, torch.Tensor]:
    """Observation inputs (1, T, ...) drawn at random per the encoder's spec."""
    a, out = policy.args, {}
    for name, (shape, dt) in policy.input_spec().items():
        if name in TRACKED_INPUTS + owned_inputs(a):
            continue
        full = (1, steps, *shape)
        if name == "obs":
            out[name] = torch.randint(0, a.n_obs, full, generator=g)
        elif name == "goal":
            out[name] = torch.randint(0, a.n_goals, full, generator=g)
        elif name == "scan":  # free / blocked per heading
            out[name] = torch.randint(0, 2, full, generator=g).float()
        elif name == "scan_bands":  # metres to the laser's nearest return per image band
            out[name] = 10.0 * torch.rand(full, generator=g)
        elif dt == torch.uint8:
            out[name] = torch.randint(0, 256, full, generator=g, dtype=torch.uint8)
        elif dt.is_floating_point:
            out[name] = torch.randn(full, generator=g, dtype=dt)
        else:
            out[name] = torch.randint(0, 2, full, generator=g, dtype=dt)
    return out


@torch.no_grad()
def record_rollout(policy: ICLPolicy, steps: int, episode_len: int, seed: int = 0) -> dict[str, torch.Tensor]:
    """A self-consistent rollout (1, T): random observations, the policy's own greedy
    previous actions, random 0/1 previous rewards, episodes of ``episode_len`` steps."""
    g = torch.Generator().manual_seed(seed)
    a = policy.args
    inp = random_observations(policy, steps, g)
    t = torch.arange(steps)
    inp["episode_step"] = (t % episode_len)[None]
    inp["episode_index"] = (t // episode_len)[None]
    inp["prev_reward"] = torch.randint(0, 2, (1, steps), generator=g).float()
    inp["prev_action"] = torch.full((1, steps), a.n_actions, dtype=torch.long)
    step = ControlStep.live(policy, make_memory(policy, 1, steps))
    spec = policy.input_spec()
    for name in step.owned_inputs:  # written by the step's extensions; recorded as the runner will write them
        shape, dt = spec[name]
        inp[name] = torch.zeros(1, steps, *shape, dtype=dt)
    for i in range(steps):
        logits, _ = step({k: v[:, i] for k, v in inp.items()})
        if i + 1 < steps:
            inp["prev_action"][:, i + 1] = logits.argmax(-1)
    return inp


@torch.no_grad()
def reference_outputs(policy: ICLPolicy, inp: dict[str, torch.Tensor]) -> tuple[np.ndarray, np.ndarray]:
    """Torch full-sequence forward (fp32): logits (1, T, A), values (1, T); the logits acted on, so
    with the model's logit rules (:mod:`icrl_ros.extensions`) applied as the runner applies them."""
    logits, values = policy.forward_sequence(inp)[:2]
    rules = logit_rules(policy.args)
    if rules:
        logits = apply_rules(rules, logits, policy.encode(inp))
    return logits.double().numpy(), values.double().numpy()


def sample_length(policy: ICLPolicy) -> tuple[int, int]:
    """(steps, episode_len) of the recorded sample: crosses episode and segment / chunk ends."""
    a = policy.args
    ep = max(2, min(a.max_episode_steps, 10))
    fam = family_of(policy)
    if fam.deploy:  # a family with its own sample (RA-DT: several episode ends, so retrieval has entries)
        return fam.deploy_module().sample_length(a)
    if fam.segments:
        return a.l_seg + max(8, a.l_seg // 4), max(2, min(a.max_episode_steps, a.l_seg // 2 + 1))
    if fam.chunk_store:  # more complete chunks than top_k, so top-k chooses
        return (a.hcam_top_k + 2) * a.hcam_chunk + a.hcam_chunk // 2, ep
    return 3 * ep, ep


# -- the bundle ---------------------------------------------------------------------------------
@contextlib.contextmanager
def _bundle_folder(out: Path):
    """A temporary folder beside ``out`` to write a bundle into: it replaces ``out`` when the block ends, and is removed
    (``out`` untouched) when the block raises, so a bundle directory is never half written."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}."))
    try:
        yield tmp
        if out.exists():
            shutil.rmtree(out)
        os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def export_bundle(policy: ICLPolicy, out: str | Path, *, config: dict | None = None, env: dict | None = None,
                  precision: str = "fp32", opset: int = DEFAULT_OPSET, memory: dict | None = None,
                  overwrite: bool = False, tensorrt: bool = False, selection: str = "sample",
                  temperature: float = 1.0, kv_dtype: str = "fp32", kv_dtypes: tuple[str, ...] = ()) -> Path:
    """Write the bundle directory ``out`` (built in a temp dir, then renamed into place).
    ``memory`` (default :func:`default_memory`), ``selection`` and ``temperature`` are what the
    bundle runs with unless its user says otherwise: record the ones it was evaluated with.
    ``kv_dtype``: how the memory stores keys / values by default (the ``core`` graph reads that);
    ``kv_dtypes``: more storage dtypes to write a core for (``core.<kv>.onnx``), for runners that
    choose another."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision: {precision!r} is not one of {list(PRECISIONS)}")
    kv_dtype = check_kv_support(policy, precision, kv_dtype)
    variants = [kv for kv in dict.fromkeys(kv_dtypes) if check_kv_support(policy, precision, kv) != kv_dtype]
    out = Path(out)
    if out.exists() and not overwrite:
        raise FileExistsError(f"{out}: exists; pass --force to replace it")
    policy = policy.eval().float()
    config = config or {}
    if memory is None:
        memory = default_memory(policy.args)
    steps, ep_len = sample_length(policy)
    manifest = build_manifest(policy, precision, opset, env or {}, memory, config, steps, selection, temperature)
    manifest.memory.kv_dtype = None if kv_dtype == "fp32" else kv_dtype
    if kv_dtype != "fp32":  # the recorded fp32 outputs against a quantised memory
        manifest.sample.tolerance = TOLERANCE[kv_dtype]
    with _bundle_folder(out) as tmp:
        torch.save(policy.state_dict(), tmp / B.WEIGHTS)
        specs = graph_specs(policy, precision, kv_dtype)
        trace_cache = max(4, policy.args.hcam_top_k) if family_of(policy).chunk_store else 4  # TopK needs >= k
        deploy = family_of(policy).deploy_module()
        for name, module in build_graphs(policy, precision, kv_dtype).items():
            export_onnx(module, specs[name], tmp / f"{name}.onnx", opset, cache=trace_cache)
            manifest.onnx.graphs[name] = M.Graph(file=f"{name}.onnx", **specs[name])
        export_kv_cores(policy, manifest, tmp, variants)
        if getattr(policy, "n_prefix", 0):
            with torch.no_grad():
                k, v = policy.initial_cache(1)
            dt = torch.float16 if precision == "fp16" else torch.float32
            np.savez(tmp / B.SINK_CACHE, k=k.to(dt).numpy(), v=v.to(dt).numpy())
        if deploy is not None:  # its extra files and its own sample (RA-DT: the key projection, a rollout)
            deploy.write_files(policy, tmp, manifest, specs, steps)
        else:
            inp = record_rollout(policy, steps, ep_len, seed=0)
            logits, values = reference_outputs(policy, inp)
            np.savez(tmp / B.SAMPLE, logits=logits, values=values, **{k: v.numpy() for k, v in inp.items()})
            if any(kv in STATIC_KV_DTYPES for kv in (kv_dtype, *variants)):
                write_kv_static(policy, inp, tmp)
        for f in sorted(tmp.iterdir()):
            if f.is_file():
                manifest.files[f.name] = M.FileRecord(sha256=B.sha256_file(f), bytes=f.stat().st_size)
        manifest.validate(tmp / B.MANIFEST).save(tmp / B.MANIFEST)
    if tensorrt:
        build_tensorrt_engines(out)
    return out




def export_kv_cores(policy: ICLPolicy, manifest: M.Manifest, out: Path, kv_dtypes: list[str]) -> None:
    """Write a ``core.<kv>.onnx`` per storage dtype into ``out`` and name it in ``manifest``."""
    for kv in kv_dtypes:
        spec = graph_specs(policy, manifest.precision, kv)["core"]
        export_onnx(build_graphs(policy, manifest.precision, kv)["core"], spec, out / f"core.{kv}.onnx",
                    manifest.onnx.opset)
        manifest.onnx.graphs[f"core.{kv}"] = M.Graph(file=f"core.{kv}.onnx", **spec)


def write_kv_static(policy: ICLPolicy, inp: dict[str, torch.Tensor], out: Path, calibration: Path | None = None) -> None:
    """The ``int8_gqa`` core's constants (:data:`~icrl_ros.runtime.bundle.KV_STATIC`), calibrated on the steps of
    the fp32 memory snapshot ``calibration`` when given (real trials), else on the trial ``inp`` (the bundle's
    sample: a few dozen steps, which may miss what later steps store)."""
    if calibration is not None:
        consts = static_kv_from(policy, *snapshot_kv(calibration, policy))
    else:
        consts = static_kv_calibration(policy, inp)
    np.savez(out / B.KV_STATIC, **{k: t.numpy().astype(np.float32) for k, t in consts.items()})


def add_kv_dtypes(src: str | Path, out: str | Path, kv_dtypes: list[str], overwrite: bool = False,
                  default: str | None = None, budget_bytes: int | None = None,
                  calibration: str | Path | None = None) -> Path:
    """Copy bundle ``src`` to ``out`` with a core for each of ``kv_dtypes`` it lacks, traced from its
    ``weights.pt`` (the other files unchanged); ``default``: the K / V storage the copy's memory uses
    unless told otherwise (its ``core`` graph then reads that; the manifest's default otherwise).
    ``budget_bytes``: the copy's default memory byte budget (its sizes then derive from it: the same
    bytes hold 4x the steps in int8). ``calibration``: an fp32 memory snapshot of the bundle on real trials to
    calibrate ``int8_gqa``'s scales on (default: the bundle's sample)."""
    src, out = Path(src), Path(out)
    bundle = B.load_bundle(src)
    if out.exists() and not overwrite:
        raise FileExistsError(f"{out}: exists; pass --force to replace it")
    if out.resolve() == src.resolve():
        raise ValueError(f"--out: {out} is the source bundle; write the copy elsewhere")
    policy = bundle.load_policy()
    have = bundle.kv_dtypes()
    todo = [kv for kv in dict.fromkeys(kv_dtypes + ([default] if default else []))
            if check_kv_support(policy, bundle.precision, kv) not in have]
    manifest = bundle.manifest
    with _bundle_folder(out) as tmp:
        for name in manifest.files:
            shutil.copy2(src / name, tmp / name)
        export_kv_cores(policy, manifest, tmp, todo)
        written = [f"core.{kv}.onnx" for kv in todo]
        asked = set(kv_dtypes + ([default] if default else []))
        # a new int8_gqa core is calibrated (on the sample, or the snapshot); an existing one again on a snapshot
        if any(kv in STATIC_KV_DTYPES for kv in todo) or (calibration and asked & set(STATIC_KV_DTYPES)):
            sample = bundle.sample()
            write_kv_static(policy, {k: torch.from_numpy(sample[k]) for k in policy.input_spec()}
                            | {"episode_index": torch.from_numpy(sample["episode_index"])}, tmp,
                            Path(calibration) if calibration else None)
            written.append(B.KV_STATIC)
        for name in written:
            f = tmp / name
            manifest.files[f.name] = M.FileRecord(sha256=B.sha256_file(f), bytes=f.stat().st_size)
        old = bundle.default_kv_dtype
        if default and default != old:  # 'core' names the default's graph, 'core.<kv>' the others
            graphs = manifest.onnx.graphs
            graphs[f"core.{old}"], graphs["core"] = graphs["core"], graphs.pop(f"core.{default}")
            manifest.memory.kv_dtype = None if default == "fp32" else default
            manifest.sample.tolerance = TOLERANCE[default] if default != "fp32" else TOLERANCE[manifest.precision]
        if budget_bytes is not None:
            manifest.memory.budget_bytes = int(budget_bytes)
        manifest.validate(tmp / B.MANIFEST).save(tmp / B.MANIFEST)
        if budget_bytes is not None:  # a budget that holds no step fails here, not on the robot
            from icrl_ros.runtime.runner import build_memory

            try:
                build_memory(B.load_bundle(tmp))
            except ValueError as e:
                raise ValueError(f"--budget-bytes: {e}") from e
    B.load_bundle(out)
    return out


def build_tensorrt_engines(path: Path) -> list[Path]:
    """Build (or reuse) TensorRT engines for the bundle's default memory size."""
    from icrl_ros.runtime.runner import build_memory
    from icrl_ros.runtime.trt_engine import load_or_build

    bundle = B.load_bundle(path)
    slots = build_memory(bundle).slots
    fp16 = bundle.precision == "fp16"
    return [load_or_build(bundle, g, 1, slots, fp16, path / "engines")[0] for g in bundle.specs]


def verify_bundle(path: str | Path, steps: int = 2000, backends: tuple[str, ...] = ("onnxruntime", "torch"),
                  episode_len: int | None = None, seed: int = 1) -> dict[str, dict]:
    """Replay a recorded rollout through each backend with an exact memory; compare with
    the torch full-sequence forward. Returns ``{backend: compare(...)}``."""
    from icrl_ros.runtime import PolicyRunner, load_bundle, make_engine
    from icrl_ros.runtime.selfcheck import compare, exact_memory, replay, tolerance_key

    bundle = load_bundle(path)
    policy = bundle.load_policy()
    a = policy.args
    deploy = family_of(bundle).deploy_module()
    if deploy is not None:  # a family with its own runner (RA-DT: retrieval from its own memory)
        return deploy.verify(bundle, policy, steps, backends, seed)
    ep = episode_len or max(2, min(a.max_episode_steps, 100))
    inp = record_rollout(policy, steps, ep, seed)
    ref_l, ref_v = reference_outputs(policy, inp)
    out = {}
    for backend in backends:
        runner = PolicyRunner(bundle, make_engine(bundle, backend, "cpu"), exact_memory(bundle, steps))
        logits, values = replay(runner, inp)
        out[backend] = compare(ref_l, ref_v, logits, values, tolerance_key(bundle))
    return out


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("checkpoint", help="checkpoint written by training/train.py (a bundle directory with "
                   "--add-kv-dtypes)")
    p.add_argument("--out", required=True, help="bundle directory to write")
    p.add_argument("--force", action="store_true", help="replace --out if it exists")
    p.add_argument("--fp16", action="store_true", help="float16 core / heads / cache (encoder stays float32)")
    p.add_argument("--opset", type=int, default=DEFAULT_OPSET, help=f"ONNX opset (default {DEFAULT_OPSET})")
    p.add_argument("--memory", choices=tuple(memory_policies()),
                   help="default memory policy of the bundle")
    p.add_argument("--capacity", type=int, help="full context: steps kept (default 8192)")
    p.add_argument("--window", type=int, help="sink + window: steps kept (default 4096)")
    p.add_argument("--max-sets", type=int, help="Memo: summary sets kept (default 256)")
    p.add_argument("--max-chunks", type=int, help=f"HCAM: chunks kept, oldest evicted (default {DEFAULT_STEPS} steps' worth)")
    p.add_argument("--max-episodes", type=int, help=f"RA-DT: whole episodes kept, oldest evicted (default {DEFAULT_STEPS} "
                   "steps' worth)")
    p.add_argument("--on-full", choices=ON_FULL, help="full / memo / retrieval: what happens at the bound")
    p.add_argument("--budget-bytes", type=int, help="default memory byte budget (sizes derive from it)")
    p.add_argument("--greedy", action="store_true",
                   help="the bundle acts greedily by default (argmax) instead of sampling; record what it was "
                        "evaluated with (training/evaluate.py samples unless --greedy)")
    p.add_argument("--temperature", type=float, default=1.0,
                   help="default sampling temperature of the bundle (default 1: the policy's own distribution)")
    p.add_argument("--action-names", help="comma-separated, when the env does not name its actions")
    p.add_argument("--goal-names", help="comma-separated, when the env does not name its goals")
    p.add_argument("--verify", action="store_true", help="compare ONNX Runtime and torch stepping with the torch forward")
    p.add_argument("--verify-steps", type=int, default=2000, help="rollout length for --verify (default 2000)")
    p.add_argument("--tensorrt", action="store_true", help="also build TensorRT engines (needs tensorrt + a GPU)")
    p.add_argument("--kv-dtype",
                   help="how the memory stores keys / values by default: fp32 (default) | fp16 | int8 (the full / "
                        "window / memo memories of ReLIC and Memo bundles; the byte budget counts the stored bytes) | "
                        "int8_gqa (ReLIC's full / window memory, ONNX Runtime only: static per-channel scales "
                        "calibrated on the bundle's sample, read in place by its GroupQueryAttention kernel)")
    p.add_argument("--kv-dtypes", default="",
                   help="comma-separated: more K / V storage dtypes to write a core graph for (a runner or node "
                        "may then choose them: kv_dtype)")
    p.add_argument("--add-kv-dtypes", default="",
                   help="with a bundle directory as the first argument: copy it to --out with core graphs for these "
                        "K / V storage dtypes (comma-separated) added (and, with --kv-dtype, that one the default)")
    p.add_argument("--kv-calibration",
                   help="with --add-kv-dtypes int8_gqa: an fp32 memory snapshot of this bundle on real trials "
                        "(PolicyRunner.snapshot, the agent node's save_memory) to calibrate the static scales on; "
                        "default: the bundle's sample, a few dozen steps")
    return p.parse_args(argv)


def _kv_list(flag: str, value: str) -> list[str]:
    from icrl_ros.memory.quant import KV_DTYPES

    out = [s.strip() for s in value.split(",") if s.strip()]
    for kv in out:
        if kv not in KV_DTYPES:
            fail(f"--{flag}: {kv!r} is not one of {list(KV_DTYPES)}")
    return out


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.verify_steps < 2:
        fail(f"--verify-steps must be at least 2 (a rollout to replay), got {args.verify_steps}")
    kv_default = (_kv_list("kv-dtype", args.kv_dtype or "") or ["fp32"])[0]
    kv_more = _kv_list("kv-dtypes", args.kv_dtypes)
    if args.kv_calibration and (not args.add_kv_dtypes or not set(STATIC_KV_DTYPES)
                                & set(_kv_list("add-kv-dtypes", args.add_kv_dtypes) + [kv_default])):
        fail("--kv-calibration: calibrates an int8_gqa core; give it with --add-kv-dtypes int8_gqa (a bundle directory)")
    if args.add_kv_dtypes:
        if not Path(args.checkpoint).is_dir():
            fail(f"--add-kv-dtypes: {args.checkpoint} is not a bundle directory")
        try:
            out = add_kv_dtypes(args.checkpoint, args.out, _kv_list("add-kv-dtypes", args.add_kv_dtypes),
                                overwrite=args.force,
                                default=kv_default if args.kv_dtype else None, budget_bytes=args.budget_bytes,
                                calibration=args.kv_calibration)
        except (FileExistsError, ValueError) as e:
            fail(str(e))
        print(f"wrote {out} (core graphs for K / V stored as {B.load_bundle(out).kv_dtypes()})")
        return 0
    if Path(args.checkpoint).is_dir():
        fail(f"{args.checkpoint}: a bundle directory, which is already exported; export takes a training checkpoint "
             f"(.pt). Check a bundle with: python training/bundle_tool.py check {args.checkpoint}")
    try:
        policy, blob = load_checkpoint(args.checkpoint)
    except (FileNotFoundError, ValueError, RuntimeError) as e:
        fail(f"{args.checkpoint}: cannot load the checkpoint ({e})")
    a = policy.args
    config = blob.get("config") or {}
    env = env_metadata((config.get("env") or {}).get("id"))
    for flag, key, n in (("action_names", "action_names", a.n_actions), ("goal_names", "goal_names", a.n_goals)):
        value = getattr(args, flag)
        if value:
            names = [s.strip() for s in value.split(",") if s.strip()]
            if len(names) != n:
                fail(f"--{flag.replace('_', '-')}: {len(names)} names given, the model has {n}")
            env[key] = names
    if a.n_goals and len(env.get("goal_names", [])) < a.n_goals:
        env.pop("goal_names", None)  # placeholders goal_0 ... are used
    if len(env.get("action_names", [])) != a.n_actions:
        env.pop("action_names", None)
    kind_policies = list(family_of(a).memories)
    if args.memory and args.memory not in kind_policies:
        fail(f"--memory {args.memory}: a {a.kind} model takes one of {kind_policies}")
    memory = default_memory(a, args.memory, args.budget_bytes)
    if a.kind == "hcam" and args.max_chunks is not None and args.max_chunks < a.hcam_top_k:
        fail(f"--max-chunks: must be >= model.hcam_top_k={a.hcam_top_k}, got {args.max_chunks}")
    for flag, pol, key in (("capacity", "full", "capacity"), ("window", "window", "window"),
                           ("max_sets", "memo", "max_sets"), ("on_full", "full", "on_full"),
                           ("on_full", "memo", "on_full"), ("max_chunks", "hcam", "max_chunks"),
                           ("max_episodes", "retrieval", "max_episodes"), ("on_full", "retrieval", "on_full")):
        value = getattr(args, flag)
        if value is not None and pol in memory:
            if isinstance(value, int) and value <= 0:
                fail(f"--{flag.replace('_', '-')}: must be > 0, got {value}")
            memory[pol][key] = value
    if args.tensorrt:
        try:
            import tensorrt  # noqa: F401
        except ImportError:
            fail("--tensorrt: the tensorrt Python package is not installed here; build engines on the target "
                 "(the runner builds them on first use) or drop --tensorrt")
    if not args.temperature > 0:
        fail(f"--temperature: must be > 0, got {args.temperature}")
    precision = "fp16" if args.fp16 else "fp32"
    deploy = family_of(a).deploy_module()
    if args.fp16 and deploy is not None and deploy.FP16:
        fail(f"--fp16: {deploy.FP16}")
    try:
        out = export_bundle(policy, args.out, config=config, env=env, precision=precision, opset=args.opset,
                            memory=memory, overwrite=args.force, tensorrt=args.tensorrt,
                            selection="greedy" if args.greedy else "sample", temperature=args.temperature,
                            kv_dtype=kv_default, kv_dtypes=tuple(kv_more))
    except (FileExistsError, ValueError) as e:
        fail(str(e))
    acting = "greedy" if args.greedy else f"sampled at temperature {args.temperature:g}"
    kv = f", K/V {kv_default}" + (f" (+ cores for {', '.join(kv_more)})" if kv_more else "")
    print(f"wrote {out} ({a.kind}, {precision}, memory {memory['policy']}{kv}, actions {acting})")
    if args.verify:
        results = verify_bundle(out, args.verify_steps)
        bad = False
        for backend, r in results.items():
            value = "" if math.isnan(r["max_value_diff"]) else f"max |value diff| {r['max_value_diff']:.3g}, "
            what = f"{r['episodes']} episodes, retrieval every step, " if "episodes" in r else ""
            print(f"verify {backend}: {args.verify_steps} steps, {what}max |logit diff| {r['max_logit_diff']:.3g}, "
                  f"{value}greedy agreement {r['greedy_agreement']:.2%} "
                  f"(tolerance {r['tolerance']:g} x the step's largest |logit|, at least 1) "
                  f"{'ok' if r['ok'] else 'FAIL'}")
            bad |= not r["ok"]
        if bad:
            fail(f"--verify: {out} differs from the torch forward beyond tolerance; re-export in fp32 or check the opset",
                 code=1)
    return 0


if __name__ == "__main__":
    from icrl_ros.training._cli import run_main

    raise SystemExit(run_main(main))
