"""Scripted in-context teachers for the grid worlds (for :mod:`icrl_ros.training.imitate`).

A teacher sees exactly what the policy sees (its cell, the rewards, where each step
arrived) and nothing of the task; it is a learning *algorithm* with a perfect memory of
the trial, so imitating it is itself in-context learning (as Algorithm Distillation and
DPT distil algorithms into a transformer). Its actions are a function of the history
alone, so it can label any history, including the student's own (DAgger).

:class:`CycleExplorer` (the default) searches along a fixed tour of the grid and remembers
three cells; see its docstring.

:class:`RoomExplorer` (Darkroom): the same idea for one goal with no terminal state: a snake
tour of the grid from the start corner until a step is rewarded, then walk to that cell and
stay there; later episodes walk straight to it. It scores 0.988 of the oracle over a 40-episode
trial (``python training/teachers.py``).

:class:`KeyDoorExplorer` (Dark-Key-To-Door): until the key is found, walk to the nearest
cell not yet visited without the key; once it is known, walk straight to it. With the key,
the same for the door over the cells visited while holding the key. On held-out tasks it
scores ~0.86 of the oracle (``python training/teachers.py``).

:class:`PolicyTeacher` (``imitate.py --teacher-checkpoint``): a trained policy, stepping its own memory on
the student's inputs, labels by its action probabilities (policy distillation).
"""

from __future__ import annotations


import numpy as np
import torch

from icrl_ros.house.frontier import at_frontier
from icrl_ros.models.checkpoint import load_checkpoint
from icrl_ros.models.stepping import make_memory
from icrl_ros.runtime.control import ControlStep
from icrl_ros.sim.gridworlds import DarkKeyToDoorVecEnv, DarkroomVecEnv, VecTrialEnv
from icrl_ros.sim.house import TEACHERS as HOUSE_TEACHERS
from icrl_ros.sim.house_oracle import TURN_LEFT

# Action indices of the grid moves (icrl_ros.sim.gridworlds._MOVES_5): +y, -y, -x, +x, stay (Darkroom only).
_UP, _DOWN, _LEFT, _RIGHT, _STAY = 0, 1, 2, 3, 4


class _GridTeacher:
    """Shared by the teachers: a batch of ``num_envs`` per-env states, each field of
    :meth:`_fields` (name -> (shape after the env axis, value at a trial start, dtype))."""

    def __init__(self, num_envs: int, size: int) -> None:
        self.n, self.size = num_envs, size
        cells = np.arange(size * size)
        self.cell_xy = np.stack([cells // size, cells % size], axis=1)  # (C, 2)
        for name, (shape, fill, dtype) in self._fields().items():
            setattr(self, name, np.full((num_envs, *shape), fill, dtype=dtype))

    def _fields(self) -> dict[str, tuple[tuple[int, ...], object, type]]:
        raise NotImplementedError

    def reset(self, idx: np.ndarray | None = None) -> None:
        """Forget everything (a new trial) for the given envs (all by default)."""
        i = slice(None) if idx is None else idx
        for name, (_, fill, _) in self._fields().items():
            getattr(self, name)[i] = fill

    def _toward(self, cells: np.ndarray, goal: np.ndarray) -> np.ndarray:
        """One step from ``cells`` towards ``goal`` (both (N,)): along x first, then y (no
        move is never chosen: callers pass goals that differ from the cell)."""
        d = self.cell_xy[goal] - self.cell_xy[cells]
        return np.where(d[:, 0] > 0, _RIGHT, np.where(d[:, 0] < 0, _LEFT, np.where(d[:, 1] > 0, _UP, _DOWN)))


class KeyDoorExplorer(_GridTeacher):
    """Batched Dark-Key-To-Door teacher; one state per env of the batch."""

    def _fields(self):
        return {"checked": ((2, self.size * self.size), False, bool),  # [env, holding key?, cell]
                "target": ((2,), -1, np.int64),  # key cell, door cell (-1 unknown)
                "has_key": ((), False, bool)}

    def visit(self, cells: np.ndarray) -> None:
        """The envs are in ``cells`` (one per env): mark them searched in the current phase."""
        self.checked[np.arange(self.n), self.has_key.astype(np.int64), cells] = True

    def act(self, cells: np.ndarray) -> np.ndarray:
        """Teacher action for every env standing in ``cells``."""
        self.visit(cells)
        phase = self.has_key.astype(np.int64)
        known = self.target[np.arange(self.n), phase]
        pos = self.cell_xy[cells]  # (N, 2)
        dist = np.abs(pos[:, None, :] - self.cell_xy[None]).sum(-1).astype(np.float64)  # (N, C)
        dist[self.checked[np.arange(self.n), phase]] = np.inf
        return self._toward(cells, np.where(known >= 0, known, dist.argmin(1)))

    def observe(self, final_cells: np.ndarray, reward: np.ndarray, done: np.ndarray,
                actions: np.ndarray | None = None) -> None:
        """After a step: ``final_cells`` is where each env arrived (before an episode reset);
        ``actions`` (the executed ones) is unused here."""
        ar = np.arange(self.n)
        self.visit(final_cells)
        got = reward > 0
        phase = self.has_key.astype(np.int64)
        self.target[ar[got], phase[got]] = final_cells[got]  # a reward names the key, then the door
        self.has_key |= got & ~self.has_key
        self.has_key[done] = False


def grid_cycle(n: int) -> list[int]:
    """A closed tour of the odd n x n grid through every cell but the corner (n-1, n-1), as
    cell indices ``x * n + y``: a snake over columns 1.. of rows 0..n-3, a two-row zig-zag back
    along rows n-2 and n-1, and column 0 home. (An odd grid has no tour through all cells.)"""
    if n < 3 or n % 2 == 0:
        raise ValueError(f"grid_cycle: needs an odd side >= 3, got {n}")
    tour = []
    for x in range(n - 2):
        tour += [(x, y) for y in (range(1, n) if x % 2 == 0 else range(n - 1, 0, -1))]
    tour.append((n - 2, n - 1))
    for y in range(n - 2, 0, -1):
        pair = [(n - 2, y), (n - 1, y)]
        tour += pair if (n - 2 - y) % 2 == 0 else pair[::-1]
    tour += [(x, 0) for x in range(n - 1, -1, -1)]
    return [x * n + y for x, y in tour]


class CycleExplorer(_GridTeacher):
    """Batched Dark-Key-To-Door teacher that searches along a fixed tour of the grid.

    Searching, it follows :func:`grid_cycle` (the skipped corner is a detour: from its
    neighbour on the tour it steps in and back, told apart by the previous action), so the
    next move depends only on the cell and the previous action. What it remembers is three
    cells per trial: the key, the door, and per phase the *frontier*, the last cell it reached
    searching; a new episode walks straight to the frontier and searches on from there.
    Scores ~0.85 of the oracle on held-out tasks, close to :class:`KeyDoorExplorer` (~0.86),
    and is far easier to imitate: the search is a fixed map, the rest is recall.
    """

    def __init__(self, num_envs: int, size: int) -> None:
        tour = grid_cycle(size)
        super().__init__(num_envs, size)
        nxt = np.full(size * size, -1, dtype=np.int64)
        nxt[tour] = np.roll(tour, -1)
        corner, before = size * size - 1, (size - 2) * size + size - 1  # (n-1, n-1) and (n-2, n-1)
        nxt[corner] = before
        self.tour_next, self.corner, self.before = nxt, corner, before

    def _fields(self):
        return {"target": ((2,), -1, np.int64),  # key, door
                "frontier": ((2,), -1, np.int64),  # per phase
                "has_key": ((), False, bool),
                "searching": ((), False, bool),  # reached the frontier this episode
                "prev_action": ((), -1, np.int64)}

    def act(self, cells: np.ndarray) -> np.ndarray:
        ar = np.arange(self.n)
        phase = self.has_key.astype(np.int64)
        known, front = self.target[ar, phase], self.frontier[ar, phase]
        self.searching |= (known < 0) & ((front < 0) | (front == cells))
        step = self.tour_next[cells]
        # on the tour's cell before the corner: into the corner, unless just back from it (moved -x)
        step = np.where((cells == self.before) & (self.prev_action != _LEFT), self.corner, step)
        goal = np.where(known >= 0, known, np.where(self.searching, step, front))
        return self._toward(cells, goal)

    def observe(self, final_cells: np.ndarray, reward: np.ndarray, done: np.ndarray,
                actions: np.ndarray | None = None) -> None:
        ar = np.arange(self.n)
        phase = self.has_key.astype(np.int64)
        search = self.searching & (self.target[ar, phase] < 0)
        self.frontier[ar[search], phase[search]] = final_cells[search]
        got = reward > 0
        self.target[ar[got], phase[got]] = final_cells[got]
        self.searching[got & ~self.has_key] = False  # picked the key: the door search starts
        self.has_key |= got
        self.has_key[done] = False
        self.searching[done] = False
        self.prev_action[:] = -1 if actions is None else actions


def snake_tour(n: int) -> list[int]:
    """Every cell of the n x n grid once, from (0, 0): up column 0, down column 1, and so on
    (cell indices ``x * n + y``; consecutive cells are neighbours)."""
    return [x * n + y for x in range(n) for y in (range(n) if x % 2 == 0 else range(n - 1, -1, -1))]


class RoomExplorer(_GridTeacher):
    """Batched Darkroom teacher: one goal cell, rewarded on every step spent on it, episodes that
    end only at the step cap, every episode starting in the corner (0, 0).

    Searching, it walks :func:`snake_tour`; a new episode walks straight to the *frontier* (the
    last cell it reached searching) and searches on from there. Once a step is rewarded, the cell
    it arrived in is the goal: it walks there in every later episode and stays. What it
    remembers is two cells per trial, so imitating it is recall plus a fixed map. The 10 x 10
    tour takes 99 steps, so the goal is always found in the first 100-step episode."""

    def __init__(self, num_envs: int, size: int) -> None:
        super().__init__(num_envs, size)
        tour = snake_tour(size)
        nxt = np.empty(size * size, dtype=np.int64)
        nxt[tour] = np.roll(tour, -1)  # the last cell's successor is the first: never used on 10 x 10
        self.tour_next = nxt

    def _fields(self):
        return {"target": ((), -1, np.int64), "frontier": ((), -1, np.int64), "searching": ((), False, bool)}

    def act(self, cells: np.ndarray) -> np.ndarray:
        known = self.target >= 0
        self.searching |= ~known & ((self.frontier < 0) | (self.frontier == cells))
        goal = np.where(known, self.target, np.where(self.searching, self.tour_next[cells], self.frontier))
        return np.where(goal == cells, _STAY, self._toward(cells, goal))

    def observe(self, final_cells: np.ndarray, reward: np.ndarray, done: np.ndarray,
                actions: np.ndarray | None = None) -> None:
        search = self.searching & (self.target < 0)
        self.frontier[search] = final_cells[search]
        got = (reward > 0) & (self.target < 0)
        self.target[got] = final_cells[got]
        self.searching[done] = False


ENV_MODES = HOUSE_TEACHERS
"""The house env's teacher modes (``env.options.teacher``): the in-context teacher with its memory or wiped every
episode, and ``seeing`` / ``seeing_wiped``, its search on a frozen encoder's eyes
(:class:`~icrl_ros.sim.house_teacher.PerceivingTeacher`, with ``env.options.teacher_encoder``): it recognises only
what the student's heads recognise; ``inputs`` / ``inputs_wiped``, a rule on what a student on that encoder is handed
(:class:`~icrl_ros.house.input_searcher.InputSearcher`: its route and frontier memories, the free headings)."""


class HouseEnvTeacher:
    """The house teacher (:class:`icrl_ros.sim.house_teacher.HouseTeacher`, or with ``teacher=seeing`` its
    search on an encoder's eyes) runs inside the env workers, where the geometry and the camera model are; the env
    is built with ``teacher`` one of :data:`ENV_MODES` and reports its label of every env's current state in
    ``HouseVecEnv.teacher_action``. This reads it, with the grid teachers' interface."""

    def __init__(self, env) -> None:
        if env.task.get("teacher") not in ENV_MODES:
            raise ValueError(f"the house teacher runs in the env: build HouseVecEnv with teacher= one of {ENV_MODES} "
                             f"(env.options.teacher in the config)")
        self.env = env

    def reset(self, idx: np.ndarray | None = None) -> None:
        """Nothing to do: the env's teacher starts afresh with every trial."""

    def act(self, obs) -> np.ndarray:
        return self.env.teacher_action.copy()

    def goal_known(self) -> np.ndarray:
        """Per env: whether the teacher knows where an instance of the goal is (its label's state)."""
        return self.env.teacher_goal_known.copy()

    def observe(self, final_cells, reward, done, actions=None) -> None:
        """Nothing to do: the env's teacher observes every step itself."""


class RouteFollower:
    """Labels for a route model (``model.house.route_memory``, :mod:`icrl_ros.memory.route`): where the
    policy's own ``route`` input has a way to the goal, the action of a follower of its waypoint that
    senses which headings are free, computed in the env workers where the geometry is
    (``HouseVecEnv.waypoint_actions``: the one-step rule of the route probe's follower); elsewhere the
    in-env teacher's label (:class:`HouseEnvTeacher`: build the env with ``teacher=memory``). The route comes
    from what the student sees, so the way is learnable; the free headings it must read from its
    camera (the frozen heads' free-space bands). :meth:`goal_known` is True on the follower's steps
    (``ppo.teacher_when: goal_known`` counts the term there only). A follower blind to obstacles
    (turn toward the waypoint, else forward) found 0.18 of remembered goals against 0.76 for this one
    in a scripted trial of both, and PPO toward it collapsed."""

    reads_inputs = True

    def __init__(self, env, scale_m: float) -> None:
        if env.task.get("teacher") not in ENV_MODES:
            raise ValueError("teacher 'route' labels off the route with the in-env teacher: "
                             "set env.options.teacher=memory")
        self.env, self.scale_m, self.fallback = env, scale_m, HouseEnvTeacher(env)
        self._routed = np.zeros(env.num_envs, bool)

    def reset(self, idx: np.ndarray | None = None) -> None:
        """Nothing to keep: the route memory is the policy's, the follower's state the env's."""

    def act(self, inputs: dict) -> np.ndarray:
        if "route" not in inputs:
            raise ValueError("teacher 'route' reads the policy's route input: set model.house.route_memory: true")
        r = inputs["route"].detach().cpu().numpy()
        routed = self.env.waypoint_actions(r[:, 1:3] * self.scale_m, r[:, 0] > 0)
        self._routed = routed >= 0
        return np.where(self._routed, routed, self.fallback.act(None))

    def goal_known(self) -> np.ndarray:
        """Per env: whether the last :meth:`act` label was the route follower's."""
        return self._routed.copy()

    def observe(self, final_cells, reward, done, actions=None) -> None:
        """Nothing to do: the env workers observe every step."""


class FrontierFollower(RouteFollower):
    """Labels for a frontier model (``model.house.frontier_memory``, :mod:`icrl_ros.house.frontier`): as
    :class:`RouteFollower` where the policy's route has a way to the goal; where it has none and the in-env teacher
    has not seen the goal either (it is exploring), the same follower toward the policy's own ``frontier``
    waypoint, turning on the spot at a frontier (as :class:`~icrl_ros.house.input_searcher.
    InputSearcher` does); elsewhere the in-env teacher's label. The teacher explores by a map of the house the
    student does not have; these labels explore by the one the student is handed. :meth:`goal_known` is True on
    the followers' steps."""

    def act(self, inputs: dict) -> np.ndarray:
        if "frontier" not in inputs:
            raise ValueError("teacher 'frontier' reads the policy's frontier input: set "
                             "model.house.frontier_memory: true")
        f = inputs["frontier"].detach().cpu().numpy()
        n = len(f)
        r = inputs["route"].detach().cpu().numpy() if "route" in inputs else np.zeros_like(f)
        fallback = self.fallback.act(None)
        routed = r[:, 0] > 0
        exploring = (f[:, 0] > 0) & ~routed & ~self.env.teacher_goal_known
        points = np.where(routed[:, None], r[:, 1:3], f[:, 1:3]) * self.scale_m
        acts = self.env.waypoint_actions(points, routed | exploring)
        acts = np.where(exploring & at_frontier(f, self.scale_m), TURN_LEFT, acts)
        self._routed = (routed | exploring) & (acts >= 0)
        return np.where(self._routed, acts, fallback).astype(np.int64).reshape(n)


class PolicyTeacher:
    """A trained policy as the teacher (policy distillation, as Algorithm Distillation distils a learner):
    it steps on the student's own inputs beside it, with a memory of its own for the whole trial, so
    it labels the student's history (DAgger) as the scripted teachers do. Its labels are its action
    probabilities (:attr:`probs`, soft targets: what it would sample), its executed action a sample.
    A trained policy's actions are a function of the history it reads, so a student that reads the
    same inputs can represent them exactly where its memory holds what the teacher's does."""

    reads_inputs = True

    def __init__(self, path: str, batch: int, steps: int, policy=None) -> None:
        self.policy, _ = load_checkpoint(path)
        self.batch, self.steps = batch, steps
        if policy is not None:
            a, b = self.policy.args, policy.args
            for field in ("n_obs", "n_actions", "obs_type", "use_reward", "n_goals"):
                if getattr(a, field) != getattr(b, field):
                    raise ValueError(f"teacher checkpoint {path}: model.{field} is {getattr(a, field)!r}, the "
                                     f"student's {getattr(b, field)!r}: a teacher must read the student's inputs")
        self.probs = None
        self.reset()

    def reset(self, idx: np.ndarray | None = None) -> None:
        """A fresh memory for a new trial (``idx`` ignored: every env's trial starts together)."""
        self.step = ControlStep.live(self.policy, make_memory(self.policy, self.batch, self.steps))

    @torch.no_grad()
    def act(self, inputs: dict) -> np.ndarray:
        logits, _ = self.step(inputs)
        self.probs = torch.softmax(logits.float(), -1)
        return torch.distributions.Categorical(probs=self.probs).sample().numpy()

    def observe(self, final_cells, reward, done, actions=None) -> None:
        """Nothing to do: the next step's inputs carry the reward, the action and the episode's end."""


TEACHERS = {"explorer": KeyDoorExplorer, "cycle": CycleExplorer, "room": RoomExplorer,
            **{mode: HouseEnvTeacher for mode in ENV_MODES}, "route": RouteFollower}
# The first is the default. The house's ENV_MODES name the env's teacher mode; "route" reads the policy's route
# input (and the env's "memory" teacher off the route).
ENV_TEACHERS = {"darkroom": ("room",), "dark_key_to_door": ("cycle", "explorer"),
                "house": (*ENV_MODES, "route", "frontier")}
FOLLOWERS = {"route": (RouteFollower, "route_memory"), "frontier": (FrontierFollower, "frontier_memory")}
"""The house teachers that label from the policy's own input: name -> (class, the ``model.house`` option the input
needs)."""


def make_teacher(env, name: str | None = None, policy=None):
    """The scripted teacher ``name`` for ``env`` (default: the env's first); with ``policy``, refuses a
    teacher that reads an input the policy lacks."""
    env_name = getattr(env, "name", type(env).__name__)
    if env_name not in ENV_TEACHERS:
        raise ValueError(f"env {env_name!r} has no scripted teacher; teachers exist for {sorted(ENV_TEACHERS)}")
    names = ENV_TEACHERS[env_name]
    # the house's teacher runs inside the env: by default, the mode its options name
    name = name or (env.task.get("teacher") if env_name == "house" else None) or names[0]
    if name not in names:
        raise ValueError(f"teacher {name!r} does not play {env_name}; choose one of {list(names)}")
    if name in FOLLOWERS:  # labels from the policy's own route / frontier input
        from icrl_ros.models.encoders import OBJECT_SCALE_M

        cls, needs = FOLLOWERS[name]
        if policy is not None and not getattr(policy.args.house, needs):
            raise ValueError(f"teacher {name!r} reads the policy's {name} input: set model.house.{needs}: true")
        return cls(env, OBJECT_SCALE_M)
    if env_name == "house":
        if env.task.get("teacher") != name:
            raise ValueError(f"teacher {name!r}: the house env runs teacher={env.task.get('teacher')!r}; "
                             f"set env.options.teacher={name}")
        return HouseEnvTeacher(env)
    return TEACHERS[name](env.num_envs, env.size)


def observe_teacher(teacher, info, reward, done, actions) -> None:
    """After an env step: the grid teachers read where each env arrived (``info["final_obs"]``);
    the house teacher has already observed inside the env."""
    if isinstance(teacher, (HouseEnvTeacher, RouteFollower, PolicyTeacher)):
        return
    teacher.observe(info["final_obs"], reward, done, actions)


def teacher_trials(env: VecTrialEnv, steps: int, name: str | None = None) -> np.ndarray:
    """The teacher's return over ``steps`` steps from each env's current task."""
    teacher = make_teacher(env, name)
    obs = env.observe()
    total = np.zeros(env.num_envs)
    for _ in range(steps):
        action = teacher.act(obs)
        obs, reward, done, info = env.step(action)
        teacher.observe(info["final_obs"], reward, done, action)
        total += reward
    return total


def main() -> int:
    for env_cls in (DarkroomVecEnv, DarkKeyToDoorVecEnv):
        for name in ENV_TEACHERS[env_cls.name]:
            env = env_cls(1000, "test", seed=0)
            env.reset_trial()
            oracle = env.oracle_trial_return(env.trial_steps)
            ret = teacher_trials(env, env.trial_steps, name)
            print(f"{TEACHERS[name].__name__} ({name}) on 1000 held-out {env_cls.name} trials of {env.trial_steps} "
                  f"steps: return {ret.mean():.2f} (oracle {oracle.mean():.2f}), oracle-normalised "
                  f"{(ret / oracle).mean():.3f}")
    return 0

if __name__ == "__main__":
    from icrl_ros.training._cli import run_main

    raise SystemExit(run_main(main))
