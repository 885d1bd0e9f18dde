"""Host side of the Habitat tests: what needs no habitat-sim, and the contract suite run inside the chroot.

The chroot (``../shared/habitat/setup.sh``, real habitat-sim 0.2.2 + habitat-lab 0.2.4 on Python 3.13)
needs root and the shared folder; where either is missing, or the chroot has not been prepared for
icrl_ros (``scripts/habitat_prepare.sh``; ``make test-habitat`` runs it), the chroot tests skip and
say why. ``ICRL_REQUIRE_HABITAT=1`` (set by ``make test-habitat``) turns those skips into failures.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SETUP = ROOT.parent / "shared" / "habitat" / "setup.sh"
CHROOT = Path(os.environ.get("HABITAT_CHROOT", "/var/tmp/icrl-habitat/trixie"))
REQUIRED = os.environ.get("ICRL_REQUIRE_HABITAT") == "1"


def chroot_missing() -> str | None:
    """Why the chroot cannot run here, or None."""
    if not SETUP.exists():
        return f"{SETUP} is not here (the Habitat chroot builder lives in the shared folder)"
    if os.geteuid() != 0:
        return "the Habitat chroot needs root (mount, chroot)"
    py = CHROOT / "opt" / "hvenv" / "bin" / "python"
    if not py.exists():
        return f"no Habitat chroot at {CHROOT}: build it with scripts/habitat_prepare.sh (make test-habitat does)"
    gym = list((CHROOT / "opt" / "hvenv" / "lib").glob("python3*/site-packages/gymnasium"))
    if not gym:
        return "the Habitat chroot is not prepared for icrl_ros: run scripts/habitat_prepare.sh"
    return None


def in_chroot(*cmd: str, timeout: float, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(["nice", "-n", "10", str(SETUP), "run", *cmd], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **(env or {})})


def test_habitat_path_imports_no_torch() -> None:
    # the env, the scene export and the compat layer must import in a Python without torch (the chroot's)
    code = ("import sys, icrl_ros.sim, icrl_ros.sim.habitat_env, icrl_ros.sim.habitat_scene, "
            "icrl_ros.sim.habitat_compat; bad = [m for m in sys.modules if m.split('.')[0] in ('torch', 'onnxruntime')]; "
            "assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True, timeout=60)


@pytest.mark.parametrize("kwargs, match", [
    ({"pose_frame": "map"}, "pose_frame"),
    ({"image_size": 8}, "image_size"),
    ({"max_episode_steps": 0}, "max_episode_steps"),
    ({"success_distance": 0.0}, "success_distance"),
    ({"render_mode": "human"}, "render_mode"),
])
def test_bad_arguments_fail_before_habitat_loads(kwargs, match) -> None:
    from icrl_ros.sim.habitat_env import HabitatExtObjNavEnv

    with pytest.raises(ValueError, match=match):
        HabitatExtObjNavEnv(**kwargs)


def test_contract_suite_inside_the_chroot() -> None:
    why = chroot_missing()
    if why:
        if REQUIRED:
            pytest.fail(why)
        pytest.skip(why)
    r = in_chroot("/opt/hvenv/bin/python", "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/habitat/chroot",
                  timeout=240)
    tail = (r.stdout + r.stderr)[-4000:]
    assert r.returncode == 0, tail
    assert " passed" in tail and "skipped" not in tail.split("\n")[-2], tail  # ran for real, nothing skipped inside
