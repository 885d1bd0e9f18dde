"""Pose errors a real robot has: a localiser's bounded map-frame error and odometry's drift.

One model for the simulator bridge (which publishes a drifting ``odom`` and a noisy localiser pose
beside it) and for evaluation (``training/evaluate.py --loc-noise / --odom-drift``, which hands the
policy the same poses), so what a test of the node exercises is what an evaluation measures.

Both errors are applied to planar poses (x, y, yaw) in one fixed frame (the house / map frame):

- :class:`LocalisationNoise`: what a localiser such as AMCL or a SLAM map frame gives. The error
  (ex, ey, eyaw), added to the true pose in the map frame, is an Ornstein-Uhlenbeck process per axis
  (stationary RMS ``error_m`` over the position, ``error_deg`` over the heading, correlation time
  ``tau_s``) clipped at ``bound`` times its RMS: bounded and slowly varying, never accumulating.
- :class:`OdometryDrift`: dead reckoning. Each motion increment (the true pose change in the robot's
  frame since the last update) is integrated with a translation scale error (``scale``, its sign drawn
  once per trial), a random-walk heading error (standard deviation ``heading_noise`` x sqrt(radians
  turned + metres driven): the same spread whether a motion arrives in one increment or in many), and a
  heading bias of ``bias_deg_per_min`` (its sign drawn once per trial) per minute of
  time. The error grows without bound, as odometry since boot does.

:class:`PoseNoise` runs both for one robot. A jump of the true pose (the simulator placing the robot at
the next episode's start) is integrated as one increment, as if the robot had driven there.

:func:`~icrl_ros.geometry.fused_pose` is how a robot stack combines the two (a localiser fix composed with
the odometry travelled since it): the agent node does exactly this between localiser updates, and
:class:`PoseObserver` with ``loc`` and ``fix_every`` does it in evaluation.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from icrl_ros.geometry import between, compose_pose, fused_pose, relative_pose, wrap_angle

Pose = tuple[float, float, float]


def _parse_floats(text: str, what: str, names: tuple[str, ...], least: int) -> list[float]:
    parts = [s for s in str(text).split(",")]
    if not least <= len(parts) <= len(names):
        raise ValueError(f"{what}: expected {','.join(names[:least])}[,{','.join(names[least:])}] "
                         f"({least} to {len(names)} numbers), got {text!r}")
    try:
        values = [float(s) for s in parts]
    except ValueError:
        raise ValueError(f"{what}: {text!r} is not comma-separated numbers ({','.join(names)})") from None
    if not all(math.isfinite(v) for v in values):
        raise ValueError(f"{what}: {text!r} has a value that is not finite")
    return values


@dataclass(frozen=True)
class LocalisationNoise:
    """A localiser's map-frame error: bounded, slowly varying (see the module docstring)."""

    error_m: float = 0.0
    """RMS of the position error (over both axes together), metres."""
    error_deg: float = 0.0
    """RMS of the heading error, degrees."""
    tau_s: float = 30.0
    """Correlation time of the error, seconds of simulated time."""
    bound: float = 2.0
    """The error is clipped at this many times its RMS (position: radially; heading: in absolute value)."""

    def __post_init__(self) -> None:
        if not (self.error_m >= 0 and self.error_deg >= 0):
            raise ValueError(f"localisation noise: error_m and error_deg must be >= 0, got {self.error_m}, {self.error_deg}")
        if not self.tau_s > 0:
            raise ValueError(f"localisation noise: tau_s must be > 0 seconds, got {self.tau_s}")
        if not self.bound > 0:
            raise ValueError(f"localisation noise: bound must be > 0 (times the RMS), got {self.bound}")

    @property
    def active(self) -> bool:
        return self.error_m > 0 or self.error_deg > 0

    @classmethod
    def parse(cls, text: str) -> "LocalisationNoise":
        """``"M,DEG[,TAU_S]"``, e.g. ``"0.15,3"`` or ``"0.15,3,30"``."""
        v = _parse_floats(text, "localisation noise", ("M", "DEG", "TAU_S"), 2)
        return cls(*v)


@dataclass(frozen=True)
class OdometryDrift:
    """Dead-reckoning drift (see the module docstring)."""

    scale: float = 0.0
    """Translation scale error, a fraction (0.01 = 1%): distances read 1 +- scale times the true ones."""
    heading_noise: float = 0.0
    """Heading random walk: an increment's heading error has standard deviation heading_noise x sqrt(radians
    turned + metres driven) (radians)."""
    bias_deg_per_min: float = 0.0
    """Heading bias, degrees per minute of simulated time (sign drawn per trial)."""

    def __post_init__(self) -> None:
        if not (0 <= self.scale < 1):
            raise ValueError(f"odometry drift: scale must be in [0, 1) (a fraction), got {self.scale}")
        if not (self.heading_noise >= 0 and self.bias_deg_per_min >= 0):
            raise ValueError("odometry drift: heading_noise and bias_deg_per_min must be >= 0, got "
                             f"{self.heading_noise}, {self.bias_deg_per_min}")

    @property
    def active(self) -> bool:
        return self.scale > 0 or self.heading_noise > 0 or self.bias_deg_per_min > 0

    @classmethod
    def parse(cls, text: str) -> "OdometryDrift":
        """``"SCALE,HEADING_NOISE,BIAS_DEG_PER_MIN"``, e.g. ``"0.01,0.01,1"``."""
        v = _parse_floats(text, "odometry drift", ("SCALE", "HEADING_NOISE", "BIAS_DEG_PER_MIN"), 3)
        return cls(*v)


class PoseNoise:
    """One robot's localisation error and odometry drift over a trial (see the module docstring).

    :meth:`reset` at the trial's first pose; :meth:`advance` after every motion with the true pose and the
    simulated seconds since the last update. :attr:`odom` is the drifting odometry pose (it equals the true
    pose at :meth:`reset`, in the same fixed frame), :attr:`localised` the localiser's noisy pose. Both are
    the true pose when their model is off. ``rng``: a ``numpy`` Generator (seeded by the caller)."""

    def __init__(self, loc: LocalisationNoise | None = None, drift: OdometryDrift | None = None,
                 rng: np.random.Generator | None = None) -> None:
        self.loc = loc if loc is not None and loc.active else None
        self.drift = drift if drift is not None and drift.active else None
        self.rng = rng if rng is not None else np.random.default_rng()
        self.true: Pose | None = None
        self._odom: Pose = (0.0, 0.0, 0.0)
        self._err = np.zeros(3)
        self.scale_sign = 1.0
        self.bias_sign = 1.0
        self.elapsed_s = 0.0

    @property
    def active(self) -> bool:
        return self.loc is not None or self.drift is not None

    def _loc_sigmas(self) -> np.ndarray:
        """Per-axis stationary standard deviations (x, y, yaw in radians)."""
        return np.array([self.loc.error_m / math.sqrt(2), self.loc.error_m / math.sqrt(2), math.radians(self.loc.error_deg)])

    def _clip(self) -> None:
        bound_m, bound_rad = self.loc.bound * self.loc.error_m, self.loc.bound * math.radians(self.loc.error_deg)
        r = math.hypot(self._err[0], self._err[1])
        if r > bound_m:
            self._err[:2] *= bound_m / r
        self._err[2] = float(np.clip(self._err[2], -bound_rad, bound_rad))

    def reset(self, pose: Pose) -> None:
        """A new trial at true ``pose``: odometry starts at it, the localisation error is drawn from its
        stationary distribution, the drift's signs are drawn afresh."""
        self.true = tuple(float(v) for v in pose)
        self._odom = self.true
        self.elapsed_s = 0.0
        self.scale_sign = 1.0 if self.rng.random() < 0.5 else -1.0
        self.bias_sign = 1.0 if self.rng.random() < 0.5 else -1.0
        self._err = np.zeros(3)
        if self.loc is not None:
            self._err = self.rng.normal(size=3) * self._loc_sigmas()
            self._clip()

    def advance(self, pose: Pose, dt_s: float) -> None:
        """The robot is now at true ``pose``, ``dt_s`` simulated seconds after the last update."""
        if self.true is None:
            raise RuntimeError("PoseNoise.advance before reset")
        pose = tuple(float(v) for v in pose)
        dt_s = max(float(dt_s), 0.0)
        self.elapsed_s += dt_s
        if self.drift is not None:
            dx, dy, dyaw = between(self.true, pose)
            d = math.hypot(dx, dy)
            k = 1.0 + self.scale_sign * self.drift.scale
            sigma = self.drift.heading_noise * math.sqrt(abs(dyaw) + d)
            err = self.rng.normal() * sigma if sigma > 0 else 0.0
            bias = self.bias_sign * math.radians(self.drift.bias_deg_per_min) * dt_s / 60.0
            # the heading error is applied halfway through the increment (the translation bends with it) and in full after
            tilt = (err + bias) / 2
            c, s = math.cos(tilt), math.sin(tilt)
            self._odom = compose_pose(self._odom, (k * (c * dx - s * dy), k * (s * dx + c * dy), dyaw + err + bias))
        if self.loc is not None and dt_s > 0:
            a = math.exp(-dt_s / self.loc.tau_s)
            self._err = a * self._err + math.sqrt(1 - a * a) * self.rng.normal(size=3) * self._loc_sigmas()
            self._clip()
        self.true = pose

    @property
    def odom(self) -> Pose:
        """The drifting odometry pose (the true pose without drift)."""
        return self._odom if self.drift is not None else self.true

    @property
    def localised(self) -> Pose:
        """The localiser's pose: the true pose plus the localisation error, in the map frame."""
        x, y, yaw = self.true
        return (x + float(self._err[0]), y + float(self._err[1]), wrap_angle(yaw + float(self._err[2])))


@dataclass(frozen=True)
class PoseErrors:
    """What the policy's pose is made of in an evaluation: a localiser (``loc``, a fix every ``fix_every``
    steps composed with odometry in between, as the agent node does) or odometry alone (``loc`` None), with
    ``drift`` on the odometry; ``dt_s`` simulated seconds per step (1: a step a second)."""

    loc: LocalisationNoise | None = None
    drift: OdometryDrift | None = None
    fix_every: int = 1
    dt_s: float = 1.0

    def __post_init__(self) -> None:
        if self.fix_every < 1:
            raise ValueError(f"fix_every must be >= 1 step, got {self.fix_every}")
        if not self.dt_s > 0:
            raise ValueError(f"dt_s must be > 0, got {self.dt_s}")

    @property
    def active(self) -> bool:
        return (self.loc is not None and self.loc.active) or (self.drift is not None and self.drift.active)

    def describe(self) -> dict:
        out: dict = {"source": "localiser" if self.loc is not None else "odometry", "dt_s": self.dt_s}
        if self.loc is not None:
            out.update(loc_error_m=self.loc.error_m, loc_error_deg=self.loc.error_deg, loc_tau_s=self.loc.tau_s,
                       loc_bound=self.loc.bound, fix_every=self.fix_every)
        if self.drift is not None:
            out.update(odom_scale=self.drift.scale, odom_heading_noise=self.drift.heading_noise,
                       odom_bias_deg_per_min=self.drift.bias_deg_per_min)
        return out


class PoseObserver:
    """The pose a policy is handed under :class:`PoseErrors`, for a batch of robots stepped together.

    Fed the true house-frame poses (what a ``pose_frame: house`` env puts in ``obs["odom"]``), it returns
    the observed house-frame odometry: the measured pose relative to the measured pose at the trial's first
    step, as the agent node computes it from its pose input (so the origin carries the error of that moment
    too). Measured = the localiser's pose (a fix every ``fix_every`` steps composed with the drifting
    odometry since) when ``loc`` is set, else the drifting odometry. ``seeds``: one per robot."""

    def __init__(self, errors: PoseErrors, seeds: list) -> None:
        self.errors = errors
        self.noise = [PoseNoise(errors.loc, errors.drift, np.random.default_rng(s)) for s in seeds]
        self._origin: list[Pose | None] = [None] * len(seeds)
        self._fix: list[tuple[Pose, Pose] | None] = [None] * len(seeds)
        self._steps = [0] * len(seeds)
        self.errors_m: list[list[float]] = [[] for _ in seeds]  # |measured - true| position error per step

    def _measured(self, i: int) -> Pose:
        n = self.noise[i]
        if self.errors.loc is None:
            return n.odom
        if self._fix[i] is None or self._steps[i] % self.errors.fix_every == 0:
            self._fix[i] = (n.localised, n.odom)
        return fused_pose(self._fix[i][0], self._fix[i][1], n.odom)

    def _observe(self, i: int) -> np.ndarray:
        m = self._measured(i)
        self.errors_m[i].append(math.hypot(m[0] - self.noise[i].true[0], m[1] - self.noise[i].true[1]))
        return relative_pose(self._origin[i], m)

    def reset(self, odom: np.ndarray) -> np.ndarray:
        """A trial's first observation: ``odom`` (B, 3) true house-frame poses -> the observed ones."""
        out = np.array(odom, dtype=np.float32, copy=True)
        for i, p in enumerate(np.asarray(odom, dtype=np.float64)):
            self.noise[i].reset(tuple(p))
            self._fix[i], self._steps[i] = None, 0
            self._origin[i] = self._measured(i)
            out[i] = self._observe(i)
        return out

    def step(self, odom: np.ndarray) -> np.ndarray:
        """After a step (``dt_s`` seconds): ``odom`` (B, 3) true house-frame poses -> the observed ones."""
        out = np.array(odom, dtype=np.float32, copy=True)
        for i, p in enumerate(np.asarray(odom, dtype=np.float64)):
            self.noise[i].advance(tuple(p), self.errors.dt_s)
            self._steps[i] += 1
            out[i] = self._observe(i)
        return out


__all__ = ["LocalisationNoise", "OdometryDrift", "PoseErrors", "PoseNoise", "PoseObserver", "fused_pose"]
