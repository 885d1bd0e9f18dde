"""Self-describing checkpoints: weights + model args + training config, no training code needed.

A shipped house checkpoint may leave out its frozen image encoder (``share_encoder``): the encoder
and its label heads are ``model.pretrained_encoder``'s weights unchanged, which the repo already
ships (``checkpoints/house_encoder.pt``, 4.5 MB of a 7 MB checkpoint). The blob then names that
file relative to the checkpoint's folder with its SHA-256, and loading fills the weights back in.
"""

from __future__ import annotations

import hashlib
import io
import os
import tempfile
from pathlib import Path

import torch

from icrl_ros.models.policy import ICLPolicy

FORMAT = "icrl_ros.checkpoint/1"


def read_encoder(path: Path) -> tuple[dict, str]:
    """An encoder file's state dict and SHA-256, from one read."""
    data = Path(path).read_bytes()
    return torch.load(io.BytesIO(data), map_location="cpu", weights_only=True), hashlib.sha256(data).hexdigest()


def frozen_encoder_keys(state: dict) -> dict[str, str]:
    """State-dict name -> name in a ``training/house_encoder.py`` file, for the frozen image
    encoder (``encoder.image.*``) and its label heads (``encoder.heads.*``) present in ``state``."""
    out = {}
    for k in state:
        if k.startswith("encoder.image."):
            out[k] = k[len("encoder.image."):]
        elif k.startswith("encoder.heads."):
            out[k] = k[len("encoder."):]
    return out


def strip_shared_encoder(path: Path, policy: ICLPolicy, state: dict) -> tuple[dict, dict]:
    """(state without the frozen encoder, the blob's ``shared_encoder`` record). Raises ValueError
    unless ``model.pretrained_encoder`` exists and holds exactly the policy's frozen weights."""
    enc_path = Path(getattr(policy.args, "pretrained_encoder", "") or "")
    if not enc_path.name or not enc_path.is_file():
        raise ValueError(f"share_encoder: model.pretrained_encoder {str(enc_path) or '(none)'!r} is not a file: "
                         "only a policy on a frozen pretrained encoder can share it")
    enc, sha = read_encoder(enc_path)
    keys = frozen_encoder_keys(state)
    differ = [k for k, e in keys.items() if e not in enc or not torch.equal(state[k].cpu(), enc[e])]
    if not keys or differ:
        raise ValueError(f"share_encoder: the policy's frozen encoder differs from {enc_path} at {differ[:3]} "
                         "(was it trained on another encoder file?): save it whole")
    record = {"file": os.path.relpath(enc_path.resolve(), path.parent.resolve()), "sha256": sha, "keys": keys}
    return {k: v for k, v in state.items() if k not in keys}, record


def fill_shared_encoder(path: Path, blob: dict) -> dict:
    """The full state dict of a checkpoint saved with ``share_encoder``."""
    rec = blob["shared_encoder"]
    enc_path = path.parent / rec["file"]
    named = Path(str(blob.get("model_args", {}).get("pretrained_encoder") or ""))
    if not enc_path.is_file() and named.name and named.is_file():
        enc_path = named  # a copy of the checkpoint moved elsewhere: the file its arguments name (SHA-256 checked)
    if not enc_path.is_file():
        raise FileNotFoundError(f"checkpoint {path}: its frozen image encoder {enc_path} is missing "
                                "(it ships beside the checkpoint; restore it from the repo)")
    enc, sha = read_encoder(enc_path)
    if sha != rec["sha256"]:
        raise ValueError(f"checkpoint {path}: {enc_path} is not the encoder it was trained on (SHA-256 differs): "
                         "restore that file from the commit that shipped the checkpoint")
    return {**blob["state_dict"], **{k: enc[e] for k, e in rec["keys"].items()}}


def save_checkpoint(path: str | Path, policy: ICLPolicy, config: dict | None = None, share_encoder: bool = False,
                    **extra) -> None:
    """Atomic write (temp file + rename) so a crash never leaves a half checkpoint. ``share_encoder``:
    leave out the frozen image encoder and refer to ``model.pretrained_encoder`` instead (shipping)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    state = policy.state_dict()
    if share_encoder:
        state, extra["shared_encoder"] = strip_shared_encoder(path, policy, state)
    blob = {"format": FORMAT, "model_args": policy.args.to_dict(), "state_dict": state,
            "config": config or {}, **extra}
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
    os.close(fd)
    os.chmod(tmp, 0o644)  # mkstemp's 0600 would make a shipped checkpoint private to its writer
    torch.save(blob, tmp)
    os.replace(tmp, path)


def model_args_from_dict(d: dict, kind: str | None = None):
    """The stored model arguments of a checkpoint or bundle: the config class of the family ``kind``
    (default: ``d["kind"]``, else relic) names (``MemoArgs``, ``RADTArgs``, ...)."""
    from icrl_ros.families import family_of

    return family_of(kind or d.get("kind") or "relic").config_class().from_dict(d)


def read_checkpoint(path: str | Path, map_location: str = "cpu") -> dict:
    """The blob of a checkpoint file written by :func:`save_checkpoint`. FileNotFoundError / ValueError
    say in one line what the path is instead (missing, a directory, not a torch file, another format)."""
    path = Path(path)
    if path.is_dir():
        raise FileNotFoundError(f"checkpoint {path}: a directory, not a checkpoint file (.pt)")
    if not path.is_file():
        raise FileNotFoundError(f"checkpoint {path}: no such file")
    try:
        blob = torch.load(path, map_location=map_location, weights_only=False)
    except Exception as e:  # a text file, a truncated download, another pickle: torch raises many kinds
        first = (str(e).strip().splitlines() or [type(e).__name__])[0][:120]
        raise ValueError(f"checkpoint {path}: not a torch checkpoint file ({type(e).__name__}: {first})") from None
    if not isinstance(blob, dict) or blob.get("format") != FORMAT:
        raise ValueError(f"checkpoint {path}: not an icrl_ros checkpoint (field 'format' is not {FORMAT!r})")
    return blob


def load_checkpoint(path: str | Path, map_location: str = "cpu") -> tuple[ICLPolicy, dict]:
    """Rebuild the policy (ReLIC / Memo / HCAM, or RA-DT for ``kind: radt``) from a checkpoint;
    returns (policy in eval mode, the whole blob)."""
    path = Path(path)
    blob = read_checkpoint(path, map_location)
    from icrl_ros.models.stepping import build_policy

    policy = build_policy(model_args_from_dict(blob["model_args"]))
    state = fill_shared_encoder(path, blob) if "shared_encoder" in blob else blob["state_dict"]
    policy.load_state_dict(state)
    return policy.eval(), blob
