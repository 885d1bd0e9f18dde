"""ship_checkpoint.py: the shipped copy drops the optimiser, keeps the training record, and says what it holds."""

from __future__ import annotations

import shutil

import pytest
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


def test_ship_refers_to_a_moved_encoder_file_with_the_same_weights(tmp_path, capsys) -> None:
    """--encoder: the shipped copy names another file holding the same encoder (a candidate's encoder moved
    into checkpoints/); a file with other weights is refused, and --encoder alone says what to add."""
    moved = tmp_path / "encoders" / "moved.pt"
    moved.parent.mkdir()
    shutil.copy("checkpoints/house_encoder.pt", moved)
    dst = tmp_path / "ship" / "shipped.pt"
    assert ship_checkpoint.main(["checkpoints/house_relic.pt", str(dst), "--share-encoder", "--encoder", str(moved)]) == 0
    shipped = torch.load(dst, map_location="cpu", weights_only=False)
    assert shipped["shared_encoder"]["file"] == "../encoders/moved.pt"
    a, _ = load_checkpoint("checkpoints/house_relic.pt")
    b, _ = load_checkpoint(str(dst))
    assert b.args.pretrained_encoder == str(moved)
    assert all(torch.equal(a.state_dict()[k], v) for k, v in b.state_dict().items())
    other = tmp_path / "other.pt"
    torch.save({k: v + 1 for k, v in torch.load(moved, weights_only=True).items()}, other)
    for argv in (["--share-encoder", "--encoder", str(other)], ["--encoder", str(moved)]):
        with pytest.raises(SystemExit):
            ship_checkpoint.main(["checkpoints/house_relic.pt", str(tmp_path / "x.pt"), *argv])
    err = capsys.readouterr().err
    assert "differs from" in err and "give it with --share-encoder" in err


def test_ship_sets_a_runtime_option_and_refuses_one_that_changes_the_weights(tmp_path, capsys) -> None:
    """--set: a model argument the weights do not depend on (the forgetting rule) is changed in the arguments
    and the training config; a field that is not one, a bad value and a change of the weights' shapes are refused."""
    dst = tmp_path / "d.pt"
    src = "checkpoints/house_relic_scan.pt"
    shutil.copy("checkpoints/house_encoder.pt", tmp_path)
    assert ship_checkpoint.main([src, str(dst), "--share-encoder", "--set", "house.forget_contradicted=5"]) == 0
    a, _ = load_checkpoint(src)
    b, blob = load_checkpoint(str(dst))
    assert a.args.house.forget_contradicted == 3 and b.args.house.forget_contradicted == 5
    assert blob["config"]["model"]["house"]["forget_contradicted"] == 5
    assert all(torch.equal(a.state_dict()[k], v) for k, v in b.state_dict().items())
    for bad, words in (("house.no_such=1", "unknown fields ['no_such']"),
                       ("house.forget_contradicted=-1", "steps >= 0"), ("d_mlp=64", "changes the model's weights")):
        with pytest.raises(SystemExit):
            ship_checkpoint.main([src, str(tmp_path / "x.pt"), "--set", bad])
        assert words in capsys.readouterr().err
