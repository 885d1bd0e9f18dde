"""Why a house policy fails: its episodes by outcome, beside what the in-context teacher knew.

    python training/house_diagnose.py checkpoints/house_relic.pt --trials 12 --episodes 8 --seed 100
    python training/house_diagnose.py bundles/house_relic --trials 12 --episodes 8   # the deployed bundle
    python training/house_diagnose.py bundles/house_relic --teacher-forced --trials 20 --episodes 5
    python training/house_diagnose.py bundles/house_relic_scan --handover 3 --trials 20 --episodes 5 --seed 300
    python training/house_diagnose.py bundles/house_relic_scan --census --trials 50 --episodes 20 --late-from 10

``--teacher-forced`` (ReLIC): the teacher drives and the policy reads its trial twice, with memory
and with memory wiped at every episode start; per episode, how well it predicts the teacher's
actions (mean log-likelihood per step, argmax agreement), and the paired gain of memory over
episodes 2 on (95% CIs over trials). A stop rule (``model.house.stop_gate`` / ``stop_sure``) is left off
here: it is not learnt, and a masked stop the teacher makes would score -1e4. Writes ``teacher_forced.json``.

The policy drives; the memory teacher (:mod:`icrl_ros.sim.house_teacher`, which sees only what the
robot saw) watches every state and says what it would do and whether it knows where an instance of
the goal is. Per episode the outcome is ``success``, ``wrong_stop`` (the policy stopped where the
goal was not in reach and view) or ``timeout`` (the step cap). Split by whether the teacher knew
the goal at the episode start, the table says whether the policy fails to *use* memory (the goal
was known, the policy still searched or stopped wrongly) or to *explore*; agreement with the
teacher on the policy's own states shows the distribution shift imitation on the teacher's states
leaves. Writes ``diagnosis.json``.

``--handover K``: the teacher drives each trial's first K episodes (the policy's memory, or its
memory-wiped ablation, reads them), then the policy drives as deployed (stop rule on); success, SPL
and steps per episode and the paired gain of memory over the policy's episodes. Writes ``handover.json``.

``--stop-views`` (a checkpoint): at every stop the policy makes, what its frozen label heads said
of the current image: P(goal category in view) and its expected distance; split by right and wrong
stops this tells a stop rule that fires blind from a navigation that never brings the goal into
view. ``--stop-gate P`` (a what-if, not the deployed policy): the stop action is masked whenever
the heads give P(goal in view) below P, so the wrong stops it removes show what they turn into.
``--stop-auto P`` (a what-if too): the stop is taken whenever the heads give P(goal in view) >= P and
an expected goal distance within ``--stop-auto-m``, so timeouts that pass a reachable goal show.

``--memory-readout`` (a checkpoint with ``model.house.object_memory``): at the first step of every episode,
what the object memory head reads for the goal (whether it holds a confident sighting, and how far
the remembered position lies from the nearest goal instance), and per episode whether the policy
ever stood where the teacher would stop and how close (geodesic) it came; split by outcome and by
whether the teacher knew the goal, so a failure with the goal known reads as memory that lacked the
sighting, memory that held a wrong position, or a policy that held the right one and did not get there.
"""

from __future__ import annotations


import argparse
import json
import sys
from pathlib import Path

import numpy as np
import torch

from icrl_ros.models.stop_rule import StopRule
from icrl_ros.sim.house import STOP
from icrl_ros.training._cli import fail
from icrl_ros.training.house_census import Census, print_census
from icrl_ros.training.house_eval import check_wipe_batch, run_house_trials, stepper_for

OUTCOMES = ("success", "wrong_stop", "timeout")


class Tally:
    """Per-step and per-episode counts, fed by :func:`run_house_trials`' observer."""

    def __init__(self, trials: int, episodes: int) -> None:
        self.episodes = episodes
        self.known_at_start = np.full((trials, episodes), -1, np.int8)
        self.outcome = np.full((trials, episodes), -1, np.int8)
        self.steps = {k: np.zeros(2, np.int64) for k in ("n", "agree", "stop", "stop_right", "label_stop", "stop_hit")}
        self._fresh = np.ones(trials, bool)

    def __call__(self, labels, first, action, logits, done, info, done_eps) -> None:
        teach, known = labels
        a = action.numpy()
        for i in range(len(a)):
            t, e = first + i, int(done_eps[i])
            if e >= self.episodes or teach[i] < 0:
                continue
            k = int(known[i])
            if self._fresh[t]:
                self.known_at_start[t, e] = k
                self._fresh[t] = False
            s = self.steps
            s["n"][k] += 1
            s["agree"][k] += int(a[i] == teach[i])
            s["stop"][k] += int(a[i] == STOP)
            s["stop_right"][k] += int(a[i] == STOP and teach[i] == STOP)
            s["label_stop"][k] += int(teach[i] == STOP)
            s["stop_hit"][k] += int(teach[i] == STOP and a[i] == STOP)
            if done[i]:
                self.outcome[t, e] = 0 if info[i]["success"] else (1 if a[i] == STOP else 2)
                self._fresh[t] = True

    def summary(self) -> dict:
        out = {}
        for name, mask in (("all", self.known_at_start >= 0), ("goal_known_at_start", self.known_at_start == 1),
                           ("goal_unknown_at_start", self.known_at_start == 0)):
            n = int(mask.sum())
            out[name] = {"episodes": n, **{o: float((self.outcome[mask] == j).mean()) if n else float("nan")
                                          for j, o in enumerate(OUTCOMES)}}
        s = {k: v.astype(float) for k, v in self.steps.items()}

        def ratio(a, b):
            return float(a / b) if b else float("nan")

        out["steps"] = {
            "agreement_goal_known": ratio(s["agree"][1], s["n"][1]),
            "agreement_goal_unknown": ratio(s["agree"][0], s["n"][0]),
            "agreement": ratio(s["agree"].sum(), s["n"].sum()),
            "stop_precision": ratio(s["stop_right"].sum(), s["stop"].sum()),
            "stop_recall": ratio(s["stop_hit"].sum(), s["label_stop"].sum()),
            "steps_goal_known": int(s["n"][1]), "steps_goal_unknown": int(s["n"][0]),
        }
        valid = self.known_at_start >= 0
        out["known_at_start_by_episode"] = [float(self.known_at_start[valid[:, e], e].mean()) if valid[:, e].any()
                                            else float("nan") for e in range(self.episodes)]
        # per trial and episode, so that two runs on the same seed compare house by house:
        # outcome 0 success, 1 wrong stop, 2 timeout; known 1 / 0; -1 = not run
        out["per_trial"] = {"outcome": self.outcome.tolist(), "known_at_start": self.known_at_start.tolist()}
        return out


class TeacherLikelihood:
    """Teacher forcing (``run_house_trials(..., drive="teacher")``): the log-probability the policy
    gives the teacher's action, and whether its argmax is that action, per (trial, episode). With
    memory the policy should predict the teacher better in later episodes, once the teacher acts on
    what it saw earlier in the trial; its memory-wiped ablation cannot."""

    def __init__(self, trials: int, episodes: int) -> None:
        self.episodes = episodes
        self.logp = np.zeros((trials, episodes))
        self.agree = np.zeros((trials, episodes))
        self.n = np.zeros((trials, episodes))

    def __call__(self, labels, first, action, logits, done, info, done_eps) -> None:
        teach = labels[0]
        logp = logits.float().log_softmax(-1).numpy()
        for i in range(len(teach)):
            e = int(done_eps[i])
            if e >= self.episodes or teach[i] < 0:
                continue
            t = first + i
            self.logp[t, e] += logp[i, teach[i]]
            self.agree[t, e] += float(logp[i].argmax() == teach[i])
            self.n[t, e] += 1

    def per_episode(self) -> dict[str, np.ndarray]:
        """Per-step means within each (trial, episode): ``logp`` and ``agreement`` (trials, episodes)."""
        n = np.maximum(self.n, 1)
        return {"logp": self.logp / n, "agreement": self.agree / n}


class WrappedStepper:
    """A stepper that passes every call to the checkpoint's :class:`TorchStepper` it wraps; the
    diagnostics below override ``logits`` or watch the model from inside."""

    def __init__(self, stepper) -> None:
        self.stepper, self.args, self.wipe_each_episode = stepper, stepper.args, stepper.wipe_each_episode

    def reset(self, batch: int, steps: int) -> None:
        self.stepper.reset(batch, steps)

    def forget(self) -> None:
        self.stepper.forget()

    def memory_stats(self) -> dict:
        return self.stepper.memory_stats()

    def logits(self, inp: dict[str, torch.Tensor]) -> torch.Tensor:
        return self.stepper.logits(inp)


class StopViews(WrappedStepper):
    """Wraps a checkpoint's :class:`TorchStepper`: per step, the frozen heads' P(goal in view) and
    expected goal distance for the current image; as an observer, records them at every stop of an
    unfinished episode with its outcome. ``gate`` > 0 masks the stop logit where P < ``gate``."""

    def __init__(self, stepper, episodes: int, gate: float = 0.0, auto: float = 0.0, auto_m: float = 0.6) -> None:
        super().__init__(stepper)
        self.episodes, self.gate, self.auto, self.auto_m = episodes, gate, auto, auto_m
        # the product's rule (models/stop_rule.py), applied to the heads' exact P; apply() reads no token, so
        # it needs no categories
        self.rule = StopRule(gate, auto, auto_m, n_goals=0) if gate > 0 or auto > 0 else None
        enc = stepper.policy.encoder
        if getattr(enc, "heads", None) is None:
            raise ValueError("--stop-views / --stop-gate: the policy has no frozen label heads (a house model with "
                             "visual_encoder: features)")
        self.enc = enc
        self.rows: list[tuple[float, float, bool, int]] = []  # (P, distance, success, episode)

    def logits(self, inp: dict[str, torch.Tensor]) -> torch.Tensor:
        logits = self.stepper.logits(inp)
        f = (inp["rgb_feat"] if "rgb_feat" in inp else self.enc.features(inp["rgb"])).float()
        goal = inp["goal"].long()
        p, _, dist = self.enc.heads.object_estimates(f, inp["odom"].float())
        self.p = p.gather(-1, goal[:, None])[:, 0]
        self.dist = dist.gather(-1, goal[:, None])[:, 0]
        if self.rule is not None:
            logits = self.rule.apply(logits, self.p, self.dist)
        return logits

    def __call__(self, labels, first, action, logits, done, info, done_eps) -> None:
        for i in np.flatnonzero(action.numpy() == STOP):
            if done_eps[i] < self.episodes:
                self.rows.append((float(self.p[i]), float(self.dist[i]), bool(info[i]["success"]), int(done_eps[i])))

    def summary(self) -> dict:
        out = {"gate": self.gate, "auto": self.auto, "auto_m": self.auto_m}
        if not self.rows:
            return out
        p, d, ok, _ = map(np.array, zip(*self.rows))
        for name, m in (("right_stops", ok), ("wrong_stops", ~ok)):
            out[name] = {"n": int(m.sum())}
            if m.any():
                out[name].update({"p_goal_quartiles": np.percentile(p[m], [25, 50, 75]).round(3).tolist(),
                                  "p_goal_below_0.5": float((p[m] < 0.5).mean()),
                                  "distance_m_quartiles": np.percentile(d[m], [25, 50, 75]).round(2).tolist()})
        return out


class MemoryReadout(WrappedStepper):
    """Wraps a checkpoint's :class:`TorchStepper` whose model has an object memory head: records
    what the head reads at every step (attention mass on sightings, the remembered house-frame
    position); as an observer (after the :class:`Tally`) scores it at each episode's first step
    against the goal's true instances (``HouseEnv.target_positions``), and per episode tracks whether
    the teacher labelled a stop on the policy's path and the closest geodesic distance reached."""

    HELD = 0.5  # the head's own gate (ObjectMemoryHead.readout): mass above it = a sighting is read
    NEAR_M = 1.5  # a remembered position this close to an instance counts as right

    def __init__(self, stepper, trials: int, episodes: int) -> None:
        from icrl_ros.models.encoders import OBJECT_SCALE_M
        from icrl_ros.models.object_memory import ObjectMemoryHead

        heads = [m for m in stepper.policy.modules() if isinstance(m, ObjectMemoryHead)]
        if not heads:
            raise ValueError("--memory-readout: the policy has no object memory head (model.house.object_memory)")
        super().__init__(stepper)
        self.episodes = episodes
        read, scale = heads[0].readout, OBJECT_SCALE_M

        def readout(y0, x):  # the head's output at the newest step of each env
            y = y0[:, -1].float()
            mass = y[:, 2].clamp(0.0, 1.0)
            self._mass = mass.numpy().copy()
            self._est = (y[:, 0:2] / mass.clamp(min=1e-3)[:, None] * scale).numpy().copy()
            return read(y0, x)

        heads[0].readout = readout
        shape = (trials, episodes)
        self.mass, self.err = np.full(shape, np.nan), np.full(shape, np.nan)
        self.passed_stop, self.closest = np.zeros(shape, bool), np.full(shape, np.inf)
        self.env, self._targets, self._fresh = None, None, None

    def bind_env(self, env) -> None:
        self.env, self._targets = env, None  # asked for at the first step, once the trial has begun
        self._fresh = np.ones(env.num_envs, bool)

    def __call__(self, labels, first, action, logits, done, info, done_eps) -> None:
        if self._targets is None:
            self._targets = self.env.call("target_positions", "house")
        for i in range(len(done)):
            t, e = first + i, int(done_eps[i])
            if e >= self.episodes:
                continue
            self.passed_stop[t, e] |= bool(labels[0][i] == STOP)
            self.closest[t, e] = min(self.closest[t, e], float(info[i]["geodesic_distance"]))
            if self._fresh[i]:  # the readout of this episode's first state
                self.mass[t, e] = self._mass[i]
                if self._mass[i] > self.HELD:
                    self.err[t, e] = np.linalg.norm(self._targets[i] - self._est[i], axis=1).min()
                self._fresh[i] = False
        if done.any():  # the envs that finished have reset: the next episode's goal
            self._targets = self.env.call("target_positions", "house")
            self._fresh |= done

    def summary(self, tally: Tally, late_from: int) -> dict:
        """Per (goal known at start, outcome), all episodes and episodes ``late_from`` + 1 on."""
        ep = np.broadcast_to(np.arange(self.episodes), self.mass.shape)
        out = {}
        for span, m0 in (("all", ep >= 0), (f"episodes_{late_from + 1}_on", ep >= late_from)):
            for kname, k in (("goal_known", 1), ("goal_unknown", 0)):
                for j, o in enumerate(OUTCOMES):
                    m = m0 & (tally.known_at_start == k) & (tally.outcome == j)
                    n = int(m.sum())
                    if not n:
                        continue
                    held = m & (self.mass > self.HELD)
                    out[f"{span}/{kname}/{o}"] = {
                        "episodes": n, "memory_held_goal": float(held.sum() / n),
                        "held_and_right": float((held & (self.err <= self.NEAR_M)).sum() / n),
                        "position_error_m_median": float(np.median(self.err[held])) if held.any() else None,
                        "passed_a_stop_state": float(self.passed_stop[m].mean()),
                        "came_within_1m": float((self.closest[m] <= 1.0).mean()),
                        "closest_m_median": float(np.median(self.closest[m]))}
        return out


def print_readout(r: dict) -> None:
    print(f"  the object memory at each episode start (held: a sighting read; right: within "
          f"{MemoryReadout.NEAR_M} m of a goal instance) and the path:")
    print(f"    {'episodes':<42} {'n':>4} {'held':>5} {'right':>5} {'err m':>6} {'stop st':>7} {'<=1 m':>6} "
          f"{'closest':>7}")
    for name, v in r.items():
        err = v["position_error_m_median"]
        print(f"    {name:<42} {v['episodes']:>4} {v['memory_held_goal']:>5.2f} {v['held_and_right']:>5.2f} "
              f"{err if err is not None else float('nan'):>6.2f} {v['passed_a_stop_state']:>7.2f} "
              f"{v['came_within_1m']:>6.2f} {v['closest_m_median']:>7.1f}")


def print_summary(label: str, d: dict) -> None:
    print(f"{label}: outcomes per episode (fractions)")
    print(f"  {'episodes':<24} {'n':>5} " + " ".join(f"{o:>11}" for o in OUTCOMES))
    for name in ("all", "goal_known_at_start", "goal_unknown_at_start"):
        r = d[name]
        print(f"  {name:<24} {r['episodes']:>5} " + " ".join(f"{r[o]:>11.3f}" for o in OUTCOMES))
    s = d["steps"]
    print(f"  agreement with the teacher on the policy's own states: {s['agreement']:.3f} (goal known "
          f"{s['agreement_goal_known']:.3f} over {s['steps_goal_known']} steps, unknown "
          f"{s['agreement_goal_unknown']:.3f} over {s['steps_goal_unknown']})")
    print(f"  stop precision {s['stop_precision']:.3f} (stops the teacher would make), recall {s['stop_recall']:.3f}")
    print("  teacher knew the goal at the start of episode k: "
          + " ".join(f"{x:.2f}" for x in d["known_at_start_by_episode"]))
    v = d.get("stop_views")
    if v:
        gate = f" (stop masked while P < {v['gate']})" if v["gate"] else ""
        if v.get("auto"):
            gate += f" (stop taken when P >= {v['auto']} within {v['auto_m']} m)"
        print(f"  the frozen heads at each stop{gate}:")
        for name in ("right_stops", "wrong_stops"):
            r = v.get(name)
            if r and r["n"]:
                print(f"    {name:<11} n={r['n']:>4}: P(goal in view) quartiles {r['p_goal_quartiles']}, below 0.5 "
                      f"{r['p_goal_below_0.5']:.2f}; expected distance quartiles {r['distance_m_quartiles']} m")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("policy", help="a house checkpoint (.pt) or bundle directory")
    p.add_argument("--trials", type=int, default=12)
    p.add_argument("--episodes", type=int, default=8)
    p.add_argument("--seed", type=int, default=100)
    p.add_argument("--split", default="test")
    p.add_argument("--batch", type=int, default=12)
    p.add_argument("--temperature", type=float, default=1.0, help="sampling temperature (default 1)")
    p.add_argument("--greedy", action="store_true", help="argmax actions instead of sampling")
    p.add_argument("--backend", default="onnxruntime", choices=["onnxruntime", "torch"], help="bundles: the engine")
    p.add_argument("--teacher-forced", action="store_true",
                   help="the teacher drives; compare the policy's prediction of its actions with and without memory")
    p.add_argument("--handover", type=int, default=0, metavar="K",
                   help="the teacher drives each trial's first K episodes, the policy (as deployed, stop rule on) the "
                        "rest, with memory and wiped; the paired gain of memory over the policy's episodes")
    p.add_argument("--stop-views", action="store_true",
                   help="a checkpoint: record the frozen heads' P(goal in view) and distance at every stop")
    p.add_argument("--stop-gate", type=float, default=0.0, metavar="P",
                   help="what-if (implies --stop-views): mask the stop action while P(goal in view) < P")
    p.add_argument("--stop-auto", type=float, default=0.0, metavar="P",
                   help="what-if (implies --stop-views): stop whenever P(goal in view) >= P within --stop-auto-m")
    p.add_argument("--stop-auto-m", type=float, default=0.6, metavar="M",
                   help="--stop-auto: the heads' expected goal distance must be at most M metres (default 0.6)")
    p.add_argument("--memory-readout", action="store_true",
                   help="a checkpoint with an object memory: what it reads at each episode start, and how close "
                        "the policy came, by outcome")
    p.add_argument("--census", action="store_true",
                   help="classify every episode: success, wrong stop, or a timeout with the goal remembered / never "
                        "seen / seen but not recognised by the encoder / recognised but not reached / reached")
    p.add_argument("--late-from", type=int, default=6, metavar="K",
                   help="--memory-readout, --census: also split out episodes K and later (default 6)")
    p.add_argument("--out", help="directory for diagnosis.json (teacher_forced.json)")
    args = p.parse_args(argv)
    if args.trials <= 0 or args.episodes <= 0:
        fail("--trials and --episodes must be positive")
    if not args.temperature > 0:
        fail(f"--temperature must be positive, got {args.temperature}")
    if args.teacher_forced:
        return teacher_forced(args)
    if args.handover:
        return handover(args)
    try:
        stepper, options, desc = stepper_for(args.policy, args.backend)
    except (FileNotFoundError, ValueError, KeyError) as e:
        fail(f"{args.policy}: {e}")
    tally = Tally(args.trials, args.episodes)
    observer, views = tally, None
    if args.stop_views or args.stop_gate or args.stop_auto:
        if not hasattr(stepper, "policy"):
            fail("--stop-views / --stop-gate read the frozen heads of a checkpoint (.pt), not a bundle")
        try:
            views = stepper = StopViews(stepper, args.episodes, args.stop_gate, args.stop_auto, args.stop_auto_m)
        except ValueError as e:
            fail(f"{args.policy}: {e}")

        def observer(*a):
            tally(*a)
            views(*a)
    census = None
    if args.census:
        if views is not None or args.memory_readout:
            fail("--census goes alone (without --stop-views / --stop-gate / --stop-auto / --memory-readout)")
        if not 1 <= args.late_from <= args.episodes:
            fail(f"--late-from must be within 1..{args.episodes}, got {args.late_from}")
        a = stepper.args
        if not (a.obs_type == "image" and a.pretrained_encoder and Path(a.pretrained_encoder).is_file()):
            fail(f"--census scores frames with the policy's frozen encoder: {args.policy} names none that exists "
                 f"(model.pretrained_encoder {a.pretrained_encoder!r})")
        census = Census(args.trials, args.episodes, a.pretrained_encoder, a.image_size)

        def observer(*a):
            tally(*a)
            census(*a)
        observer.bind_env, observer.see = census.bind_env, census.see
    readout = None
    if args.memory_readout:
        if views is not None or not hasattr(stepper, "policy"):
            fail("--memory-readout reads the object memory of a checkpoint (.pt), not a bundle, and goes alone "
                 "(without --stop-views / --stop-gate / --stop-auto)")
        if not 1 <= args.late_from <= args.episodes:
            fail(f"--late-from must be within 1..{args.episodes}, got {args.late_from}")
        try:
            readout = stepper = MemoryReadout(stepper, args.trials, args.episodes)
        except ValueError as e:
            fail(f"{args.policy}: {e}")

        def observer(*a):
            tally(*a)
            readout(*a)
        observer.bind_env = readout.bind_env  # run_house_trials hands it each batch's envs
    res = run_house_trials(stepper, args.trials, args.episodes, seed=args.seed, split=args.split, greedy=args.greedy,
                           temperature=args.temperature, batch=args.batch, env_options=options, teacher="memory",
                           observer=observer, progress=lambda m: print(f"  {m}", file=sys.stderr, flush=True))
    d = {**tally.summary(), **({"stop_views": views.summary()} if views else {}),
         **({"memory_readout": readout.summary(tally, args.late_from - 1)} if readout else {}),
         **({"census": census.summary(tally, args.late_from - 1)} if census else {}), "policy": desc,
         "trials": args.trials, "episodes": args.episodes, "seed": args.seed,
         "greedy": args.greedy, "temperature": None if args.greedy else args.temperature,
         "success_rate": float(res["success"].mean()), "spl": float(res["spl"].mean())}
    print_summary(Path(args.policy).name, d)
    if readout:
        print_readout(d["memory_readout"])
    if census:
        print_census(Path(args.policy).name, d["census"])
    print(f"  success {d['success_rate']:.3f}, SPL {d['spl']:.3f} over {args.trials} x {args.episodes} episodes")
    write_out(args, "diagnosis.json", d)
    return 0



def mean_ci(x: np.ndarray) -> tuple[float, float]:
    x = np.asarray(x, float)
    return float(x.mean()), float(1.96 * x.std(ddof=1) / np.sqrt(len(x))) if len(x) > 1 else float("nan")


def write_out(args, name: str, data: dict) -> None:
    """``data`` as ``--out``/``name`` (JSON), when ``--out`` is given."""
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        (Path(args.out) / name).write_text(json.dumps(data, indent=1))
        print(f"wrote {Path(args.out) / name}")


def kept_and_wiped(args, **kw):
    """(wiped, stepper, env options, description): the policy with its memory, then with memory wiped at
    every episode start; a CLI failure, before any trial runs, when it does not load or the batch does not fit."""
    for wipe in (False, True):
        try:
            stepper, options, desc = stepper_for(args.policy, args.backend, wipe=wipe, **kw)
            check_wipe_batch(stepper, args.batch)
        except (FileNotFoundError, ValueError, KeyError) as e:
            fail(f"{args.policy}: {e}")
        yield wipe, stepper, options, desc


def teacher_forced(args) -> int:
    """``--teacher-forced``: the policy with memory and wiped on the teacher's trials (same states)."""
    got, desc = {}, None
    for wipe, stepper, options, d in kept_and_wiped(args, stop_rule=False):
        desc = desc or d
        tally = TeacherLikelihood(args.trials, args.episodes)
        res = run_house_trials(stepper, args.trials, args.episodes, seed=args.seed, split=args.split,
                               batch=args.batch, env_options=options, teacher="memory", observer=tally, drive="teacher")
        got["wiped" if wipe else "memory"] = {**tally.per_episode(), "teacher_success": float(res["success"].mean())}
    m, w = got["memory"], got["wiped"]
    print(f"{Path(args.policy).name}: the teacher drives ({args.trials} trials x {args.episodes} episodes, seed "
          f"{args.seed}; teacher success {m['teacher_success']:.3f}); the policy's prediction of its actions")
    print(f"  {'episode':>7} | {'log-lik memory':>14} {'wiped':>7} | {'agree memory':>12} {'wiped':>7}")
    for e in range(args.episodes):
        print(f"  {e + 1:>7} | {m['logp'][:, e].mean():>14.3f} {w['logp'][:, e].mean():>7.3f} | "
              f"{m['agreement'][:, e].mean():>12.3f} {w['agreement'][:, e].mean():>7.3f}")
    out = {"policy": desc, "trials": args.trials, "episodes": args.episodes, "seed": args.seed, "batch": args.batch}
    if args.episodes > 1:
        for k in ("logp", "agreement"):
            gain = m[k][:, 1:].mean(1) - w[k][:, 1:].mean(1)
            mu, ci = mean_ci(gain)
            out[f"{k}_gain"] = {"mean": mu, "ci95": ci, "min": float(gain.min()), "per_trial": gain.tolist()}
            print(f"  memory - wiped, episodes 2-{args.episodes}, per trial: {k} {mu:+.3f} +- {ci:.3f} "
                  f"(smallest {gain.min():+.3f}, n={args.trials})")
    out.update({k: {kk: (vv.tolist() if isinstance(vv, np.ndarray) else vv) for kk, vv in v.items()}
                for k, v in got.items()})
    write_out(args, "teacher_forced.json", out)
    return 0


def handover(args) -> int:
    """``--handover K``: the teacher lives in the house for K episodes (the policy's memory, or its wiped
    ablation, reads them), then the policy drives; its success, SPL and steps from episode K + 1 on."""
    K = args.handover
    if not 0 < K < args.episodes:
        fail(f"--handover {K}: needs 0 < K < --episodes ({args.episodes}), so the policy drives at least one episode")
    got, desc = {}, None
    for wipe, stepper, options, d in kept_and_wiped(args):
        desc = desc or d
        res = run_house_trials(stepper, args.trials, args.episodes, seed=args.seed, split=args.split,
                               greedy=args.greedy, temperature=args.temperature, batch=args.batch,
                               env_options=options, teacher="memory", drive="teacher", teacher_episodes=K)
        got["wiped" if wipe else "memory"] = {k: res[k] for k in ("success", "spl", "steps")}
    m, w = got["memory"], got["wiped"]
    print(f"{Path(args.policy).name}: the teacher drives episodes 1-{K}, the policy {K + 1}-{args.episodes} "
          f"({args.trials} trials, seed {args.seed})")
    print(f"  {'episode':>7} | {'success memory':>14} {'wiped':>6} | {'SPL memory':>10} {'wiped':>6} | "
          f"{'steps memory':>12} {'wiped':>6}")
    for e in range(args.episodes):
        print(f"  {e + 1:>7}{'*' if e >= K else ' '}| "
              f"{m['success'][:, e].mean():>14.3f} {w['success'][:, e].mean():>6.3f} | "
              f"{m['spl'][:, e].mean():>10.3f} {w['spl'][:, e].mean():>6.3f} | "
              f"{m['steps'][:, e].mean():>12.1f} {w['steps'][:, e].mean():>6.1f}")
    out = {"policy": desc, "trials": args.trials, "episodes": args.episodes, "handover": K, "seed": args.seed,
           "batch": args.batch}
    for k in ("success", "spl", "steps"):
        gain = m[k][:, K:].mean(1) - w[k][:, K:].mean(1)
        mu, ci = mean_ci(gain)
        out[f"{k}_gain"] = {"mean": mu, "ci95": ci, "sd": float(gain.std(ddof=1)) if len(gain) > 1 else 0.0,
                            "per_trial": gain.tolist()}
        print(f"  memory - wiped, policy's episodes {K + 1}-{args.episodes}, per trial: {k} {mu:+.3f} +- {ci:.3f} "
              f"(n={args.trials})")
    out.update({k: {kk: vv.tolist() for kk, vv in v.items()} for k, v in got.items()})
    write_out(args, "handover.json", out)
    return 0


if __name__ == "__main__":
    from icrl_ros.training._cli import run_main

    raise SystemExit(run_main(main))
