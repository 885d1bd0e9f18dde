"""A bundle of the shipped house ReLIC with the laser-fed frontier memory (``model.house.frontier_from_scan``) and the
route over looked-at floor: new input projections at zero, so it acts as the shipped weights do on a new input."""

from __future__ import annotations

from pathlib import Path

import pytest

SHIPPED = Path(__file__).resolve().parents[2] / "checkpoints" / "house_relic.pt"


def export_laser_bundle(out: Path) -> Path:
    """Export it to ``out`` (skips the test where the shipped checkpoint is missing)."""
    if not SHIPPED.is_file():
        pytest.skip(f"{SHIPPED} is missing")
    from icrl_ros.models import load_checkpoint
    from icrl_ros.models.policy import ICLPolicy
    from icrl_ros.training.export import env_metadata, export_bundle

    base, blob = load_checkpoint(SHIPPED)
    policy = ICLPolicy(base.args.replace_section("house", route_memory=True, frontier_memory=True,
                                                  frontier_from_scan=True, route_over_looked=True))
    policy.load_state_dict(base.state_dict(), strict=False)
    return export_bundle(policy, out, config=blob["config"], env=env_metadata(blob["config"]["env"]["id"]))
