"""Image / odometry / quaternion conversion: every encoding, padding, resizing, every bad input."""

from __future__ import annotations

import math

import numpy as np
import pytest

from icrl_ros.nodes.convert import (
    InputError,
    compose_pose,
    image_to_rgb,
    quaternion_from_yaw,
    relative_pose,
    resize_rgb,
    rgb_to_image_fields,
    yaw_from_quaternion,
)
from icrl_ros.geometry import episode_odometry, map_to_odom, wrap_angle
from tests.nodes.ros_support import ros_import_error

RNG = np.random.default_rng(0)
RGB = RNG.integers(0, 256, size=(5, 7, 3), dtype=np.uint8)


def encode(rgb: np.ndarray, encoding: str, pad: int = 0) -> tuple[bytes, int]:
    """The inverse conversion, written out by hand: (data, step) with ``pad`` bytes per row."""
    if encoding == "rgb8":
        px = rgb
    elif encoding == "bgr8":
        px = rgb[..., ::-1]
    elif encoding == "rgba8":
        px = np.concatenate([rgb, np.full(rgb.shape[:2] + (1,), 7, np.uint8)], axis=2)
    elif encoding == "bgra8":
        px = np.concatenate([rgb[..., ::-1], np.full(rgb.shape[:2] + (1,), 7, np.uint8)], axis=2)
    elif encoding == "mono8":
        px = rgb[..., :1]
    else:
        raise AssertionError(encoding)
    h, w, c = px.shape
    rows = np.zeros((h, w * c + pad), np.uint8)
    rows[:, : w * c] = px.reshape(h, w * c)
    rows[:, w * c:] = 0xAB  # padding garbage must not leak into the image
    return rows.tobytes(), w * c + pad


@pytest.mark.parametrize("encoding", ["rgb8", "bgr8", "rgba8", "bgra8", "mono8"])
@pytest.mark.parametrize("pad", [0, 3])
def test_every_encoding_round_trips(encoding: str, pad: int) -> None:
    data, step = encode(RGB, encoding, pad)
    out = image_to_rgb(data, 5, 7, encoding, step)
    expected = np.repeat(RGB[..., :1], 3, axis=2) if encoding == "mono8" else RGB
    assert out.dtype == np.uint8 and out.shape == (5, 7, 3)
    np.testing.assert_array_equal(out, expected)


def test_last_row_without_padding_is_accepted() -> None:
    data, step = encode(RGB, "rgb8", pad=5)
    out = image_to_rgb(data[:-5], 5, 7, "rgb8", step)
    np.testing.assert_array_equal(out, RGB)


def test_output_owns_its_memory() -> None:
    buf = bytearray(RGB.tobytes())
    out = image_to_rgb(buf, 5, 7, "rgb8", 21)
    buf[0] = (buf[0] + 1) % 256
    assert out[0, 0, 0] == RGB[0, 0, 0]


@pytest.mark.parametrize(
    "kwargs, field, words",
    [
        ({"encoding": "yuv422"}, "encoding", "unsupported 'yuv422'"),
        ({"encoding": "16UC1"}, "encoding", "supported"),
        ({"height": 0}, "size", "zero-size"),
        ({"width": 0}, "size", "zero-size"),
        ({"step": 20}, "step", "less than width"),
        ({"data": RGB.tobytes()[:-1]}, "data", "truncated"),
        ({"data": b""}, "data", "truncated"),
    ],
)
def test_bad_images_raise_input_error(kwargs: dict, field: str, words: str) -> None:
    args = {"data": RGB.tobytes(), "height": 5, "width": 7, "encoding": "rgb8", "step": 21} | kwargs
    with pytest.raises(InputError, match=words) as info:
        image_to_rgb(**args)
    assert info.value.field == field
    assert isinstance(info.value, ValueError)


def test_resize_integer_factor_is_block_mean() -> None:
    img = RNG.integers(0, 256, size=(8, 12, 3), dtype=np.uint8)
    out = resize_rgb(img, (4, 3))
    ref = img.reshape(4, 2, 3, 4, 3).astype(np.float64).mean(axis=(1, 3))
    np.testing.assert_array_equal(out, np.clip(np.rint(ref), 0, 255).astype(np.uint8))


def test_resize_area_and_bilinear_keep_constants_and_ranges() -> None:
    const = np.full((480, 640, 3), 77, np.uint8)
    assert np.all(resize_rgb(const, (128, 96)) == 77)  # non-integer area factors
    assert np.all(resize_rgb(const[:5, :7], (16, 23)) == 77)  # upsampling
    img = RNG.integers(0, 256, size=(33, 45, 3), dtype=np.uint8)
    for size in [(16, 16), (64, 90), (33, 10), (1, 1)]:
        out = resize_rgb(img, size)
        assert out.shape == (*size, 3) and out.dtype == np.uint8
    assert np.abs(resize_rgb(img, (1, 1)).astype(float) - img.reshape(-1, 3).mean(0)).max() <= 0.5


def test_resize_gradient_is_monotone() -> None:
    ramp = np.tile(np.arange(0, 250, 10, dtype=np.uint8)[None, :, None], (4, 1, 3))  # 25 columns
    for width in (7, 60):
        row = resize_rgb(ramp, (4, width))[0, :, 0].astype(int)
        assert np.all(np.diff(row) >= 0)


def test_image_to_rgb_resizes() -> None:
    data, step = encode(RGB, "bgr8", pad=1)
    out = image_to_rgb(data, 5, 7, "bgr8", step, size=(10, 14))
    assert out.shape == (10, 14, 3)


def test_rgb_to_image_fields_round_trip_and_errors() -> None:
    fields = rgb_to_image_fields(RGB)
    assert fields["encoding"] == "rgb8" and fields["step"] == 21
    back = image_to_rgb(fields["data"], fields["height"], fields["width"], fields["encoding"], fields["step"])
    np.testing.assert_array_equal(back, RGB)
    with pytest.raises(InputError):
        rgb_to_image_fields(RGB[..., :2])
    with pytest.raises(InputError):
        rgb_to_image_fields(np.zeros((0, 4, 3), np.uint8))


@pytest.mark.parametrize("yaw", [0.0, 0.3, -1.2, math.pi - 1e-6, -math.pi + 1e-6, 2.5])
def test_quaternion_yaw_round_trip(yaw: float) -> None:
    q = quaternion_from_yaw(yaw)
    assert abs(wrap_angle(yaw_from_quaternion(*q) - yaw)) < 1e-9
    scaled = [3.0 * v for v in q]  # not normalised
    assert abs(wrap_angle(yaw_from_quaternion(*scaled) - yaw)) < 1e-9


def test_bad_quaternions() -> None:
    for q in [(0, 0, 0, 0), (math.nan, 0, 0, 1), (0, 0, math.inf, 1)]:
        with pytest.raises(InputError):
            yaw_from_quaternion(*q)


def test_wrap_angle() -> None:
    for a in [0, 1, -1, 3 * math.pi, -3 * math.pi + 0.1, 10.0]:
        w = wrap_angle(a)
        assert -math.pi <= w <= math.pi
        assert abs(math.sin(w) - math.sin(a)) < 1e-9 and abs(math.cos(w) - math.cos(a)) < 1e-9


def test_house_odometry_is_the_node_transform() -> None:
    """The simulators' odometry (house world x, z, yaw; planar y = -z) and the node's transform of a
    base's odometry are one function: a robot 1 m along world -z from a start facing +x has moved
    1 m to its left; turned by 0.3 rad it reads yaw 0.3 in both."""
    start, pose = (2.0, 1.0, 0.0), (2.0, 0.0, 0.3)
    np.testing.assert_allclose(episode_odometry(start, pose), [0.0, 1.0, 0.3], atol=1e-6)
    np.testing.assert_array_equal(episode_odometry(start, pose), relative_pose((2.0, -1.0, 0.0), (2.0, 0.0, 0.3)))


def test_relative_pose_axes() -> None:
    origin = (1.0, 2.0, math.pi / 2)  # facing +y of the odom frame
    # one metre further along +y is one metre forward; one along -x is one metre to the left
    np.testing.assert_allclose(relative_pose(origin, (1.0, 3.0, math.pi / 2)), [1, 0, 0], atol=1e-6)
    np.testing.assert_allclose(relative_pose(origin, (0.0, 2.0, math.pi)), [0, 1, math.pi / 2], atol=1e-6)
    rel = relative_pose(origin, (1.0, 2.0, -math.pi / 2 - 0.1))  # yaw difference wraps
    assert rel.dtype == np.float32 and abs(rel[2] - (math.pi - 0.1)) < 1e-6


def test_compose_inverts_relative() -> None:
    for _ in range(20):
        a = (*RNG.uniform(-5, 5, 2), RNG.uniform(-math.pi, math.pi))
        b = (*RNG.uniform(-5, 5, 2), RNG.uniform(-math.pi, math.pi))
        back = compose_pose(a, tuple(relative_pose(a, b).astype(float)))
        np.testing.assert_allclose(back[:2], b[:2], atol=1e-5)
        assert abs(wrap_angle(back[2] - b[2])) < 1e-5


@pytest.mark.parametrize("bad", [(math.nan, 0, 0), (0, math.inf, 0), (0, 0, -math.inf)])
def test_relative_pose_rejects_non_finite(bad) -> None:
    with pytest.raises(InputError):
        relative_pose((0, 0, 0), bad)
    with pytest.raises(InputError):
        relative_pose(bad, (0, 0, 0))


# --- the thin msg helpers, with real message classes ------------------------------------------


@pytest.mark.skipif(bool(ros_import_error()), reason=ros_import_error() or "rclpy available")
def test_msg_helpers_with_ros_messages() -> None:
    from nav_msgs.msg import Odometry
    from sensor_msgs.msg import Image

    from icrl_ros.nodes.convert import image_msg_to_rgb, odometry_msg_to_pose

    data, step = encode(RGB, "bgra8", pad=2)
    msg = Image(height=5, width=7, encoding="bgra8", step=step, data=data)
    np.testing.assert_array_equal(image_msg_to_rgb(msg), RGB)
    assert image_msg_to_rgb(msg, (3, 3)).shape == (3, 3, 3)
    msg.encoding = "bayer_rggb8"
    with pytest.raises(InputError, match="encoding"):
        image_msg_to_rgb(msg)

    odom = Odometry()
    odom.pose.pose.position.x, odom.pose.pose.position.y = 1.5, -2.0
    q = quaternion_from_yaw(0.7)
    o = odom.pose.pose.orientation
    o.x, o.y, o.z, o.w = q
    x, y, yaw = odometry_msg_to_pose(odom)
    assert (x, y) == (1.5, -2.0) and abs(yaw - 0.7) < 1e-9
    odom.pose.pose.position.x = math.nan
    with pytest.raises(InputError, match="non-finite"):
        odometry_msg_to_pose(odom)
    odom.pose.pose.position.x = 0.0
    o.w = math.inf
    with pytest.raises(InputError):
        odometry_msg_to_pose(odom)


def test_map_to_odom_composes_back_to_the_map_pose() -> None:
    """map -> odom, applied to the base's odometry pose, gives its map pose (what TF chains)."""
    rng = np.random.default_rng(4)
    for _ in range(50):
        map_pose = (*rng.uniform(-10, 10, 2), rng.uniform(-math.pi, math.pi))
        odom_pose = (*rng.uniform(-10, 10, 2), rng.uniform(-math.pi, math.pi))
        back = compose_pose(map_to_odom(map_pose, odom_pose), odom_pose)
        np.testing.assert_allclose(back[:2], map_pose[:2], atol=1e-5)  # relative_pose is float32
        assert abs(wrap_angle(back[2] - map_pose[2])) < 1e-5
    assert map_to_odom((1.0, 2.0, 0.5), (1.0, 2.0, 0.5)) == pytest.approx((0.0, 0.0, 0.0), abs=1e-6)


def test_a_laser_scan_becomes_the_free_headings_and_a_bad_one_is_refused() -> None:
    from types import SimpleNamespace

    from icrl_ros.nodes.convert import scan_msg_to_free

    def msg(ranges, angle_min=-math.pi, inc=math.radians(1.0), lo=0.05, hi=10.0):
        return SimpleNamespace(ranges=ranges, angle_min=angle_min, angle_increment=inc, range_min=lo, range_max=hi)

    ranges = [math.inf] * 360
    for deg in range(177, 184):  # a post 0.48 m straight ahead (beams at -3 .. +3 degrees)
        ranges[deg] = 0.48
    ranges[0] = float("nan")  # no return behind: ignored
    ranges[90] = 0.01  # below range_min (the base itself): ignored
    free = scan_msg_to_free(msg(ranges), 0.25, 0.25)
    assert free.dtype == np.float32 and free.tolist() == [0.0] + [1.0] * 11
    for bad in (msg([]), msg([1.0, 2.0], inc=0.0), msg([1.0], angle_min=math.nan)):
        with pytest.raises(InputError) as e:
            scan_msg_to_free(bad, 0.25, 0.25)
        assert e.value.field == "scan"


def test_a_laser_scan_gives_the_nearest_return_per_camera_band_and_a_bad_one_is_refused() -> None:
    """scan_msg_to_inputs: ``scan_bands`` is the nearest in-range return in each band of the camera's view (no return:
    range_max), the env's laser_bands on the same ranges; only the inputs asked for are computed."""
    from types import SimpleNamespace

    from icrl_ros.house.frontier import bands_from_scan
    from icrl_ros.models.encoders import FREE_BANDS
    from icrl_ros.nodes.convert import scan_msg_to_inputs

    def msg(ranges, angle_min=-math.pi, inc=math.radians(1.0), lo=0.05, hi=10.0):
        return SimpleNamespace(ranges=ranges, angle_min=angle_min, angle_increment=inc, range_min=lo, range_max=hi)

    ranges = [math.inf] * 360
    for deg in range(177, 184):  # a post 1.5 m straight ahead
        ranges[deg] = 1.5
    ranges[180 + 30] = 0.01  # below range_min, 30 degrees left: ignored
    out = scan_msg_to_inputs(msg(ranges), ("scan_bands",), 0.25, 0.25)
    bands = out["scan_bands"]
    assert list(out) == ["scan_bands"] and bands.dtype == np.float32 and bands.shape == (FREE_BANDS,)
    middle = [FREE_BANDS // 2 - 1, FREE_BANDS // 2]
    assert np.allclose(bands[middle], 1.5) and np.allclose(np.delete(bands, middle), 10.0)
    angles = -math.pi + math.radians(1.0) * np.arange(360)
    clean = np.where(np.asarray(ranges) >= 0.05, ranges, np.inf)
    np.testing.assert_allclose(bands, bands_from_scan(clean, angles, 10.0))
    both = scan_msg_to_inputs(msg(ranges), ("scan", "scan_bands"), 0.25, 0.25)
    assert set(both) == {"scan", "scan_bands"} and both["scan"].shape == (12,)
    for bad in (msg([]), msg([1.0, 2.0], inc=0.0), msg([1.0], hi=math.inf)):
        with pytest.raises(InputError) as e:
            scan_msg_to_inputs(bad, ("scan_bands",), 0.25, 0.25)
        assert e.value.field == "scan"
