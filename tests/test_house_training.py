"""The house recipe end to end at a tiny size: DAgger on the env's in-context teacher with the
frozen pretrained encoder (resumable), PPO --init with the teacher term, export, and the
evaluation through the training code and through the bundle (ONNX Runtime), which agree."""

from __future__ import annotations

import importlib.util
import json

import numpy as np
import pytest
import torch

from tests.test_train_cli import run

if importlib.util.find_spec("miniworld") is None:  # importing it here would open a display
    pytest.skip("the MiniWorld house needs the miniworld package", allow_module_level=True)

TINY = ["--set", "env.num_envs=2", "--set", "ppo.rollout_length=48", "--set", "model.d_model=32",
        "--set", "model.n_layers=2", "--set", "model.n_heads=4", "--set", "model.d_mlp=64",
        "--set", "env.options.max_episode_steps=30", "--set", "checkpoint_every=1"]


def test_house_imitation_resume_ppo_export_and_evaluation_agree(tmp_path):
    cfg = "config/train/house_memo_imitate.yaml"
    im = tmp_path / "im"
    r = run(["training/imitate.py", "--config", cfg, "--run-dir", str(im), "--set", "total_steps=96", *TINY])
    assert r.returncode == 0, r.stderr
    assert "iteration 1/1" in r.stdout and "episodes=" in r.stdout and "success=" in r.stdout
    r = run(["training/imitate.py", "--config", cfg, "--run-dir", str(im), "--set", "total_steps=192", *TINY,
             "--resume", str(im / "checkpoints" / "latest.pt")])
    assert r.returncode == 0, r.stderr
    assert "resumed" in r.stdout and "iteration 2/2" in r.stdout and "iteration 1/2" not in r.stdout
    ckpt = im / "checkpoints" / "final.pt"
    blob = torch.load(ckpt, weights_only=False)
    assert blob["env_steps"] == 192 and blob["model_args"]["visual_encoder"] == "features"
    # the frozen encoder is the shipped one, unchanged by training
    enc = torch.load("checkpoints/house_encoder.pt", weights_only=True)
    assert torch.equal(blob["state_dict"]["encoder.image.net.0.weight"], enc["net.0.weight"])

    r = run(["training/train.py", "--config", "config/train/house_memo.yaml", "--run-dir", str(tmp_path / "ppo"),
             "--init", str(ckpt), "--set", "total_steps=96", "--set", "ppo.num_updates=2", *TINY, "--no-progress"])
    assert r.returncode == 0, r.stderr

    bundle = tmp_path / "bundle"
    r = run(["training/export.py", str(ckpt), "--out", str(bundle), "--verify", "--verify-steps", "120"])
    assert r.returncode == 0, r.stdout + r.stderr
    import yaml

    assert yaml.safe_load((bundle / "manifest.yaml").read_text())["observation"]["pose_frame"] == "house"

    out = tmp_path / "eval"
    r = run(["training/evaluate.py", str(ckpt), str(bundle), "--label", "torch", "--label", "bundle",
             "--trials", "2", "--episodes", "2", "--batch", "2", "--seed", "3", "--out", str(out)])
    assert r.returncode == 0, r.stderr
    doc = json.loads((out / "curves.json").read_text())
    assert (out / "icl_curve.png").is_file()
    a, b = doc["raw"]["torch"], doc["raw"]["bundle"]
    assert np.array(a["spl"]).shape == (2, 2) and doc["curves"]["torch"]["spl"]["n"] == 2
    assert a == b  # same seeds, same actions: the deployed runtime is the evaluated policy
    assert doc["settings"]["runs"]["bundle"]["env_options"]["pose_frame"] == "house"


def test_house_offline_imitation_from_saved_trials(tmp_path):
    """--save-trials writes the labelled trials (cached features, not images); with --beta 1 the
    teacher's labels are what was executed, --noise replaces them by the given actions; --offline
    trains on the saved files and reports held-out agreement."""
    cfg = "config/train/house_relic_imitate.yaml"
    data = tmp_path / "data"
    r = run(["training/imitate.py", "--config", cfg, "--run-dir", str(tmp_path / "c"), "--set", "total_steps=192",
             *TINY, "--beta", "1", "--save-trials", str(data)])
    assert r.returncode == 0, r.stderr
    files = sorted(data.glob("trials_*.pt"))
    assert [f.name for f in files] == ["trials_0000.pt", "trials_0001.pt"]
    t = torch.load(files[0], weights_only=False)
    assert t["rgb_feat"].shape == (2, 48, 128) and "rgb" not in t
    executed = t["prev_action"][:, 1:]
    assert torch.equal(executed, t["label"][:, :-1])  # the teacher acted; its action is the next prev_action

    noisy = tmp_path / "noisy"
    r = run(["training/imitate.py", "--config", cfg, "--run-dir", str(tmp_path / "n"), "--set", "total_steps=96",
             *TINY, "--beta", "1", "--noise", "1", "--noise-actions", "2", "--save-trials", str(noisy)])
    assert r.returncode == 0, r.stderr
    t = torch.load(noisy / "trials_0000.pt", weights_only=False)
    assert (t["prev_action"][:, 1:] == 2).all() and (t["label"] != 2).any()  # always turned left, labels unchanged

    r = run(["training/imitate.py", "--config", cfg, "--run-dir", str(tmp_path / "off"), *TINY,
             "--offline", str(data), "--updates", "4", "--val-files", "1"])
    assert r.returncode == 0, r.stderr
    assert "offline imitation on 1 files (96 labelled steps), 1 held out" in r.stdout
    assert "update 4/4" in r.stdout and "val_agreement=" in r.stdout
    blob = torch.load(tmp_path / "off" / "checkpoints" / "final.pt", weights_only=False)
    assert blob["offline_updates"] == 4

    r = run(["training/imitate.py", "--config", cfg, "--run-dir", str(tmp_path / "agg"), "--set", "total_steps=96",
             *TINY, "--pool", str(data), "--updates", "3", "--init", str(tmp_path / "off" / "checkpoints" / "final.pt")])
    assert r.returncode == 0, r.stderr
    assert "aggregating with 2 saved files (192 labelled steps); 3 updates of 1 trials" in r.stdout
    assert "iteration 1/1" in r.stdout and "agreement=" in r.stdout

    r = run(["training/imitate.py", "--config", cfg, "--run-dir", str(tmp_path / "bad"), *TINY,
             "--offline", str(noisy), "--val-files", "1"])
    assert r.returncode != 0 and "need more than --val-files 1" in r.stderr
