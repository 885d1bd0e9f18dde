"""RA-DT's bundle: what it holds beyond the shared parts, how it is checked, replayed and exported.

The runtime and the exporter ask a family without the cached control step for these through
``Family.deploy`` (:meth:`~icrl_ros.families.Family.deploy_module`); nothing outside this folder
names RA-DT's files, sample keys or retrieval memory.

An RA-DT bundle holds one ``policy`` graph over the episode window and the retrieved
sub-trajectories, the fixed random projection that makes the retrieval keys
(:data:`KEY_PROJECTION`, checked for shape) and a ``retrieval`` manifest section (top-l,
re-ranking weights, target return). Its sample is a rollout recorded through the training-side
evaluation loop (grid worlds) or through the torch engine's runner (images).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

KEY_PROJECTION = "key_projection.npz"
"""The fixed random projection of the step inputs that makes the retrieval keys."""
SAMPLE_KEYS = ("obs", "prev_reward", "episode_index", "action", "logits")
"""The recorded sample: a rollout (T,) with its actions and the torch logits (T, A) (image models:
``rgb``, ``odom``, ``goal`` (T, ...) in place of ``obs``)."""
FP16 = "RA-DT bundles are fp32 only (a 0.2M-parameter model; its step is dominated by retrieval)"
"""Why ``export.py --fp16`` refuses this family (None where a family exports fp16)."""


# -- reading a bundle ---------------------------------------------------------------------------
def bundle_layout(args, precision: str) -> tuple[dict, tuple[str, ...], dict[str, dict[str, tuple]]]:
    """What :func:`~icrl_ros.runtime.bundle.load_bundle` checks: (graph specs, the sample's keys, the
    extra ``.npz`` files with their arrays' shapes)."""
    from icrl_ros.families.radt.graphs import graph_specs

    keys = SAMPLE_KEYS if args.obs_type != "image" else (*args.input_spec(), *SAMPLE_KEYS[1:])
    return graph_specs(args, precision), keys, {KEY_PROJECTION: {"key_proj": (args.key_inputs, args.key_dim)}}


def key_projection(bundle) -> np.ndarray:
    """The retrieval keys' projection (key inputs, key_dim) float32."""
    with np.load(bundle.file(KEY_PROJECTION), allow_pickle=False) as z:
        return z["key_proj"].copy()


def build_memory(bundle, name: str, budget_bytes: int | None, cfg: dict):
    """The retrieval memory a runner of ``bundle`` uses: keys from the bundle's projection, numpy on the CPU."""
    from icrl_ros.memory import create_memory

    a, r = bundle.args, bundle.manifest.retrieval
    return create_memory(name, kind="radt", n_layers=a.n_layers, n_heads=a.n_heads, head_dim=a.head_dim,
                         budget_bytes=budget_bytes, key_proj=key_projection(bundle), context=a.context,
                         horizon=a.max_episode_steps, n_actions=a.n_actions, obs_features=a.obs_features,
                         relevance_weight=r.relevance_weight, utility_weight=r.utility_weight, **cfg)


def exact_sizes(episodes: int) -> dict:
    """The sizes that keep every one of ``episodes`` episodes (so replay is exact)."""
    return {"max_episodes": episodes}


def _obs(runner, sample: dict[str, np.ndarray], t: int):
    """Step t's observation for ``RADTRunner.step``: the cell, or the encoder's inputs."""
    return {n: sample[n][t] for n in runner.spec} if runner.spec else int(sample["obs"][t])


def replay(runner, sample: dict[str, np.ndarray]) -> np.ndarray:
    """Step an RA-DT runner through a recorded rollout from a fresh trial (episode starts from
    ``episode_index``, the recorded rewards and actions); returns logits (T, A) float64."""
    runner.reset_trial()
    ep, out = sample["episode_index"], []
    for t in range(len(ep)):
        if t == 0 or ep[t] != ep[t - 1]:
            runner.begin_episode()
        lg = runner.step(_obs(runner, sample, t), float(sample["prev_reward"][t]), int(sample["action"][t]))
        out.append(lg.double().cpu().numpy())
    return np.stack(out)


def _runner(bundle, backend: str, steps: int, episodes: int, device: str = "cpu"):
    from icrl_ros.families.radt.runner import RADTRunner
    from icrl_ros.runtime.engine import make_engine
    from icrl_ros.runtime.selfcheck import exact_memory

    return RADTRunner(bundle, make_engine(bundle, backend, device), exact_memory(bundle, steps, episodes=episodes))


def record_images(bundle, steps: int, seed: int = 0) -> dict[str, np.ndarray]:
    """An image RA-DT rollout recorded through the torch engine's runner: random rgb / odom / goal per
    step, 0/1 rewards, episodes of C/2 .. C steps (so several end and fill the index), greedy actions.
    The torch reference other backends replay (no evaluation loop exists for images); keys as
    :func:`bundle_layout`'s."""
    a = bundle.args
    rng = np.random.default_rng(seed)
    longest = max(2, min(a.context, a.max_episode_steps))
    lengths: list[int] = []
    while sum(lengths) < steps:
        lengths.append(int(rng.integers(longest // 2, longest + 1)))
    sample = {"rgb": rng.integers(0, 256, (steps, a.image_size, a.image_size, 3), dtype=np.uint8),
              "odom": rng.normal(0.0, 2.0, (steps, 3)).astype(np.float32),
              "goal": np.repeat(rng.integers(0, max(1, a.n_goals), len(lengths)), lengths)[:steps],
              "prev_reward": (rng.random(steps) < 0.2).astype(np.float32),
              "episode_index": np.repeat(np.arange(len(lengths)), lengths)[:steps]}
    sample["prev_reward"][0] = 0.0
    runner = _runner(bundle, "torch", steps, len(lengths))
    ep, logits, actions = sample["episode_index"], [], []
    for t in range(steps):
        if t == 0 or ep[t] != ep[t - 1]:
            runner.begin_episode()
        lg = runner.step(_obs(runner, sample, t), float(sample["prev_reward"][t]))
        actions.append(int(lg.argmax()))
        runner.memory.record_action(actions[-1])
        logits.append(lg.double().numpy())
    return {**sample, "action": np.array(actions), "logits": np.stack(logits)}


def check_sample(bundle, backend: str, device: str) -> dict:
    """The bundle's recorded sample through ``backend``, against its recorded logits."""
    from icrl_ros.runtime.selfcheck import compare

    sample = bundle.sample()
    runner = _runner(bundle, backend, len(sample["episode_index"]), int(sample["episode_index"].max()) + 1, device)
    return compare(sample["logits"], None, replay(runner, sample), None, bundle.precision)


# -- writing a bundle ---------------------------------------------------------------------------
def manifest_sections(args, config: dict) -> dict:
    """The manifest sections of this family (``retrieval``), from the model and its training config."""
    from icrl_ros.runtime import manifest as M

    return {"retrieval": M.Retrieval(key_projection=KEY_PROJECTION, key_dim=args.key_dim, key_seed=args.key_seed,
                                     l=int(config.get("retrieve_l", 50)), relevance_weight=1.0,
                                     utility_weight=float(config.get("utility_weight", 1.0)),
                                     target_return=float(config.get("target_return", 90.0)),
                                     utility="episode_return")}


def sample_length(args) -> tuple[int, int]:
    """(steps, episode length) of the recorded sample: several episode ends, so retrieval has entries
    (images: episodes of C/2 .. C steps, a small sample)."""
    if args.obs_type == "image":
        return 4 * min(args.context, args.max_episode_steps), args.context
    return 5 * args.max_episode_steps, args.max_episode_steps


def _rollout(policy, steps: int, retrieval, seed: int) -> dict[str, np.ndarray]:
    """The evaluation loop on a replay (``icrl_ros/training/radt_eval.py``) with the manifest's retrieval
    settings: inputs, actions and reference logits."""
    from icrl_ros.training.radt_eval import record_rollout

    return record_rollout(policy, steps, seed=seed, target_return=retrieval.target_return, retrieve_l=retrieval.l,
                          utility_weight=retrieval.utility_weight)


def write_files(policy, folder: Path, manifest, specs: dict, steps: int) -> None:
    """The key projection and the recorded sample, into the bundle being written."""
    from icrl_ros.runtime.bundle import SAMPLE, Bundle

    np.savez(folder / KEY_PROJECTION, key_proj=policy.key_proj.numpy())
    if policy.args.obs_type == "image":  # the torch runner of the bundle being written records it
        rec = record_images(Bundle(folder, manifest, policy.args, specs, _policy=policy), steps)
    else:
        rec = _rollout(policy, steps, manifest.retrieval, seed=0)
    np.savez(folder / SAMPLE, **rec)


def verify(bundle, policy, steps: int, backends: tuple[str, ...], seed: int) -> dict[str, dict]:
    """``export.py --verify``: runner replays (retrieval from their own memory) of a rollout recorded
    through the evaluation loop, against its logits."""
    from icrl_ros.runtime.selfcheck import compare

    if bundle.args.obs_type == "image":  # no evaluation loop for images: the torch runner's recording
        rec = record_images(bundle, min(steps, 4 * bundle.args.context), seed)
    else:
        rec = _rollout(policy, steps, bundle.manifest.retrieval, seed)
    episodes = int(rec["episode_index"].max()) + 1
    out = {}
    for backend in backends:
        out[backend] = compare(rec["logits"], None, replay(_runner(bundle, backend, steps, episodes), rec), None,
                               bundle.precision)
        out[backend]["episodes"] = episodes
    return out
