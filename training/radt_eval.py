"""In-context trials of an RA-DT policy (RA-DT Algorithm 1), batched over trials.

Each trial owns a :class:`~icrl_ros.memory.subtrajectories.SubTrajectoryMemory` that starts
EMPTY; every finished episode of the agent enters it (its sub-trajectories with the
episode's return). At every step the query is the key of the current episode's window,
the top-l entries by cosine are re-ranked by relevance + episode return, and the top-k
go to the cross-attention layers. The DT is conditioned on a return-to-go drawn per
episode from N(target_return, target_return_std) and decreased by the rewards received.

Used by ``training/evaluate.py`` for RA-DT checkpoints (same table / JSON / plot).
"""

from __future__ import annotations

import math

import numpy as np
import torch

from icrl_ros.memory.subtrajectories import SubTrajectoryMemory
from icrl_ros.models.radt import RADTPolicy, as_tensors, episode_windows
from icrl_ros.sim import VecTrialEnv


def empty_retrieved(batch: int, k: int, context: int) -> dict[str, np.ndarray]:
    shape = (batch, k, 2 * context)
    out = {n: np.zeros(shape, dtype=np.int64) for n in ("obs", "action", "episode_step")}
    out.update(reward=np.zeros(shape, np.float32), rtg=np.zeros(shape, np.float32), valid=np.zeros(shape, bool))
    return out


@torch.no_grad()
def run_radt_trials(policy: RADTPolicy, env: VecTrialEnv, steps: int, greedy: bool = False, seed: int = 0,
                    target_return: float = 90.0, target_return_std: float = 5.0, retrieve_l: int = 50,
                    utility_weight: float = 1.0) -> dict:
    """Run ``env.num_envs`` trials of ``steps`` steps from the env's current tasks; returns
    ``returns`` (N, E) per finished episode (NaN-padded), ``trial_return`` (N,), the memory
    figures, and ``memories`` (one per trial, for inspection)."""
    policy.eval()
    a = policy.args
    B, H, C = env.num_envs, env.max_episode_steps, a.context
    rng = np.random.default_rng(seed)
    g = torch.Generator().manual_seed(seed)
    mems = [SubTrajectoryMemory(policy.trajectory_keys, a.key_dim, C, H, max_episodes=math.ceil(steps / H) + 1,
                                utility_weight=utility_weight) for _ in range(B)]
    ep = {n: np.zeros((B, H), dtype=dt) for n, dt in (("obs", np.int64), ("action", np.int64),
                                                       ("reward", np.float32), ("rtg", np.float32))}
    target = rng.normal(target_return, target_return_std, B)
    t = np.zeros(B, dtype=np.int64)
    ep_ret, trial_ret = np.zeros(B), np.zeros(B)
    episodes: list[list[float]] = [[] for _ in range(B)]
    rows = np.arange(B)
    obs = env.observe()
    for _ in range(steps):
        ep["obs"][rows, t], ep["rtg"][rows, t] = obs, target - ep_ret
        win = episode_windows(ep["obs"], ep["action"], ep["reward"], ep["rtg"], t, C, a.n_actions)
        queries = policy.trajectory_keys(win["obs"], win["valid"])
        ret = empty_retrieved(B, a.top_k, C)
        for i, mem in enumerate(mems):
            if len(mem):
                got = mem.retrieve(queries[i:i + 1], retrieve_l, a.top_k)  # task=None: re-rank by return
                for n in ret:
                    ret[n][i] = got[n][0]
        logits = policy(as_tensors(win), as_tensors(ret))[:, -1]
        action = logits.argmax(-1) if greedy else torch.multinomial(logits.softmax(-1), 1, generator=g)[:, 0]
        act = action.numpy()
        obs, reward, done, _ = env.step(act)
        ep["action"][rows, t], ep["reward"][rows, t] = act, reward
        ep_ret += reward
        trial_ret += reward
        t += 1
        for i in np.flatnonzero(done):
            mems[i].add_episodes(ep["obs"][i, :t[i]][None], ep["action"][i, :t[i]][None], ep["reward"][i, :t[i]][None])
            episodes[i].append(ep_ret[i])
            for arr in ep.values():
                arr[i] = 0
            target[i] = rng.normal(target_return, target_return_std)
        ep_ret[done], t[done] = 0, 0
    E = max(len(e) for e in episodes)
    returns = np.full((B, E), np.nan)
    for i, e in enumerate(episodes):
        returns[i, :len(e)] = e
    return {"returns": returns, "trial_return": trial_ret, "memory_bytes": int(sum(m.nbytes for m in mems)),
            "memory_tokens": int(len(mems[0])), "memories": mems}
