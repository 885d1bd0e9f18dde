"""The house encoder's larger-image and pooled trunks, its size labels, and the recall-by-size report."""

from __future__ import annotations

import json
import math
import shutil

import numpy as np
import pytest
import torch

from icrl_ros.models.encoders import FeatureEncoder, as_images, feature_encoder_for


@pytest.mark.parametrize("size,side", [(24, 3), (64, 8), (96, 6), (128, 8)])
def test_feature_trunk_map_keeps_8x8_cells_above_64_px(size, side):
    enc = FeatureEncoder(16, size)
    m = enc.net(as_images(torch.zeros(1, size, size, 3, dtype=torch.uint8))[0])
    assert m.shape == (1, 64, side, side)
    assert enc(torch.zeros(2, size, size, 3, dtype=torch.uint8)).shape == (2, 16)


def test_pooled_features_are_the_per_cell_head_maximum_and_rebuild_from_a_file(tmp_path):
    torch.manual_seed(0)
    enc = FeatureEncoder(16, 64, pooled=5).eval()
    rgb = torch.randint(0, 256, (3, 64, 64, 3), dtype=torch.uint8)
    with torch.no_grad():
        f = enc(rgb)
        m = enc.net(as_images(rgb)[0])  # (3, 64, 8, 8)
        per_cell = torch.stack([enc.cells(m[:, :, i:i + 1, j:j + 1]).flatten(1)
                                for i in range(8) for j in range(8)], 1)  # (3, 64 cells, 5)
    assert f.shape == (3, 16)
    assert torch.allclose(f[:, -5:], per_cell.max(1).values, atol=1e-6)
    torch.save(enc.state_dict(), tmp_path / "e.pt")
    again = feature_encoder_for(torch.load(tmp_path / "e.pt", weights_only=True), 64)
    again.load_state_dict(torch.load(tmp_path / "e.pt", weights_only=True))
    with torch.no_grad():
        assert torch.equal(again.eval()(rgb), f)
    with pytest.raises(ValueError, match="pooled"):
        FeatureEncoder(16, 64, pooled=16)


def test_size_labels_agree_with_presence_and_two_image_sizes_show_the_same_scenes():
    from icrl_ros.training.house_encoder import _collect

    a = _collect(("test", 7, 24, 12, 64))
    b = _collect(("test", 7, 24, 12, 96))
    assert a["rgb"].shape == (24, 64, 64, 3) and b["rgb"].shape == (24, 96, 96, 3)
    for k in ("present", "size_px", "bearing", "dist", "free", "blocked"):
        assert np.array_equal(a[k], b[k]), k
    np.testing.assert_array_equal(a["metres"], b["metres"])
    assert np.array_equal(a["present"] > 0.5, a["size_px"] >= 10)
    seen = a["size_px"] > 0
    assert seen.sum() > a["present"].sum() > 0  # some categories in view below the 10-pixel mark
    assert np.isfinite(a["metres"][seen]).all() and np.isnan(a["metres"][~seen]).all()


def test_recall_table_bins_sizes_and_distances():
    from icrl_ros.training.encoder_recall import recall_table, wilson

    size = np.array([[0, 3, 12], [18, 50, 0], [100, 7, 25]], np.float32)
    metres = np.where(size > 0, 2.5, np.nan).astype(np.float32)
    p = np.array([[0.9, 0.1, 0.6], [0.2, 0.7, 0.1], [0.8, 0.6, 0.3]])
    r = recall_table(p, size, metres)
    rates = {tuple(row["px"]): (row["n"], row["rate"]) for row in r["by_size_px"]}
    assert rates[(0.0, 5.0)] == (1, 0.0) and rates[(5.0, 10.0)] == (1, 1.0)
    assert rates[(10.0, 15.0)] == (1, 1.0) and rates[(15.0, 20.0)] == (1, 0.0)
    assert rates[(20.0, 40.0)] == (1, 0.0) and rates[(40.0, 80.0)] == (1, 1.0) and rates[(80.0, math.inf)] == (1, 1.0)
    assert r["recall_10_20px"]["n"] == 2 and r["recall_10_20px"]["rate"] == 0.5
    assert r["recall_resolved"]["rate"] == pytest.approx(3 / 5)
    assert r["false_positive_not_in_view"] == {"n": 2, "rate": 0.5, "ci95": list(wilson(1, 2))}
    assert r["by_metres_resolved"][2]["n"] == 5  # all at 2.5 m
    first, second, third = r["by_category"]  # per category (column): 10-20 px, 80+ px, all resolved
    assert first["category"] == "red_ball" and third["category"] == "blue_ball"
    assert (first["recall_10_20px"]["n"], first["recall_10_20px"]["rate"]) == (1, 0.0)  # 18 px, P 0.2
    assert (first["recall_80px"]["n"], first["recall_80px"]["rate"]) == (1, 1.0)  # 100 px, P 0.8
    assert second["recall_80px"]["n"] == 0
    assert (second["recall_resolved"]["n"], second["recall_resolved"]["rate"]) == (1, 1.0)
    assert (third["recall_10_20px"]["rate"], third["recall_resolved"]["n"]) == (1.0, 2)
    lo, hi = wilson(13, 100)
    assert lo < 0.13 < hi and hi - lo == pytest.approx(0.137, abs=0.01)


def test_recall_cli_refuses_a_bad_encoder_spec_in_one_line(tmp_path, capsys):
    from icrl_ros.training.encoder_recall import main

    for spec, words in (("checkpoints/house_encoder.pt", "expected NAME=PATH@IMAGE_SIZE"),
                        (f"x={tmp_path / 'none.pt'}@64", "is not a file")):
        with pytest.raises(SystemExit) as e:
            main(["--encoder", spec, "--out", str(tmp_path)])
        err = capsys.readouterr().err
        assert e.value.code == 2 and words in err.strip().splitlines()[-1] and "Traceback" not in err


@pytest.mark.parametrize("size,stem", [(24, "strided"), (64, "patch")])
def test_a_policy_on_a_pooled_encoder_loads_it_and_exports_with_its_outputs(tmp_path, size, stem):
    """model.feature_pooled / feature_stem: the policy builds the frozen encoder with the pooled path and the file's
    stem, loads the file's weights, and its bundle (ONNX Runtime, the max over the map inside the graph) reproduces
    the torch step."""
    from icrl_ros.models import build_policy
    from icrl_ros.models.config import ModelArgs
    from icrl_ros.runtime.bundle import load_bundle
    from icrl_ros.runtime.selfcheck import check_sample
    from icrl_ros.training.export import export_bundle

    torch.manual_seed(0)
    enc = FeatureEncoder(16, size, pooled=4, stem=stem)
    torch.save(enc.state_dict(), tmp_path / "enc.pt")
    args = ModelArgs(n_obs=1, n_actions=4, max_episode_steps=8, d_model=32, n_layers=1, n_heads=4, d_mlp=64,
                     obs_type="image", image_size=size, n_goals=3, sink="kv0", visual_encoder="features", feature_dim=16,
                     feature_pooled=4, feature_stem=stem, pretrained_encoder=str(tmp_path / "enc.pt"), use_reward=False)
    policy = build_policy(args, load_pretrained=True).eval()
    rgb = torch.randint(0, 256, (2, size, size, 3), dtype=torch.uint8)
    with torch.no_grad():
        assert torch.equal(policy.encoder.image(rgb), enc.eval()(rgb))
    bundle = export_bundle(policy, tmp_path / "b", env={"goal_names": ["a", "b", "c"],
                                                         "action_names": ["stop", "forward", "left", "right"]})
    assert check_sample(load_bundle(bundle))["ok"]
    assert load_bundle(bundle).manifest.model.args["feature_stem"] == stem
    with pytest.raises(ValueError, match="feature_pooled"):
        ModelArgs(n_obs=1, n_actions=4, max_episode_steps=8, feature_dim=16, feature_pooled=16)


@pytest.mark.slow  # renders and trains two tiny encoders (~15 s on an idle machine)
def test_encoder_training_saves_each_epoch_and_continues_from_it(tmp_path, capsys):
    """house_encoder.py writes ``last_epoch/`` after every epoch but the last: its weights (``--init OUT/last_epoch``
    starts a new run from them) and its state (``--resume`` goes on with the stopped run exactly); an --init folder
    without an encoder, a --resume with other options or with nothing to resume is refused."""
    from icrl_ros.training.house_encoder import main

    out = tmp_path / "enc"
    common = ["--test-frames", "16", "--batch", "16", "--workers", "1", "--threads", "1", "--pooled", "8"]
    assert main(["--frames", "32", "--epochs", "2", "--out", str(out), *common]) == 0
    first = torch.load(out / "last_epoch" / "encoder.pt", weights_only=True)
    final = torch.load(out / "encoder.pt", weights_only=True)
    assert json.loads((out / "last_epoch" / "epoch.json").read_text())["epochs_done"] == 1
    assert first.keys() == final.keys() and any("heads." in k for k in first)
    assert not all(torch.equal(first[k], final[k]) for k in first)  # the second epoch trained on
    more = tmp_path / "more"
    assert main(["--data", str(out / "frames.npz"), "--init", str(out / "last_epoch"), "--epochs", "1",
                 "--out", str(more), *common]) == 0
    assert json.loads((more / "encoder.json").read_text())["init"] == str(out / "last_epoch")
    with pytest.raises(SystemExit) as e:
        main(["--data", str(out / "frames.npz"), "--init", str(tmp_path / "nowhere"), "--out", str(more), *common])
    assert e.value.code == 2 and "--init" in capsys.readouterr().err
    # a run stopped after its first epoch goes on with --resume and ends as the unstopped run did, bit for bit
    stopped = tmp_path / "stopped"
    shutil.copytree(out / "last_epoch", stopped / "last_epoch")
    shutil.copy(out / "frames.npz", stopped / "frames.npz")
    assert main(["--frames", "32", "--epochs", "2", "--out", str(stopped), "--resume", *common]) == 0
    again = torch.load(stopped / "encoder.pt", weights_only=True)
    assert all(torch.equal(final[k], again[k]) for k in final)
    assert json.loads((stopped / "encoder.json").read_text())["resumed_at_epoch"] == 1
    with pytest.raises(SystemExit, match="other options"):  # the schedule depends on them
        main(["--frames", "32", "--epochs", "3", "--out", str(stopped), "--resume", *common])
    with pytest.raises(SystemExit) as e:
        main(["--epochs", "2", "--out", str(tmp_path / "empty"), "--resume", *common])
    assert e.value.code == 2 and "start it again without --resume" in capsys.readouterr().err


@pytest.mark.parametrize("size,patch", [(64, 2), (96, 3), (128, 4)])
def test_patch_stem_sees_every_pixel_once_and_keeps_the_8x8_map(size, patch):
    """The patch stem's first conv tiles the image with non-overlapping patches (kernel = stride = size / 32),
    so a change in one pixel moves exactly one cell of its 32x32 map, and the trunk still ends in 8x8 cells."""
    enc = FeatureEncoder(16, size, pooled=4, stem="patch").eval()
    first = enc.net[0]
    assert first.kernel_size == (patch, patch) and first.stride == (patch, patch)
    x = torch.zeros(1, size, size, 3, dtype=torch.uint8)
    y = x.clone()
    y[0, size - 1, 5] = 255  # one pixel in the bottom row
    with torch.no_grad():
        a, b = first(as_images(x)[0]), first(as_images(y)[0])
        moved = (a - b).abs().sum(1)[0] > 0  # (32, 32)
        assert moved.sum() == 1 and moved[31, 5 // patch]
        assert enc.net(as_images(x)[0]).shape == (1, 64, 8, 8)
        assert enc(x).shape == (1, 16)


def test_patch_stem_rebuilds_from_its_file_and_a_policy_takes_it(tmp_path):
    from icrl_ros.models.config import ModelArgs
    from icrl_ros.models.encoders import stem_of

    torch.manual_seed(0)
    enc = FeatureEncoder(16, 128, pooled=4, stem="patch").eval()
    assert stem_of(enc.state_dict()) == "patch" and stem_of(FeatureEncoder(16, 128).state_dict()) == "strided"
    again = feature_encoder_for(enc.state_dict(), 128)
    again.load_state_dict(enc.state_dict())  # strict: the same modules
    rgb = torch.randint(0, 256, (2, 128, 128, 3), dtype=torch.uint8)
    with torch.no_grad():
        assert torch.equal(again.eval()(rgb), enc(rgb))
    with pytest.raises(ValueError, match="multiple of 32"):
        FeatureEncoder(16, 80, stem="patch")
    with pytest.raises(ValueError, match="stem"):
        FeatureEncoder(16, 64, stem="conv")
    with pytest.raises(ValueError, match="feature_stem"):
        ModelArgs(n_obs=1, n_actions=4, max_episode_steps=8, feature_stem="patch", image_size=80)
    with pytest.raises(ValueError, match="feature_stem"):
        ModelArgs(n_obs=1, n_actions=4, max_episode_steps=8, feature_stem="vit")
