"""Message <-> numpy conversion for the nodes: camera images, odometry, quaternions.

The core functions take plain values (bytes, ints, floats) and return numpy arrays, so they are
tested without ROS; the ``*_msg`` helpers only read fields off message objects and import nothing
from ROS. Every malformed input raises :class:`InputError` naming the field and the bad value.

Frames follow REP 103: x forward, y left, yaw counter-clockwise, angles in [-pi, pi].
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Any

import numpy as np

from icrl_ros import geometry

# encoding -> (channels, index of R, G, B in a pixel); mono replicates its one channel.
ENCODINGS: dict[str, tuple[int, tuple[int, int, int]]] = {
    "rgb8": (3, (0, 1, 2)),
    "bgr8": (3, (2, 1, 0)),
    "rgba8": (4, (0, 1, 2)),
    "bgra8": (4, (2, 1, 0)),
    "mono8": (1, (0, 0, 0)),
}


class InputError(ValueError):
    """A message the nodes cannot use (bad encoding, size, data or numbers).

    ``field`` names what was wrong (``encoding``, ``size``, ``step``, ``data``, ``odometry``, ...);
    the agent node keeps one counter per field.
    """

    def __init__(self, message: str, field: str = "input") -> None:
        super().__init__(message)
        self.field = field


# ---------------------------------------------------------------------------------------------
# Images


def check_image_fields(height: int, width: int, encoding: str, step: int, nbytes: int) -> None:
    """Raise :class:`InputError` unless the header describes a usable image of ``nbytes`` bytes.

    O(1): reads no pixel, so a node can refuse a bad frame when it arrives and convert only the
    frame it acts on.
    """
    if encoding not in ENCODINGS:
        raise InputError(f"encoding: unsupported {encoding!r}; supported: {sorted(ENCODINGS)}", "encoding")
    if height <= 0 or width <= 0:
        raise InputError(f"image size: zero-size image {height}x{width}", "size")
    channels = ENCODINGS[encoding][0]
    row_bytes = width * channels
    if step < row_bytes:
        raise InputError(f"step: {step} bytes is less than width * channels = {width} * {channels} = {row_bytes}", "step")
    # The last row needs no padding; ROS drivers send step * height, we accept either.
    needed = step * (height - 1) + row_bytes
    if nbytes < needed:
        raise InputError(
            f"data: truncated, {nbytes} bytes for a {height}x{width} {encoding} image with step {step} "
            f"(needs at least {needed})",
            "data",
        )


def image_to_rgb(
    data: bytes | bytearray | memoryview | np.ndarray | Any,
    height: int,
    width: int,
    encoding: str,
    step: int,
    size: tuple[int, int] | None = None,
) -> np.ndarray:
    """Raw image buffer -> (H, W, 3) uint8 RGB, optionally resized to ``size = (H, W)``.

    ``step`` is the row length in bytes (>= width * channels; any padding is skipped).
    """
    if encoding not in ENCODINGS:
        check_image_fields(height, width, encoding, step, 0)
    try:
        buf = np.frombuffer(data, dtype=np.uint8)
    except TypeError:  # a list of ints (some message libraries hand out lists)
        buf = np.asarray(data, dtype=np.uint8).reshape(-1)
    check_image_fields(height, width, encoding, step, buf.size)
    channels, rgb_index = ENCODINGS[encoding]
    row_bytes = width * channels
    # (H, step) view -> drop row padding -> (H, W, C)
    rows = np.lib.stride_tricks.as_strided(buf, shape=(height, row_bytes), strides=(step, 1))
    pixels = rows.reshape(height, width, channels)
    if channels == 1:
        rgb = np.repeat(pixels, 3, axis=2)
    elif rgb_index == (0, 1, 2) and channels == 3:
        rgb = np.array(pixels)  # own the memory: the message buffer may be reused
    else:
        rgb = np.ascontiguousarray(pixels[:, :, list(rgb_index)])
    if size is not None:
        rgb = resize_rgb(rgb, size)
    return rgb


def check_image_msg(msg: Any) -> None:
    """:func:`check_image_fields` on a ``sensor_msgs/Image`` (O(1): no pixel is read)."""
    check_image_fields(int(msg.height), int(msg.width), str(msg.encoding), int(msg.step), len(msg.data))


def image_msg_to_rgb(msg: Any, size: tuple[int, int] | None = None) -> np.ndarray:
    """``sensor_msgs/Image`` -> (H, W, 3) uint8 RGB (8-bit encodings: byte order is irrelevant)."""
    return image_to_rgb(msg.data, int(msg.height), int(msg.width), str(msg.encoding), int(msg.step), size)


def rgb_to_image_fields(rgb: np.ndarray) -> dict[str, Any]:
    """(H, W, 3) uint8 -> the fields of an rgb8 ``sensor_msgs/Image`` (header left to the caller)."""
    rgb = np.asarray(rgb)
    if rgb.ndim != 3 or rgb.shape[2] != 3 or rgb.dtype != np.uint8:
        raise InputError(f"rgb: expected (H, W, 3) uint8, got {rgb.shape} {rgb.dtype}", "rgb")
    if rgb.shape[0] == 0 or rgb.shape[1] == 0:
        raise InputError(f"rgb: zero-size image {rgb.shape[0]}x{rgb.shape[1]}", "size")
    height, width = int(rgb.shape[0]), int(rgb.shape[1])
    return {
        "height": height,
        "width": width,
        "encoding": "rgb8",
        "is_bigendian": 0,
        "step": width * 3,
        "data": np.ascontiguousarray(rgb).tobytes(),
    }


@lru_cache(maxsize=32)
def _resample_matrix(n_in: int, n_out: int) -> np.ndarray:
    """(n_out, n_in) float32 weights: area averaging when shrinking, bilinear when growing.

    Pixel i covers [i, i + 1) in input units; output pixel j covers [j * s, (j + 1) * s), s = n_in / n_out.
    """
    m = np.zeros((n_out, n_in), dtype=np.float64)
    scale = n_in / n_out
    if n_out <= n_in:  # area: overlap length of each input pixel with the output footprint
        for j in range(n_out):
            lo, hi = j * scale, (j + 1) * scale
            i0, i1 = int(math.floor(lo)), min(int(math.ceil(hi)), n_in)
            for i in range(i0, i1):
                m[j, i] = min(hi, i + 1) - max(lo, i)
            m[j] /= m[j].sum()
    else:  # bilinear on pixel centres (half-pixel convention, edges clamped)
        for j in range(n_out):
            x = (j + 0.5) * scale - 0.5
            x = min(max(x, 0.0), n_in - 1.0)
            i0 = int(math.floor(x))
            i1 = min(i0 + 1, n_in - 1)
            f = x - i0
            m[j, i0] += 1.0 - f
            m[j, i1] += f
    return m.astype(np.float32)


def resize_rgb(rgb: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """(H, W, C) uint8 -> (h, w, C) uint8 with separable area / bilinear resampling."""
    out_h, out_w = int(size[0]), int(size[1])
    if out_h <= 0 or out_w <= 0:
        raise InputError(f"size: target size must be positive, got {size}", "size")
    h, w, c = rgb.shape
    if (h, w) == (out_h, out_w):
        return rgb
    if h % out_h == 0 and w % out_w == 0:  # integer factor: block mean, exact and cheap
        fh, fw = h // out_h, w // out_w
        blocks = rgb.reshape(out_h, fh, out_w, fw, c).astype(np.float32)
        out = blocks.mean(axis=(1, 3))
    else:
        mh = _resample_matrix(h, out_h)  # (out_h, H)
        mw = _resample_matrix(w, out_w)  # (out_w, W)
        tmp = (mh @ rgb.reshape(h, w * c).astype(np.float32)).reshape(out_h, w, c)  # (out_h, W, C)
        out = np.einsum("ow,hwc->hoc", mw, tmp)  # (out_h, out_w, C)
    return np.clip(np.rint(out), 0, 255).astype(np.uint8)


# ---------------------------------------------------------------------------------------------
# Angles, quaternions, planar poses


def yaw_from_quaternion(x: float, y: float, z: float, w: float) -> float:
    """Yaw (rotation about z, CCW) of a quaternion; it need not be normalised."""
    vals = (x, y, z, w)
    if not all(math.isfinite(v) for v in vals):
        raise InputError(f"orientation: non-finite quaternion {vals}", "orientation")
    n = math.sqrt(sum(v * v for v in vals))
    if n < 1e-9:
        raise InputError(f"orientation: zero-norm quaternion {vals}", "orientation")
    x, y, z, w = (v / n for v in vals)
    return float(math.atan2(2.0 * (w * z + x * y), 1.0 - 2.0 * (y * y + z * z)))


def quaternion_from_yaw(yaw: float) -> tuple[float, float, float, float]:
    """(x, y, z, w) of a rotation by ``yaw`` about z."""
    return (0.0, 0.0, math.sin(yaw / 2.0), math.cos(yaw / 2.0))


def check_pose(pose: tuple[float, float, float] | np.ndarray, what: str = "pose") -> tuple[float, float, float]:
    x, y, yaw = (float(v) for v in pose)
    if not (math.isfinite(x) and math.isfinite(y) and math.isfinite(yaw)):
        raise InputError(f"{what}: non-finite value (x={x}, y={y}, yaw={yaw})", "pose")
    return x, y, yaw


def relative_pose(origin: tuple[float, float, float], pose: tuple[float, float, float]) -> np.ndarray:
    """``pose`` expressed in the frame of ``origin`` (both (x, y, yaw) in one fixed frame), checked
    for non-finite values (:class:`InputError`): :func:`icrl_ros.geometry.relative_pose`, the
    transform the simulators use, so the node feeds the policy the odometry it was trained on."""
    return geometry.relative_pose(check_pose(origin, "origin"), check_pose(pose))


def compose_pose(base: tuple[float, float, float], delta: tuple[float, float, float]) -> tuple[float, float, float]:
    """Apply ``delta`` (in ``base``'s frame) to ``base``; the inverse of :func:`relative_pose`."""
    return geometry.compose_pose(check_pose(base, "base"), check_pose(delta, "delta"))


def odometry_msg_to_pose(msg: Any) -> tuple[float, float, float]:
    """``nav_msgs/Odometry`` -> (x, y, yaw) of the base in the odometry frame; InputError on NaN / inf."""
    p = msg.pose.pose.position
    q = msg.pose.pose.orientation
    if not (math.isfinite(p.x) and math.isfinite(p.y) and math.isfinite(p.z)):
        raise InputError(f"odometry position: non-finite value ({p.x}, {p.y}, {p.z})", "position")
    yaw = yaw_from_quaternion(q.x, q.y, q.z, q.w)
    return (float(p.x), float(p.y), yaw)


def pose_msg_to_pose(msg: Any) -> tuple[float, float, float]:
    """``geometry_msgs/PoseStamped`` or ``PoseWithCovarianceStamped`` -> planar (x, y, yaw) in its header's frame;
    InputError on NaN / inf or a zero-norm quaternion."""
    pose = msg.pose.pose if hasattr(msg.pose, "covariance") else msg.pose
    p, q = pose.position, pose.orientation
    if not (math.isfinite(p.x) and math.isfinite(p.y) and math.isfinite(p.z)):
        raise InputError(f"pose position: non-finite value ({p.x}, {p.y}, {p.z})", "position")
    return (float(p.x), float(p.y), yaw_from_quaternion(q.x, q.y, q.z, q.w))


def _scan_returns(msg: Any) -> tuple[np.ndarray, np.ndarray]:
    """A ``sensor_msgs/LaserScan``'s (ranges, bearings), radians counter-clockwise from the base's x axis; returns
    outside ``[range_min, range_max]`` (and NaN / inf) become ``inf``, no return. InputError on an empty scan or a bad
    angle increment."""
    ranges = np.asarray(msg.ranges, np.float64)
    n, inc = ranges.size, float(msg.angle_increment)
    if n == 0:
        raise InputError("laser scan: no ranges", "scan")
    if not (math.isfinite(inc) and math.isfinite(float(msg.angle_min))) or (n > 1 and inc == 0.0):
        raise InputError(f"laser scan: angle_min {msg.angle_min} / angle_increment {inc} unusable", "scan")
    lo, hi = float(msg.range_min), float(msg.range_max)
    return np.where((ranges >= lo) & (ranges <= hi), ranges, np.inf), float(msg.angle_min) + inc * np.arange(n)


def scan_msg_to_free(msg: Any, step_m: float, clearance_m: float) -> np.ndarray:
    """``sensor_msgs/LaserScan`` -> the policy's ``scan`` input (:func:`~icrl_ros.geometry.free_headings_from_scan`):
    which of the 12 headings around the base a ``step_m`` forward step can take with ``clearance_m`` around it.
    Returns outside ``[range_min, range_max]`` (and NaN / inf) are no return; the scan is assumed to be in the
    base's frame (forward x, left y). InputError on an empty scan or a bad angle increment."""
    return geometry.free_headings_from_scan(*_scan_returns(msg), step_m, clearance_m)


def scan_msg_to_inputs(msg: Any, names: tuple[str, ...], step_m: float, clearance_m: float) -> dict[str, np.ndarray]:
    """``sensor_msgs/LaserScan`` -> the encoder inputs ``names`` a bundle reads from it: ``scan``
    (:func:`scan_msg_to_free`) and ``scan_bands``, the nearest return in each column band of the policy's camera
    image (:func:`~icrl_ros.geometry.bands_from_scan`; no return: the scan's ``range_max``). The scan is
    assumed to be in the base's frame, the camera looking along its x axis."""
    ranges, angles = _scan_returns(msg)
    out = {}
    if "scan" in names:
        out["scan"] = geometry.free_headings_from_scan(ranges, angles, step_m, clearance_m)
    if "scan_bands" in names:
        hi = float(msg.range_max)
        if not (math.isfinite(hi) and hi > 0):
            raise InputError(f"laser scan: range_max {msg.range_max}: no floor per band from it", "scan")
        out["scan_bands"] = geometry.bands_from_scan(ranges, angles, hi).astype(np.float32)
    return out


def stamp_to_seconds(stamp: Any) -> float:
    """``builtin_interfaces/Time`` -> float seconds."""
    return float(stamp.sec) + 1e-9 * float(stamp.nanosec)


__all__ = [
    "ENCODINGS",
    "InputError",
    "check_image_fields",
    "check_image_msg",
    "image_to_rgb",
    "image_msg_to_rgb",
    "rgb_to_image_fields",
    "scan_msg_to_inputs",
    "resize_rgb",
    "yaw_from_quaternion",
    "quaternion_from_yaw",
    "check_pose",
    "relative_pose",
    "compose_pose",
    "odometry_msg_to_pose",
    "pose_msg_to_pose",
    "stamp_to_seconds",
]
