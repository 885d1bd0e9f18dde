"""Our generated houses as Habitat scenes: a .glb stage, its navmesh and an ObjectNav episode set.

``export_houses(seeds, out)`` writes, for each house seed of ``house_layout.generate_layout``::

    out/scene_datasets/icrl_houses/house_<seed>.glb       the stage (rooms, walls with door gaps,
                                                           ceilings, pictures, objects)
    out/scene_datasets/icrl_houses/house_<seed>.navmesh   built by habitat-sim's Recast at the house
                                                           agent's radius from the house's collision
                                                           model (walls, objects as footprint discs)
    out/datasets/objectnav/icrl_houses/<split>/<split>.json.gz   ObjectNav-v1 episodes

so ``icrl_ros/HabitatExtObjNav-v0`` (or any habitat-lab ObjectNav code) runs our houses through the
same path as HM3D: ``data_path`` and ``scenes_dir`` point at these folders instead.

The stage is ``habitat_mesh.write_glb``'s (the MiniWorld house's geometry, textures and lighting).
Coordinates are MiniWorld's (x east, y up, z south), which are also habitat's world axes: a yaw of
the house is a habitat agent rotation of ``yaw - pi / 2`` about +y (``habitat_env.rotation_for_yaw``).

ObjectNav goals: one ``ObjectGoal`` per instance, its ``position`` the object's centre (half its
height up), ``radius`` its footprint radius, and ``view_points`` the navigable points (a 0.2 m
lattice) from which stopping can succeed in the MiniWorld house: free for the agent, within
``success_distance`` of the object's surface, with a sight line past every wall
(``NavGrid.goal_mask``). habitat-lab's ``distance_to_goal`` (geodesic to the nearest view point) is
then the MiniWorld reward's distance. Episodes are drawn with the MiniWorld task's rules (goal
categories with at most ``goal_instances`` instances, starts ``min_start_distance`` geodesic metres
away in a room without the goal: ``HouseEnv``'s own start-room rule), for ``episodes_per_house``
episodes per house.

Where it runs: the mesh needs only numpy and trimesh, the navmesh and the snapping of starts and view
points need habitat-sim, so the export runs where habitat-sim is (inside the Habitat chroot:
``python -m icrl_ros.sim.habitat_scene --seeds 3 7 --out DIR``). No torch anywhere on this path.
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import tempfile
from pathlib import Path
from types import SimpleNamespace

import numpy as np

from icrl_ros.sim.habitat_mesh import LOOKS, write_glb
from icrl_ros.sim.house import HouseEnv  # numpy and gymnasium only at import (no GL)
from icrl_ros.sim.house_layout import CATEGORIES, GOAL_NAMES, HouseLayout, generate_layout, house_split
from icrl_ros.sim.house_nav import NavGrid

SCENE_DATASET = "icrl_houses"
SCENE_VERSION = 6  # bumped when the exported files change (2: MiniWorld's lighting baked in, mesh materials;
# 3: objects lit per vertex as MiniWorld draws them: vertex colours, mesh normals, every mesh material;
# the navmesh on the floor, CELL_HEIGHT; 4: the navmesh from the collision model, objects as discs;
# 5: 2.5 cm navmesh voxels, CELL_SIZE; 6: pictures as MiniWorld's framed boxes, 5 cm deep, black sides)
AGENT_RADIUS = HouseEnv.agent_radius
AGENT_HEIGHT = 1.0  # navmesh clearance only: the camera is a sensor at CAMERA_HEIGHT
MAX_CLIMB = 0.1  # nothing in a house is a step; keeps object tops off the navmesh
# Recast's voxel height. The navmesh (and so the agent, whose camera sensor is CAMERA_HEIGHT over it) lies
# on top of the floor's voxels, one cell up: at habitat-sim's default 0.2 m the camera stood 1.1 m over the
# floor, not the house's 0.9 m, and objects showed lower and smaller than MiniWorld draws them (the frozen
# label heads found the goal in 0.25 of the Habitat probe frames, 0.78 of MiniWorld's). 4 mm is about the
# least that builds (0.001 m fails: the clearance, AGENT_HEIGHT / CELL_HEIGHT cells, overflows Recast).
CELL_HEIGHT = 0.004
# Recast's voxel side. Walls and objects rasterise conservatively (a touched voxel is blocked) and the
# agent's radius erodes in whole voxels, so the navmesh edge lies up to a voxel inside the house's free
# space: at habitat-sim's 5 cm, random walks were blocked in Habitat on 3% of the forward steps the house
# allowed.
CELL_SIZE = 0.025
VIEW_POINT_SPACING = 0.2  # metres between view points (every other NavGrid cell)
def scene_name(house_seed: int) -> str:
    return f"house_{int(house_seed)}"


# -- navmesh, view points and episodes (habitat-sim) -------------------------------------------------
def navmesh_settings(habitat_sim, agent_radius: float = AGENT_RADIUS):
    ns = habitat_sim.NavMeshSettings()
    ns.set_defaults()
    ns.agent_radius = float(agent_radius)
    ns.agent_height = AGENT_HEIGHT
    ns.agent_max_climb = MAX_CLIMB
    ns.cell_height = CELL_HEIGHT
    ns.cell_size = CELL_SIZE
    return ns


def open_stage(glb: str | Path):
    """A bare habitat-sim Simulator on a stage, for navmesh work."""
    from icrl_ros.sim.habitat_compat import import_habitat_sim

    habitat_sim = import_habitat_sim()

    sim_cfg = habitat_sim.SimulatorConfiguration()
    sim_cfg.scene_id = str(glb)
    sim_cfg.enable_physics = False
    # habitat-sim keeps the stage's geometry (which the navmesh is built from) only when it makes a
    # renderer, and it makes one only for an agent with a sensor: one 8x8 camera
    cam = habitat_sim.CameraSensorSpec()
    cam.uuid, cam.resolution = "rgb", [8, 8]
    agent = habitat_sim.agent.AgentConfiguration()
    agent.sensor_specifications = [cam]
    return habitat_sim.Simulator(habitat_sim.Configuration(sim_cfg, [agent]))


def build_navmesh(sim, path: str | Path, agent_radius: float = AGENT_RADIUS) -> float:
    """Recompute the stage's navmesh for the house agent and save it; returns the navigable area (m^2)."""
    import habitat_sim

    from icrl_ros.sim.habitat_compat import recompute_navmesh

    if not recompute_navmesh(sim, navmesh_settings(habitat_sim, agent_radius)):
        raise RuntimeError(f"habitat-sim could not build a navmesh for {path}")
    sim.pathfinder.save_nav_mesh(str(path))
    return float(sim.pathfinder.navigable_area)


def _on_navmesh(pathfinder, x: float, z: float, tol: float = 0.05) -> list[float] | None:
    """The navmesh point at floor point (x, z), or None when (x, z) is not navigable there."""
    p = np.asarray(pathfinder.snap_point(np.array([x, 0.0, z], np.float32)), np.float64)
    if not np.all(np.isfinite(p)) or math.hypot(p[0] - x, p[2] - z) > tol or abs(p[1]) > 0.3:
        return None
    return [float(x), float(p[1]), float(z)]


def goal_regions(layout: HouseLayout, nav: NavGrid, success_distance: float = 1.0) -> dict[int, np.ndarray]:
    """Per category present: the NavGrid cells where stopping can succeed (HouseEnv's goal masks)."""
    return {c: nav.goal_mask([o for o in layout.objects if o.category == c], success_distance)
            for c in layout.categories_present()}


def view_points(pathfinder, nav: NavGrid, instance, success_distance: float = 1.0) -> list[list[float]]:
    """Navigable points on a VIEW_POINT_SPACING lattice from which stopping near ``instance`` can
    succeed (free, within reach of its surface, sight line past every wall)."""
    mask = nav.goal_mask([instance], success_distance)
    step = max(int(round(VIEW_POINT_SPACING / nav.cell)), 1)
    lattice = np.zeros_like(mask)
    lattice[::step, ::step] = True
    out = []
    for i, j in np.argwhere(mask & lattice):
        p = _on_navmesh(pathfinder, float(nav.xs[j]), float(nav.zs[i]))
        if p is not None:
            out.append(p)
    return out


def goal_categories(layout: HouseLayout, regions: dict[int, np.ndarray], goal_instances: int = 1) -> tuple[int, ...]:
    """HouseEnv's goal categories: reachable, then those with the fewest instances (<= goal_instances)."""
    reachable = [c for c, m in regions.items() if m.any()]
    count = {c: sum(o.category == c for o in layout.objects) for c in reachable}
    if goal_instances:
        limit = max(goal_instances, min(count.values()))
        reachable = [c for c in reachable if count[c] <= limit]
    return tuple(reachable)


def sample_episodes(layout: HouseLayout, nav: NavGrid, pathfinder, n: int, rng: np.random.Generator,
                    goal_instances: int = 1, start_away: bool = True, min_start_distance: float = 3.0,
                    success_distance: float = 1.0) -> list[dict]:
    """``n`` episodes drawn with HouseEnv's rules; each a dict of start (x, z, yaw), goal category and
    the MiniWorld geodesic distance of the start (metres)."""
    regions = goal_regions(layout, nav, success_distance)
    cats = goal_categories(layout, regions, goal_instances)
    fields: dict[int, np.ndarray] = {}
    probe = SimpleNamespace(start_away=start_away, nav=nav, layout=layout)
    out = []
    while len(out) < n:
        goal = int(rng.choice(cats))
        if goal not in fields:
            fields[goal] = nav.distance_field(regions[goal])
        D = fields[goal]
        finite = np.isfinite(D)
        ok = np.argwhere(finite & (D >= min_start_distance) & HouseEnv._start_rooms(probe, goal))
        if len(ok) == 0:
            ok = np.argwhere(finite & (D >= min_start_distance))
        i, j = ok[int(rng.integers(len(ok)))]
        x = float(nav.xs[j] + rng.uniform(-0.5, 0.5) * nav.cell)
        z = float(nav.zs[i] + rng.uniform(-0.5, 0.5) * nav.cell)
        if nav.collides(x, z) or _on_navmesh(pathfinder, x, z) is None:
            continue  # HouseEnv retries too; here the start must also be on habitat's navmesh
        yaw = float(rng.uniform(-math.pi, math.pi))
        out.append({"x": x, "z": z, "yaw": yaw, "goal": goal, "geodesic": float(nav.geodesic(D, x, z))})
    return out


def _rotation_xyzw(yaw: float) -> list[float]:
    """habitat's start_rotation [x, y, z, w] for a house yaw (rotation of yaw - pi/2 about +y)."""
    half = (yaw - math.pi / 2) / 2
    return [0.0, math.sin(half), 0.0, math.cos(half)]


def house_episode_set(house_seed: int, scenes_dir: Path, episodes_per_house: int, rng: np.random.Generator,
                      look: str = "miniworld", **task) -> tuple[list[dict], dict[str, list[dict]], dict]:
    """Write one house's stage (drawn in ``look``, :data:`~icrl_ros.sim.habitat_mesh.LOOKS`) and navmesh under
    ``scenes_dir``; its ObjectNav episodes and goals (the same for every look)."""
    layout = generate_layout(house_seed)
    name = scene_name(house_seed)
    glb = write_glb(layout, scenes_dir / SCENE_DATASET / f"{name}.glb", look=look)
    # The navmesh comes from the house's collision model (walls and each object's footprint disc), not
    # from the drawn meshes: Recast's 5 cm voxels miss thin ones (a key, a medkit), which the agent then
    # walked through where HouseEnv blocks it. Built in a scratch folder, so the dataset holds one stage.
    with tempfile.TemporaryDirectory() as tmp:
        sim = open_stage(write_glb(layout, Path(tmp) / f"{name}_collision.glb", objects="discs"))
    try:
        area = build_navmesh(sim, glb.with_suffix(".navmesh"))
        nav = NavGrid(layout, AGENT_RADIUS)
        pf = sim.pathfinder
        goals: dict[str, list[dict]] = {}
        for c in layout.categories_present():
            entries = []
            for k, o in enumerate(layout.objects):
                if o.category != c:
                    continue
                vps = view_points(pf, nav, o, task.get("success_distance", 1.0))
                if not vps:
                    continue  # unreachable from the navmesh: not a goal (HouseEnv's goal mask is empty too)
                entries.append({
                    "object_id": str(k), "object_name": f"{o.cat.name}_{k}", "object_category": o.cat.name,
                    "position": [o.x, o.cat.height / 2, o.z], "radius": o.cat.radius,
                    "view_points": [{"agent_state": {"position": p, "rotation": [0.0, 0.0, 0.0, 1.0]}, "iou": None}
                                    for p in vps],
                })
            if entries:
                goals[f"{name}.glb_{CATEGORIES[c].name}"] = entries
        drawn = sample_episodes(layout, nav, pf, episodes_per_house, rng, **task)
        episodes = []
        for e in drawn:
            cat = CATEGORIES[e["goal"]].name
            if f"{name}.glb_{cat}" not in goals:
                continue
            start = _on_navmesh(pf, e["x"], e["z"])
            episodes.append({
                "episode_id": "", "scene_id": f"{SCENE_DATASET}/{name}.glb", "object_category": cat,
                "start_position": start, "start_rotation": _rotation_xyzw(e["yaw"]),
                "info": {"geodesic_distance": e["geodesic"], "house_seed": int(house_seed),
                         "start_yaw": e["yaw"]},
                "goals": [],
            })
        stats = {"house_seed": int(house_seed), "navigable_area_m2": area, "objects": len(layout.objects),
                 "view_points": sum(len(g["view_points"]) for v in goals.values() for g in v)}
        return episodes, goals, stats
    finally:
        sim.close()


def export_houses(seeds: list[int], out: str | Path, split: str = "val", episodes_per_house: int = 20,
                  seed: int = 0, look: str = "miniworld", **task) -> dict:
    """Export houses as Habitat scenes plus one ObjectNav-v1 episode file; returns paths and stats."""
    out = Path(out)
    scenes_dir = out / "scene_datasets"
    rng = np.random.default_rng(seed)
    episodes, goals, stats = [], {}, []
    for s in seeds:
        e, g, st = house_episode_set(int(s), scenes_dir, episodes_per_house, rng, look, **task)
        episodes += e
        goals.update(g)
        stats.append(st)
    for i, e in enumerate(episodes):
        e["episode_id"] = str(i)
    data_path = out / "datasets" / "objectnav" / SCENE_DATASET / split / f"{split}.json.gz"
    data_path.parent.mkdir(parents=True, exist_ok=True)
    ids = {name: i for i, name in enumerate(GOAL_NAMES)}  # observation goal index = our category index
    with gzip.open(data_path, "wt") as f:
        json.dump({"episodes": episodes, "goals_by_category": goals, "category_to_task_category_id": ids,
                   "category_to_scene_annotation_category_id": ids}, f)
    return {"data_path": str(out / "datasets" / "objectnav" / SCENE_DATASET / "{split}" / "{split}.json.gz"),
            "scenes_dir": str(scenes_dir), "split": split, "episodes": len(episodes), "look": look, "houses": stats}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", type=int, nargs="+", required=True, help="house seeds (generate_layout)")
    p.add_argument("--out", required=True, help="output folder (scene_datasets/ and datasets/ go under it)")
    p.add_argument("--split", default="val", help="name of the episode split file (default val)")
    p.add_argument("--episodes", type=int, default=20, help="episodes per house")
    p.add_argument("--seed", type=int, default=0, help="seed of the episode draws")
    p.add_argument("--look", default="miniworld", choices=sorted(LOOKS),
                   help="how the houses are drawn: miniworld (MiniWorld's textures and light) or unseen (textures "
                        "and a light no training house has)")
    a = p.parse_args(argv)
    info = export_houses(a.seeds, a.out, a.split, a.episodes, a.seed, look=a.look)
    info["house_splits"] = {s: house_split(s) for s in a.seeds}
    print(json.dumps(info, indent=1))


if __name__ == "__main__":
    main()
