"""``RADTRunner``: RA-DT behind the runner API, with its bounded retrieval memory.

RA-DT's step does not split into encode / core / heads over a KV cache: the model reads
the last C steps of the current episode and k retrieved sub-trajectories. Per step::

    reward of the previous action -> memory.record_reward (after begin_episode: the
                                     finished episode is stored now, with its return)
    (image models) rgb, odom, goal-> engine.encode        step features (1, F)
    obs, return-to-go             -> memory.observe       window (WINDOW_KEYS, (1, C))
    window key (fixed projection) -> memory.query         faiss top-l by cosine, re-ranked
                                                          by episode return, top-k (1, k, 2C)
    window + retrieved            -> engine.policy        logits (1, A) -> action
    action                        -> memory.record_action

The return-to-go is ``target_return`` (the manifest's, RA-DT's conditioning) minus the
episode's rewards so far. Rewards come in ``obs["reward"]`` (the reward of the previous
action, as for every runner). A robot gets none: :meth:`RADTRunner.end_episode` takes the
episode's return (or success) from outside (the agent node forwards the sim bridge's
``episode_end`` events), and that becomes the stored episode's re-ranking utility; told
nothing, every stored return is 0 and the re-ranking falls back to relevance alone. The memory is numpy + faiss on the CPU for every backend
(only the graph inputs move to the engine's device). Bookkeeping, actions and snapshots:
:class:`~icrl_ros.runtime.runner_base.RunnerBase`; the snapshot adds ``episode_end_pending``.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from icrl_ros.memory.snapshot import SnapshotError
from icrl_ros.families.radt.memory import SubTrajectoryMemory
from icrl_ros.runtime.bundle import Bundle
from icrl_ros.runtime.engine import Engine, make_engine
from icrl_ros.families.radt.graphs import RETRIEVED_PREFIX
from icrl_ros.runtime.graphs import input_buffers
from icrl_ros.runtime.runner_base import RunnerBase


def retrieval_step_inputs(memories: list[SubTrajectoryMemory], obs, rtg, l: int, k: int) -> dict[str, np.ndarray]:
    """RA-DT's one control step before the network, for a batch of trials that each own a memory:
    push the step (``obs[i]``, return-to-go ``rtg[i]``) into memory i's window, retrieve its top-l
    by cosine re-ranked to top-k, and stack. Returns the policy graph's inputs by name (window
    (B, C), ``retrieved_*`` (B, k, 2C)). The deployed runner (B = 1) and the training-side
    evaluation loop (:mod:`icrl_ros.training.radt_eval`) both step through here, so the window, padding and
    retrieval they see are the memory's, written once."""
    arrays: dict[str, list[np.ndarray]] = {}
    for mem, o, g in zip(memories, obs, rtg):
        window = {n: a.copy() for n, a in mem.observe(o, rtg=float(g)).items()}
        retrieved = mem.query(l, k)
        for name, a in (*window.items(), *((RETRIEVED_PREFIX + n, a) for n, a in retrieved.items())):
            arrays.setdefault(name, []).append(a)
    return {name: np.concatenate(parts) for name, parts in arrays.items()}


class RADTRunner(RunnerBase):
    def __init__(self, bundle: Bundle, engine: Engine, memory: SubTrajectoryMemory) -> None:
        super().__init__(bundle, engine, memory)
        r = bundle.manifest.retrieval
        self.retrieve_l, self.target_return = int(r.l), float(r.target_return)
        self.batch = 1
        # static graph inputs, in radt_graph_specs order
        self._inputs = input_buffers(bundle.specs["policy"], 1, engine.device)
        self.spec = {io["name"]: io for io in bundle.specs["encoder"]["inputs"]} if "encoder" in bundle.specs else {}
        """Image models: the encoder's observation inputs (rgb, odom, goal)."""
        self._obs_inputs = input_buffers(bundle.specs["encoder"], 1, engine.device) if self.spec else {}
        self.episode_end_pending = False
        """begin_episode was called after steps: the finished episode is stored at the next
        step, when its last reward arrives."""
        self.pending_return: float | None = None
        """The return :meth:`end_episode` was told for the episode stored next (None: its rewards')."""
        self.reset_trial()

    @classmethod
    def for_bundle(cls, bundle: Bundle, backend: str = "onnxruntime", device: str = "cpu", memory: str | None = None,
                   memory_budget_bytes: int | None = None, threads: int | None = None) -> RADTRunner:
        from icrl_ros.runtime.runner import build_memory

        mem = build_memory(bundle, memory, memory_budget_bytes)
        opts = {"profile": (1, 1)} if backend == "tensorrt" else {}  # static graph: only the batch axis
        return cls(bundle, make_engine(bundle, backend, device, threads=threads, **opts), mem)

    # -- trials and episodes ---------------------------------------------------------------
    def reset_trial(self) -> None:
        with self._lock:
            super().reset_trial()
            self.episode_end_pending = False
            self.pending_return = None

    def begin_episode(self, goal: str | None = None) -> None:
        with self._lock:
            super().begin_episode(goal)
            self.episode_end_pending = self.episode_end_pending or self.memory.cur_len > 0

    def end_episode(self, return_: float | None = None, episode: int | None = None) -> bool:
        """The episode ``episode`` (default: the current one) is over and its return (or
        success, any utility where higher is better) was ``return_``: the re-ranking uses it
        in place of the sum of the rewards the runner saw. The current episode is stored with
        it at the next step (as after :meth:`begin_episode`); the previous, already stored
        one (the news came after the next episode began) gets its utility updated. False
        when there was nothing to tell (no steps, an older episode)."""
        with self._lock:
            episode = self.episode if episode is None else episode
            if episode == self.episode and self.memory.cur_len and not self.episode_end_pending:
                self.episode_end_pending, self.pending_return = True, return_
                return True
            if episode == self.episode and self.episode_end_pending:  # told between begin_episode and a step
                self.pending_return = return_
                return True
            if episode == self.episode - 1 and not self.episode_end_pending and return_ is not None:
                return self.memory.set_last_return(return_)
            return False

    # -- stepping --------------------------------------------------------------------------
    def step(self, obs: int | dict, reward: float = 0.0, action: int | None = None) -> Tensor:
        """Low level: one step of the current episode given the previous action's
        ``reward``; ``obs`` a cell index, or (image models) the encoder's inputs ``{rgb, odom,
        goal}`` as arrays. Returns the logits (A,) (a copy). With ``action`` the memory records
        that action (replays); None leaves recording to the caller (:meth:`act`). Does not
        touch the runner's trial / episode / previous-action bookkeeping."""
        with self._lock:
            mem = self.memory
            mem.record_reward(reward)
            if self.episode_end_pending:
                mem.end_episode() if self.pending_return is None else mem.end_episode(self.pending_return)
                self.episode_end_pending, self.pending_return = False, None
            if self.spec:
                for name, buf in self._obs_inputs.items():
                    buf.copy_(torch.as_tensor(np.asarray(obs[name])).reshape(buf.shape))
                obs = self.engine.encode(self._obs_inputs)[0].cpu().numpy()  # (F,) step features
            arrays = retrieval_step_inputs([mem], [obs], [self.target_return - mem.episode_return], self.retrieve_l,
                                           self.args.top_k)
            for name, buf in self._inputs.items():
                buf.copy_(torch.from_numpy(arrays[name]))
            logits = self.engine.policy(*self._inputs.values())[0].clone()
            if action is not None:
                mem.record_action(action)
            return logits

    def _act_logits(self, obs: dict) -> tuple[Tensor, dict]:
        info = {"retrieved_entries": len(self.memory), "stored_episodes": self.memory.episodes}
        if self.spec:
            return self.step(self._image_obs(obs), self.prev_reward)[None], info
        if "obs" not in obs:
            raise ValueError("obs: missing key 'obs'; this model reads ['obs'] (a grid cell index)")
        cell = np.asarray(obs["obs"])
        if cell.shape != () or not np.issubdtype(cell.dtype, np.integer) or not 0 <= int(cell) < self.args.n_obs:
            raise ValueError(f"obs['obs']: expected a cell index in [0, {self.args.n_obs}), got {obs['obs']!r}")
        return self.step(int(cell), self.prev_reward)[None], info

    def _image_obs(self, obs: dict) -> dict[str, np.ndarray]:
        """The encoder's inputs from an observation (goal: begin_episode's, else obs['goal']),
        shapes checked."""
        reads = [n for n in self.spec if n != "goal"]
        return {name: self._observed(name, io, obs, reads) for name, io in self.spec.items()}

    def _took(self, action: int) -> None:
        self.memory.record_action(action)

    # -- persistence -----------------------------------------------------------------------
    def _runner_state(self) -> dict:
        return {**super()._runner_state(), "episode_end_pending": self.episode_end_pending,
                "pending_return": self.pending_return}

    def _check_runner_state(self, r: dict, path) -> None:
        if not isinstance(r.get("episode_end_pending"), bool):
            raise SnapshotError(f"snapshot {path}: field 'runner.episode_end_pending' is "
                                f"{r.get('episode_end_pending')!r}, expected true or false")
        ret = r.get("pending_return")  # optional: snapshots written before it existed have none
        if ret is not None and (not isinstance(ret, (int, float)) or isinstance(ret, bool) or not np.isfinite(ret)):
            raise SnapshotError(f"snapshot {path}: field 'runner.pending_return' is {ret!r}, expected a number or null")

    def _load_runner_state(self, r: dict) -> None:
        self.episode_end_pending = r["episode_end_pending"]
        self.pending_return = None if r.get("pending_return") is None else float(r["pending_return"])
