"""A short `make demo` (training/demo_ros.py): bridge and agent processes over loopback DDS, the
shipped default bundle (it reads the bridge's laser scan), 2 episodes of at most 20 steps; the table, the plots and
the GIF."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np

from tests.nodes.ros_support import REPO, assert_loopback_env, require_house_bundle, require_ros

require_ros()


def test_short_demo_runs_two_episodes_and_writes_its_pictures(tmp_path) -> None:
    bundle = require_house_bundle()
    assert_loopback_env()
    out = tmp_path / "demo_out"
    env = dict(os.environ, OMP_NUM_THREADS="1")
    proc = subprocess.run(
        [sys.executable, "training/demo_ros.py", "--bundle", bundle, "--episodes", "2", "--max-steps", "20",
         "--out", str(out), "--timeout", "150", "--domain-id", os.environ["ROS_DOMAIN_ID"]],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=200)
    text = proc.stdout + proc.stderr
    assert proc.returncode == 0, text[-4000:]
    assert "DDS on loopback only" in text and "episode 2/2 ended" in text
    assert "act mean" in text and "mem tokens" in text  # the per-episode table

    summary = json.loads((out / "episodes.json").read_text())
    rows = summary["episodes"]
    assert [r["episode"] for r in rows] == [0, 1] and summary["split"] == "test"
    for r in rows:
        assert 1 <= r["steps"] <= 20 and r["agent_steps"] == r["steps"]  # one action per bridge step
        assert 0.0 <= r["spl"] <= 1.0 and r["act_mean_ms"] > 0 and r["memory_bytes"] > 0
    # memory carries from the first episode into the second
    assert rows[1]["memory_tokens"] == rows[0]["memory_tokens"] + rows[1]["steps"]

    import matplotlib.image as mpimg
    from PIL import Image

    for name in ("icl_curve.png", "top_down.png"):
        img = mpimg.imread(out / name)
        assert img.ndim == 3 and img.shape[0] > 200 and img.shape[1] > 300, (name, img.shape)
        assert float(np.std(img[..., :3])) > 0.05, f"{name} looks blank"
    gif = Image.open(out / "camera.gif")
    assert gif.n_frames == sum(r["steps"] for r in rows)  # one camera frame per step
    assert gif.size[0] >= 64 * 3
    assert (out / "logs" / "agent.log").stat().st_size > 0 and (out / "logs" / "bridge.log").stat().st_size > 0
