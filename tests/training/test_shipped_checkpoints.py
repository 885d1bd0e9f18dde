"""The checkpoints shipped in checkpoints/ still do what docs/notebook says (short versions)."""

from pathlib import Path

import numpy as np
import pytest

from icrl_ros.models import load_checkpoint
from icrl_ros.sim import make_vec
from icrl_ros.training.evaluate import held_out_tasks, run_trials

ROOT = Path(__file__).resolve().parents[2]
DARKROOM = ROOT / "checkpoints" / "darkroom_relic.pt"


def held_out_curve(path: Path, env_id: str, trials: int, steps: int, temperature: float) -> tuple[float, float, float]:
    """Episode 1's and episode 10's mean return and the oracle-normalised trial return of a shipped
    checkpoint on held-out tasks (seed 0, every chunk / the whole trial in memory)."""
    policy, _ = load_checkpoint(path)
    env = make_vec(env_id, trials, split="test", seed=0)
    held_out_tasks(env, trials, seed=0)
    oracle = env.oracle_trial_return(steps)
    out = run_trials(policy, env, steps=steps, seed=0, temperature=temperature)
    R = out["returns"]
    return float(np.nanmean(R[:, 0])), float(np.nanmean(R[:, 9])), float((out["trial_return"] / oracle).mean())


@pytest.mark.skipif(not DARKROOM.is_file(), reason="checkpoints/darkroom_relic.pt not shipped")
def test_darkroom_relic_learns_in_context_on_held_out_goals():
    policy, blob = load_checkpoint(DARKROOM)
    env = make_vec("icrl_ros/Darkroom-v0", 40, split="test", seed=0)
    held_out_tasks(env, 40, seed=0)  # each of the 20 held-out goals twice
    out = run_trials(policy, env, steps=1000, window=blob["config"]["ppo"]["rollout_length"], seed=0)
    R = out["returns"]
    first, tenth = np.nanmean(R[:, 0]), np.nanmean(R[:, 9])
    # docs/notebook (100 trials, 40 episodes): 33 -> 88; issue bar: >= 75 and >= 30 above episode 1
    assert tenth >= first + 30, (first, tenth)
    assert tenth >= 75, tenth


def shipped(name: str, *args, slow: bool = False):
    """One case of the table below, skipped where its checkpoint is not shipped (``slow``: in make test-all only)."""
    path = ROOT / "checkpoints" / name
    marks = [pytest.mark.skipif(not path.is_file(), reason=f"checkpoints/{name} not shipped")]
    return pytest.param(path, *args, id=name.removesuffix(".pt"), marks=marks + [pytest.mark.slow] * slow)


# make test keeps the Darkroom ReLIC (above) and Memo cases; Dark-Key-To-Door, HCAM and RA-DT (~5 CPU-minutes between
# them) run in make test-all


# (checkpoint, env, held-out trials, steps, temperature, episode 10 at least this above episode 1, trial return / oracle)
HELD_OUT_CASES = [
    # Dark-Key-To-Door ReLIC, sampled at temperature 0.6, chosen on training tasks (docs/notebook):
    # 0.639 +- 0.026 of the oracle on 400 held-out trials, 0.77 -> 1.88 by episode 10; these 64 trials
    # measured 0.610, 0.73 -> 1.89. Margins for 64 trials.
    shipped("dark_key_to_door_relic.pt", "icrl_ros/DarkKeyToDoor-v0", 64, 500, 0.6, 0.7, 0.55, slow=True),
    # HCAM (hidden 128; imitation of RoomExplorer, then 0.98M steps of PPO), every chunk of the trial kept,
    # sampled at temperature 0.6 (chosen on training goals, docs/notebook); each held-out goal once. These 20
    # trials measured 38.1 -> 90.9 by episode 10, 0.925 of the oracle (100 held-out trials of 4,000 steps:
    # 0.974, docs/notebook). Without its memory a policy stays near episode 1's return (the no-IEA ReLIC: 0.31
    # of the oracle); the imitation-only HCAM it replaces gave 0.787 here.
    shipped("darkroom_hcam.pt", "icrl_ros/Darkroom-v0", 20, 1000, 0.6, 30, 0.85, slow=True),
    # Memo (config/train/darkroom_memo.yaml, 3.0M PPO steps from scratch), its summaries and the whole
    # trial's segments kept, sampled at temperature 1; each held-out goal once. These 20 trials measured
    # 24.7 -> 80.7 by episode 10, 0.726 of the oracle over the 10 episodes (100 held-out trials of 4,000
    # steps through the bundle: 35.6 -> 84.9, 0.866; docs/notebook 2026-11-27 fifth session). Without memory a
    # policy stays near episode 1 (the no-IEA ReLIC: ~28 throughout).
    shipped("darkroom_memo.pt", "icrl_ros/Darkroom-v0", 20, 1000, 1.0, 40, 0.6),
]


@pytest.mark.parametrize("path, env_id, trials, steps, temperature, min_rise, min_norm", HELD_OUT_CASES)
def test_shipped_checkpoint_learns_in_context_on_held_out_tasks(path, env_id, trials, steps, temperature,
                                                                 min_rise, min_norm):
    first, tenth, norm = held_out_curve(path, env_id, trials, steps, temperature=temperature)
    assert tenth >= first + min_rise, (first, tenth)
    assert norm >= min_norm, norm


RADT = ROOT / "checkpoints" / "darkroom_radt.pt"


@pytest.mark.slow
@pytest.mark.skipif(not RADT.is_file(), reason="checkpoints/darkroom_radt.pt not shipped")
def test_darkroom_radt_learns_in_context_on_held_out_goals():
    """RA-DT (a cell known by its row and column, no return-to-go, no retrieval dropout; offline on
    short RoomExplorer trials, retrieving from its own earlier episodes): its index starts empty in
    every trial."""
    pytest.importorskip("faiss")
    from icrl_ros.training.evaluate import evaluate

    r = evaluate(str(RADT), "test", 20, 1000, None, False, 0, "window")  # each held-out goal once, seed 0
    first, tenth = r["episodes"][0]["mean"], r["episodes"][9]["mean"]
    # These 20 trials measured 48.0 -> 90.9 by episode 10, 0.951 of the oracle (100 held-out trials of 4,000
    # steps: 0.988, docs/notebook 2026-11-27 fifth session). The same recipe with retrieval dropout 0.1 gave
    # 42.8 -> 81.8, 0.856 here (some trials never searched again after a missed first episode); with a
    # per-cell table it stayed at ~27 after episode 1 (0.357); the Q-learner-data RA-DT rose to 40 (0.537).
    assert tenth >= first + 35, (first, tenth)
    assert r["trial_return"]["oracle_normalised"] >= 0.9, r["trial_return"]
