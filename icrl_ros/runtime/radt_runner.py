"""``RADTRunner``: RA-DT behind the runner API, with its bounded retrieval memory.

RA-DT's step does not split into encode / core / heads over a KV cache: the model reads
the last C steps of the current episode and k retrieved sub-trajectories. Per step::

    reward of the previous action -> memory.record_reward (after begin_episode: the
                                     finished episode is stored now, with its return)
    obs, return-to-go             -> memory.observe       window (WINDOW_KEYS, (1, C))
    window key (fixed projection) -> memory.query         faiss top-l by cosine, re-ranked
                                                          by episode return, top-k (1, k, 2C)
    window + retrieved            -> engine.policy        logits (1, A) -> action
    action                        -> memory.record_action

The return-to-go is ``target_return`` (the manifest's, RA-DT's conditioning) minus the
episode's rewards so far. Rewards come in ``obs["reward"]`` (the reward of the previous
action, as for every runner); without them every stored return is 0 and the re-ranking
falls back to relevance alone. The memory is numpy + faiss on the CPU for every backend
(only the graph inputs move to the engine's device). Bookkeeping, actions and snapshots:
:class:`~icrl_ros.runtime.runner_base.RunnerBase`; the snapshot adds ``episode_end_pending``.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from icrl_ros.memory.snapshot import SnapshotError
from icrl_ros.memory.subtrajectories import SubTrajectoryMemory
from icrl_ros.models.radt import RETRIEVED_KEYS, WINDOW_KEYS
from icrl_ros.runtime.bundle import Bundle
from icrl_ros.runtime.engine import Engine, make_engine
from icrl_ros.runtime.graphs import TORCH_DTYPES
from icrl_ros.runtime.runner_base import RunnerBase


class RADTRunner(RunnerBase):
    def __init__(self, bundle: Bundle, engine: Engine, memory: SubTrajectoryMemory) -> None:
        super().__init__(bundle, engine, memory)
        r = bundle.manifest["retrieval"]
        self.retrieve_l, self.target_return = int(r["l"]), float(r["target_return"])
        self.batch = 1
        # static graph inputs (ORT / TensorRT bind them by address), in radt_graph_specs order
        spec = bundle.specs["policy"]["inputs"]
        self._inputs = [torch.zeros([1, *io["shape"][1:]], dtype=TORCH_DTYPES[io["dtype"]], device=engine.device)
                        for io in spec]
        self.episode_end_pending = False
        """begin_episode was called after steps: the finished episode is stored at the next
        step, when its last reward arrives."""
        self.reset_trial()

    @classmethod
    def for_bundle(cls, bundle: Bundle, backend: str = "onnxruntime", device: str = "cpu", memory: str | None = None,
                   memory_budget_bytes: int | None = None) -> RADTRunner:
        from icrl_ros.runtime.runner import build_memory

        mem = build_memory(bundle, memory, memory_budget_bytes)
        opts = {"profile": (1, 1)} if backend == "tensorrt" else {}  # static graph: only the batch axis
        return cls(bundle, make_engine(bundle, backend, device, **opts), mem)

    # -- trials and episodes ---------------------------------------------------------------
    def reset_trial(self) -> None:
        with self._lock:
            super().reset_trial()
            self.episode_end_pending = False

    def begin_episode(self, goal: str | None = None) -> None:
        with self._lock:
            super().begin_episode(goal)
            self.episode_end_pending = self.episode_end_pending or self.memory.cur_len > 0

    # -- stepping --------------------------------------------------------------------------
    def step(self, obs: int, reward: float = 0.0, action: int | None = None) -> Tensor:
        """Low level: one step of the current episode given the previous action's
        ``reward``; returns the logits (A,) (a copy). With ``action`` the memory records
        that action (replays); None leaves recording to the caller (:meth:`act`). Does not
        touch the runner's trial / episode / previous-action bookkeeping."""
        with self._lock:
            mem = self.memory
            mem.record_reward(reward)
            if self.episode_end_pending:
                mem.end_episode()
                self.episode_end_pending = False
            window = mem.observe(obs, rtg=self.target_return - mem.episode_return)
            retrieved = mem.query(self.retrieve_l, self.args.top_k)
            arrays = [window[n] for n in WINDOW_KEYS] + [retrieved[n] for n in RETRIEVED_KEYS]
            for buf, arr in zip(self._inputs, arrays):
                buf.copy_(torch.from_numpy(arr))
            logits = self.engine.policy(*self._inputs)[0].clone()
            if action is not None:
                mem.record_action(action)
            return logits

    def _act_logits(self, obs: dict) -> tuple[Tensor, dict]:
        if "obs" not in obs:
            raise ValueError("obs: missing key 'obs'; this model reads ['obs'] (a grid cell index)")
        cell = np.asarray(obs["obs"])
        if cell.shape != () or not np.issubdtype(cell.dtype, np.integer) or not 0 <= int(cell) < self.args.n_obs:
            raise ValueError(f"obs['obs']: expected a cell index in [0, {self.args.n_obs}), got {obs['obs']!r}")
        logits = self.step(int(cell), self.prev_reward)
        return logits[None], {"retrieved_entries": len(self.memory), "stored_episodes": self.memory.episodes}

    def _took(self, action: int) -> None:
        self.memory.record_action(action)

    # -- persistence -----------------------------------------------------------------------
    def _runner_state(self) -> dict:
        return {**super()._runner_state(), "episode_end_pending": self.episode_end_pending}

    def _check_runner_state(self, r: dict, path) -> None:
        if not isinstance(r.get("episode_end_pending"), bool):
            raise SnapshotError(f"snapshot {path}: field 'runner.episode_end_pending' is "
                                f"{r.get('episode_end_pending')!r}, expected true or false")

    def _load_runner_state(self, r: dict) -> None:
        self.episode_end_pending = r["episode_end_pending"]
