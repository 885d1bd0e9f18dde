"""Benchmark: the in-context house teacher beside its ceiling and its floor.

    python experiments/house_teacher_curves.py --trials 100 --episodes 20 --out docs/results/house_teacher
    python experiments/house_teacher_curves.py --task old ...      # the earlier task defaults

Runs three agents on the same held-out houses, starts and goals (the env's episode stream is
seeded per trial, and none of the agents draws random numbers):

* ``oracle``: the privileged shortest-path follower (knows the map and every object);
* ``teacher``: :class:`~icrl_ros.sim.house_teacher.HouseTeacher` with the trial's memory;
* ``wiped``: the same teacher with its memory wiped at every episode start;
* ``seeing`` / ``seeing_wiped`` (with ``--encoder``): the same search on a student's perception
  (:class:`~icrl_ros.sim.house_teacher.PerceivingTeacher`): recognition, sighting positions and the
  stop from a frozen encoder's label heads on the camera image, with and without the trial's memory.
  What separates it from ``teacher`` is perception; what separates a student from it is the policy.
* ``inputs`` / ``inputs_wiped`` (with ``--encoder``): a scripted searcher on a student's own inputs
  (:class:`~icrl_ros.house.input_searcher.InputSearcher`): the runtime's route and frontier
  memories fed from the same heads, no ray casting, no map of the house. Beside ``seeing`` it says what the
  teacher's privileged floor map is worth; beside a student on those inputs, what the learnt policy adds.

``--census`` also says, per episode of a perceiving agent, where it ended (:data:`CENSUS`: found, stopped wrongly,
never saw the goal, saw it without its heads calling it, called it without reaching it, reached it without stopping).

Each trial is one house for ``--episodes`` episodes (capped at ``--max-steps`` steps). Prints
the per-episode table and writes ``curves.json`` and ``icl_curve.png`` to ``--out`` after every
agent; ``--resume`` keeps the agents an earlier run with the same settings already wrote there.
"""

from __future__ import annotations


import argparse
import multiprocessing as mp
import os
import time
from pathlib import Path

import numpy as np

from icrl_ros.training import house_curves

AGENTS = ("oracle", "teacher", "wiped", "seeing", "seeing_wiped", "inputs", "inputs_wiped")
SEEING = ("seeing", "seeing_wiped", "inputs", "inputs_wiped")


_ENVS: dict = {}  # one env per worker process and setting (its renderer is reused across trials)


def perceiver(encoder: str, image_size: int):
    """The seeing and input agents' detector from an encoder file (``house_encoder.py``): its label heads'
    P(in view) per category, the position each implies, the expected distance and the floor distance per
    column band (:func:`~icrl_ros.house.perception.encoder_perceiver`)."""
    from icrl_ros.house.perception import encoder_perceiver

    return encoder_perceiver(encoder, image_size)


def sensed_bands(env, perceive, sensor: str):
    """``perceive`` with the floor distance per band measured rather than the heads' estimate: ``depth``, cast
    from the env's pose (a depth camera over the image); ``laser``, from the env's planar laser scan."""
    from icrl_ros.models.encoders import FREE_BANDS
    from icrl_ros.sim.house_render import CAMERA_HEIGHT, CAMERA_PITCH_DEG, FOV_Y_DEG
    from icrl_ros.sim.house_view import cast_view, obstacle_bands

    if sensor == "laser":
        from icrl_ros.house.perception import with_laser_bands

        return with_laser_bands(env, perceive)

    def seen(rgb, pose):
        p, xy, dist, _ = perceive(rgb, pose)
        view = cast_view(env.layout, env.nav.walls, env.x, env.z, env.yaw, 64, CAMERA_HEIGHT, CAMERA_PITCH_DEG,
                         FOV_Y_DEG)
        return p, xy, dist, obstacle_bands(view, FREE_BANDS, CAMERA_HEIGHT, CAMERA_PITCH_DEG, FOV_Y_DEG)

    return seen


CENSUS = ("success", "wrong_stop", "never_saw", "saw_not_recognised", "recognised_not_reached", "reached_no_stop")
"""Where a perceiving agent's episode ended (``--census``), first match wins: found it; stopped elsewhere; timed out
with the goal never covering MIN_PIXELS of a frame (exploration), covering them but never called present by the
agent's heads at its ``present`` threshold (perception), called but never within reach and view (navigation),
within reach and view but no stop."""


class EpisodeSight:
    """What one episode of a perceiving agent showed it (ray cast: the goal's pixels, whether in reach and view)
    and what its heads called, frame by frame; :meth:`verdict` gives its :data:`CENSUS` class."""

    def __init__(self) -> None:
        self.max_px, self.recognised, self.reached = 0.0, False, False

    def look(self, env, searcher) -> None:
        from icrl_ros.sim.house_view import MIN_PIXELS

        cat_px, reach = env.goal_sight()
        g = int(env.goal)
        px = float(cat_px[g])
        self.max_px = max(self.max_px, px)
        self.recognised |= px >= MIN_PIXELS and float(searcher.heads_p(g)) >= searcher.present
        self.reached |= bool(reach)

    def verdict(self, success: bool, last_action: int) -> int:
        from icrl_ros.sim.house_oracle import STOP
        from icrl_ros.sim.house_view import MIN_PIXELS

        if success:
            return 0
        if last_action == STOP:
            return 1
        if self.max_px < MIN_PIXELS:
            return 2
        return 3 if not self.recognised else (4 if not self.reached else 5)


def run_trial(job: tuple) -> dict[str, list]:
    agent, trial_seed, episodes, max_steps, split, task, extra, seeing, census = job
    os.environ.setdefault("LP_NUM_THREADS", "1")
    from icrl_ros.sim.house import OLD_TASK, HouseEnv

    key = (agent, max_steps, split, task, tuple(sorted(extra.items())))
    if key not in _ENVS:
        kw = {**(dict(OLD_TASK) if task == "old" else {}), **extra}
        teacher = {"teacher": "memory", "wiped": "wiped"}.get(agent)
        _ENVS[key] = HouseEnv(split=split, max_episode_steps=max_steps, teacher=teacher, **kw)
    env = _ENVS[key]
    out = {"success": [], "spl": [], "steps": [], "house_seed": None, "census": []}
    obs, info = env.reset(seed=trial_seed)
    out["house_seed"] = info["house_seed"]
    searcher = None
    slip, rng = 0.0, np.random.default_rng([trial_seed, 0x511])
    if agent in SEEING:
        opts = dict(seeing)
        slip = float(opts.pop("slip", 0.0))  # a random movement replaces the searcher's action this often
        perceive = perceiver(opts.pop("encoder"), env.image_size)
        if agent.startswith("inputs"):
            opts.pop("whole_map", None)  # it plans over no map of the house
            bands = opts.pop("bands", "heads")
            if bands != "heads":
                perceive = sensed_bands(env, perceive, bands)
        else:
            opts.pop("bands", None)  # it sweeps the floor by ray casting
            opts.pop("approach", None)  # it plans over that floor
            opts.pop("stop_frames", None)
        from icrl_ros.sim.house_teacher import encoder_searcher

        searcher = encoder_searcher(agent, env, perceive, **opts)
    for _ in range(episodes):
        if searcher is not None:
            searcher.see(obs["rgb"])
            searcher.episode_start()
        sight = EpisodeSight()
        while True:
            if census and searcher is not None:
                sight.look(env, searcher)
            if agent == "oracle":
                a = env.oracle_action()
            elif searcher is not None:
                a = searcher.act()
                if slip and rng.random() < slip:
                    a = int(rng.integers(1, 4))  # forward, left or right: what an imitator's error looks like
            else:
                a = info["teacher_action"]
            obs, _, term, trunc, info = env.step(a)
            if term or trunc:
                break
            if searcher is not None:
                searcher.see(obs["rgb"])
                searcher.observe()
        out["success"].append(float(info["success"]))
        out["spl"].append(float(info["spl"]))
        out["steps"].append(float(info["episode_step"]))
        if census and searcher is not None:
            out["census"].append(sight.verdict(bool(info["success"]), a))
        obs, info = env.reset()
    return out


def print_census(agent: str, classes: np.ndarray) -> None:
    """Shares of each :data:`CENSUS` class in episode 1 and over all episodes."""
    print(f"{agent}: census (share of episodes)  " + "  ".join(
        f"{name} {np.mean(classes[:, 0] == k):.2f}/{np.mean(classes == k):.2f}" for k, name in enumerate(CENSUS))
        + "  (episode 1 / all)", flush=True)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--trials", type=int, default=100)
    p.add_argument("--episodes", type=int, default=20)
    p.add_argument("--max-steps", type=int, default=200)
    p.add_argument("--split", default="test")
    p.add_argument("--seed", type=int, default=1000, help="evaluation seed (trial k uses seed + k)")
    p.add_argument("--task", choices=("new", "old"), default="new", help="task defaults (env OLD_TASK for old)")
    p.add_argument("--env", action="append", default=[], metavar="KEY=VALUE",
                   help="a further HouseEnv argument (e.g. min_start_distance=4)")
    p.add_argument("--agents", default=",".join(AGENTS[:3]))
    p.add_argument("--encoder", help="the frozen encoder file the seeing agents perceive with (house_encoder.py's encoder.pt)")
    p.add_argument("--searcher", action="append", default=[], metavar="KEY=VALUE",
                   help="a setting of the seeing and input agents: present, stop_p, stop_m, whole_map (seeing only), "
                   "bands=heads|depth|laser (inputs only: the frontier memory's floor distances from the encoder's "
                   "heads, cast from the pose as a depth camera gives them, or from the laser scan), slip=P (a random "
                   "forward / left / right replaces the searcher's action with probability P: an imitator's errors), "
                   "approach=route|looked (inputs only: the way to a remembered goal over the floor stood on, or over "
                   "the floor the camera looked at), stop_frames=N (inputs only: stop after N images in a row give the "
                   "goal within reach)")
    p.add_argument("--census", action="store_true",
                   help="the perceiving agents' failure census: per episode, where it ended (success, wrong stop, "
                   "never saw the goal, saw it but its heads did not call it, called it but never reached it, reached "
                   "it but no stop); in curves.json raw[agent]['census'] as indices into CENSUS")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--out", default="docs/results/house_teacher")
    p.add_argument("--resume", action="store_true",
                   help="keep the agents already in --out/curves.json when its settings match these")
    args = p.parse_args(argv)
    agents = args.agents.split(",")
    import yaml

    extra = {}
    for kv in args.env:
        if "=" not in kv:
            p.error(f"--env: expected KEY=VALUE, got {kv!r}")
        k, v = kv.split("=", 1)
        extra[k] = yaml.safe_load(v)
    for a in agents:
        if a not in AGENTS:
            p.error(f"--agents: {a!r} is not one of {AGENTS}")
    seeing = None  # the seeing agents' encoder and PerceivingTeacher settings
    if set(agents) & set(SEEING):
        if not args.encoder:
            p.error(f"--agents {', '.join(SEEING)} need --encoder PATH")
        if not Path(args.encoder).is_file():
            p.error(f"--encoder: {args.encoder} does not exist")
        seeing = {"encoder": args.encoder}
        for kv in args.searcher:
            k, _, v = kv.partition("=")
            if k not in ("present", "stop_p", "stop_m", "whole_map", "bands", "slip", "approach", "stop_frames") \
                    or not v:
                p.error("--searcher: expected present|stop_p|stop_m|whole_map|bands|slip|approach|stop_frames=VALUE, "
                        f"got {kv!r}")
            if k == "bands" and v not in ("heads", "depth", "laser"):
                p.error(f"--searcher bands: expected heads, depth or laser, got {v!r}")
            if k == "approach" and v not in ("route", "looked"):
                p.error(f"--searcher approach: expected route or looked, got {v!r}")
            seeing[k] = yaml.safe_load(v)
            if k == "slip" and not (isinstance(seeing[k], (int, float)) and 0.0 <= seeing[k] <= 1.0):
                p.error(f"--searcher slip: a probability in [0, 1], got {v!r}")
    raw, curves = {}, {}
    same = ("trials", "episodes", "max_steps", "split", "seed", "task", "env")
    settings = {k: v for k, v in vars(args).items() if k != "resume"}
    done_s = 0.0
    if args.resume and (Path(args.out) / "curves.json").is_file():
        import json

        doc = json.loads((Path(args.out) / "curves.json").read_text())
        if all(doc["settings"].get(k) == settings[k] for k in same):
            for agent in agents:
                if agent in doc["raw"]:
                    raw[agent] = {k: np.array(v) for k, v in doc["raw"][agent].items()}
                    curves[agent] = doc["curves"][agent]
                    print(f"{agent}: kept from {args.out}/curves.json", flush=True)
            done_s = float(doc["settings"].get("wall_s", 0.0))
        else:
            print(f"--resume: {args.out}/curves.json has other settings; starting over", flush=True)
    t0 = time.perf_counter()
    title = f"House teacher, {args.task} task defaults, {args.split} houses"
    if extra:  # a reader must not take a changed env for the defaults
        title += " (" + ", ".join(f"{k}={v}" for k, v in extra.items()) + ")"
    if seeing is not None:  # which eyes the seeing agents had
        eyes = ", ".join(f"{k}={Path(v).name if k == 'encoder' else v}" for k, v in seeing.items())
        title += f"; perceiving agents: {eyes}"
    ctx = mp.get_context("forkserver")
    with ctx.Pool(args.workers) as pool:
        for agent in agents:
            if agent in raw:
                continue
            t = time.perf_counter()
            jobs = [(agent, args.seed + k, args.episodes, args.max_steps, args.split, args.task, extra,
                     seeing if agent in SEEING else None, args.census) for k in range(args.trials)]
            res = pool.map(run_trial, jobs, chunksize=1)
            raw[agent] = {k: np.array([r[k] for r in res]) for k in house_curves.METRICS}
            raw[agent]["house_seed"] = np.array([r["house_seed"] for r in res])
            if args.census and agent in SEEING:
                raw[agent]["census"] = np.array([r["census"] for r in res], np.int8)
                print_census(agent, raw[agent]["census"])
            curves[agent] = house_curves.summarise(raw[agent])
            steps = raw[agent]["steps"].sum()
            print(f"{agent}: {args.trials} trials x {args.episodes} episodes, {steps:.0f} steps in "
                  f"{time.perf_counter() - t:.0f} s ({steps / (time.perf_counter() - t):.0f} steps/s, "
                  f"{args.workers} workers)", flush=True)
            ordered = {a: curves[a] for a in agents if a in curves}
            house_curves.write(ordered, {a: raw[a] for a in ordered},
                               {**settings, "wall_s": done_s + time.perf_counter() - t0}, Path(args.out), title)
    house_curves.print_table({a: curves[a] for a in agents})
    print(f"wrote {args.out}/curves.json and icl_curve.png")
    return 0


if __name__ == "__main__":
    from icrl_ros.training._cli import run_main

    raise SystemExit(run_main(main))
