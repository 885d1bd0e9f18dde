"""The MiniWorld house and its Habitat export side by side: geodesic distance, success rule, frames/s.

Two halves, because the simulators live in two Pythons (MiniWorld in .venv, habitat-sim in the chroot
of ../shared/habitat); the JSON between them names every (house, start, goal) and pose:

    # 1. MiniWorld (host): HouseEnv's own episodes and probe poses near goal objects, its geodesic and
    #    success rule on each, and its frames/s
    .venv/bin/python experiments/habitat_compare.py miniworld --seeds 1 5 ... --out runs/habitat_compare/mw.json
    # 2. Habitat (chroot): export the same houses, replay every (start, goal) and pose in
    #    HabitatExtObjNavEnv (reset with options start / goal), compare, and time the env
    ../shared/habitat/setup.sh run /opt/hvenv/bin/python experiments/habitat_compare.py habitat \\
        --pairs runs/habitat_compare/mw.json --export /tmp/icrl_houses --out runs/habitat_compare/habitat.json
    # 3. host: a house checkpoint's frozen label heads on both halves' probe frames (same poses)
    .venv/bin/python experiments/habitat_compare.py heads --pairs runs/habitat_compare/mw.json \\
        --habitat runs/habitat_compare/habitat.json

Single process each, random actions (forward / left / right) for the frame rate, 64x64 RGB. The
motion model: the MiniWorld half also records random walks (``--walks`` per house, ``--walk-steps``
actions each) and the Habitat half replays them, open loop from the same start and one action at a
time from MiniWorld's own pose (forward distance, blocked moves, turn angle, the odometry read).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import time
from pathlib import Path

import numpy as np


def _steps_per_s(env, steps: int, rng: np.random.Generator, reset_kwargs: dict) -> float:
    env.reset(**reset_kwargs)
    t0 = time.perf_counter()
    for _ in range(steps):
        _, _, terminated, truncated, _ = env.step(int(rng.integers(1, 4)))
        if terminated or truncated:
            env.reset()
    return steps / (time.perf_counter() - t0)


def _free_poses(house_seed: int, n: int, rng: np.random.Generator) -> list[tuple[float, float, float]]:
    from icrl_ros.sim.house_layout import generate_layout
    from icrl_ros.sim.house_nav import NavGrid

    nav = NavGrid(generate_layout(house_seed))
    cells = np.argwhere(nav.free)[rng.integers(0, int(nav.free.sum()), n)]
    return [(float(nav.xs[j]), float(nav.zs[i]), float(rng.uniform(-math.pi, math.pi))) for i, j in cells]


def _frames_per_s(render, poses) -> float:
    """Frames/s of ``render(x, z, yaw)`` over the poses (the renderer alone, no env logic)."""
    render(*poses[0])
    t0 = time.perf_counter()
    for p in poses:
        render(*p)
    return len(poses) / (time.perf_counter() - t0)


def _random_walk(rng: np.random.Generator, n: int) -> list[int]:
    """Movement actions as a searching policy issues them: forward 60%, each turn 20%."""
    return [int(v) for v in rng.choice([1, 2, 3], size=n, p=[0.6, 0.2, 0.2])]


def _miniworld_walks(env, house_seed: int, n: int, steps: int, rng: np.random.Generator) -> list[dict]:
    """``n`` random walks of ``steps`` movement actions from fresh episode starts of ``env``'s
    house: after every action the world pose (x, z, yaw), the odometry the policy reads (house
    frame of the episode: the walk's start) and the distance moved."""
    from icrl_ros.sim.house_layout import GOAL_NAMES

    walks = []
    for _ in range(n):
        env.reset()
        w = {"house_seed": house_seed, "start": list(env.start_pose), "goal": GOAL_NAMES[env.goal],
             "actions": _random_walk(rng, steps), "pose": [], "odom": [], "moved": []}
        for act in w["actions"]:
            x0, z0 = env.x, env.z
            env.step(act)
            w["pose"].append([env.x, env.z, env.yaw])
            w["odom"].append([float(v) for v in env.pose_in("episode")])
            w["moved"].append(math.hypot(env.x - x0, env.z - z0))
        walks.append(w)
    return walks


def compare_walks(env, walks: list[dict]) -> dict:
    """Replay MiniWorld's walks in the Habitat env. Two ways: open loop from the same start (what a
    policy's odometry would drift to), and one action at a time from MiniWorld's own pose before it
    (the motion model alone, without compounding): forward distance, blocked moves, turn angle."""
    from icrl_ros.geometry import wrap_angle
    from icrl_ros.sim.habitat_env import rotation_for_yaw

    final_err, odom_err, first_apart = [], [], []
    fwd, turn_err, blocked = [], [], []  # per action from the same pose: (mw, habitat) forward moves, |turn error|
    for w in walks:
        env.reset(options={"house_seed": w["house_seed"], "start": w["start"], "goal": w["goal"], "new_trial": True})
        apart = None
        for t, act in enumerate(w["actions"]):
            env.step(act)
            x, z, _ = env._planar()
            err = math.hypot(x - w["pose"][t][0], z - w["pose"][t][1])
            if apart is None and err > 0.10:
                apart = t
            if apart is None:  # the odometry the policy reads (x forward, y left, yaw), while the poses agree
                d = np.asarray(env.pose_in("episode")) - np.asarray(w["odom"][t])
                d[2] = wrap_angle(d[2])
                odom_err.append(float(np.abs(d).max()))
        first_apart.append(len(w["actions"]) if apart is None else apart)
        final_err.append(err)
        env.reset(options={"house_seed": w["house_seed"], "start": w["start"], "goal": w["goal"], "new_trial": True})
        sim, y = env._env.sim, float(env._position()[1])
        before = [w["start"], *w["pose"][:-1]]
        for (x0, z0, yaw0), act, (x1, z1, yaw1), moved in zip(before, w["actions"], w["pose"], w["moved"]):
            sim.set_agent_state(np.array([x0, y, z0], np.float32), rotation_for_yaw(yaw0))
            env._read_state()
            env.step(act)
            hx, hz, hyaw = env._planar()
            if act == 1:
                fwd.append((moved, math.hypot(hx - x0, hz - z0)))
                blocked.append((moved < 0.24, math.hypot(hx - x0, hz - z0) < 0.24))
            else:
                turn_err.append(abs(wrap_angle(hyaw - yaw1)))
            if env._episode_over:
                env.reset(options={"house_seed": w["house_seed"], "start": w["start"], "goal": w["goal"]})
    f, b = np.array(fwd, np.float64), np.array(blocked, bool)
    return {
        "walks": len(walks), "steps_per_walk": len(walks[0]["actions"]) if walks else 0,
        "open_loop": {"final_position_error_m_median": float(np.median(final_err)),
                      "final_position_error_m_p90": float(np.percentile(final_err, 90)),
                      "first_step_apart_over_0.1m_median": float(np.median(first_apart)),
                      "walks_never_apart": int(sum(v == len(w["actions"]) for v, w in zip(first_apart, walks)))},
        "odometry_max_abs_diff_while_together": float(max(odom_err)) if odom_err else float("nan"),
        "per_action_from_the_same_pose": {
            "forward_actions": len(f), "forward_m_mean_miniworld": float(f[:, 0].mean()),
            "forward_m_mean_habitat": float(f[:, 1].mean()),
            "forward_abs_diff_m_median": float(np.median(np.abs(f[:, 0] - f[:, 1]))),
            "forward_abs_diff_over_5cm": int((np.abs(f[:, 0] - f[:, 1]) > 0.05).sum()),
            "blocked_miniworld": int(b[:, 0].sum()), "blocked_habitat": int(b[:, 1].sum()),
            "blocked_both": int((b[:, 0] & b[:, 1]).sum()),
            "turn_actions": len(turn_err), "turn_abs_error_deg_max": float(np.degrees(max(turn_err))) if turn_err else 0.0},
    }


def miniworld_side(a: argparse.Namespace) -> None:
    from icrl_ros.sim.house import HouseEnv
    from icrl_ros.sim.house_layout import GOAL_NAMES, house_split

    rng = np.random.default_rng(a.seed)
    pairs, probes, fps, render_fps, frames, walks = [], [], {}, {}, [], []
    for s in a.seeds:
        env = HouseEnv(split=house_split(s), house_seed=s, image_size=64)
        for k in range(a.episodes):
            _, info = env.reset(seed=a.seed + k) if k == 0 else env.reset()
            pairs.append({"house_seed": s, "start": list(env.start_pose), "goal": GOAL_NAMES[env.goal],
                          "geodesic": info["geodesic_distance"]})
            # probe poses for the success rule: near a goal instance (0.3-1.6 m from its centre), any yaw
            # half of the time, roughly facing it the other half, on free floor
            targets = env.target_instances()
            for _ in range(a.probes):
                o = targets[int(rng.integers(len(targets)))]
                for _ in range(100):
                    r, th = rng.uniform(0.3, 1.0 + o.cat.radius + 0.6), rng.uniform(-math.pi, math.pi)
                    x, z = o.x + r * math.cos(th), o.z + r * math.sin(th)
                    if not env.nav.collides(x, z) and env.nav.free[env.nav.index(x, z)]:
                        break
                else:
                    continue
                face = math.atan2(-(o.z - z), o.x - x)
                yaw = face + rng.uniform(-0.5, 0.5) if rng.random() < 0.5 else rng.uniform(-math.pi, math.pi)
                env.x, env.z, env.yaw = x, z, (yaw + math.pi) % (2 * math.pi) - math.pi
                probes.append({"house_seed": s, "pose": [env.x, env.z, env.yaw], "goal": GOAL_NAMES[env.goal],
                               "success": env.target_visible_in_reach()})
                frames.append(env.observe()["rgb"])
        walks.extend(_miniworld_walks(env, s, a.walks, a.walk_steps, rng))
        fps[str(s)] = _steps_per_s(env, a.steps, rng, {})
        render_fps[str(s)] = _frames_per_s(env._renderer.render, _free_poses(s, a.steps, rng))
        env.close()
    out = {"side": "miniworld", "seeds": a.seeds, "pairs": pairs, "probes": probes, "walks": walks, "steps_per_s": fps,
           "render_frames_per_s": render_fps, "machine": platform.node(), "cpus": os.cpu_count(),
           "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(out, indent=1))
    np.savez_compressed(Path(a.out).with_suffix(".npz"), probe_rgb=np.stack(frames))  # (P, 64, 64, 3)
    print(f"MiniWorld: {len(pairs)} (start, goal) pairs, {len(probes)} probe poses "
          f"({sum(p['success'] for p in probes)} succeed); steps/s per house {fps}; render frames/s {render_fps}")


def habitat_side(a: argparse.Namespace) -> None:
    from icrl_ros.sim.habitat_env import HabitatExtObjNavEnv, rotation_for_yaw
    from icrl_ros.sim.habitat_scene import export_houses

    mw = json.loads(Path(a.pairs).read_text())
    t0 = time.perf_counter()
    export_houses(mw["seeds"], a.export, episodes_per_house=4)
    export_s = time.perf_counter() - t0
    env = HabitatExtObjNavEnv.for_houses(a.export, image_size=64, scene_navmesh=not a.recomputed_navmesh)
    geo = []
    for p in mw["pairs"]:
        _, info = env.reset(options={"house_seed": p["house_seed"], "start": p["start"], "goal": p["goal"]})
        geo.append((p["geodesic"], info["geodesic_distance"]))
    agree = []
    frames = []
    for p in mw["probes"]:
        obs, _ = env.reset(options={"house_seed": p["house_seed"], "start": p["pose"], "goal": p["goal"]})
        frames.append(obs["rgb"])
        _, _, _, _, info = env.step(0)
        agree.append((bool(p["success"]), bool(info["success"])))
    walks = compare_walks(env, mw.get("walks", []))
    rng = np.random.default_rng(0)
    fps = {str(s): _steps_per_s(env, a.steps, rng, {"options": {"house_seed": s}}) for s in mw["seeds"]}
    render_fps, area = {}, {}
    for s in mw["seeds"]:  # habitat-sim alone: set the agent, render RGB + depth (what the env's camera is)
        env.reset(options={"house_seed": s})
        area[str(s)] = float(env._env.sim.pathfinder.navigable_area)
        sim, y = env._env.sim, float(env._position()[1])

        def render(x, z, yaw, sim=sim, y=y):
            sim.set_agent_state(np.array([x, y, z], np.float32), rotation_for_yaw(yaw))
            return sim.get_sensor_observations()

        render_fps[str(s)] = _frames_per_s(render, _free_poses(s, a.steps, rng))
    env.close()
    g = np.array(geo, np.float64)
    finite = np.isfinite(g).all(1)
    d = g[finite, 1] - g[finite, 0]
    rel = np.abs(d) / np.maximum(g[finite, 0], 1e-9)
    tol = np.abs(d) <= a.tol_m + a.tol_rel * g[finite, 0]
    s = np.array(agree, bool).reshape(-1, 2)
    # the camera images at the same poses: how far apart the two renderers' pictures are
    mw_rgb = np.load(Path(a.pairs).with_suffix(".npz"))["probe_rgb"].astype(np.float64)
    hab_rgb = np.stack(frames).astype(np.float64)
    image = {"mean_abs_diff_0_255": float(np.abs(hab_rgb - mw_rgb).mean()),
             "mean_brightness_miniworld": float(mw_rgb.mean()), "mean_brightness_habitat": float(hab_rgb.mean()),
             # a frame of one flat colour (a wall filling the view) has no correlation: left out
             "per_image_correlation_median": float(np.median([np.corrcoef(h.ravel(), m.ravel())[0, 1]
                                                              for h, m in zip(hab_rgb, mw_rgb)
                                                              if h.std() > 0 and m.std() > 0]))}
    res = {
        "pairs": len(geo), "finite_both": int(finite.sum()),
        "habitat_minus_miniworld_m": {"mean": float(d.mean()), "median": float(np.median(d)),
                                      "p5": float(np.percentile(d, 5)), "p95": float(np.percentile(d, 95)),
                                      "max_abs": float(np.abs(d).max())},
        "abs_rel_error": {"median": float(np.median(rel)), "p95": float(np.percentile(rel, 95))},
        "tolerance": f"|habitat - miniworld| <= {a.tol_m} m + {a.tol_rel:.0%} of the MiniWorld distance",
        "within_tolerance": int(tol.sum()),
        "probes": len(s), "success_rule_agree": int((s[:, 0] == s[:, 1]).sum()),
        "success_both": int((s[:, 0] & s[:, 1]).sum()), "miniworld_only": int((s[:, 0] & ~s[:, 1]).sum()),
        "habitat_only": int((~s[:, 0] & s[:, 1]).sum()), "images_at_probe_poses": image,
        "habitat_steps_per_s": fps, "miniworld_steps_per_s": mw["steps_per_s"],
        "habitat_sim_render_rgb_depth_per_s": render_fps, "miniworld_render_rgb_per_s": mw["render_frames_per_s"],
        "walks": walks, "navmesh": "recomputed by habitat-sim" if a.recomputed_navmesh else "exported",
        "navigable_area_m2": area, "export_s": export_s,
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps({"result": res, "geodesic_pairs": geo, "success_pairs": agree}, indent=1))
    np.savez_compressed(Path(a.out).with_suffix(".npz"), probe_rgb=hab_rgb.astype(np.uint8))  # for `heads`
    print(json.dumps(res, indent=1))


def heads_side(a: argparse.Namespace) -> None:
    """Host, with torch: the frozen label heads of a house checkpoint on both simulators' probe
    frames (same poses). Does what the policy sees of its goal survive the change of renderer?"""
    import torch

    from icrl_ros.models import load_checkpoint
    from icrl_ros.sim.house_layout import GOAL_NAMES

    mw = json.loads(Path(a.pairs).read_text())
    frames = {"miniworld": np.load(Path(a.pairs).with_suffix(".npz"))["probe_rgb"],
              "habitat": np.load(Path(a.habitat).with_suffix(".npz"))["probe_rgb"]}
    enc = load_checkpoint(a.checkpoint)[0].encoder
    if getattr(enc, "heads", None) is None:
        raise SystemExit(f"{a.checkpoint}: no frozen label heads (a house model with visual_encoder: features)")
    goal = torch.tensor([GOAL_NAMES.index(p["goal"]) for p in mw["probes"]])
    visible = np.array([p["success"] for p in mw["probes"]], bool)  # goal in reach and in view (MiniWorld's rule)
    p_goal, top = {}, {}
    with torch.no_grad():
        for sim, rgb in frames.items():
            f = enc.features(torch.as_tensor(rgb)).float()
            p, _, _ = enc.heads.object_estimates(f, torch.zeros(len(f), 3))
            p_goal[sim] = p.gather(1, goal[:, None])[:, 0].numpy()
            top[sim] = p.argmax(1).numpy()
    res = {"probes": len(visible), "goal_visible_in_reach": int(visible.sum()), "checkpoint": a.checkpoint}
    for sim in frames:
        res[sim] = {"p_goal_median_visible": float(np.median(p_goal[sim][visible])),
                    "p_goal_median_not_visible": float(np.median(p_goal[sim][~visible])),
                    "recall_p_gt_0.5": float((p_goal[sim][visible] > 0.5).mean()),
                    "false_pos_p_gt_0.5": float((p_goal[sim][~visible] > 0.5).mean())}
    res["goal_decision_agree"] = float(((p_goal["miniworld"] > 0.5) == (p_goal["habitat"] > 0.5)).mean())
    res["most_likely_category_agree"] = float((top["miniworld"] == top["habitat"]).mean())
    res["mean_abs_p_goal_diff"] = float(np.abs(p_goal["miniworld"] - p_goal["habitat"]).mean())
    if a.out:
        Path(a.out).write_text(json.dumps(res, indent=1))
    print(json.dumps(res, indent=1))


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="side", required=True)
    m = sub.add_parser("miniworld", help="host half: HouseEnv episodes, probes, frames/s")
    m.add_argument("--seeds", type=int, nargs="+", required=True)
    m.add_argument("--episodes", type=int, default=25, help="(start, goal) pairs per house")
    m.add_argument("--probes", type=int, default=2, help="success-rule probe poses per episode")
    m.add_argument("--steps", type=int, default=500, help="random steps timed per house")
    m.add_argument("--seed", type=int, default=0)
    m.add_argument("--walks", type=int, default=4, help="random walks per house, replayed in Habitat action for action")
    m.add_argument("--walk-steps", type=int, default=100, help="movement actions per walk")
    m.add_argument("--out", required=True)
    h = sub.add_parser("habitat", help="chroot half: export, replay, compare, frames/s")
    h.add_argument("--pairs", required=True, help="the miniworld half's JSON")
    h.add_argument("--export", required=True, help="folder for the exported scenes and episodes")
    h.add_argument("--steps", type=int, default=500)
    h.add_argument("--recomputed-navmesh", action="store_true",
                   help="run on the navmesh habitat-sim recomputes from the drawn meshes (what the env did "
                        "before it kept the exported one), for a before / after comparison")
    h.add_argument("--tol-m", type=float, default=0.25)
    h.add_argument("--tol-rel", type=float, default=0.05)
    h.add_argument("--out", required=True)
    e = sub.add_parser("heads", help="host half after both: a checkpoint's frozen label heads on both probe frame sets")
    e.add_argument("--pairs", required=True, help="the miniworld half's JSON")
    e.add_argument("--habitat", required=True, help="the habitat half's JSON")
    e.add_argument("--checkpoint", default="checkpoints/house_memo.pt", help="a house checkpoint with frozen heads")
    e.add_argument("--out", help="JSON of the result")
    a = p.parse_args(argv)
    {"miniworld": miniworld_side, "habitat": habitat_side, "heads": heads_side}[a.side](a)


if __name__ == "__main__":
    main()
