"""RemoteEnv against the env it serves: the same observations, rewards and infos as the env itself
(the MiniWorld house served by ``python -m icrl_ros.sim.env_server`` in another process; the chroot
test serves Habitat)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from icrl_ros.sim.env_server import RemoteEnv

ROOT = Path(__file__).resolve().parents[2]


def _assert_same(a, b) -> None:
    if isinstance(a, dict):
        assert set(a) == set(b)
        for k in a:
            _assert_same(a[k], b[k])
    elif isinstance(a, (tuple, list)):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            _assert_same(x, y)
    else:
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
        if isinstance(b, (np.ndarray, np.generic)):  # same type, dtype and shape: spaces check them
            assert type(a) is type(b) and a.dtype == b.dtype and np.shape(a) == np.shape(b), (a, b)


def test_remote_house_matches_the_house(tmp_path) -> None:
    if importlib.util.find_spec("miniworld") is None:  # not importorskip: importing it before the renderer breaks EGL
        pytest.skip("miniworld is not installed")
    from icrl_ros.sim.house import HouseEnv

    local = HouseEnv(split="test", image_size=32, scan=True, scan_bands=True)
    (tmp_path / "token").write_text("s3cret\n")
    ready = tmp_path / "port"
    server = subprocess.Popen([sys.executable, "-m", "icrl_ros.sim.env_server",
                               "--env-id", "icrl_ros/MiniWorldHouse-v0",
                               "--env-kwargs", json.dumps({"split": "test", "image_size": 32, "scan": True,
                                                           "scan_bands": True}), "--port", "0",
                               "--token-file", str(tmp_path / "token"), "--ready-file", str(ready), "--forever"],
                              cwd=ROOT)
    try:
        for _ in range(300):
            if ready.exists() and ready.read_text():
                break
            assert server.poll() is None, "the env server exited"
            time.sleep(0.05)
        port = int(ready.read_text())
        _compare(local, port)
    finally:
        server.terminate()
        server.wait(timeout=10)
        local.close()


def _compare(local, port: int) -> None:
    with pytest.raises(RuntimeError, match="bad token"):
        RemoteEnv(f"127.0.0.1:{port}", token="wrong")
    with pytest.raises(ValueError, match="pose_frame"):
        RemoteEnv(f"127.0.0.1:{port}", token="s3cret", pose_frame="episode")  # served: house
    remote = RemoteEnv(f"127.0.0.1:{port}", token="s3cret")
    try:
        assert remote.goal_names == local.goal_names and remote.action_space == local.action_space
        assert remote.observation_space == local.observation_space
        first = remote.reset(seed=4, options={"new_trial": True})
        _assert_same(first, local.reset(seed=4, options={"new_trial": True}))
        assert remote.observation_space.contains(first[0])
        for a in (1, 2, 1, 3, 1, 0):
            got, want = remote.step(a), local.step(a)
            _assert_same(got[0], want[0])
            assert got[1:4] == pytest.approx(want[1:4]) and got[1:4] == want[1:4]
            _assert_same(got[4], want[4])
        _assert_same(remote.reset(), local.reset())
        assert remote.move_continuous(0.1, 0.2) == local.move_continuous(0.1, 0.2)
        _assert_same(remote.observe(), local.observe())
        np.testing.assert_allclose(remote.pose_in("house"), local.pose_in("house"))
        got, want = remote.laser_scan(), local.laser_scan()  # the bridge publishes it as a LaserScan
        assert got[0] == want[0] and got[1] == want[1] and got[3] == want[3]
        np.testing.assert_array_equal(got[2], want[2])
        with pytest.raises(ValueError, match="frame"):  # the served env's own error, raised here
            remote.pose_in("moon")
    finally:
        remote.close()
