"""The agent's pose from a localiser and odometry, as a robot stack composes them (no ROS here).

A localiser (AMCL, slam_toolbox) publishes the base's map-frame pose now and then, stamped with the
time of the sensor data it used, usually behind the odometry; odometry arrives often and drifts. The
map -> odom correction of the newest fix, applied to the odometry now, gives a map-frame pose at every
step::

    pose_now = fix_map (+) (odom_at(fix.stamp)^-1 (+) odom_now)

:class:`LocaliserFusion` keeps a short history of odometry to find ``odom_at(stamp)`` (interpolated
between the two messages around it), holds a fix stamped ahead of the newest odometry until odometry
catches up, and measures how far the odometry has travelled since the fix (the node stops the base when
that exceeds ``pose_max_travel_m``: the fix is stale). The composition itself is
:func:`icrl_ros.geometry.fused_pose`, the one the evaluations use (:mod:`icrl_ros.sim.pose_noise`).
"""

from __future__ import annotations

import bisect
import math
from collections import deque

from icrl_ros.geometry import wrap_angle
from icrl_ros.geometry import fused_pose

Pose = tuple[float, float, float]

ACCEPTED, PENDING, REPEAT, BACK_DATED, JUMP, TOO_OLD = "accepted", "pending", "repeat", "back_dated", "jump", "too_old"


def _interpolate(a: tuple[float, Pose, float], b: tuple[float, Pose, float], t: float) -> tuple[Pose, float]:
    """Pose and travelled distance at ``t`` between history entries ``a`` and ``b`` (stamp, pose, travel)."""
    (ta, pa, da), (tb, pb, db) = a, b
    f = 0.0 if tb <= ta else min(max((t - ta) / (tb - ta), 0.0), 1.0)
    yaw = wrap_angle(pa[2] + f * wrap_angle(pb[2] - pa[2]))
    return (pa[0] + f * (pb[0] - pa[0]), pa[1] + f * (pb[1] - pa[1]), yaw), da + f * (db - da)


class LocaliserFusion:
    """Localiser fixes x odometry (see the module docstring). ``history``: odometry messages kept (at 100 Hz,
    4096 cover 40 s of localiser lag); ``time_jump_s``: an odometry stamp this far back means time jumped (a
    restarted bridge, a looped bag): the history and the fix are forgotten and the new stamps taken."""

    def __init__(self, time_jump_s: float = 1.0, history: int = 4096) -> None:
        self.time_jump_s = float(time_jump_s)
        self._hist: deque[tuple[float, Pose, float]] = deque(maxlen=history)  # (stamp, odom pose, travel so far)
        self._travel = 0.0  # metres the odometry travelled since the first message
        self._fix: tuple[Pose, Pose, float, float] | None = None  # (map pose, odom pose, travel, stamp) at the fix
        self._pending: tuple[Pose, float] | None = None  # a fix stamped after the newest odometry

    def reset(self) -> None:
        """Forget odometry and fixes (a new configure)."""
        self._hist.clear()
        self._travel = 0.0
        self._fix = self._pending = None

    @property
    def has_fix(self) -> bool:
        return self._fix is not None

    @property
    def fix_stamp(self) -> float:
        return self._fix[3] if self._fix is not None else -math.inf

    def odometry(self, pose: Pose, stamp: float) -> str:
        """An odometry message. Returns JUMP where its stamp went back by time_jump_s or more (everything
        before is forgotten), REPEAT for one stamped no later than the newest (not kept), else ACCEPTED."""
        if self._hist and stamp > 0:
            last_t, last_p, _ = self._hist[-1]
            if stamp <= last_t - self.time_jump_s:
                self.reset()
                self._hist.append((stamp, pose, 0.0))
                return JUMP
            if stamp <= last_t:
                return REPEAT
            self._travel += math.hypot(pose[0] - last_p[0], pose[1] - last_p[1])
        self._hist.append((stamp, pose, self._travel))
        if self._pending is not None and (stamp >= self._pending[1] or stamp <= 0):
            fix, self._pending = self._pending, None
            self._take(*fix)
        return ACCEPTED

    def fix(self, pose: Pose, stamp: float) -> str:
        """A localiser pose (map frame) stamped ``stamp``. ACCEPTED (composed from now on), PENDING (stamped after
        the newest odometry: taken when odometry reaches it), REPEAT (the stamp of the fix in use), BACK_DATED
        (stamped before it, however far: dropped; time going back is recognised on the odometry, whose jump
        forgets the fix) or TOO_OLD (stamped before the odometry kept: it cannot be composed; dropped)."""
        last = self._pending[1] if self._pending is not None else self.fix_stamp
        if stamp > 0 and math.isfinite(last) and last > 0:
            if stamp == last:
                return REPEAT
            if stamp < last:
                return BACK_DATED
        if not self._hist:
            self._pending = (pose, stamp)
            return PENDING
        newest = self._hist[-1][0]
        if stamp <= 0 or stamp == newest:
            self._take(pose, stamp)
            return ACCEPTED
        if stamp > newest:
            self._pending = (pose, stamp)
            return PENDING
        if stamp < self._hist[0][0]:
            return TOO_OLD
        self._take(pose, stamp)
        return ACCEPTED

    def _take(self, pose: Pose, stamp: float) -> None:
        """Compose from the fix at ``stamp`` on: the odometry at that stamp, interpolated (history not empty)."""
        if stamp <= 0:
            _, odom, travel = self._hist[-1]
        else:
            stamps = [h[0] for h in self._hist]
            i = bisect.bisect_left(stamps, stamp)
            if i >= len(stamps):
                _, odom, travel = self._hist[-1]
            elif i == 0 or stamps[i] == stamp:
                _, odom, travel = self._hist[i]
            else:
                odom, travel = _interpolate(self._hist[i - 1], self._hist[i], stamp)
        self._fix = (pose, odom, travel, stamp)

    def travelled(self) -> float:
        """Metres the odometry travelled since the fix in use (inf without one)."""
        return self._travel - self._fix[2] if self._fix is not None else math.inf

    def pose(self, odom_now: Pose) -> Pose | None:
        """The map-frame pose at odometry pose ``odom_now``: the fix composed with the odometry since it (None
        without a fix)."""
        if self._fix is None:
            return None
        return fused_pose(self._fix[0], self._fix[1], odom_now)


__all__ = ["LocaliserFusion", "ACCEPTED", "PENDING", "REPEAT", "BACK_DATED", "JUMP", "TOO_OLD"]
