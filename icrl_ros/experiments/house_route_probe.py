"""How far does knowing *where* the goal is get a robot that has no map? Scripted navigators, given the
goal's position, on the house episodes a policy is evaluated on.

    python experiments/house_route_probe.py --trials 40 --episodes 12 --seed 100 --out runs/route_probe

The shipped house students fail late episodes mostly on the way to a goal their memory holds
(``house_diagnose.py --memory-readout``): the remembered position is right, the robot never gets
there. Is a remembered position plus what a robot senses around it (which headings are free) enough
to get there, so that the students' gap is one of learning, or does the way there need a memory of
the house's layout (a map, a route)? Each navigator runs the same trials (house, goals and starts
are drawn by the env from the seed, whatever the actions), every episode:

* ``oracle``: the privileged shortest-path follower (the whole map; the ceiling);
* ``teacher``: the in-context teacher (:mod:`icrl_ros.sim.house_teacher`): it knows the goal only
  once its camera resolved it in this trial, and plans over the floor it has seen (a map built
  from its own trial), with its memory of earlier episodes' positions off by ``--noise`` metres;
* ``greedy``: knows from the start a remembered position (the nearest instance plus ``--noise``
  metres per axis, drawn per episode) and steers for it one step at a time: of the headings it can
  turn to, the free one closest to the bearing (the oracle's local steering), with no map; once an
  instance shows in its view (the recognition rule) it steers for that, and at the remembered spot
  it turns on the spot;
* ``greedy_escape``: ``greedy`` that, when 12 steps bring it no closer by 0.25 m, walks at random
  (forward when free, else a random turn) for 8 steps: the least a wall-blocked robot can do.

Two hybrids live the teacher's trial (it explores while it does not know the goal, so memory is what
the teacher gathered) and take over for the episode when the teacher knows the goal at its start,
heading for the teacher's remembered position (off by ``--noise`` as the teacher's is):

* ``teacher_greedy``: with ``greedy``'s local steering;
* ``teacher_sighting``: first to the nearest place the robot stood on when its camera resolved that
  instance (earlier in the trial; from there the goal was in sight), then ``greedy``'s way on: a
  route memory of one waypoint, which a fixed attention head over past poses could read;
* ``teacher_nofallback``: a second teacher that watched the same trial takes over, planning over the
  floor it has seen but never over the whole map (the env's teacher does when no known floor leads
  to a remembered goal; the ``teacher`` run counts those plans as ``whole_map_plans``);
* ``teacher_trail``: the same with the floor it stood on only (within 0.5 m of its past poses: the
  map a memory of its own poses holds).

* ``teacher_route``: the route memory the students read (:mod:`icrl_ros.memory.route`), fed as a student's
  is (the frozen encoder's heads on the rendered image, the house-frame odometry), takes over for an episode
  whose goal it holds at the start (sighting mass above one half): toward its waypoint while it has a
  route (the way to join the track when off it), else straight for its remembered position (local
  steering). Its goal-known split is its own;
  its takeovers are also split by how far the remembered position is from the nearest true instance.
  The only navigator that renders images.

Both second teachers, standing off any known floor that leads to the goal (a new episode starts
where the robot may never have been), first steer (locally) for the nearest cell of it that does.

Every navigator stops the oracle's way once an instance is within reach with a line of sight (the
success test the env applies). Reported: success, SPL and steps over episodes ``--late-from``..E,
on all episodes and on those whose goal the teacher knew at the start (what the students face in
late episodes: ``house_diagnose.py`` measured 0.54 success on those for the shipped Memo; a hybrid's
split is its own teacher's, as its trial differs from the teacher run's), with
95% CIs over trials. Writes ``route_probe.json``. No images are rendered (geometry only).
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

import numpy as np

from icrl_ros.geometry import relative_pose
from icrl_ros.models.object_memory import ROUTE_DIM
from icrl_ros.sim.house import HouseEnv
from icrl_ros.sim.house_oracle import FORWARD, STOP, TURN_LEFT, TURN_RIGHT, steer, end_game, robot_frame_to_world
from icrl_ros.sim.house_teacher import HouseTeacher
from icrl_ros.training._cli import fail

NAVIGATORS = ("oracle", "teacher", "greedy", "greedy_escape", "teacher_greedy", "teacher_sighting", "teacher_nofallback",
              "teacher_trail", "teacher_route")
SECOND = {"teacher_nofallback": "seen", "teacher_trail": "stood"}  # hybrids whose takeover is a second teacher
HYBRID = ("teacher_greedy", "teacher_sighting", *SECOND, "teacher_route")
AT_M = 0.4  # this close to the remembered position counts as there
STUCK_STEPS, STUCK_GAIN_M, ESCAPE_STEPS = 12, 0.25, 8


class Greedy:
    """A remembered position and local steering; ``escape``: random steps when stuck."""

    def __init__(self, env: HouseEnv, goal_xz: tuple[float, float], escape: bool, rng: np.random.Generator,
                 via: tuple[float, float] | None = None) -> None:
        """``via``: a waypoint to reach (within ``AT_M``, or until an instance shows) before the goal."""
        self.env, self.goal, self.escape, self.rng, self.via = env, goal_xz, escape, rng, via
        self.best, self.since, self.escaping = math.inf, 0, 0

    def act(self) -> int:
        env = self.env
        near = end_game(env)
        if near is not None:
            return near
        seen = env.visible_targets()
        if seen.any():
            self.via = None
            o = env.target_instances()[int(np.flatnonzero(seen)[0])]
            target = (o.x, o.z)
        else:
            if self.via is not None and math.hypot(self.via[0] - env.x, self.via[1] - env.z) < AT_M:
                self.via = None
            target = self.goal if self.via is None else self.via
        d = math.hypot(target[0] - env.x, target[1] - env.z)
        if self.escape:
            if self.escaping:
                self.escaping -= 1
                fx, fz = env.x + env.forward_step * math.cos(env.yaw), env.z - env.forward_step * math.sin(env.yaw)
                if not env.nav.collides(fx, fz) and self.rng.random() < 0.7:
                    return FORWARD
                return TURN_LEFT if self.rng.random() < 0.5 else TURN_RIGHT
            if d < self.best - STUCK_GAIN_M:
                self.best, self.since = d, 0
            else:
                self.since += 1
                if self.since >= STUCK_STEPS and d > AT_M:
                    self.escaping, self.since, self.best = ESCAPE_STEPS, 0, math.inf
        if d < AT_M:
            return TURN_LEFT  # at the remembered spot: look round
        return steer(env, *target)


class JoinKnownFloor:
    """A second teacher that takes over an episode, and first walks (local steering) to the nearest cell
    of its known floor from which that floor leads to the remembered goal when it stands off it (a
    new episode starts where it may never have stood)."""

    def __init__(self, teacher: HouseTeacher) -> None:
        self.teacher, self.env = teacher, teacher.env

    def act(self) -> int:
        te, env = self.teacher, self.env
        if env.target_visible_in_reach():
            return STOP
        key, target, _ = te._target()
        if key[0] == "goal" and target is not None:
            D = te._distances(target, False)
            if te._start_cell(D) is None and np.isfinite(D).any():
                i, j = np.nonzero(np.isfinite(D))
                k = int(np.argmin(np.hypot(te.xs[j] - env.x, te.zs[i] - env.z)))
                return steer(env, float(te.xs[j[k]]), float(te.zs[i[k]]))
        return te.act()


class StudentSight:
    """What a student's frozen encoder makes of an image: the token entries its object memory (and the
    route memory) read, and a route memory fed with them as the control step feeds it."""

    def __init__(self, encoder_path: str) -> None:
        import torch

        from icrl_ros.memory.route import RouteMemory
        from icrl_ros.models.encoders import FeatureEncoder, FeatureHeads, OBJECT_SCALE_M, load_frozen, read_encoder_file

        state = read_encoder_file(encoder_path)
        n_cat = state["heads.present.weight"].shape[0]
        d_feat = state["heads.present.weight"].shape[1]
        self.encoder, self.heads = FeatureEncoder(d_feat, 64).eval(), FeatureHeads(d_feat, n_cat).eval()
        load_frozen(self.encoder, encoder_path, state=state)
        load_frozen(self.heads, encoder_path, prefix="heads.", state=state)
        self.torch, self.scale = torch, OBJECT_SCALE_M
        self.memory = RouteMemory(1, n_cat, OBJECT_SCALE_M)
        self.route = np.zeros(ROUTE_DIM, np.float32)

    def step(self, obs: dict, episode: int) -> None:
        """One control step's worth: the route from what came before, then this image's sightings."""
        from icrl_ros.models.object_memory import object_struct

        torch = self.torch
        odom = torch.as_tensor(np.asarray(obs["odom"], np.float32))[None]
        goal = torch.as_tensor([int(obs["goal"])])
        self.route = self.memory.fill({"odom": odom, "goal": goal}, torch.tensor([episode]))[0].numpy().copy()
        with torch.no_grad():
            f = self.encoder(torch.as_tensor(np.asarray(obs["rgb"]))[None])
            p, xy, _ = self.heads.object_estimates(f, odom)
            self.memory.observe(object_struct(p, xy, odom, goal, self.scale))
        self.odom = odom[0].numpy().astype(np.float64)

    def holds_goal(self, goal: int) -> bool:
        return self.memory.remembered(0, goal)[1] > 0.5


class RouteFollower:
    """Takes over an episode: the route memory's waypoint while it has a route, else its remembered position."""

    def __init__(self, env: HouseEnv, sight: StudentSight) -> None:
        self.env, self.sight = env, sight
        self.routed_steps = self.steps = 0

    def act(self) -> int:
        env, sight = self.env, self.sight
        near = end_game(env)
        if near is not None:
            return near
        self.steps += 1
        r = sight.route
        if r[0] > 0:
            self.routed_steps += 1
            return steer(env, *robot_frame_to_world(env, r[1] * sight.scale, r[2] * sight.scale))
        g, _ = sight.memory.remembered(0, int(env.goal))
        fwd, left = (float(v) for v in relative_pose(tuple(sight.odom), (g[0], g[1], 0.0))[:2])
        if math.hypot(fwd, left) < AT_M:
            return TURN_LEFT
        return steer(env, *robot_frame_to_world(env, fwd, left))


def hybrid_agent(env: HouseEnv, stood: dict, via_sighting: bool, rng: np.random.Generator) -> Greedy:
    """The scripted navigator that takes over from the teacher for an episode whose goal it knows:
    for the nearest (by the teacher's belief) known goal instance, its remembered position and, with
    ``via_sighting``, the nearest place it was resolved from."""
    te = env.teacher
    known = [k for k, o in enumerate(env.layout.objects) if te.known[k] and o.category == env.goal]
    k = min(known, key=lambda k: math.hypot(te.guess[k].x - env.x, te.guess[k].z - env.z))
    via = None
    if via_sighting and stood.get(k):
        pts = np.array(stood[k])
        via = tuple(pts[int(np.argmin(np.hypot(pts[:, 0] - env.x, pts[:, 1] - env.z)))])
    return Greedy(env, (te.guess[k].x, te.guess[k].z), False, rng, via=via)


def run(nav: str, trials: int, episodes: int, seed: int, noise: float, split: str, encoder: str) -> dict:
    opts = {"split": split}
    if nav == "teacher" or nav in HYBRID:
        opts.update(teacher="memory", teacher_noise=noise)
    env = HouseEnv(**opts)
    if nav != "teacher_route":
        env.observe = lambda: {}  # geometry only: no other navigator reads the camera image
    out = {k: np.zeros((trials, episodes)) for k in ("success", "spl", "steps", "known", "whole_map_plans",
                                                       "shortest_m", "routed", "goal_err_m")}
    for t in range(trials):
        stood: dict[int, list] = {}  # teacher_sighting: object index -> where the robot stood when it was resolved
        for e in range(episodes):
            if e == 0:
                obs, info = env.reset(seed=seed * 100_003 + t, options={"new_trial": True})
                second = (HouseTeacher(env, noise=noise, rng=np.random.default_rng([seed, t, 0x2D]), floor=SECOND[nav],
                                       whole_map=False) if nav in SECOND else None)
                sight = StudentSight(encoder) if nav == "teacher_route" else None
            else:
                obs, info = env.reset()
            if second is not None:
                second.episode_start()
            plans0 = env.teacher.whole_map_plans if env.teacher is not None else 0
            out["known"][t, e] = float(info.get("teacher_goal_known", False))
            out["shortest_m"][t, e] = env.shortest_path  # the episode's start and goal, whoever drives
            rng = np.random.default_rng([seed, t, e])
            agent = None
            if nav.startswith("greedy"):
                inst = env.target_instances()
                o = inst[int(np.argmin([math.hypot(o.x - env.x, o.z - env.z) for o in inst]))]
                err = rng.normal(0.0, noise, 2) if noise > 0 else np.zeros(2)
                agent = Greedy(env, (o.x + err[0], o.z + err[1]), nav == "greedy_escape", rng)
            elif sight is not None:
                sight.step(obs, e)
                if sight.holds_goal(int(env.goal)):
                    agent = RouteFollower(env, sight)
                    g, _ = sight.memory.remembered(0, int(env.goal))  # how far off the remembered goal is
                    out["goal_err_m"][t, e] = float(np.hypot(*(env.target_positions("house") - g).T).min())
                out["known"][t, e] = float(agent is not None)  # its own split: the route memory held the goal
            elif second is not None and info["teacher_goal_known"]:
                agent = JoinKnownFloor(second)
            elif nav in HYBRID and info["teacher_goal_known"]:
                agent = hybrid_agent(env, stood, nav == "teacher_sighting", rng)
            while True:
                if nav == "teacher_sighting":
                    for k in np.flatnonzero(env.teacher.view.resolved(env.teacher.min_pixels)):
                        stood.setdefault(int(k), []).append((env.x, env.z))
                if nav == "oracle":
                    a = env.oracle_action()
                elif agent is None:  # the teacher, or a hybrid while the teacher explores
                    a = info["teacher_action"]
                else:
                    a = agent.act()
                obs, _, term, trunc, info = env.step(int(a))
                if sight is not None and not (term or trunc):
                    sight.step(obs, e)
                if term or trunc:
                    out["success"][t, e], out["spl"][t, e] = float(info["success"]), float(info["spl"])
                    out["steps"][t, e] = float(info["episode_step"])
                    if env.teacher is not None:
                        out["whole_map_plans"][t, e] = env.teacher.whole_map_plans - plans0
                    if isinstance(agent, RouteFollower):
                        out["routed"][t, e] = agent.routed_steps / max(agent.steps, 1)
                    break
                if second is not None:
                    second.observe()
    env.close()
    return out


def summary(x: np.ndarray, mask: np.ndarray) -> tuple[float, float, int]:
    """Mean over the masked episodes and a 95% CI over trials (per-trial means of the trials with any)."""
    rows = [x[i][mask[i]].mean() for i in range(len(x)) if mask[i].any()]
    n = len(rows)
    if n == 0:
        return float("nan"), float("nan"), 0
    sd = float(np.std(rows, ddof=1)) if n > 1 else float("nan")
    return float(np.mean(x[mask])), 1.96 * sd / math.sqrt(n), int(mask.sum())


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--trials", type=int, default=40)
    p.add_argument("--episodes", type=int, default=12)
    p.add_argument("--seed", type=int, default=100)
    p.add_argument("--split", default="test")
    p.add_argument("--noise", type=float, default=0.8, help="metres per axis: the remembered position's error")
    p.add_argument("--late-from", type=int, default=6, help="first episode (1-based) of the late window")
    p.add_argument("--navigators", nargs="+", default=list(NAVIGATORS), choices=NAVIGATORS)
    p.add_argument("--encoder", default="checkpoints/house_encoder.pt",
                   help="teacher_route: the frozen encoder (and heads) whose sightings feed the route memory")
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args(argv)
    if args.trials < 2 or args.episodes < 1:
        fail("--trials must be >= 2 (a CI) and --episodes >= 1")
    if not 1 <= args.late_from <= args.episodes:
        fail(f"--late-from must lie in 1..--episodes ({args.episodes}), got {args.late_from}")
    if "teacher" not in args.navigators:
        args.navigators.insert(0, "teacher")  # the goal-known split comes from the teacher's run
    res, walls = {}, {}
    for nav in args.navigators:
        t0 = time.perf_counter()
        res[nav] = run(nav, args.trials, args.episodes, args.seed, args.noise, args.split, args.encoder)
        walls[nav] = time.perf_counter() - t0
        print(f"{nav}: {walls[nav]:.0f} s", flush=True)
    late = np.zeros((args.trials, args.episodes), bool)
    late[:, args.late_from - 1:] = True
    table = {}
    print(f"\nepisodes {args.late_from}-{args.episodes}, {args.trials} trials, seed {args.seed}, noise {args.noise} m")
    print("| navigator | success, all late | SPL, all late | steps | success, teacher knew goal | SPL, teacher knew goal |")
    print("| --- | --- | --- | --- | --- | --- |")
    for nav, r in res.items():
        row = {}
        # the goal-known split: a hybrid's own teacher's (its trial is its own), else the teacher run's
        known = late & (r["known"] > 0 if nav in HYBRID else res["teacher"]["known"] > 0)
        for name, mask in (("all", late), ("known", known)):
            for k in ("success", "spl", "steps"):
                row[f"{k}_{name}"] = summary(r[k], mask)
        table[nav] = row
        f = lambda v: f"{v[0]:.3f} +- {v[1]:.3f}"  # noqa: E731
        print(f"| {nav} | {f(row['success_all'])} | {f(row['spl_all'])} | {row['steps_all'][0]:.0f} | "
              f"{f(row['success_known'])} (n = {row['success_known'][2]}) | {f(row['spl_known'])} |")
    if "teacher_route" in res:
        nav = "teacher_route"
        r = res[nav]
        took = late & (r["known"] > 0)
        print(f"{nav}: took over {took.sum() / late.sum():.3f} of late episodes; of their steps "
              f"{r['routed'][took].mean():.3f} had a route")
        err = np.asarray(r["goal_err_m"])
        for lo, hi in ((0.0, 1.0), (1.0, 2.0), (2.0, math.inf)):
            m = took & (err >= lo) & (err < hi)
            row = table[nav][f"success_err_{lo:g}_{hi:g}"] = summary(r["success"], m)
            print(f"  remembered goal {lo:g}-{hi:g} m off: {row[2]} episodes ({row[2] / max(took.sum(), 1):.2f}), "
                  f"success {row[0]:.3f}")
    for nav in ("teacher", *[n for n in res if n in HYBRID]):
        used = res[nav]["whole_map_plans"][late] > 0
        print(f"{nav}: the env's teacher planned over the whole map in {used.mean():.3f} of late episodes")
        table[nav]["whole_map_share"] = float(used.mean())
    args.out.mkdir(parents=True, exist_ok=True)
    doc = {"settings": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}, "wall_s": walls,
           "table": table, "raw": {n: {k: v.tolist() for k, v in r.items()} for n, r in res.items()}}
    (args.out / "route_probe.json").write_text(json.dumps(doc, indent=1))
    print(f"wrote {args.out / 'route_probe.json'}")


if __name__ == "__main__":
    from icrl_ros.training._cli import run_main

    raise SystemExit(run_main(main))
