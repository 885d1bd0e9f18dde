"""Replaying recorded inputs through a runner and comparing with recorded outputs.

Used by ``training/bundle_tool.py check`` (the bundle's own sample), ``training/export.py
--verify`` (a long recorded rollout against the torch full-sequence forward) and the
parity tests. Tolerances (issue 4): fp32 max |logit diff| <= 1e-4; fp16 <= 2e-2 with the
same greedy action on >= 99% of steps; a memory storing K / V in 8 bits <= 1e-1, same agreement.
"""

from __future__ import annotations

import numpy as np
import torch

from icrl_ros.families import family_of
from icrl_ros.memory import default_memory, trial_sizes
from icrl_ros.runtime.bundle import Bundle
from icrl_ros.runtime.engine import make_engine
from icrl_ros.runtime.runner import PolicyRunner, build_memory

TOLERANCE = {"fp32": 1e-4, "fp16": 2e-2, "int8": 1e-1, "int8_gqa": 1e-1}
"""Max |logit diff| (times the larger of 1 and the step's largest logit) by :func:`tolerance_key`: fp32,
fp16 (an fp16 bundle, or fp16 K / V storage), int8 and int8_gqa (8-bit K / V storage); fp16 and the 8-bit
ones also need the same greedy action on >= 99% of steps."""


def tolerance_key(bundle: Bundle) -> str:
    """Which :data:`TOLERANCE` a bundle's replay is held to: its K / V storage dtype when that is
    quantised, else its precision."""
    return bundle.kv_dtype if getattr(bundle, "kv_dtype", "fp32") != "fp32" else bundle.precision
MIN_AGREEMENT = 0.99


def exact_memory(bundle: Bundle, steps: int, batch: int = 1, device="cpu", episodes: int | None = None):
    """A memory that keeps everything ``steps`` steps need (so stepping is exact); a family with its
    own memory (``Family.deploy``, RA-DT) keeps every one of ``episodes`` episodes (default: as many as steps)."""
    name = default_memory(bundle.kind)
    sizes = trial_sizes(name, bundle.args, steps)
    deploy = family_of(bundle).deploy_module()
    if deploy is not None:
        return build_memory(bundle, name, **sizes | deploy.exact_sizes(episodes or steps))
    return build_memory(bundle, name, batch=batch, device=device, **sizes)


def replay(runner: PolicyRunner, inputs: dict[str, np.ndarray | torch.Tensor]) -> tuple[np.ndarray, np.ndarray]:
    """Step ``runner`` through recorded inputs (each (B, T, ...), plus ``episode_index``)
    from a fresh trial; returns logits (B, T, A) and values (B, T) as float64 numpy."""
    runner.reset_trial()
    t_in = {k: torch.as_tensor(np.asarray(v)) for k, v in inputs.items()}
    dev = runner.engine.device
    T = t_in["episode_index"].shape[1]
    names = [n for n in runner.spec]
    logits, values = [], []
    for t in range(T):
        lg, val = runner.step({n: t_in[n][:, t].to(dev) for n in names}, t_in["episode_index"][:, t].to(dev))
        logits.append(lg.float().cpu())
        values.append(val.float().cpu())
    return torch.stack(logits, 1).double().numpy(), torch.stack(values, 1).double().numpy()


def compare(ref_logits: np.ndarray, ref_values: np.ndarray | None, logits: np.ndarray, values: np.ndarray | None,
            precision: str) -> dict:
    """Max |diff| of logits and values (NaN for a policy without values: RA-DT), greedy
    agreement, and pass / fail for ``precision``: each logit within the tolerance times the larger of 1 and
    the largest logit size of its step (float rounding grows with the magnitudes summed: a fixed head that
    adds ~100s to every logit of a step makes even that step's small logits carry that rounding)."""
    diff = np.abs(ref_logits - logits)
    dl = float(diff.max())
    dv = float(np.abs(ref_values - values).max()) if ref_values is not None else float("nan")
    agree = float((ref_logits.argmax(-1) == logits.argmax(-1)).mean())
    tol = TOLERANCE[precision]
    within = bool((diff <= tol * np.maximum(1.0, np.abs(ref_logits).max(-1, keepdims=True))).all())
    ok = within and (precision == "fp32" or agree >= MIN_AGREEMENT)
    return {"max_logit_diff": dl, "max_value_diff": dv, "greedy_agreement": agree, "tolerance": tol, "ok": ok}


def check_sample(bundle: Bundle, backend: str = "onnxruntime", device: str = "cpu") -> dict:
    """Run the bundle's recorded sample through ``backend``; compare with the recorded outputs."""
    deploy = family_of(bundle).deploy_module()
    if deploy is not None:  # a family with its own runner and sample (RA-DT: window + retrieval)
        return deploy.check_sample(bundle, backend, device)
    sample = bundle.sample()
    T = sample["episode_index"].shape[-1]
    mem = exact_memory(bundle, T, device=device)
    opts = {"profile": (1, mem.slots)} if backend == "tensorrt" else {}
    runner = PolicyRunner(bundle, make_engine(bundle, backend, device, **opts), mem)
    inputs = {k: v for k, v in sample.items() if k not in ("logits", "values")}
    logits, values = replay(runner, inputs)
    return compare(sample["logits"], sample["values"], logits, values, tolerance_key(bundle))
