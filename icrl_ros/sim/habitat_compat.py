"""The one place where habitat-sim / habitat-lab 0.2.x and 0.3.x differ for icrl_ros.

0.2.2 (habitat-sim) + 0.2.4 (habitat-lab) is what runs here (``../shared/habitat``); 0.3.x is what a
conda or Habitat-docker install gives. What icrl_ros uses differs in:

* ``Simulator.recompute_navmesh``: 0.2.x takes ``include_static_objects`` as an argument; 0.3.x
  moved it into ``NavMeshSettings`` and takes two arguments.
* Nothing else in the files: 0.2.2 reads a plain .glb stage (no scene dataset config) Z-up, so
  ``habitat_mesh`` writes Z-up files; 0.3 does the same by default (a habitat-sim maintainer in
  facebookresearch/habitat-sim issue 2429, 2024: a Z-up glb "will load into Habitat correctly by
  default"; not run here, no 0.3 on this machine).

Everything else icrl_ros calls (``habitat.get_config`` with hydra overrides under ``habitat.*``,
``habitat.Env``, its ``episode_iterator``, ``get_metrics``, the ObjectNav-v1 dataset reader,
``pathfinder.snap_point / try_step / find_path``, agent states with numpy-quaternion rotations) has
the same spelling in both.
"""

from __future__ import annotations

import os


def import_habitat_sim():
    """habitat_sim, its C++ and magnum logging quietened unless the caller set them (a line per
    scene load otherwise)."""
    os.environ.setdefault("HABITAT_SIM_LOG", "quiet")
    os.environ.setdefault("MAGNUM_LOG", "quiet")
    import habitat_sim

    return habitat_sim


def versions() -> dict[str, str]:
    """Installed habitat-sim and habitat-lab versions."""
    import habitat
    import habitat_sim

    return {"habitat_sim": str(habitat_sim.__version__), "habitat_lab": str(getattr(habitat, "__version__", "?"))}


def recompute_navmesh(sim, settings) -> bool:
    """Rebuild ``sim.pathfinder`` from the stage alone (no objects), in either API."""
    if hasattr(settings, "include_static_objects"):  # 0.3.x
        settings.include_static_objects = False
        return bool(sim.recompute_navmesh(sim.pathfinder, settings))
    return bool(sim.recompute_navmesh(sim.pathfinder, settings, include_static_objects=False))  # 0.2.x
