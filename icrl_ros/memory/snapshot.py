"""Memory snapshots on disk: one ``.npz`` file, written atomically, validated on read.

Layout: one array per memory tensor (``k``, ``v``, ``valid``, ``episode``) plus
``__meta__`` (UTF-8 JSON): format, memory config, counters, a SHA-256 per tensor and the
caller's metadata (model hash, trial id, step counts, runner state). No pickle anywhere
(``allow_pickle=False``), so a snapshot from an untrusted disk cannot run code.

Writes go to a temp file in the same directory, are fsync'ed, then renamed over the
target: a crash leaves the previous snapshot or the new one, never half of either.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import zipfile
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

FORMAT = "icrl_ros.memory_snapshot/1"
META_KEY = "__meta__"


class SnapshotError(ValueError):
    """A snapshot file cannot be restored; the message names the file and the field."""


def _to_numpy(t: Tensor) -> np.ndarray:
    t = t.detach().cpu().contiguous()
    if t.dtype == torch.bfloat16:  # numpy has no bfloat16: store the raw bits
        t = t.view(torch.int16)
    return t.numpy()


def _digest(a: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(a).view(np.uint8).reshape(-1)).hexdigest()


def write_snapshot(path: str | Path, tensors: dict[str, Tensor], meta: dict) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    arrays = {name: _to_numpy(t) for name, t in tensors.items()}
    meta = {"format": FORMAT, **meta,
            "tensors": {name: {"dtype": str(t.dtype).replace("torch.", ""), "shape": list(t.shape),
                               "sha256": _digest(arrays[name])} for name, t in tensors.items()}}
    arrays[META_KEY] = np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            np.savez(f, **arrays)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    try:  # make the rename itself durable
        dfd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    except OSError:
        pass


def read_snapshot(path: str | Path) -> tuple[dict[str, np.ndarray], dict]:
    """All arrays and the metadata of a snapshot; :class:`SnapshotError` if unreadable."""
    path = Path(path)
    if not path.is_file():
        raise SnapshotError(f"snapshot {path}: no such file")
    try:
        with np.load(path, allow_pickle=False) as z:
            names = list(z.files)
            if META_KEY not in names:
                raise SnapshotError(f"snapshot {path}: field '{META_KEY}' is missing (not an icrl_ros snapshot)")
            arrays = {}
            for name in names:
                try:
                    arrays[name] = z[name]
                except (ValueError, OSError, EOFError, zipfile.BadZipFile) as e:
                    raise SnapshotError(f"snapshot {path}: field 'tensors.{name}' is unreadable ({e})") from e
    except SnapshotError:
        raise
    except (ValueError, OSError, EOFError, zipfile.BadZipFile) as e:
        raise SnapshotError(f"snapshot {path}: not a readable .npz archive ({e})") from e
    try:
        meta = json.loads(arrays.pop(META_KEY).tobytes().decode())
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise SnapshotError(f"snapshot {path}: field '{META_KEY}' is not valid JSON ({e})") from e
    if not isinstance(meta, dict):
        raise SnapshotError(f"snapshot {path}: field '{META_KEY}' is not a mapping")
    return arrays, meta


def validate_snapshot(path: str | Path, arrays: dict[str, np.ndarray], meta: dict, memory, expect: dict,
                      extra: dict[str, Tensor] | None = None) -> dict[str, Tensor]:
    """Check a read snapshot against ``memory`` (and the ``extra`` tensors kept beside it) and
    ``expect``; returns the tensors to load.

    Nothing is written to ``memory`` here, so a refusal leaves it untouched.
    """
    def refuse(field: str, msg: str) -> SnapshotError:
        return SnapshotError(f"snapshot {path}: field '{field}' {msg}")

    if meta.get("format") != FORMAT:
        raise refuse("format", f"is {meta.get('format')!r}, expected {FORMAT!r}")
    for key, want in expect.items():
        if meta.get(key) != want:
            raise refuse(key, f"is {meta.get(key)!r}, this runner has {want!r}")
    saved = meta.get("memory")
    if not isinstance(saved, dict):
        raise refuse("memory", "is missing")
    for key, want in memory.config().items():
        if saved.get(key) != want:
            raise refuse(f"memory.{key}", f"is {saved.get(key)!r}, this memory has {want!r}")
    counters = meta.get("counters")
    if not isinstance(counters, dict):
        raise refuse("counters", "is missing")
    bad = memory._check_counters(counters)
    if bad is not None:
        raise refuse(f"counters.{bad}", f"is {counters.get(bad)!r}, expected a valid count")
    specs = meta.get("tensors", {})
    out = {}
    for name, t in {**memory.tensors(), **(extra or {})}.items():
        if name not in arrays or name not in specs:
            raise refuse(f"tensors.{name}", "is missing")
        a, spec = arrays[name], specs[name]
        if list(a.shape) != list(t.shape):
            raise refuse(f"tensors.{name}", f"has shape {list(a.shape)}, this memory has {list(t.shape)}")
        dtype = str(t.dtype).replace("torch.", "")
        if spec.get("dtype") != dtype:
            raise refuse(f"tensors.{name}", f"has dtype {spec.get('dtype')!r}, this memory has {dtype!r}")
        if spec.get("sha256") != _digest(a):
            raise refuse(f"tensors.{name}", "fails its SHA-256 check (file corrupt)")
        x = torch.from_numpy(np.array(a))
        out[name] = x.view(torch.bfloat16) if t.dtype == torch.bfloat16 else x
        if out[name].dtype != t.dtype:
            raise refuse(f"tensors.{name}", f"stores {out[name].dtype}, this memory has {t.dtype}")
    return out
