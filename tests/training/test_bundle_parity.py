"""Every shipped bundle, re-exported from its checkpoint by today's code, acts as the shipped one.

The shipped bundles' graphs were written by earlier exports; the control step, the heads graph and
the extensions (:mod:`icrl_ros.extensions`) have changed since. Re-exporting each checkpoint and
replaying the shipped bundle's recorded sample through both bundles (ONNX Runtime, PolicyRunner)
must give the same logits and values, and both must match the sample the shipped export recorded.
"""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from tests.nodes.ros_support import REPO, require_bundle

SHIPPED = ("house_relic_scan", "house_memo_scan", "house_relic", "house_memo")


def replay_sample(bundle_dir: str, sample: dict) -> tuple[np.ndarray, np.ndarray]:
    from icrl_ros.runtime.bundle import load_bundle
    from icrl_ros.runtime.engine import make_engine
    from icrl_ros.runtime.runner import PolicyRunner
    from icrl_ros.runtime.selfcheck import exact_memory, replay

    b = load_bundle(bundle_dir)
    mem = exact_memory(b, sample["episode_index"].shape[-1])
    runner = PolicyRunner(b, make_engine(b, "onnxruntime", "cpu"), mem)
    logits, values = replay(runner, {k: v for k, v in sample.items() if k not in ("logits", "values")})
    return np.asarray(logits), np.asarray(values)


@pytest.mark.slow  # one export per bundle (~20-60 s each); make test checks the runtime half through every shipped
@pytest.mark.parametrize("name", SHIPPED)  # bundle's own recorded sample (tests/nodes/test_shipped_bundle.py)
def test_reexported_bundle_gives_the_shipped_logits(name, tmp_path):
    check_parity(name, tmp_path)


def check_parity(name: str, tmp_path) -> None:
    shipped = require_bundle(name)
    ckpt = os.path.join(REPO, "checkpoints", f"{name}.pt")
    out = tmp_path / name
    r = subprocess.run([sys.executable, "training/export.py", ckpt, "--out", str(out)], cwd=REPO, capture_output=True,
                       text=True, env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    with np.load(os.path.join(shipped, "sample.npz")) as z:
        sample = {k: z[k] for k in z.files}
    old_logits, old_values = replay_sample(shipped, sample)
    new_logits, new_values = replay_sample(str(out), sample)
    assert np.abs(new_logits - old_logits).max() <= 1e-5 and np.abs(new_values - old_values).max() <= 1e-5
    assert np.abs(new_logits - sample["logits"].reshape(new_logits.shape)).max() <= 1e-4
