"""Evaluate a house policy: per-episode success, SPL and steps over fixed-length trials.

    python training/evaluate.py checkpoints/house_memo.pt --trials 100 --episodes 20   # training side
    python training/evaluate.py bundles/house_relic --trials 100 --episodes 20          # deployed bundle

Every trial is one held-out house for exactly ``episodes`` episodes (an env that has run its
episodes takes ``stop`` until the others finish; those steps are not counted), so every
episode index averages over all trials. Two steppers run the same loop:

* :class:`TorchStepper`: the training code (``icrl_ros.models.act`` with its memory);
* :class:`BundleStepper`: what is deployed, a bundle through
  :class:`~icrl_ros.runtime.runner.PolicyRunner` (ONNX Runtime by default) and the memory the
  manifest names, batched over trials with ``PolicyRunner.step``.

Actions are drawn by :func:`~icrl_ros.runtime.runner_base.choose_actions` (greedy or sampled at a
temperature) with a seeded generator; the env's starts and goals come from ``seed`` as well.
"""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

from icrl_ros.families import family_of
from icrl_ros.models import load_checkpoint, make_memory
from icrl_ros.runtime.control import ControlStep
from icrl_ros.runtime.runner_base import choose_actions
from icrl_ros.sim.house import SEEING_TEACHERS, STOP
from icrl_ros.sim.house_vec import HouseVecEnv
from icrl_ros.training.ppo import next_step_inputs, trial_start_inputs


class TorchStepper:
    """The training-side policy (its live control step against ``make_memory``)."""

    wipe_each_episode = False
    """Clear the memory at every episode start (:func:`stepper_for` ``wipe``, Memo / HCAM)."""

    def __init__(self, policy) -> None:
        self.policy = policy
        self.args = policy.args
        self.mem = None

    def use_args(self, args) -> None:
        """Act with ``args`` (the same weights; runtime options changed: the wiped ablation, house options)."""
        self.policy.args = self.args = args

    def reset(self, batch: int, steps: int) -> None:
        self.mem = make_memory(self.policy, batch, steps)
        self.control = ControlStep.live(self.policy, self.mem)

    def logits(self, inp: dict[str, torch.Tensor]) -> torch.Tensor:
        return self.control(inp)[0]

    def forget(self) -> None:
        """Clear the memory (the no-memory ablation at an episode start; batch 1), the route map with it."""
        self.control.forget()

    def memory_stats(self) -> dict:
        return {"memory_bytes": self.control.memory_bytes,
                "memory_tokens": int(self.mem.valid[0].sum())}


class BundleStepper:
    """A deploy bundle through PolicyRunner with the manifest's memory policy."""

    wipe_each_episode = False
    """Clear the memory at every episode start (:func:`stepper_for` ``wipe``, Memo / HCAM)."""

    def __init__(self, path: str | Path, backend: str = "onnxruntime", memory: str | None = None) -> None:
        from icrl_ros.runtime.bundle import load_bundle
        from icrl_ros.runtime.engine import make_engine

        self.bundle = load_bundle(path)
        self.engine = make_engine(self.bundle, backend, "cpu")
        self.backend, self.memory = backend, memory
        self.args = self.bundle.args
        self.runner = None

    def use_args(self, args) -> None:
        """Act with ``args`` (the same weights; runtime options changed: the wiped ablation, house options)."""
        self.bundle = replace(self.bundle, args=args)
        self.args = args

    def reset(self, batch: int, steps: int) -> None:
        from icrl_ros.runtime.runner import PolicyRunner, build_memory

        mem = build_memory(self.bundle, self.memory, batch=batch)
        self.runner = PolicyRunner(self.bundle, self.engine, mem)
        self.names = list(self.runner.spec)

    def logits(self, inp: dict[str, torch.Tensor]) -> torch.Tensor:
        return self.runner.step({n: inp[n] for n in self.names if n in inp}, inp["episode_index"])[0]

    def forget(self) -> None:
        """Clear the memory (the no-memory ablation at an episode start; batch 1), the route map with
        it. A pinned sink-token prefix stays (``Memory.reset``)."""
        self.runner.control.forget()

    def memory_stats(self) -> dict:
        m = self.runner.memory
        return {"memory_bytes": self.runner.control.memory_bytes, "memory_tokens": int(m.valid[0].sum()),
                "memory_policy": m.policy}


@torch.no_grad()
def run_house_trials(stepper, trials: int, episodes: int, seed: int = 0, split: str = "test",
                     greedy: bool = False, temperature: float = 1.0, batch: int = 25, workers: int = 2,
                     env_options: dict | None = None, teacher: str | None = None, observer=None,
                     drive: str = "policy", teacher_episodes: int | None = None, progress=None,
                     pose_errors=None) -> dict:
    """``trials`` trials of ``episodes`` episodes each, ``batch`` trials at a time. Returns the
    (trials, episodes) matrices ``success``, ``spl``, ``steps``, ``goal`` (each episode's goal category) and run
    figures.

    ``teacher`` ("memory" | "wiped"): run the in-context teacher beside the policy (it only
    watches). ``observer(labels, first_trial, action, logits, done, info, done_eps)`` is called
    after every step: ``labels`` = the teacher's (action, goal known) arrays for the states the
    actions were taken in, ``done_eps`` = each env's finished episodes before the step. An
    observer with a ``bind_env(env)`` method is handed each batch's ``HouseVecEnv`` first; one with
    a ``see(obs)`` method is handed every observation the policy is about to act on (after the
    trial's reset, then after each step and the observer call).

    ``drive="teacher"``: the teacher's actions are executed and the policy only reads the states
    (teacher forcing: its memory holds the teacher's trial, the same for every policy); the matrices
    are then the teacher's results. ``teacher_episodes`` N (with ``drive="teacher"``): the teacher drives
    each trial's first N episodes only and the policy the rest, on a memory that holds the teacher's
    (the policy's draws are made at every step either way, so runs stay paired draw for draw).
    ``progress(message)``: called after each batch of trials with a line on how far the run is.

    ``pose_errors`` (:class:`~icrl_ros.sim.pose_noise.PoseErrors`): the policy's odometry is what a robot
    with that localisation error / odometry drift would hand it (:class:`~icrl_ros.sim.pose_noise.PoseObserver`,
    seeded per trial from ``seed``, so two runs meet the same errors where they take the same path); the env,
    the teacher and the scores keep the true pose. Needs the house frame (``pose_frame: house``). The result
    then has ``pose_error_m_mean`` / ``_p95``: the position error of the pose handed over, over every step."""
    if drive not in ("policy", "teacher"):
        raise ValueError(f"drive: {drive!r} is not 'policy' or 'teacher'")
    if drive == "teacher" and teacher is None:
        raise ValueError("drive='teacher' needs teacher='memory' or 'wiped'")
    if teacher_episodes is not None and drive != "teacher":
        raise ValueError("teacher_episodes: the teacher drives only with drive='teacher'")
    a = stepper.args
    forget = stepper.wipe_each_episode
    check_wipe_batch(stepper, batch)
    options = dict(env_options or {})
    options.pop("teacher", None)
    if teacher is not None:
        options["teacher"] = teacher
    if teacher not in SEEING_TEACHERS:  # a checkpoint imitated from the seeing teacher names its eyes
        options.pop("teacher_encoder", None)
        options.pop("teacher_present", None)
    if not str(teacher).startswith("inputs"):  # and from the input searcher, its floor and approach
        options.pop("teacher_bands", None)
        options.pop("teacher_approach", None)
        options.pop("teacher_stop_frames", None)
    max_steps = int(options.pop("max_episode_steps", a.max_episode_steps))
    size = int(options.pop("image_size", a.image_size))  # a checkpoint's env options may name its camera
    if size != a.image_size:
        raise ValueError(f"env image_size {size} is not the policy's camera ({a.image_size} px)")
    if pose_errors is not None and not pose_errors.active:
        pose_errors = None
    if pose_errors is not None and options.get("pose_frame", "house") != "house":
        raise ValueError(f"pose errors are applied to house-frame odometry; this policy reads {options['pose_frame']!r}")
    pose_err_m: list[float] = []
    taught_episodes = episodes if teacher_episodes is None else teacher_episodes  # drive="teacher": its episodes
    out = {k: np.zeros((trials, episodes)) for k in ("success", "spl", "steps")}
    out["goal"] = np.full((trials, episodes), -1, np.int64)  # each episode's goal category (index into GOAL_NAMES)
    houses, total, t0 = [], 0, time.perf_counter()
    env = None
    try:
        for start in range(0, trials, batch):
            B = min(batch, trials - start)
            # batches of one size share their worker processes; reseed gives what new ones would draw
            if env is None or env.num_envs != B:
                if env is not None:
                    env.close()
                env = HouseVecEnv(B, split=split, seed=seed * 100_003 + start, image_size=a.image_size,
                                  num_workers=min(workers, B), max_episode_steps=max_steps, **options)
            else:
                env.reseed(seed * 100_003 + start)
            # one action sampler per batch: a batch's draws do not depend on how long the batches before it
            # ran, so two policies (a policy and its memory-wiped ablation) share episode 1 trial for trial
            g = torch.Generator().manual_seed(seed * 100_003 + start)
            if hasattr(observer, "bind_env"):  # an observer that asks the envs for privileged facts
                observer.bind_env(env)
            obs = env.reset_trial()
            poses = None
            if pose_errors is not None:
                from icrl_ros.sim.pose_noise import PoseObserver

                poses = PoseObserver(pose_errors, [[seed, start + i, 0x90D] for i in range(B)])
                obs["odom"] = poses.reset(obs["odom"])
            see = getattr(observer, "see", None)
            if see is not None:
                see(obs)
            houses += [i["house_seed"] for i in env.call("_info")]
            stepper.reset(B, episodes * max_steps + 1)
            cur = trial_start_inputs(env, obs, a.n_actions, "cpu")
            done_eps = np.zeros(B, np.int64)
            while (done_eps < episodes).any():
                logits = stepper.logits(cur)
                action = choose_actions(logits, greedy, temperature, g)
                if drive == "teacher":
                    taught = torch.as_tensor(done_eps < taught_episodes)
                    action = torch.where(taught, torch.as_tensor(env.teacher_action, dtype=torch.long), action)
                action = torch.where(torch.as_tensor(done_eps >= episodes), STOP, action)
                before = (env.teacher_action.copy(), env.teacher_goal_known.copy())
                obs, reward, done, info = env.step(action.numpy(), active=done_eps < episodes)  # finished trials wait
                if poses is not None:
                    obs["odom"] = poses.step(obs["odom"])
                if forget and done[0]:  # the no-memory ablation of a non-ReLIC policy: batch 1
                    stepper.forget()
                if observer is not None:
                    observer(before, start, action, logits, done, info, done_eps.copy())
                if see is not None:
                    see(obs)
                total += int((done_eps < episodes).sum())
                for i in np.flatnonzero(done):
                    e = done_eps[i]
                    if e < episodes:
                        out["success"][start + i, e] = float(info[i]["success"])
                        out["spl"][start + i, e] = float(info[i]["spl"])
                        out["steps"][start + i, e] = float(info[i]["episode_step"])
                        out["goal"][start + i, e] = int(cur["goal"][i])  # the ended episode's (cur: its last step)
                    done_eps[i] += 1
                cur = next_step_inputs(env, obs, action, reward, done, cur, "cpu", info)
            stats = stepper.memory_stats()
            if poses is not None:
                pose_err_m += [e for errs in poses.errors_m for e in errs]
            if progress is not None:
                done = start + B
                el = time.perf_counter() - t0
                progress(f"trials {done}/{trials} done, {total:,} steps in {el:.0f} s ({total / max(el, 1e-9):.0f} "
                         f"steps/s), success so far {out['success'][:done].mean():.3f}")
    finally:
        if env is not None:
            env.close()
    wall = time.perf_counter() - t0
    extra = {"pose_error_m_mean": float(np.mean(pose_err_m)), "pose_error_m_p95": float(np.percentile(pose_err_m, 95))
             } if pose_err_m else {}
    return {**out, "house_seed": np.array(houses), "agent_steps": total, "wall_s": wall,
            "steps_per_s": total / wall, **stats, **extra}


class _Stopper:
    """A stepper that stops at once: every episode ends on its first step (for :func:`episode_goals`)."""

    wipe_each_episode = False

    def __init__(self, args) -> None:
        self.args = args

    def reset(self, batch: int, steps: int) -> None:
        pass

    def logits(self, inp: dict[str, torch.Tensor]) -> torch.Tensor:
        out = torch.full((inp["goal"].shape[0], self.args.n_actions), -1.0e9)
        out[:, STOP] = 0.0
        return out

    def memory_stats(self) -> dict:
        return {}


def episode_goals(path: str, trials: int, episodes: int, seed: int, batch: int, split: str = "test") -> dict:
    """The goal category of each episode of the trials :func:`run_house_trials` runs for ``path``'s policy with
    this seed and batch, without running the policy: an episode's goal and start come from the env's own
    generator, not from the actions, so a policy that stops at once meets the same goals in the same houses.
    Returns ``goal`` (trials, episodes) and ``house_seed``; for evaluations written before ``goal`` was recorded."""
    st, opts, _ = stepper_for(path)
    r = run_house_trials(_Stopper(st.args), trials, episodes, seed=seed, split=split, batch=batch, env_options=opts,
                         greedy=True)
    return {"goal": r["goal"], "house_seed": r["house_seed"]}


def check_wipe_batch(stepper, batch: int) -> None:
    """A stepper that clears its memory at every episode start (the no-memory ablation of Memo /
    HCAM, ``stepper_for(wipe=True)``) runs one trial at a time: raises ValueError otherwise."""
    if stepper.wipe_each_episode and batch != 1:
        raise ValueError(f"--wipe-memory on a {stepper.args.kind} policy clears its memory at every episode start, "
                         f"which a batched memory cannot do per trial: use batch 1 (--batch 1), got {batch}")


def stepper_for(path: str, backend: str = "onnxruntime", memory: str | None = None, wipe: bool = False,
                stop_rule: bool = True, house: dict | None = None):
    """(stepper, env options, description) for a checkpoint file or a bundle directory.

    ``stop_rule`` False: the policy's learnt logits without its stop rule (``model.house.stop_gate`` /
    ``stop_sure``), for scoring how well it predicts a teacher rather than for acting. ``house``: fields of the
    model's ``house`` section to change for acting (``{"forget_contradicted": 3}``).

    ``wipe``: the no-memory ablation, the same weights without what they saw in earlier episodes of
    the trial. ReLIC attends only to the current episode (inter-episode attention off: as if memory
    were cleared at every episode start); Memo and HCAM, whose summaries and chunks mix episodes,
    have their memory cleared at every episode start (``forget``; batch 1)."""
    p = Path(path)
    if p.is_dir():
        st = BundleStepper(p, backend, memory)
        args, m = st.bundle.args, st.bundle.manifest
        desc = {"bundle": str(p), "backend": backend, "memory": memory or m.memory.policy}
        opts = {"pose_frame": m.observation.frame}
        for name in ("scan", "scan_bands"):  # the bundle reads the env's laser-scan headings / floor per band
            if any(io["name"] == name for io in st.bundle.specs["encoder"]["inputs"]):
                opts[name] = True
    else:
        policy, blob = load_checkpoint(p)
        st, args = TorchStepper(policy), policy.args
        opts = dict((blob["config"].get("env") or {}).get("options") or {})
        opts.setdefault("pose_frame", "episode")  # checkpoints from before pose frames were episode-framed
        desc = {"checkpoint": str(p), "backend": "torch (training code)", "env_steps_trained": blob.get("env_steps")}
    changed = args
    if wipe:
        if args.kind == "relic":
            changed = replace(changed, iea=False)
        elif family_of(args).cached_step:
            st.wipe_each_episode = True
        else:
            raise ValueError(f"the memory-wiped ablation: not for {args.kind} (its memory is a retrieval index)")
        desc["memory_wiped_each_episode"] = True
    if house:  # runtime options of the house section
        changed = changed.replace_section("house", **house)
        changed.house.validate(changed)
        desc["house_options"] = dict(house)
    if not stop_rule and args.house.stop_rule:
        changed = changed.replace_section("house", stop_gate=0.0, stop_sure=0.0)
        desc["stop_rule_off"] = True
    if changed is not args:  # the stepper builds its control step from these at every trial
        st.use_args(changed)
    return st, opts, desc
