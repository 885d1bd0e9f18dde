"""Shipped house checkpoints may leave out the frozen image encoder and load it from the encoder file."""

import shutil
from pathlib import Path

import pytest
import torch

from icrl_ros.models import load_checkpoint, save_checkpoint

REPO = Path(__file__).resolve().parents[2]
SHIPPED = REPO / "checkpoints" / "house_relic.pt"


@pytest.fixture()
def house(tmp_path):
    """A shipped house policy whose encoder file is a private copy beside the new checkpoint."""
    if not SHIPPED.is_file():
        pytest.skip(f"{SHIPPED} is missing")
    policy, blob = load_checkpoint(SHIPPED)
    enc = tmp_path / "house_encoder.pt"
    shutil.copy(REPO / policy.args.pretrained_encoder, enc)
    policy.args.pretrained_encoder = str(enc)
    return policy, blob, tmp_path


def test_shared_encoder_round_trip_is_exact_and_smaller(house):
    policy, blob, d = house
    save_checkpoint(d / "whole.pt", policy, blob["config"])
    save_checkpoint(d / "shared.pt", policy, blob["config"], share_encoder=True)
    raw = torch.load(d / "shared.pt", weights_only=False)
    assert raw["shared_encoder"]["file"] == "house_encoder.pt"  # relative to the checkpoint's folder
    assert not any(k.startswith(("encoder.image.", "encoder.heads.")) for k in raw["state_dict"])
    assert (d / "shared.pt").stat().st_size < 0.5 * (d / "whole.pt").stat().st_size
    back, _ = load_checkpoint(d / "shared.pt")
    want = policy.state_dict()
    assert back.state_dict().keys() == want.keys()
    assert all(torch.equal(v, want[k]) for k, v in back.state_dict().items())


def test_a_copy_elsewhere_finds_the_encoder_its_arguments_name(house):
    """A checkpoint copied away from its encoder (into a run folder, to resume a pipeline) loads the file its
    model arguments name, by the same SHA-256."""
    policy, blob, d = house
    save_checkpoint(d / "shared.pt", policy, blob["config"], share_encoder=True)
    (d / "run").mkdir()
    shutil.copy(d / "shared.pt", d / "run" / "copy.pt")
    back, _ = load_checkpoint(d / "run" / "copy.pt")
    assert all(torch.equal(v, policy.state_dict()[k]) for k, v in back.state_dict().items())


def test_shared_encoder_refuses_a_changed_or_missing_file(house):
    policy, blob, d = house
    save_checkpoint(d / "shared.pt", policy, blob["config"], share_encoder=True)
    enc = torch.load(d / "house_encoder.pt", weights_only=True)
    enc["net.0.bias"] = enc["net.0.bias"] + 1.0
    torch.save(enc, d / "house_encoder.pt")
    with pytest.raises(ValueError, match="SHA-256 differs"):
        load_checkpoint(d / "shared.pt")
    (d / "house_encoder.pt").unlink()
    with pytest.raises(FileNotFoundError, match="frozen image encoder .* is missing"):
        load_checkpoint(d / "shared.pt")


def test_share_encoder_needs_the_very_weights_of_the_file(house):
    policy, blob, d = house
    with torch.no_grad():
        policy.encoder.image.net[0].bias.add_(1.0)  # no longer the file's encoder
    with pytest.raises(ValueError, match="differs from"):
        save_checkpoint(d / "x.pt", policy, blob["config"], share_encoder=True)
    assert not (d / "x.pt").exists()


HOUSE_CHECKPOINTS = sorted(p for p in (REPO / "checkpoints").glob("house_*.pt") if p.name != "house_encoder.pt")


@pytest.mark.parametrize("path", HOUSE_CHECKPOINTS, ids=lambda p: p.name)
def test_every_committed_house_checkpoint_loads_from_the_repo(path):
    """A shared-encoder record must point beside the checkpoint in the repo, not to the folder it was
    shipped from (house_memo_scan.pt once held ``../../checkpoints/house_encoder.pt`` and loaded nowhere)."""
    raw = torch.load(path, map_location="cpu", weights_only=False)
    if "shared_encoder" in raw:
        assert (path.parent / raw["shared_encoder"]["file"]).resolve() == (path.parent / "house_encoder.pt").resolve()
    load_checkpoint(path)
