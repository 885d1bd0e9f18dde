"""In-context trials of an RA-DT policy (RA-DT Algorithm 1), batched over trials.

Each trial owns a :class:`~icrl_ros.families.radt.memory.SubTrajectoryMemory` that starts
EMPTY; every finished episode of the agent enters it (its sub-trajectories with the
episode's return). The step is the deployed runner's (one function for both, over the memory's
own window and retrieval). At every step the query is the key of the current episode's window,
the top-l entries by cosine are re-ranked by relevance + episode return, and the top-k
go to the cross-attention layers. The DT is conditioned on a return-to-go drawn per
episode from N(target_return, target_return_std) and decreased by the rewards received.

Used by ``training/evaluate.py`` for RA-DT checkpoints (same table / JSON / plot), and as
the reference a deployed RA-DT is checked against: :func:`record_rollout` runs this loop on
a :class:`ReplayEnv` (recorded observations and rewards) and keeps every step's logits,
which ``training/export.py`` stores as the bundle's sample and ``--verify`` compares with
ONNX Runtime / torch :class:`~icrl_ros.families.radt.runner.RADTRunner` replays.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from icrl_ros.families.radt.memory import SubTrajectoryMemory
from icrl_ros.families.radt.model import RADTPolicy
from icrl_ros.families.radt.graphs import RADTGraph
from icrl_ros.families.radt.runner import retrieval_step_inputs
from icrl_ros.runtime.graphs import input_buffers
from icrl_ros.runtime.runner_base import choose_actions
from icrl_ros.sim import VecTrialEnv
from icrl_ros.training.ppo import episode_returns_matrix


@torch.no_grad()
def run_radt_trials(policy: RADTPolicy, env: VecTrialEnv, steps: int, greedy: bool = False, seed: int = 0,
                    target_return: float = 90.0, target_return_std: float = 5.0, retrieve_l: int = 50,
                    utility_weight: float = 1.0, record: bool = False, temperature: float = 1.0,
                    graph=None) -> dict:
    """Run ``env.num_envs`` trials of ``steps`` steps from the env's current tasks; returns
    ``returns`` (N, E) per finished episode (NaN-padded), ``trial_return`` (N,), the memory
    figures, and ``memories`` (one per trial, for inspection); ``record``: also every
    step's ``logits`` (N, T, A) and ``actions`` (N, T). Each trial steps its own memory through
    :func:`~icrl_ros.families.radt.runner.retrieval_step_inputs` and the policy graph a bundle
    exports, as the deployed runner does. ``graph``: named step inputs -> logits (B, A), e.g. a
    bundle's graph on an engine (:func:`engine_graph`); default the policy's own
    :class:`~icrl_ros.families.radt.graphs.RADTGraph`."""
    policy.eval()
    a = policy.args
    B, H = env.num_envs, env.max_episode_steps
    rng = np.random.default_rng(seed)
    g = torch.Generator().manual_seed(seed)
    shortest = getattr(env, "min_episode_steps", H)  # fixed-length episodes unless the env says otherwise
    mems = [SubTrajectoryMemory(policy.trajectory_keys, a.key_dim, a.context, H, utility_weight=utility_weight,
                                max_episodes=math.ceil(steps / shortest) + 1, n_obs=a.n_obs, n_actions=a.n_actions)
            for _ in range(B)]
    if graph is None:
        torch_graph = RADTGraph(policy)
        graph = lambda arrays: torch_graph(*(torch.from_numpy(arrays[n]) for n in torch_graph.names))  # noqa: E731
    target = rng.normal(target_return, target_return_std, B)
    trial_ret = np.zeros(B)
    episodes: list[list[float]] = [[] for _ in range(B)]
    obs = env.observe()
    rec_logits, rec_actions = [], []
    for _ in range(steps):
        rtg = [target[i] - mem.episode_return for i, mem in enumerate(mems)]
        arrays = retrieval_step_inputs(mems, obs, rtg, retrieve_l, a.top_k)
        logits = graph(arrays)
        act = choose_actions(logits, greedy, temperature, g).numpy()
        if record:
            rec_logits.append(logits.double().numpy())
            rec_actions.append(act)
        obs, reward, done, _ = env.step(act)
        trial_ret += reward
        for i, mem in enumerate(mems):
            mem.record_action(int(act[i]))
            mem.record_reward(float(reward[i]))
        for i in np.flatnonzero(done):
            episodes[i].append(mems[i].episode_return)
            mems[i].end_episode()
            target[i] = rng.normal(target_return, target_return_std)
    returns = episode_returns_matrix(episodes)
    out = {"returns": returns, "trial_return": trial_ret, "memory_bytes": int(sum(m.nbytes for m in mems)),
           "memory_tokens": int(len(mems[0])), "memories": mems}
    if record:
        out["logits"], out["actions"] = np.stack(rec_logits, 1), np.stack(rec_actions, 1)
    return out


def engine_graph(bundle, engine, batch: int):
    """A bundle's policy graph on ``engine`` (ONNX Runtime, torch, TensorRT) for ``batch`` trials at
    once: named step inputs -> logits (B, A), through input buffers allocated once (as the
    runner binds them)."""
    bufs = input_buffers(bundle.specs["policy"], batch, engine.device)

    def graph(arrays: dict[str, np.ndarray]) -> torch.Tensor:
        for name, buf in bufs.items():
            buf.copy_(torch.from_numpy(arrays[name]))
        return engine.policy(*bufs.values()).float().cpu().clone()

    return graph


class ReplayEnv:
    """One trial of recorded observations (T,) and rewards (T,) behind the env interface
    ``run_radt_trials`` uses; ``done`` (T,) marks each episode's last step. Actions do not
    change what comes next (a replay)."""

    def __init__(self, obs: np.ndarray, reward: np.ndarray, done: np.ndarray, max_episode_steps: int) -> None:
        self.obs, self.reward, self.done = (np.asarray(x) for x in (obs, reward, done))
        self.num_envs, self.max_episode_steps, self.t = 1, max_episode_steps, 0
        ends = np.flatnonzero(self.done)
        self.min_episode_steps = int(np.diff(np.r_[-1, ends]).min()) if len(ends) else max_episode_steps

    def observe(self) -> np.ndarray:
        return self.obs[min(self.t, len(self.obs) - 1)][None]

    def step(self, action: np.ndarray):
        t = self.t
        self.t += 1
        return self.observe(), self.reward[t:t + 1].astype(np.float32), self.done[t:t + 1].astype(bool), {}


def record_rollout(policy: RADTPolicy, steps: int, seed: int = 0, target_return: float = 90.0,
                   retrieve_l: int = 50, utility_weight: float = 1.0) -> dict[str, np.ndarray]:
    """A recorded rollout through the evaluation loop: random cells, 0/1 rewards (p 0.2),
    episodes of H/2 .. H steps (H = the model's max_episode_steps; partial sub-trajectories
    and episode ends included), greedy actions, deterministic return-to-go. Returns ``obs``,
    ``prev_reward`` (the reward of the previous action, 0 at t = 0), ``episode_index``,
    ``action`` (each (T,)) and ``logits`` (T, A): what a runner replay needs."""
    a = policy.args
    H = a.max_episode_steps
    rng = np.random.default_rng(seed)
    lengths = []
    while sum(lengths) < steps:
        lengths.append(int(rng.integers(max(1, H // 2), H + 1)))
    episode_index = np.repeat(np.arange(len(lengths)), lengths)[:steps]
    done = np.r_[episode_index[1:] != episode_index[:-1], True]
    obs = rng.integers(0, a.n_obs, steps)
    reward = (rng.random(steps) < 0.2).astype(np.float32)
    out = run_radt_trials(policy, ReplayEnv(obs, reward, done, H), steps, greedy=True, target_return=target_return,
                          target_return_std=0.0, retrieve_l=retrieve_l, utility_weight=utility_weight, record=True)
    return {"obs": obs, "prev_reward": np.r_[0.0, reward[:-1]].astype(np.float32), "episode_index": episode_index,
            "action": out["actions"][0], "logits": out["logits"][0]}
