"""ship_checkpoint.py: the shipped copy drops the optimiser, keeps the training record, and says what it holds."""

from __future__ import annotations

import shutil

import torch

from icrl_ros.models import load_checkpoint
from icrl_ros.training import ship_checkpoint


def test_ship_keeps_weights_and_record_and_reports_an_offline_fine_tune(tmp_path, capsys) -> None:
    src = tmp_path / "offline.pt"
    blob = torch.load("checkpoints/house_relic.pt", map_location="cpu", weights_only=False)
    blob["optimizer"] = {"state": {}, "param_groups": []}  # what a training checkpoint carries besides
    # the record imitate.py --offline writes (the shipped ReLIC's own is now a PPO run's)
    blob.update(trainer="imitate", env_steps=0, offline_updates=800, offline_data="runs/pool")
    torch.save(blob, src)
    shutil.copy("checkpoints/house_encoder.pt", tmp_path)  # a shared-encoder checkpoint reads it beside itself
    dst = tmp_path / "shipped.pt"
    assert ship_checkpoint.main([str(src), str(dst), "--share-encoder"]) == 0
    out = capsys.readouterr().out
    assert f"{blob['offline_updates']:,} offline updates on {blob['offline_data']}" in out  # not "0 env steps"
    shipped = torch.load(dst, map_location="cpu", weights_only=False)
    assert "optimizer" not in shipped
    assert {k: shipped[k] for k in ("trainer", "offline_updates", "offline_data")} == \
        {k: blob[k] for k in ("trainer", "offline_updates", "offline_data")}
    a, _ = load_checkpoint("checkpoints/house_relic.pt")
    b, _ = load_checkpoint(str(dst))
    sa, sb = a.state_dict(), b.state_dict()
    assert list(sa) == list(sb) and all(torch.equal(sa[k], sb[k]) for k in sa)


def test_ship_reports_env_steps_of_an_online_run(tmp_path, capsys) -> None:
    dst = tmp_path / "d.pt"
    assert ship_checkpoint.main(["checkpoints/darkroom_relic.pt", str(dst)]) == 0
    steps = torch.load("checkpoints/darkroom_relic.pt", map_location="cpu", weights_only=False)["env_steps"]
    assert f"{steps:,} env steps" in capsys.readouterr().out
