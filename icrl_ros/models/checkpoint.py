"""Self-describing checkpoints: weights + model args + training config, no training code needed."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import torch

from icrl_ros.models.config import ModelArgs
from icrl_ros.models.policy import ICLPolicy

FORMAT = "icrl_ros.checkpoint/1"


def save_checkpoint(path: str | Path, policy: ICLPolicy, config: dict | None = None, **extra) -> None:
    """Atomic write (temp file + rename) so a crash never leaves a half checkpoint."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    blob = {"format": FORMAT, "model_args": policy.args.to_dict(), "state_dict": policy.state_dict(),
            "config": config or {}, **extra}
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
    os.close(fd)
    torch.save(blob, tmp)
    os.replace(tmp, path)


def model_args_from_dict(d: dict, kind: str | None = None):
    """The stored model arguments of a checkpoint or bundle: ``RADTArgs`` for ``kind`` (default:
    ``d["kind"]``) ``radt`` (a DT with a retrieval memory), else ``ModelArgs``."""
    if (kind or d.get("kind")) == "radt":
        from icrl_ros.families.radt.model import RADTArgs

        return RADTArgs.from_dict(d)
    return ModelArgs.from_dict(d)


def load_checkpoint(path: str | Path, map_location: str = "cpu") -> tuple[ICLPolicy, dict]:
    """Rebuild the policy (ReLIC / Memo / HCAM, or RA-DT for ``kind: radt``) from a checkpoint;
    returns (policy in eval mode, the whole blob)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"checkpoint {path}: no such file")
    blob = torch.load(path, map_location=map_location, weights_only=False)
    if not isinstance(blob, dict) or blob.get("format") != FORMAT:
        raise ValueError(f"checkpoint {path}: field 'format' is not {FORMAT!r}")
    from icrl_ros.models.stepping import build_policy

    policy = build_policy(model_args_from_dict(blob["model_args"]))
    policy.load_state_dict(blob["state_dict"])
    return policy.eval(), blob
