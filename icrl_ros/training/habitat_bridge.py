"""Habitat behind the ROS bridge: the env server in Habitat's Python, the bridge's ``RemoteEnv`` kwargs.

``sim_bridge_node`` and ``agent_node`` run in this Python (ROS 2, torch, ONNX Runtime); habitat-sim runs
in the chroot of ``../shared/habitat`` (Python 3.13, numpy 1.26, no ROS needed) as
``python -m icrl_ros.sim.env_server`` on 127.0.0.1, and the bridge drives it through
``icrl_ros/RemoteEnv-v0``. This is the set-up of a user with ROS on the system Python and Habitat in
conda. (Running the bridge itself inside the chroot was tried first: DDS between the chroot and the
host found no peer, because the chroot's /dev/shm is not the host's and even UDP-only discovery saw
nothing; a plain TCP socket between the two Pythons has no such dependency.)

Files live under ``runs/habitat_bridge/`` of the checkout: the chroot sees the checkout at /project.
Used by ``training/demo_ros.py --habitat`` and its test.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import time
from pathlib import Path

from icrl_ros.training._cli import REPO_ROOT

SETUP = REPO_ROOT.parent / "shared" / "habitat" / "setup.sh"
WORK = REPO_ROOT / "runs" / "habitat_bridge"
CHROOT_PY = "/opt/hvenv/bin/python"


def inside(path: Path) -> str:
    """A checkout path as the chroot sees it."""
    return "/project/" + Path(path).resolve().relative_to(REPO_ROOT.resolve()).as_posix()


def export_house(house_seed: int, episodes: int, log: Path, look: str = "miniworld") -> Path:
    """Export one house (stage drawn in ``look``, navmesh, ``episodes`` ObjectNav episodes) unless already there."""
    from icrl_ros.sim.habitat_scene import SCENE_VERSION

    out = WORK / f"export_{house_seed}_{episodes}_v{SCENE_VERSION}{'' if look == 'miniworld' else '_' + look}"
    if not (out / "datasets" / "objectnav" / "icrl_houses" / "val" / "val.json.gz").exists():
        with open(log, "ab") as f:
            subprocess.run([str(SETUP), "run", CHROOT_PY, "-m", "icrl_ros.sim.habitat_scene",
                            "--seeds", str(house_seed), "--out", inside(out), "--episodes", str(episodes),
                            "--look", look],
                           cwd=REPO_ROOT, stdout=f, stderr=subprocess.STDOUT, check=True, timeout=300)
    return out


def start_server(export: Path, env_kwargs: dict, log: Path, timeout_s: float = 180.0) -> tuple[subprocess.Popen, dict]:
    """Start the Habitat env server in the chroot on a free loopback port; returns the process (its own
    session: stop it with ``stop_server``) and the bridge's ``RemoteEnv`` keyword arguments."""
    WORK.mkdir(parents=True, exist_ok=True)
    token_file, ready = WORK / "token", WORK / "port"
    token_file.write_text(secrets.token_hex(16))
    token_file.chmod(0o600)
    ready.unlink(missing_ok=True)
    kwargs = {"data_path": inside(export) + "/datasets/objectnav/icrl_houses/{split}/{split}.json.gz",
              "scenes_dir": inside(export) + "/scene_datasets", **env_kwargs}
    cmd = [str(SETUP), "run", CHROOT_PY, "-m", "icrl_ros.sim.env_server", "--env-id", "icrl_ros/HabitatExtObjNav-v0",
           "--env-kwargs", json.dumps(kwargs), "--port", "0", "--token-file", inside(token_file),
           "--ready-file", inside(ready)]
    proc = subprocess.Popen(cmd, cwd=REPO_ROOT, stdout=open(log, "ab"), stderr=subprocess.STDOUT,
                            start_new_session=True)
    deadline = time.monotonic() + timeout_s
    while not (ready.exists() and ready.read_text().strip()):
        if proc.poll() is not None:
            raise RuntimeError(f"the Habitat env server exited with code {proc.returncode}; log: {log}")
        if time.monotonic() > deadline:
            stop_server(proc)
            raise RuntimeError(f"the Habitat env server did not listen within {timeout_s:.0f} s; log: {log}")
        time.sleep(0.1)
    address = f"127.0.0.1:{int(ready.read_text())}"
    return proc, {"address": address, "token_file": str(token_file), "pose_frame": env_kwargs.get("pose_frame")}


def stop_server(proc: subprocess.Popen, timeout_s: float = 20.0) -> None:
    """SIGINT to the server's process group (setup.sh, the chroot's python), then SIGKILL if it lingers;
    setup.sh unmounts the chroot on its way out."""
    if proc.poll() is not None:
        return
    os.killpg(proc.pid, signal.SIGINT)
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=timeout_s)
