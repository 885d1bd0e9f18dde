"""What every runner shares, whatever its model's step looks like.

A runner steps a bundle one observation at a time against a bounded memory:
``reset_trial`` / ``begin_episode(goal)`` / ``act(obs) -> (action, info)`` / ``snapshot``
/ ``restore`` / ``close``. This base keeps the trial, episode and previous-action
bookkeeping, the action choice (greedy, or sampled from a seeded generator; by default as the
manifest's ``action.selection`` / ``action.temperature`` say), the info
dict, and the snapshot file handling (memory + runner state in one atomic file, the
runner state validated before the memory changes). Subclasses run the model:
:class:`~icrl_ros.runtime.runner.PolicyRunner` (encoder -> core over a KV memory ->
heads) and :class:`~icrl_ros.families.radt.runner.RADTRunner` (RA-DT: window + retrieval
-> one graph).

Thread-safe: one lock around act / reset / snapshot / restore, so a ROS service callback
may snapshot while the control loop acts.
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

from icrl_ros.memory.snapshot import SnapshotError
from icrl_ros.runtime.bundle import Bundle
from icrl_ros.runtime.engine import Engine
from icrl_ros.runtime.manifest import Manifest

_RUNNER_FIELDS = ("trial", "trial_id", "episode", "step", "total_steps", "prev_action", "prev_reward", "goal")


def choose_actions(logits: Tensor, greedy: bool = False, temperature: float = 1.0,
                   generator: torch.Generator | None = None) -> Tensor:
    """Actions from (A,) or (B, A) logits: the argmax, or one draw per row from
    softmax(logits / temperature) with ``generator`` (a CPU generator; the draw runs on the CPU)."""
    if greedy:
        return logits.argmax(-1)
    probs = (logits.float() / temperature).softmax(-1).cpu()
    return torch.multinomial(probs, 1, generator=generator)[..., 0]


class RunnerBase:
    def __init__(self, bundle: Bundle, engine: Engine, memory) -> None:
        self.bundle, self.engine, self.memory = bundle, engine, memory
        self.args = bundle.args
        self.memory_policy = memory.policy
        self.goal_names: list[str] = list(bundle.manifest.observation.goal_names)
        self.action_names: list[str] = list(bundle.manifest.action.names)
        self.greedy = False
        """Greedy (argmax) actions; False samples from the policy with :attr:`generator`."""
        self.temperature = 1.0
        """Sampling temperature: actions are drawn from softmax(logits / temperature)."""
        self.configure_actions()
        self.generator = torch.Generator().manual_seed(0)
        self._lock = threading.RLock()
        self.trial = -1

    @property
    def manifest(self) -> Manifest:
        return self.bundle.manifest

    def configure_actions(self, selection: str | None = None, temperature: float | None = None) -> None:
        """How :meth:`act` chooses actions: ``selection`` "sample" | "greedy" and the sampling
        ``temperature``; None (each) takes the bundle's (manifest ``action.selection`` /
        ``action.temperature``, what it was evaluated with)."""
        a = self.bundle.manifest.action
        selection = selection or a.selection
        temperature = a.temperature if temperature is None else float(temperature)
        if selection not in ("sample", "greedy"):
            raise ValueError(f"selection: {selection!r} is not one of ['sample', 'greedy']")
        if not temperature > 0:
            raise ValueError(f"temperature: must be > 0, got {temperature!r}")
        self.greedy, self.temperature = selection == "greedy", temperature

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

    def _observed(self, name: str, io: dict, obs: dict, reads: list[str]) -> np.ndarray:
        """An encoder input taken from the observation: ``goal`` (begin_episode's, else
        obs['goal'], as an index), or ``obs[name]`` checked against its graph spec ``io`` and
        cast to its dtype; ``reads`` names the observation keys the model reads (for errors)."""
        if name == "goal":
            if self.goal is not None:
                return np.asarray(self.goal)
            if "goal" not in obs:
                raise ValueError("goal: this model needs a goal; call begin_episode(goal=...) or pass obs['goal']")
            return np.asarray(self.goal_index(obs["goal"]))
        if name not in obs:
            raise ValueError(f"obs: missing key {name!r}; this model reads {reads}")
        val = np.asarray(obs[name])
        want = tuple(io["shape"][1:])
        if val.shape != want:
            raise ValueError(f"obs[{name!r}]: shape {val.shape}, expected {want} ({io['dtype']})")
        return val.astype(np.dtype(io["dtype"]), copy=False)

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
            logits, extra = self._act_logits(obs)
            action = int(choose_actions(logits[0], self.greedy, self.temperature, self.generator))
            self._took(action)
            self.prev_action = action
            self.step_in_episode += 1
            self.total_steps += 1
            info = {"latency_ms": 0.0, "memory_tokens": self.memory.tokens, "memory_bytes": self.memory.nbytes,
                    "episode": self.episode, "trial": self.trial, "step": self.step_in_episode - 1,
                    **extra, "action_name": self.action_names[action]}
        info["latency_ms"] = (time.perf_counter() - t0) * 1e3
        return action, info

    def _act_logits(self, obs: dict) -> tuple[Tensor, dict]:
        """Run the model for this step (bookkeeping already updated); returns logits (1, A)
        and extra info fields."""
        raise NotImplementedError

    def _took(self, action: int) -> None:
        """The action chosen for this step (a memory that records actions stores it)."""

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

    def _check_runner_state(self, r: dict, path) -> None:
        """Refuse (SnapshotError naming the file and field) runner fields a subclass adds."""

    def _load_runner_state(self, r: dict) -> None:
        """Take over the runner fields a subclass adds (already checked)."""

    def _extra_tensors(self) -> dict:
        """State a subclass keeps beside the memory, snapshotted with it (loaded in place)."""
        return {}

    def snapshot(self, path: str | Path) -> None:
        """Write memory + runner state atomically (temp file + rename)."""
        with self._lock:
            self.memory.snapshot(path, extra=self._extra_tensors(), model_hash=self.bundle.model_hash,
                                 precision=self.bundle.precision, trial_id=self.trial_id, runner=self._runner_state())

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
                self._check_runner_state(r, path)
                state.update(r)

            self.memory.restore(path, expect={"model_hash": self.bundle.model_hash,
                                              "precision": self.bundle.precision}, check_meta=check,
                                extra=self._extra_tensors())
            self.trial, self.trial_id, self.episode = state["trial"], state["trial_id"], state["episode"]
            self.step_in_episode, self.total_steps = state["step"], state["total_steps"]
            self.prev_action, self.prev_reward, self.goal = state["prev_action"], float(state["prev_reward"]), state["goal"]
            if "sampler_state" in state:
                self.generator.set_state(state["sampler_state"])
            self._load_runner_state(state)
