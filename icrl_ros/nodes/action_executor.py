"""Discrete navigation actions -> velocity commands, closed loop on odometry.

The policies act in steps (stop / forward 0.25 m / turn 30 deg); a mobile base takes velocities.
:class:`ActionExecutor` turns one step into a stream of (v, w) commands: a P-controller on the
remaining distance or angle, clamped by speed limits, a braking profile (``v <= sqrt(2 a d)``, so
the base can stop within what is left) and acceleration limits, finishing inside a tolerance or
on a timeout. Pure Python: the agent node calls :meth:`update` from a >= 10 Hz timer and
publishes each command (the Fetch base zeroes commands older than 0.25 s).

Poses are (x, y, yaw) in one odometry frame (REP 103: x forward, y left, yaw CCW).
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass

from icrl_ros.geometry import wrap_angle
from icrl_ros.nodes.convert import InputError, check_pose, relative_pose


class ActionKind(enum.Enum):
    STOP = "stop"
    FORWARD = "forward"
    TURN_LEFT = "turn_left"
    TURN_RIGHT = "turn_right"

    @classmethod
    def from_name(cls, name: str) -> "ActionKind":
        """Map a bundle's action name to a kind; unknown names list the known ones."""
        key = name.strip().lower().replace("-", "_").replace(" ", "_")
        aliases = {"left": "turn_left", "right": "turn_right", "move_forward": "forward"}
        key = aliases.get(key, key)
        for kind in cls:
            if kind.value == key:
                return kind
        raise ValueError(f"action name: unknown {name!r}; known: {[k.value for k in cls]}")


@dataclass
class ExecutorConfig:
    """Step sizes, limits and gains of :class:`ActionExecutor` (SI units)."""

    forward_m: float = 0.25
    """Distance of one forward step."""
    turn_rad: float = math.radians(30.0)
    """Angle of one turn step."""
    max_linear_speed: float = 0.3
    """|v| limit in m/s."""
    max_angular_speed: float = 0.8
    """|w| limit in rad/s."""
    max_linear_accel: float = 0.5
    """|dv/dt| limit in m/s^2 (also shapes braking)."""
    max_angular_accel: float = 1.5
    """|dw/dt| limit in rad/s^2 (also shapes braking)."""
    kp_linear: float = 2.0
    """P gain on the remaining distance, 1/s."""
    kp_angular: float = 2.5
    """P gain on the remaining angle, 1/s."""
    kp_heading: float = 1.5
    """P gain holding the start heading while driving forward, 1/s."""
    min_linear_speed: float = 0.03
    """Floor on |v| while outside the tolerance, so friction cannot stall the last centimetres."""
    min_angular_speed: float = 0.08
    """Floor on |w| while outside the tolerance."""
    linear_tolerance_m: float = 0.01
    angular_tolerance_rad: float = math.radians(1.0)
    timeout_s: float = 5.0
    """Give up on a step after this long (blocked base, lost odometry)."""
    first_dt_s: float = 0.05
    """Time step assumed for the acceleration limit on the first update of a step."""

    def validate(self) -> "ExecutorConfig":
        for name in (
            "forward_m", "turn_rad", "max_linear_speed", "max_angular_speed", "max_linear_accel",
            "max_angular_accel", "kp_linear", "kp_angular", "linear_tolerance_m",
            "angular_tolerance_rad", "timeout_s", "first_dt_s",
        ):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f"{name}: must be a positive finite number, got {value!r}")
        for name in ("kp_heading", "min_linear_speed", "min_angular_speed"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(f"{name}: must be >= 0, got {value!r}")
        if self.min_linear_speed > self.max_linear_speed:
            raise ValueError(f"min_linear_speed: {self.min_linear_speed} exceeds max_linear_speed {self.max_linear_speed}")
        if self.min_angular_speed > self.max_angular_speed:
            raise ValueError(
                f"min_angular_speed: {self.min_angular_speed} exceeds max_angular_speed {self.max_angular_speed}"
            )
        return self


def _clamp(x: float, lo: float, hi: float) -> float:
    return max(lo, min(hi, x))


def _speed_toward(error: float, kp: float, v_max: float, v_min: float, a_max: float) -> float:
    """Desired signed speed for a remaining ``error``: P term, braking profile, limits, floor."""
    mag = min(kp * abs(error), v_max, math.sqrt(2.0 * a_max * abs(error)))
    mag = max(mag, v_min)
    return math.copysign(mag, error)


class ActionExecutor:
    """Executes one discrete step at a time; ``update`` is called with fresh odometry.

    ``start(kind, pose)`` begins a step from ``pose``; ``update(pose, now)`` returns
    ``(v, w, done)``. When ``done`` is True the command is (0, 0) and :attr:`result` says why:
    ``"reached"``, ``"stopped"`` (the stop action), ``"timeout"`` or ``"aborted"``.
    """

    def __init__(self, config: ExecutorConfig | None = None) -> None:
        self.config = (config or ExecutorConfig()).validate()
        self.kind: ActionKind | None = None
        self.result: str | None = None
        self._start_pose: tuple[float, float, float] | None = None
        self._t0: float | None = None
        self._t_prev: float | None = None
        self._v = 0.0
        self._w = 0.0

    @property
    def busy(self) -> bool:
        return self.kind is not None

    @property
    def command(self) -> tuple[float, float]:
        """The last command returned (what a republishing timer should send)."""
        return self._v, self._w

    def start(self, action: ActionKind | str, odom_pose: tuple[float, float, float]) -> None:
        kind = action if isinstance(action, ActionKind) else ActionKind.from_name(action)
        self._start_pose = check_pose(odom_pose, "odom_pose")
        self.kind = kind
        self.result = None
        self._t0 = None
        self._t_prev = None
        # the previous command carries over, so the acceleration limit holds across steps

    def abort(self) -> None:
        """Drop the current step; the next update returns (0, 0, True)."""
        if self.kind is not None:
            self.result = "aborted"
        self.kind = None
        self._v = self._w = 0.0

    def remaining(self, odom_pose: tuple[float, float, float]) -> float:
        """Signed distance (m) or angle (rad) left in the current step; 0 when idle."""
        if self.kind is None or self._start_pose is None:
            return 0.0
        rel = relative_pose(self._start_pose, odom_pose)  # progress in the start frame
        if self.kind is ActionKind.FORWARD:
            return self.config.forward_m - float(rel[0])
        if self.kind is ActionKind.TURN_LEFT:
            return wrap_angle(self.config.turn_rad - float(rel[2]))
        if self.kind is ActionKind.TURN_RIGHT:
            return wrap_angle(-self.config.turn_rad - float(rel[2]))
        return 0.0

    def _finish(self, result: str) -> tuple[float, float, bool]:
        self.kind = None
        self.result = result
        self._v = self._w = 0.0
        return 0.0, 0.0, True

    def update(self, odom_pose: tuple[float, float, float], now: float) -> tuple[float, float, bool]:
        if self.kind is None:
            self._v = self._w = 0.0
            return 0.0, 0.0, True
        if not math.isfinite(now):
            raise InputError(f"now: non-finite time {now!r}", "time")
        pose = check_pose(odom_pose, "odom_pose")
        cfg = self.config
        if self.kind is ActionKind.STOP:
            return self._finish("stopped")
        if self._t0 is None:
            self._t0 = now
        if now - self._t0 > cfg.timeout_s:
            return self._finish("timeout")
        dt = cfg.first_dt_s if self._t_prev is None else _clamp(now - self._t_prev, 0.0, 0.5)
        self._t_prev = now

        error = self.remaining(pose)
        if self.kind is ActionKind.FORWARD:
            if abs(error) <= cfg.linear_tolerance_m:
                return self._finish("reached")
            v_des = _speed_toward(error, cfg.kp_linear, cfg.max_linear_speed, cfg.min_linear_speed, cfg.max_linear_accel)
            heading_err = -float(relative_pose(self._start_pose, pose)[2])  # hold the start heading
            w_des = _clamp(cfg.kp_heading * heading_err, -cfg.max_angular_speed, cfg.max_angular_speed)
        else:
            if abs(error) <= cfg.angular_tolerance_rad:
                return self._finish("reached")
            v_des = 0.0
            w_des = _speed_toward(
                error, cfg.kp_angular, cfg.max_angular_speed, cfg.min_angular_speed, cfg.max_angular_accel
            )
        # acceleration limits (the braking profile above already bounds deceleration needs)
        self._v += _clamp(v_des - self._v, -cfg.max_linear_accel * dt, cfg.max_linear_accel * dt)
        self._w += _clamp(w_des - self._w, -cfg.max_angular_accel * dt, cfg.max_angular_accel * dt)
        return self._v, self._w, False


__all__ = ["ActionKind", "ExecutorConfig", "ActionExecutor"]
