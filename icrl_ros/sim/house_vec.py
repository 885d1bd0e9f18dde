"""``HouseVecEnv``: many house trials stepped in subprocess workers for training.

Each worker process owns a contiguous slice of the envs (its own EGL context) and talks
to the parent over a pipe. ``step`` auto-resets a finished env to the *next episode of the
same trial* (same house); ``reset_trial`` draws new houses. Observations come back
stacked: rgb (N, H, W, 3) uint8, goal (N,), odom (N, 3) float32, prev_action (N,), and with the
``scan`` option scan (N, SCAN_BINS) float32.
"""

from __future__ import annotations

import math
import multiprocessing as mp
import os
import traceback
from typing import Any

import numpy as np

from icrl_ros.sim.house_layout import FORWARD_STEP_M, GOAL_NAMES, ODOM_LIMIT_M, TURN_STEP_DEG, check_split

OBS_KEYS = ("rgb", "goal", "odom", "prev_action")


def env_seeds(seed: int | None, num_envs: int) -> list[int]:
    """Per-env seeds of a HouseVecEnv (env i's first trial is ``reset(seed=env_seeds[i])``)."""
    return [int(s.generate_state(1)[0]) for s in np.random.SeedSequence(seed).spawn(num_envs)]


def _stack(obs: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    return {k: np.stack([o[k] for o in obs]) for k in (*OBS_KEYS, "scan", "scan_bands") if k in obs[0]}


HOLD = -1
"""The action of an env that :meth:`HouseVecEnv.step` holds (``active`` False): not stepped."""


def _held_info(info: dict, episode_start: bool) -> dict:
    """What a held env reports: its episode step and its teacher's label of the state it waits in."""
    out = {"episode_step": 0 if episode_start else int(info["episode_step"])}
    for k in ("teacher_action", "teacher_goal_known"):
        if k in info:
            out[k] = info[k]
    return out


def _worker(conn, env_kwargs: dict, seeds: list[int], single_thread_gl: bool) -> None:
    if single_thread_gl:  # one llvmpipe render thread per worker: workers are the parallelism
        os.environ.setdefault("LP_NUM_THREADS", "1")
    try:
        from icrl_ros.sim.house import HouseEnv

        envs = [HouseEnv(**env_kwargs) for _ in seeds]
        last: list = [None] * len(envs)  # per env: (observation, info, episode just started) a held step repeats
        started = False
        conn.send(("ok", None))
        while True:
            cmd, arg = conn.recv()
            if cmd == "reset_trial":
                idx, house_seeds = arg
                obs, teach = [], []
                for k in idx:
                    opts = {"new_trial": True}
                    if house_seeds is not None and house_seeds[k] is not None:
                        opts["house_seed"] = int(house_seeds[k])
                    # The first trial seeds each env's own generator (reproducible streams).
                    o, info = envs[k].reset(seed=None if started else seeds[k], options=opts)
                    last[k] = (o, info, True)
                    obs.append(o)
                    teach.append((info.get("teacher_action", -1), info.get("teacher_goal_known", False)))
                started = True
                conn.send(("ok", (_stack(obs), np.array(teach, np.int64).reshape(-1, 2))))
            elif cmd == "reseed":  # the next reset_trial seeds every env afresh, as a new worker's first one
                seeds, started = list(arg), False
                conn.send(("ok", None))
            elif cmd == "step":
                obs, rew, done, infos = [], [], [], []
                for k, (env, a) in enumerate(zip(envs, arg)):
                    if a == HOLD:  # a paused env: not stepped, its last observation again
                        o, info, started_now = last[k]
                        obs.append(o)
                        rew.append(0.0)
                        done.append(False)
                        infos.append(dict(_held_info(info, started_now), held=True))
                        continue
                    o, r, term, trunc, info = env.step(int(a))
                    info["terminated"], info["truncated"] = term, trunc
                    if term or trunc:
                        o, first = env.reset()  # next episode, same house
                        if "teacher_action" in first:  # the label of the state now observed
                            info["teacher_action"] = first["teacher_action"]
                            info["teacher_goal_known"] = first["teacher_goal_known"]
                    obs.append(o)
                    rew.append(r)
                    done.append(term or trunc)
                    infos.append(info)
                    last[k] = (o, info, term or trunc)
                conn.send(("ok", (_stack(obs), np.array(rew, np.float32), np.array(done), infos)))
            elif cmd == "waypoints":  # one (forward, left) or None per env of this worker
                conn.send(("ok", [-1 if p is None else env.waypoint_action(*p) for env, p in zip(envs, arg)]))
            elif cmd == "call":
                name, args, kwargs = arg
                conn.send(("ok", [getattr(env, name)(*args, **kwargs) for env in envs]))
            elif cmd == "close":
                for env in envs:
                    env.close()
                conn.send(("ok", None))
                return
            else:
                raise ValueError(f"unknown command {cmd!r}")
    except Exception:  # report to the parent instead of dying silently
        try:
            conn.send(("error", traceback.format_exc()))
        except (BrokenPipeError, EOFError):
            pass
    finally:
        conn.close()


class HouseVecEnv:
    """``num_envs`` MiniWorld house trials in ``num_workers`` processes."""

    name = "house"
    n_actions = 4
    action_names = ("stop", "forward", "turn_left", "turn_right")
    goal_names = GOAL_NAMES
    forward_step = FORWARD_STEP_M  # the step sizes of HouseEnv (bundle manifests record them)
    turn_step = math.radians(TURN_STEP_DEG)

    def __init__(
        self,
        num_envs: int,
        split: str = "train",
        seed: int | None = None,
        image_size: int = 64,
        num_workers: int | None = None,
        max_episode_steps: int = 200,
        success_distance: float = 1.0,
        start_method: str | None = None,
        single_thread_gl: bool = True,
        **task,
    ) -> None:
        """``task``: further :class:`~icrl_ros.sim.house.HouseEnv` arguments (``pose_frame``,
        ``goal_instances``, ``start_away``, ``min_start_distance``, ``teacher``). With a
        ``teacher``, :attr:`teacher_action` holds its label of every env's current state."""
        if not isinstance(num_envs, (int, np.integer)) or num_envs <= 0:
            raise ValueError(f"num_envs must be a positive int, got {num_envs!r}")
        check_split(split)
        workers = min(num_envs, num_workers or os.cpu_count() or 1)
        if workers <= 0:
            raise ValueError(f"num_workers must be positive, got {num_workers!r}")
        self.num_envs, self.split, self.image_size = int(num_envs), split, int(image_size)
        self.max_episode_steps = int(max_episode_steps)
        self.episode_step = np.zeros(self.num_envs, np.int64)
        seeds = env_seeds(seed, self.num_envs)
        # Contiguous slices of envs per worker.
        bounds = np.linspace(0, self.num_envs, workers + 1).round().astype(int)
        self._slices = [(int(a), int(b)) for a, b in zip(bounds[:-1], bounds[1:])]
        kwargs = dict(split=split, image_size=self.image_size, max_episode_steps=self.max_episode_steps,
                      success_distance=success_distance, **task)
        self.task = dict(task)
        self.pose_frame = task.get("pose_frame", "house")
        self.teacher_action = np.full(self.num_envs, -1, np.int64)
        self.teacher_goal_known = np.zeros(self.num_envs, bool)
        """With a teacher: whether it knows where an instance of the goal is (:attr:`teacher_action`'s state)."""
        if start_method is None:
            start_method = "forkserver" if "forkserver" in mp.get_all_start_methods() else "spawn"
        ctx = mp.get_context(start_method)
        if start_method == "forkserver":  # workers forked from a server that imported the grid search once
            ctx.set_forkserver_preload(["__main__", "scipy.sparse.csgraph"])
        self._conns, self._procs = [], []
        self._closed = False
        for a, b in self._slices:
            parent, child = ctx.Pipe()
            p = ctx.Process(target=_worker, args=(child, kwargs, seeds[a:b], single_thread_gl), daemon=True)
            p.start()
            child.close()
            self._conns.append(parent)
            self._procs.append(p)
        for w in range(len(self._conns)):
            self._recv(w)

        from gymnasium import spaces

        from icrl_ros.sim.house import observation_space

        self.action_space = spaces.Discrete(4)
        self.observation_space = observation_space(self.image_size, len(GOAL_NAMES), ODOM_LIMIT_M,
                                                   bool(task.get("scan", False)), bool(task.get("scan_bands", False)))

    def model_fields(self) -> dict:
        """ModelArgs fields this env determines: RGB + odometry + goal, no reward input."""
        return {"n_obs": 1, "n_actions": self.n_actions, "max_episode_steps": self.max_episode_steps,
                "obs_type": "image", "image_size": self.image_size, "n_goals": len(self.goal_names),
                "use_reward": False}

    @property
    def num_workers(self) -> int:
        return len(self._procs)

    def _recv(self, w: int) -> Any:
        try:
            status, payload = self._conns[w].recv()
        except EOFError:
            raise RuntimeError(f"HouseVecEnv worker {w} died (exit code {self._procs[w].exitcode})") from None
        if status == "error":
            raise RuntimeError(f"HouseVecEnv worker {w} failed:\n{payload}")
        return payload

    def _gather(self) -> list:
        return [self._recv(w) for w in range(len(self._conns))]

    # -- API ---------------------------------------------------------------------------------
    def reset_trial(self, house_seeds: list[int | None] | None = None) -> dict[str, np.ndarray]:
        """New houses for every env (``house_seeds[i]`` picks env i's house; None draws one
        from the split). Returns the first observations, stacked."""
        if house_seeds is not None and len(house_seeds) != self.num_envs:
            raise ValueError(f"house_seeds must have {self.num_envs} entries, got {len(house_seeds)}")
        for w, (a, b) in enumerate(self._slices):
            seeds = None if house_seeds is None else list(house_seeds[a:b])
            self._conns[w].send(("reset_trial", (list(range(b - a)), seeds)))
        parts = self._gather()
        obs = _stack_parts([p[0] for p in parts])
        teach = np.concatenate([p[1] for p in parts])
        self.teacher_action, self.teacher_goal_known = teach[:, 0], teach[:, 1].astype(bool)
        self.episode_step[:] = 0
        return obs

    def reseed(self, seed: int | None) -> None:
        """Make the next :meth:`reset_trial` draw what a new ``HouseVecEnv(num_envs, seed=seed)``'s
        first one would (same houses, goals and starts), without starting new worker processes (each
        costs ~2.5 s: a process, MiniWorld's import and an EGL context)."""
        seeds = env_seeds(seed, self.num_envs)
        for w, (a, b) in enumerate(self._slices):
            self._conns[w].send(("reseed", seeds[a:b]))
        self._gather()

    def step(self, actions, active=None) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray, list[dict]]:
        """Step every env; finished envs start their next episode in the same house. The
        info of a finished env describes the episode that ended (success, spl, ...).

        ``active`` (bool per env, optional): envs with False are held, not stepped (an evaluation's
        trials that have run all their episodes): their last observation comes back again, reward 0,
        not done, info ``held`` True; their actions are ignored."""
        a = np.asarray(actions, dtype=np.int64).reshape(-1)
        if a.shape[0] != self.num_envs:
            raise ValueError(f"expected {self.num_envs} actions, got {a.shape[0]}")
        if (a < 0).any() or (a >= self.n_actions).any():
            raise ValueError(f"actions must lie in [0, {self.n_actions}) {self.action_names}, got {a}")
        if active is not None:
            active = np.asarray(active, dtype=bool).reshape(-1)
            if active.shape[0] != self.num_envs:
                raise ValueError(f"expected {self.num_envs} active flags, got {active.shape[0]}")
            a = np.where(active, a, HOLD)
        for w, (lo, hi) in enumerate(self._slices):
            self._conns[w].send(("step", a[lo:hi]))
        parts = self._gather()
        obs = _stack_parts([p[0] for p in parts])
        reward = np.concatenate([p[1] for p in parts])
        done = np.concatenate([p[2] for p in parts])
        infos = [i for p in parts for i in p[3]]
        self.episode_step = np.where(done, 0, np.array([i["episode_step"] for i in infos])).astype(np.int64)
        self.teacher_action = np.array([i.get("teacher_action", -1) for i in infos], np.int64)
        self.teacher_goal_known = np.array([i.get("teacher_goal_known", False) for i in infos], bool)
        return obs, reward, done, infos

    def waypoint_actions(self, points, mask) -> np.ndarray:
        """Per env, the action of a follower that senses free headings (``HouseEnv.waypoint_action``) toward
        ``points[i]`` (forward, left metres from the robot, e.g. a route memory's waypoint) where ``mask[i]``;
        -1 where not."""
        p = np.asarray(points, dtype=np.float64).reshape(self.num_envs, 2)
        m = np.asarray(mask, dtype=bool).reshape(self.num_envs)
        for w, (lo, hi) in enumerate(self._slices):
            self._conns[w].send(("waypoints", [tuple(map(float, p[i])) if m[i] else None for i in range(lo, hi)]))
        return np.array([a for part in self._gather() for a in part], np.int64)

    def call(self, name: str, *args, **kwargs) -> list:
        """Call a method on every env (e.g. ``render_top_down``); one result per env."""
        for w in range(len(self._conns)):
            self._conns[w].send(("call", (name, args, kwargs)))
        return [r for part in self._gather() for r in part]

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for w, conn in enumerate(self._conns):
            try:
                conn.send(("close", None))
                conn.recv()
            except (BrokenPipeError, EOFError, OSError):
                pass
        for p in self._procs:
            p.join(timeout=5)
            if p.is_alive():
                p.terminate()
        for conn in self._conns:
            conn.close()

    def __enter__(self) -> HouseVecEnv:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass


def _stack_parts(parts: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
