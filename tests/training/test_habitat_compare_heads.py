"""habitat_compare.py heads: the frozen label heads on two frame sets of the same probe poses."""

import json

import numpy as np

from icrl_ros.sim.house_layout import GOAL_NAMES
from icrl_ros.experiments.habitat_compare import main


def test_identical_frames_agree_everywhere_and_differing_frames_do_not(tmp_path):
    rng = np.random.default_rng(0)
    frames = rng.integers(0, 256, (12, 64, 64, 3), dtype=np.uint8)
    probes = [{"goal": GOAL_NAMES[i % len(GOAL_NAMES)], "success": bool(i % 2)} for i in range(12)]
    (tmp_path / "mw.json").write_text(json.dumps({"probes": probes}))
    np.savez_compressed(tmp_path / "mw.npz", probe_rgb=frames)
    np.savez_compressed(tmp_path / "hab.npz", probe_rgb=frames)
    main(["heads", "--pairs", str(tmp_path / "mw.json"), "--habitat", str(tmp_path / "hab.json"),
          "--out", str(tmp_path / "same.json")])
    same = json.loads((tmp_path / "same.json").read_text())
    assert same["probes"] == 12 and same["goal_visible_in_reach"] == 6
    assert same["goal_decision_agree"] == 1.0 and same["most_likely_category_agree"] == 1.0
    assert same["mean_abs_p_goal_diff"] == 0.0 and same["miniworld"] == same["habitat"]
    np.savez_compressed(tmp_path / "hab.npz", probe_rgb=255 - frames)  # a very different renderer
    main(["heads", "--pairs", str(tmp_path / "mw.json"), "--habitat", str(tmp_path / "hab.json"),
          "--out", str(tmp_path / "other.json")])
    assert json.loads((tmp_path / "other.json").read_text())["mean_abs_p_goal_diff"] > 0.0
