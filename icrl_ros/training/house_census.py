"""Where a house policy's episodes end: a failure census by what the robot saw, recognised and reached.

Run through ``training/house_diagnose.py POLICY --census``. While the policy drives, every frame
it sees is scored twice: by ray casting (how many pixels of a 64x64 frame the goal's largest
instance covers; the in-context teacher recognises it from 10) and by the frozen encoder's
presence head (P(goal in view) > 0.5), and the env says whether a goal instance is within the
success distance and visible. Each episode then falls in exactly one class, first match wins:

``success``; ``wrong_stop`` (stopped where no goal was in reach and view); and, for timeouts, with
the goal's position known at the episode start: ``timeout_goal_recognised_before`` (the robot's own
encoder had called the goal category present in an earlier frame of the trial where it covered >= 10
pixels: its memory could hold the sighting, and using it failed) or ``timeout_goal_seen_not_recognised``
(only the watching teacher, which recognises whatever covers 10 pixels of what the robot saw, knew it:
the robot's encoder never recognised it, so its memory had nothing to use); then ``never_saw`` (the
goal never covered 10 pixels in this episode: exploration), ``saw_not_recognised`` (it did, but the
encoder never called it in such a frame: perception), ``recognised_not_reached`` (navigation),
``reached_no_stop`` (it stood in reach and view and did not stop).
"""

from __future__ import annotations

import numpy as np
import torch

from icrl_ros.training.encoder_recall import load_encoder
from icrl_ros.sim.house_view import MIN_PIXELS

CLASSES = ("success", "wrong_stop", "timeout_goal_recognised_before", "timeout_goal_seen_not_recognised", "never_saw",
           "saw_not_recognised", "recognised_not_reached", "reached_no_stop")


class Census:
    """An observer for :func:`~icrl_ros.training.house_eval.run_house_trials` (with ``teacher="memory"``), run
    beside :class:`~icrl_ros.training.house_diagnose.Tally`, which keeps each episode's outcome and whether the
    teacher knew the goal at its start: per (trial, episode) the largest goal size seen, whether the encoder
    recognised the goal in a frame where it covered >= 10 pixels (and in an earlier episode), whether the robot
    reached it."""

    def __init__(self, trials: int, episodes: int, encoder_path: str, image_size: int, threshold: float = 0.5) -> None:
        self.enc, self.heads = load_encoder(encoder_path, image_size)
        n_cat = self.heads.n_cat
        self.episodes, self.threshold = episodes, threshold
        shape = (trials, episodes)
        self.max_px = np.zeros(shape, np.float32)
        self.recognised = np.zeros(shape, bool)
        self.false_alarm = np.zeros(shape, bool)  # P > threshold on a frame where the goal covered no pixel
        self.reached = np.zeros(shape, bool)
        self.recognised_before = np.zeros(shape, bool)  # the encoder had recognised the goal earlier in the trial
        self._seen_cats = np.zeros((trials, n_cat), bool)  # per trial: categories the encoder recognised so far
        self._started = np.full(trials, -1, np.int64)  # per trial: the last episode whose first frame was scored
        self._next, self._start, self._env, self._episode = 0, 0, None, np.zeros(0, np.int64)

    def bind_env(self, env) -> None:
        self._env, self._start = env, self._next
        self._next += env.num_envs
        self._episode = np.full(env.num_envs, -1, np.int64)  # -1: the trial's first frame not seen yet

    def __call__(self, labels, first, action, logits, done, info, done_eps) -> None:
        self._episode = done_eps + np.asarray(done, np.int64)  # each env's episode from the next frame on

    @torch.no_grad()
    def see(self, obs: dict) -> None:
        """Score the frames the policy is about to act on (each env's current episode)."""
        sight = self._env.call("goal_sight")
        goal = np.asarray(obs["goal"]).astype(np.int64).reshape(-1)
        said_all = (self.heads(self.enc(torch.as_tensor(obs["rgb"])))["present"].sigmoid() > self.threshold).numpy()
        self._episode[self._episode < 0] = 0
        for i, (cat_px, reach) in enumerate(sight):
            t, e = self._start + i, int(self._episode[i])
            if e >= self.episodes:
                continue
            g = int(goal[i])
            if self._started[t] != e:  # the episode's first frame: what the encoder had recognised before it
                self._started[t] = e
                self.recognised_before[t, e] = bool(self._seen_cats[t, g])
            px, said = float(cat_px[g]), bool(said_all[i, g])
            self.max_px[t, e] = max(self.max_px[t, e], px)
            self.recognised[t, e] |= said and px >= MIN_PIXELS
            self.false_alarm[t, e] |= said and px <= 0
            self.reached[t, e] |= bool(reach)
            self._seen_cats[t] |= said_all[i] & (np.asarray(cat_px) >= MIN_PIXELS)

    def classes(self, tally) -> np.ndarray:
        """(trials, episodes) index into :data:`CLASSES` (-1: not run), with the outcomes and teacher knowledge
        ``tally`` (a :class:`~icrl_ros.training.house_diagnose.Tally` of the same run) kept."""
        outcome = tally.outcome  # 0 success, 1 wrong stop, 2 timeout
        c = np.full(outcome.shape, -1, np.int8)
        timeout = outcome == 2
        known = timeout & (tally.known_at_start == 1)
        order = [(outcome == 0, 0), (outcome == 1, 1), (known & self.recognised_before, 2), (known, 3),
                 (timeout & (self.max_px < MIN_PIXELS), 4), (timeout & ~self.recognised, 5),
                 (timeout & ~self.reached, 6), (timeout, 7)]
        for mask, k in reversed(order):  # the first match wins: assign in reverse so it overwrites
            c[mask] = k
        return c

    def summary(self, tally, late_from: int) -> dict:
        """Shares of each class in episode 1, in episodes ``late_from``+1 on, and in all; per-trial classes."""
        c = self.classes(tally)
        out = {}
        for name, cols in (("episode_1", slice(0, 1)), (f"episodes_{late_from + 1}_on", slice(late_from, None)),
                           ("all", slice(None))):
            sub = c[:, cols]
            sub = sub[sub >= 0]
            out[name] = {"episodes": int(sub.size), **{k: float((sub == j).mean()) if sub.size else float("nan")
                                                       for j, k in enumerate(CLASSES)}}
        failed = tally.outcome > 0
        out["failed_episodes_encoder_false_alarm"] = float(self.false_alarm[failed].mean()) if failed.any() else None
        out["per_trial"] = {"class": c.tolist(), "max_goal_px": np.round(self.max_px, 1).tolist()}
        return out


def print_census(name: str, summary: dict) -> None:
    keys = [k for k in summary if k.startswith("episode")] + ["all"]
    print(f"{name}: failure census (share of episodes; first matching class)")
    print(f"  {'class':<34}" + "".join(f"{k:>16}" for k in keys))
    for cls in CLASSES:
        print(f"  {cls:<34}" + "".join(f"{summary[k][cls]:>16.3f}" for k in keys))
    print(f"  {'episodes':<34}" + "".join(f"{summary[k]['episodes']:>16d}" for k in keys))
