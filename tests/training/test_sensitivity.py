"""experiments/sensitivity.py: the KL of a policy under a random optimiser-sized step, HCAM's top-k flips."""

import pytest
import torch

from icrl_ros.families.hcam.config import HCAMArgs
from icrl_ros.families.hcam.model import ChunkMemoryAttention, HCAMPolicy
from icrl_ros.models import save_checkpoint
from icrl_ros.sim import make_vec
from icrl_ros.experiments import sensitivity


@pytest.fixture(scope="module")
def hcam_ckpt(tmp_path_factory):
    torch.manual_seed(0)
    env = make_vec("icrl_ros/DarkKeyToDoor-v0", 1, seed=0)
    args = HCAMArgs(n_obs=env.n_obs, n_actions=env.n_actions, max_episode_steps=env.max_episode_steps,
                    d_model=32, n_layers=1, n_heads=4, d_mlp=64, hcam_chunk=8, hcam_top_k=2, depth_dropout=0.0)
    path = tmp_path_factory.mktemp("sens") / "hcam.pt"
    save_checkpoint(path, HCAMPolicy(args), config={"env": {"id": "icrl_ros/DarkKeyToDoor-v0"}})
    return path


def test_no_step_no_move_and_a_step_moves(hcam_ckpt):
    from icrl_ros.models import load_checkpoint

    policy, blob = load_checkpoint(hcam_ckpt)
    policy.eval()
    inp = sensitivity.record_trials(policy, blob["config"]["env"]["id"], trials=2, seed=0, split="train")
    still, moved = sensitivity.measure(policy, inp, 0.0, repeats=1), sensitivity.measure(policy, inp, 1e-2, repeats=1)
    assert abs(still["kl"]) < 1e-9 and still["flipped"] == 0.0
    assert moved["kl"] > 1e-6 and 0.0 < moved["flipped"] <= 1.0
    # the recording leaves the blocks' own select in place
    assert all("select" not in vars(m) for m in policy.modules() if isinstance(m, ChunkMemoryAttention))


def test_cli_prints_a_row_per_step_and_refuses_bad_steps(hcam_ckpt, capsys):
    assert sensitivity.main([str(hcam_ckpt), "--steps", "1e-3", "--trials", "2", "--repeats", "1",
                             "--hcam-weights", "continuous"]) == 0
    rows = capsys.readouterr().out.strip().splitlines()
    assert len(rows) == 2 and "1e-03" in rows[1]
    with pytest.raises(SystemExit) as e:
        sensitivity.main([str(hcam_ckpt), "--steps", "fast"])
    assert e.value.code != 0
