"""``PolicyRunner``: one observation in, one action out, with a bounded memory.

Per step: the encoder inputs (obs + tracked prev_action / prev_reward / episode_step / goal)
are copied into static buffers, then :class:`~icrl_ros.runtime.control.ControlStep` runs
encode -> core over the memory -> commit -> heads (the same step training and evaluation
run), and the action is chosen from the logits.

Trials and episodes: ``reset_trial()`` clears memory (a new house); ``begin_episode()``
keeps it (in-context learning attends across episodes), increments the episode index
(ReLIC's RoPE position and IEA mask) and restarts the within-episode step.

The bookkeeping, action choice, snapshots and the lock are shared with RA-DT's runner
(:mod:`icrl_ros.runtime.runner_base`); ``from_bundle`` returns that runner for RA-DT bundles.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import Tensor

from icrl_ros.families import family_of
from icrl_ros.memory import Memory, create_memory, model_dims
from icrl_ros.memory.quant import STATIC_KV_DTYPES
from icrl_ros.runtime.bundle import Bundle, BundleError, load_bundle
from icrl_ros.runtime.control import ControlStep
from icrl_ros.runtime.engine import Engine, check_backend, make_engine
from icrl_ros.runtime.graphs import TRACKED_INPUTS, input_buffers
from icrl_ros.runtime.runner_base import RunnerBase

SIZE_FIELDS = ("capacity", "window", "max_sets", "max_chunks", "max_episodes")


def build_memory(bundle: Bundle, name: str | None = None, budget_bytes: int | None = None, batch: int = 1,
                 device: str | torch.device = "cpu", **overrides) -> Memory:
    """The memory a runner of ``bundle`` uses: policy ``name`` (default: the manifest's),
    sized by ``budget_bytes`` when given (else the manifest's budget, else its sizes), sink token pinned, its K / V
    stored as ``bundle.kv_dtype`` (:meth:`~icrl_ros.runtime.bundle.Bundle.with_kv_dtype`; the budget
    counts the stored bytes). A budget is per trial, what one robot's memory may take: a batch of ``batch``
    trials (an evaluation) gets ``batch`` times it, so each trial holds what the robot would."""
    mcfg = bundle.manifest.memory
    name = name or mcfg.policy
    cfg = mcfg.config(name)
    budget = budget_bytes if budget_bytes is not None else mcfg.budget_bytes
    if budget is not None:
        budget = int(budget) * batch
        for key in SIZE_FIELDS:
            cfg.pop(key, None)
    cfg.update(overrides)
    a = bundle.args
    deploy = family_of(bundle).deploy_module()
    if deploy is not None:  # a family with its own memory from a bundle (RA-DT: a retrieval index)
        return deploy.build_memory(bundle, name, budget, cfg)
    dtype = torch.float16 if bundle.precision == "fp16" else torch.float32
    static = bundle.kv_static() if bundle.kv_dtype in STATIC_KV_DTYPES else None
    n_prefix = bundle.n_prefix + (static["sink_k"].shape[2] if static is not None else 0)  # + the Sink-KV rows
    try:
        mem = create_memory(name, **model_dims(a), batch=batch, n_prefix=n_prefix, dtype=dtype, device=device,
                            budget_bytes=budget, kv_dtype=bundle.kv_dtype, **cfg)
    except ValueError as e:
        if "kv_dtype" in str(e) and bundle.kv_dtype != "fp32":
            raise ValueError(f"{e} (this runner's kv_dtype is {bundle.kv_dtype!r}: give kv_dtype='fp32' for "
                             f"memory {name!r})") from e
        raise
    if static is not None:  # the calibrated scales, then the sink rows stored with them
        mem.set_static_scales(static["k_scale"].to(device), static["v_scale"].to(device))
        if n_prefix:
            k, v = (static[s].to(device)[:, None].expand(-1, batch, -1, -1, -1) for s in ("sink_k", "sink_v"))
            mem.set_prefix(k, v)
    sink = bundle.sink_cache()
    if sink is not None:
        k, v = (t.to(device=device, dtype=dtype).expand(-1, batch, -1, -1, -1) for t in sink)
        mem.set_prefix(k, v)
    return mem


class PolicyRunner(RunnerBase):
    """Steps a bundle one observation at a time (batch 1 for :meth:`act`; :meth:`step`
    takes explicit encoder inputs for any batch the memory was built with). Trial /
    episode bookkeeping, actions and snapshots: :class:`~icrl_ros.runtime.runner_base.RunnerBase`."""

    def __init__(self, bundle: Bundle, engine: Engine, memory: Memory) -> None:
        super().__init__(bundle, engine, memory)
        self.batch, dev = memory.batch, engine.device
        if memory.k.device.type != dev.type or (dev.type == "cuda" and memory.k.device.index != dev.index):
            raise ValueError(f"memory on {memory.k.device}, engine on {dev}: build both on one device")
        if memory.kv_dtype != engine.kv_dtype:
            raise ValueError(f"memory stores K / V as {memory.kv_dtype}, the engine's core reads {engine.kv_dtype}: "
                             "build both from one bundle (Bundle.with_kv_dtype)")
        self.spec = {io["name"]: io for io in bundle.specs["encoder"]["inputs"]}
        self._inputs = input_buffers(bundle.specs["encoder"], self.batch, dev)
        self._episode = torch.zeros(self.batch, dtype=torch.long, device=dev)
        self.control = ControlStep.for_model(engine, memory, bundle.args)
        self.reset_trial()

    def reset_trial(self) -> None:
        with self._lock:
            super().reset_trial()
            self.control.reset_states()  # the extensions' state goes with the memory

    def _extra_tensors(self) -> dict:
        return self.control.state_tensors()

    def _load_runner_state(self, r: dict) -> None:
        self.control.states_restored()

    # -- construction ----------------------------------------------------------------------
    @classmethod
    def from_bundle(cls, path: str | Path, backend: str = "onnxruntime", device: str = "cpu",
                    memory: str | None = None, memory_budget_bytes: int | None = None,
                    selection: str | None = None, temperature: float | None = None,
                    kv_dtype: str | None = None, threads: int | None = None) -> RunnerBase:
        """Load and validate a bundle, build its memory (``memory`` policy: "full" | "window" |
        "memo" | "hcam" | "retrieval"; default the manifest's) within ``memory_budget_bytes``,
        and an engine. Actions: ``selection`` "sample" | "greedy" at ``temperature``, default the
        manifest's (:meth:`~icrl_ros.runtime.runner_base.RunnerBase.configure_actions`). ``kv_dtype``:
        how the memory stores keys / values ("fp32" | "fp16" | "int8" | "int8_gqa"; default the manifest's
        ``memory.kv_dtype``), if the bundle has a core for it. ``threads``: the engine's CPU threads (ONNX
        Runtime's intra-op threads, torch's); None = ``OMP_NUM_THREADS`` where set, else the engine's default (a
        thread per core; a robot computer that runs other nodes wants fewer). A family with its own runner
        (``Family.runner``: RA-DT's :class:`~icrl_ros.families.radt.runner.RADTRunner`, the same public
        API) gets that."""
        check_backend(backend, device)
        bundle = load_bundle(path).with_kv_dtype(kv_dtype)
        own = family_of(bundle).runner_class()
        if own is not None:
            runner = own.for_bundle(bundle, backend, device, memory, memory_budget_bytes, threads=threads)
        else:
            mem = build_memory(bundle, memory, memory_budget_bytes, batch=1, device=device)
            opts = {"profile": (1, mem.slots)} if backend == "tensorrt" else {}
            runner = cls(bundle, make_engine(bundle, backend, device, threads=threads, **opts), mem)
        runner.configure_actions(selection, temperature)
        return runner

    # -- stepping --------------------------------------------------------------------------
    def _act_logits(self, obs: dict) -> tuple[Tensor, dict]:
        for name, buf in self._inputs.items():
            buf.copy_(self._input_value(name, obs))
        self._episode.fill_(self.episode)
        logits, value = self._step()
        return logits, {"value": float(value[0])}

    def _input_value(self, name: str, obs: dict):
        if name == "prev_action":
            return self.prev_action
        if name == "prev_reward":
            return self.prev_reward
        if name == "episode_step":
            return self.step_in_episode
        if name in self.control.owned_inputs:  # the control step's extensions write it
            return self._inputs[name]
        reads = [n for n in self.spec if n not in TRACKED_INPUTS + self.control.owned_inputs]
        return torch.from_numpy(self._observed(name, self.spec[name], obs, reads))

    def step(self, inputs: dict[str, Tensor], episode_index: Tensor) -> tuple[Tensor, Tensor]:
        """Low level: explicit encoder inputs (each (B,)) and episode indices (B,) for one
        step of every env (not those the control step's extensions write); returns logits (B, A)
        and value (B,) (copies). Does not touch
        the runner's trial / episode / previous-action bookkeeping."""
        with self._lock:
            for name, buf in self._inputs.items():
                if name not in self.control.owned_inputs:
                    buf.copy_(inputs[name])
            self._episode.copy_(episode_index)
            logits, value = self._step()
            return logits.clone(), value.clone()

    def _step(self) -> tuple[Tensor, Tensor]:
        return self.control(self._inputs, self._episode)

    def close(self) -> None:
        with self._lock:
            super().close()
            self.control = None  # type: ignore[assignment]  # it holds the engine too


__all__ = ["PolicyRunner", "BundleError", "build_memory"]
