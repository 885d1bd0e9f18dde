"""Small randomly initialised *image* policies (house observation: rgb + odom + goal, no
reward) exported into bundles, for the runtime and ROS node tests. Goal and action names
are those of the node tests' image env (``tests/nodes/fixture_env.py``)."""

from __future__ import annotations

from pathlib import Path

import torch

GOALS = ["chair", "table", "sofa"]
ENV = {"goal_names": GOALS, "action_names": ["stop", "forward", "turn_left", "turn_right"], "forward_m": 0.25,
       "turn_deg": 30.0}
IMAGE = 32


def image_policy(kind: str, max_episode_steps: int = 40):
    """An ``hcam`` or ``radt`` policy on 32x32 images, 3 goals, 4 actions, use_reward false."""
    torch.manual_seed(0)
    common = dict(n_obs=1, n_actions=4, max_episode_steps=max_episode_steps, n_goals=len(GOALS), use_reward=False,
                  image_size=IMAGE, obs_type="image", d_model=32, n_layers=2, n_heads=4, d_mlp=64)
    if kind == "radt":
        from icrl_ros.families.radt.model import RADTArgs, RADTPolicy

        return RADTPolicy(RADTArgs(**common, context=6, key_dim=64)).eval()
    from icrl_ros.families.hcam.config import HCAMArgs
    from icrl_ros.families.hcam.model import HCAMPolicy

    return HCAMPolicy(HCAMArgs(**common, hcam_chunk=4, hcam_top_k=2, sink="kv0")).eval()


def export_image_bundle(kind: str, out: str | Path, max_episode_steps: int = 40) -> Path:
    from icrl_ros.training.export import export_bundle

    return export_bundle(image_policy(kind, max_episode_steps), out, env=ENV)
