"""``PolicyRunner``: one observation in, one action out, with a bounded memory.

Per step (DESIGN.md, "One control step")::

    encoder inputs (obs + tracked prev_action / prev_reward / episode_step / goal)
      -> engine.encode                      token x (B, D)
      -> memory view: buffers + mask        (the memory's static buffers, in place)
      -> engine.core                        hidden, this token's K/V (HCAM: also reads the
                                            chunk store, returns the token's memory inputs)
      -> memory.commit                      append / ring-write (Memo: summarise at a
                                            segment end through engine.summarize; HCAM:
                                            a completed chunk enters the ring)
      -> engine.heads                       logits, value -> action

Trials and episodes: ``reset_trial()`` clears memory (a new house); ``begin_episode()``
keeps it (in-context learning attends across episodes), increments the episode index
(ReLIC's RoPE position and IEA mask) and restarts the within-episode step.

The runner is thread-safe (one lock around act / reset / snapshot / restore), so a ROS
service callback may snapshot while the control loop acts.
"""

from __future__ import annotations

import base64
import threading
import time
import uuid
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from icrl_ros.memory import Memory, MemoMemory, create_memory
from icrl_ros.memory.snapshot import SnapshotError
from icrl_ros.runtime.bundle import Bundle, BundleError, load_bundle
from icrl_ros.runtime.engine import Engine, check_backend, make_engine
from icrl_ros.runtime.graphs import TORCH_DTYPES, TRACKED_INPUTS

SIZE_FIELDS = ("capacity", "window", "max_sets", "max_chunks")
_RUNNER_FIELDS = ("trial", "trial_id", "episode", "step", "total_steps", "prev_action", "prev_reward", "goal")


def build_memory(bundle: Bundle, name: str | None = None, budget_bytes: int | None = None, batch: int = 1,
                 device: str | torch.device = "cpu", **overrides) -> Memory:
    """The memory a runner of ``bundle`` uses: policy ``name`` (default: the manifest's),
    sized by ``budget_bytes`` when given (else the manifest's sizes), sink token pinned."""
    mcfg = bundle.manifest["memory"]
    name = name or mcfg["policy"]
    cfg = dict(mcfg.get(name) or {})
    budget = budget_bytes if budget_bytes is not None else mcfg.get("budget_bytes")
    if budget is not None:
        for key in SIZE_FIELDS:
            cfg.pop(key, None)
    cfg.update(overrides)
    a = bundle.args
    dtype = torch.float16 if bundle.precision == "fp16" else torch.float32
    mem = create_memory(name, kind=a.kind, n_layers=a.n_layers, n_heads=a.n_heads, head_dim=a.head_dim, batch=batch,
                        n_prefix=bundle.n_prefix, l_seg=a.l_seg, l_sum=a.l_sum, variant=a.memo_variant,
                        n_mem_layers=len(a.memory_layers), chunk=a.hcam_chunk, top_k=a.hcam_top_k, dtype=dtype,
                        device=device, budget_bytes=budget, **cfg)
    sink = bundle.sink_cache()
    if sink is not None:
        k, v = (t.to(device=device, dtype=dtype).expand(-1, batch, -1, -1, -1) for t in sink)
        mem.set_prefix(k, v)
    return mem


class PolicyRunner:
    """Steps a bundle one observation at a time (batch 1 for :meth:`act`; :meth:`step`
    takes explicit encoder inputs for any batch the memory was built with)."""

    def __init__(self, bundle: Bundle, engine: Engine, memory: Memory) -> None:
        self.bundle, self.engine, self.memory = bundle, engine, memory
        a = bundle.args
        self.args, self.is_memo = a, isinstance(memory, MemoMemory)
        self.batch, dev = memory.batch, engine.device
        if memory.k.device.type != dev.type or (dev.type == "cuda" and memory.k.device.index != dev.index):
            raise ValueError(f"memory on {memory.k.device}, engine on {dev}: build both on one device")
        self.memory_policy = memory.policy
        self.spec = {io["name"]: io for io in bundle.specs["encoder"]["inputs"]}
        # Static per-step buffers: ORT / TensorRT bind them by address, CUDA graphs read them.
        self._inputs = {n: torch.zeros([self.batch, *io["shape"][1:]], dtype=TORCH_DTYPES[io["dtype"]], device=dev)
                        for n, io in self.spec.items()}
        self._position = torch.zeros(self.batch, dtype=torch.long, device=dev)
        self._episode = torch.zeros(self.batch, dtype=torch.long, device=dev)
        # IEA (and Memo, which always attends across episodes): the mask is the validity buffer itself.
        self._own_mask = not (a.iea or self.is_memo)
        self._mask = torch.zeros_like(memory.valid) if self._own_mask else memory.valid
        obs = bundle.manifest["observation"]
        self.goal_names: list[str] = list(obs.get("goal_names") or [])
        self.action_names: list[str] = list(bundle.manifest["action"]["names"])
        self.greedy = True
        """Greedy (argmax) actions; False samples from the policy with :attr:`generator`."""
        self.generator = torch.Generator().manual_seed(0)
        self._lock = threading.RLock()
        self.trial = -1
        self.reset_trial()

    # -- construction ----------------------------------------------------------------------
    @classmethod
    def from_bundle(cls, path: str | Path, backend: str = "onnxruntime", device: str = "cpu",
                    memory: str | None = None, memory_budget_bytes: int | None = None) -> PolicyRunner:
        """Load and validate a bundle, build its memory (``memory`` policy: "full" | "window" |
        "memo" | "hcam"; default the manifest's) within ``memory_budget_bytes``, and an engine."""
        check_backend(backend, device)
        bundle = load_bundle(path)
        mem = build_memory(bundle, memory, memory_budget_bytes, batch=1, device=device)
        opts = {"profile": (1, mem.slots)} if backend == "tensorrt" else {}
        engine = make_engine(bundle, backend, device, **opts)
        return cls(bundle, engine, mem)

    @property
    def manifest(self) -> dict:
        return self.bundle.manifest

    # -- trials and episodes ---------------------------------------------------------------
    def reset_trial(self) -> None:
        """A new trial (new house): memory cleared, episode counter restarted."""
        with self._lock:
            self.memory.reset()
            self.trial += 1
            self.trial_id = uuid.uuid4().hex
            self.episode = -1  # the first act() or begin_episode() starts episode 0
            self.step_in_episode = 0
            self.total_steps = 0
            self.prev_action = self.args.n_actions  # "no previous action"
            self.prev_reward = 0.0
            self.goal: int | None = None

    def goal_index(self, goal: str | int) -> int:
        if isinstance(goal, (int, np.integer)) and not isinstance(goal, bool):
            if not 0 <= int(goal) < self.args.n_goals:
                raise ValueError(f"goal: index {goal} out of range for goals {self.goal_names}")
            return int(goal)
        if goal not in self.goal_names:
            raise ValueError(f"goal: unknown name {goal!r}; known: {self.goal_names}")
        return self.goal_names.index(goal)

    def begin_episode(self, goal: str | None = None) -> None:
        """Start the next episode of this trial; memory is kept."""
        with self._lock:
            idx = self.goal_index(goal) if goal is not None else None
            self.episode += 1
            self.step_in_episode = 0
            self.goal = idx

    # -- stepping --------------------------------------------------------------------------
    def act(self, obs: dict) -> tuple[int, dict]:
        """One control step. ``obs``: the model's observation inputs (grid worlds:
        ``{"obs": int}``), optionally ``"reward"`` (the reward of the previous action)
        and ``"goal"`` (name or index, when no goal was given to begin_episode)."""
        t0 = time.perf_counter()
        with self._lock:
            if self.episode < 0:
                self.begin_episode()
            self.prev_reward = float(obs.get("reward", 0.0))
            for name, buf in self._inputs.items():
                buf.copy_(self._input_value(name, obs))
            self._episode.fill_(self.episode)
            logits, value = self._step()
            if self.greedy:
                action = int(logits[0].argmax())
            else:
                action = int(torch.multinomial(logits[0].float().softmax(-1).cpu(), 1, generator=self.generator))
            self.prev_action = action
            self.step_in_episode += 1
            self.total_steps += 1
            info = {"latency_ms": 0.0, "memory_tokens": self.memory.tokens, "memory_bytes": self.memory.nbytes,
                    "episode": self.episode, "trial": self.trial, "step": self.step_in_episode - 1,
                    "value": float(value[0]), "action_name": self.action_names[action]}
        info["latency_ms"] = (time.perf_counter() - t0) * 1e3
        return action, info

    def _input_value(self, name: str, obs: dict):
        if name == "prev_action":
            return self.prev_action
        if name == "prev_reward":
            return self.prev_reward
        if name == "episode_step":
            return self.step_in_episode
        if name == "goal":
            if self.goal is not None:
                return self.goal
            if "goal" not in obs:
                raise ValueError("goal: this model needs a goal; call begin_episode(goal=...) or pass obs['goal']")
            return self.goal_index(obs["goal"])
        if name not in obs:
            raise ValueError(f"obs: missing key {name!r}; this model reads {[n for n in self.spec if n not in TRACKED_INPUTS]}")
        io = self.spec[name]
        val = np.asarray(obs[name])
        want = tuple(io["shape"][1:])
        if val.shape != want:
            raise ValueError(f"obs[{name!r}]: shape {val.shape}, expected {want} ({io['dtype']})")
        return torch.from_numpy(val.astype(np.dtype(io["dtype"]), copy=False))

    def step(self, inputs: dict[str, Tensor], episode_index: Tensor) -> tuple[Tensor, Tensor]:
        """Low level: explicit encoder inputs (each (B,)) and episode indices (B,) for one
        step of every env; returns logits (B, A) and value (B,) (copies). Does not touch
        the runner's trial / episode / previous-action bookkeeping."""
        with self._lock:
            for name, buf in self._inputs.items():
                buf.copy_(inputs[name])
            self._episode.copy_(episode_index)
            logits, value = self._step()
            return logits.clone(), value.clone()

    def _step(self) -> tuple[Tensor, Tensor]:
        eng, mem = self.engine, self.memory
        x = eng.encode(self._inputs)
        if self.is_memo:
            self._position.fill_(mem.pos_base() + mem.seg_count)
        else:
            self._position.copy_(self._episode)  # ReLIC: RoPE on the episode index
        past_k, past_v, valid, episode = mem.view()
        if self._own_mask:  # no IEA: only this episode's slots (and the sink token, episode -1)
            torch.logical_and(valid, (episode == self._episode[:, None]) | (episode < 0), out=self._mask)
        h, k, v, *more = eng.core(x, self._position, self._mask, past_k, past_v, *mem.core_inputs())
        if self.is_memo:
            if mem.commit(k, v, self._episode):
                mem.add_summary(*eng.summarize(*mem.summary_inputs()))
        else:
            mem.commit(k, v, self._episode, *more)  # HCAM: + the token's memory-layer inputs
        return eng.heads(h)

    def close(self) -> None:
        """Release the engine (sessions, CUDA graphs, TensorRT contexts). The runner is
        unusable afterwards; memory contents are dropped with it."""
        with self._lock:
            self.engine = None  # type: ignore[assignment]

    # -- persistence -----------------------------------------------------------------------
    def _runner_state(self) -> dict:
        # "sampler": the action-sampling generator's state (base64), so a restored runner
        # that samples (greedy False) draws what the original would have drawn next.
        return {"trial": self.trial, "trial_id": self.trial_id, "episode": self.episode, "step": self.step_in_episode,
                "total_steps": self.total_steps, "prev_action": self.prev_action, "prev_reward": self.prev_reward,
                "goal": self.goal, "sampler": base64.b64encode(self.generator.get_state().numpy().tobytes()).decode()}

    def snapshot(self, path: str | Path) -> None:
        """Write memory + runner state atomically (temp file + rename)."""
        with self._lock:
            self.memory.snapshot(path, model_hash=self.bundle.model_hash, precision=self.bundle.precision,
                                 trial_id=self.trial_id, runner=self._runner_state())

    def restore(self, path: str | Path) -> None:
        """Load a snapshot; refuses (SnapshotError naming file and field) a snapshot of
        another model, memory policy, size or precision, leaving memory untouched."""
        with self._lock:
            state: dict = {}

            def check(meta: dict) -> None:
                r = meta.get("runner")
                if not isinstance(r, dict):
                    raise SnapshotError(f"snapshot {path}: field 'runner' is missing")
                for key in _RUNNER_FIELDS:
                    if key not in r:
                        raise SnapshotError(f"snapshot {path}: field 'runner.{key}' is missing")
                ints = ("trial", "episode", "step", "total_steps", "prev_action")
                for key in ints:
                    if not isinstance(r[key], int):
                        raise SnapshotError(f"snapshot {path}: field 'runner.{key}' is {r[key]!r}, expected an int")
                if not 0 <= r["prev_action"] <= self.args.n_actions:
                    raise SnapshotError(f"snapshot {path}: field 'runner.prev_action' is {r['prev_action']}, "
                                        f"expected 0..{self.args.n_actions}")
                if r["goal"] is not None and not (isinstance(r["goal"], int) and 0 <= r["goal"] < self.args.n_goals):
                    raise SnapshotError(f"snapshot {path}: field 'runner.goal' is {r['goal']!r}, not a goal index")
                if "sampler" in r:  # optional: snapshots written before it existed restore without it
                    try:
                        raw = base64.b64decode(r["sampler"], validate=True)
                    except (TypeError, ValueError):
                        raw = b""
                    if len(raw) != self.generator.get_state().numel():
                        raise SnapshotError(f"snapshot {path}: field 'runner.sampler' is not a generator state")
                    state["sampler_state"] = torch.frombuffer(bytearray(raw), dtype=torch.uint8)
                state.update(r)

            self.memory.restore(path, expect={"model_hash": self.bundle.model_hash,
                                              "precision": self.bundle.precision}, check_meta=check)
            self.trial, self.trial_id, self.episode = state["trial"], state["trial_id"], state["episode"]
            self.step_in_episode, self.total_steps = state["step"], state["total_steps"]
            self.prev_action, self.prev_reward, self.goal = state["prev_action"], float(state["prev_reward"]), state["goal"]
            if "sampler_state" in state:
                self.generator.set_state(state["sampler_state"])


__all__ = ["PolicyRunner", "BundleError", "build_memory"]
