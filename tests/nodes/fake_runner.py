"""TEST DOUBLE of ``icrl_ros.runtime.PolicyRunner`` for the agent-node tests.

Implements the runner interface the node codes against (``from_bundle``, ``manifest``,
``reset_trial``, ``begin_episode``, ``act``, ``snapshot``, ``restore``) with a list as "memory".
Actions follow ``raw["fake"]["script"]`` per episode step when given, else they are a
deterministic function of the whole memory, so a lost or replayed memory changes the actions.
The bundle is a directory with ``manifest.json``; :func:`write_fake_bundle` makes one. ``manifest``
exposes the attributes of :class:`icrl_ros.runtime.manifest.Manifest` the node reads.
Replace with a real exported bundle once ``icrl_ros.runtime`` and a shipped bundle exist.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import tempfile
from types import SimpleNamespace
from typing import Any

import numpy as np

DEFAULT_MANIFEST = {
    "observation": {"image_size": [16, 16], "goal_names": ["chair", "table", "sofa"]},
    "action": {"names": ["stop", "forward", "turn_left", "turn_right"], "forward_m": 0.25, "turn_deg": 30.0},
    "fake": {"script": None},
}


class FakeBundleError(ValueError):
    pass


class FakeMemory(list):
    """One token per act; ``tokens`` / ``nbytes`` as the real memories report them."""

    @property
    def tokens(self) -> int:
        return len(self)

    @property
    def nbytes(self) -> int:
        return 28 * len(self)


def write_fake_bundle(directory: str, script: list[int] | None = None, **observation: Any) -> str:
    manifest = copy.deepcopy(DEFAULT_MANIFEST)
    manifest["observation"].update(observation)
    manifest["fake"]["script"] = script
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, "manifest.json"), "w") as f:
        json.dump(manifest, f)
    return directory


class FakeRunner:
    instances: list["FakeRunner"] = []

    def __init__(self, manifest: dict[str, Any], kwargs: dict[str, Any]) -> None:
        self.raw = manifest
        obs, action = manifest["observation"], manifest["action"]
        self.manifest = SimpleNamespace(  # the typed Manifest's attributes the node reads
            observation=SimpleNamespace(image_size=obs.get("image_size"), goal_names=obs["goal_names"],
                                        pose_frame=obs.get("pose_frame"), frame=obs.get("pose_frame") or "episode"),
            action=SimpleNamespace(names=action["names"], forward_m=action.get("forward_m"),
                                   turn_deg=action.get("turn_deg")))
        self.kwargs = kwargs
        self.calls: list[tuple] = []
        self.memory = FakeMemory()  # one token per act: [episode, step, goal, image mean, x, y, yaw]
        self.trial = 0
        self.episode = -1
        self.step = 0
        self.goal: str | None = None
        self.closed = False
        self.infos: list[dict[str, Any]] = []
        FakeRunner.instances.append(self)

    @classmethod
    def from_bundle(cls, path: str, backend: str = "onnxruntime", device: str = "cpu", memory: str | None = None,
                    memory_budget_bytes: int | None = None) -> "FakeRunner":
        file = os.path.join(path, "manifest.json")
        try:
            with open(file) as f:
                manifest = json.load(f)
        except OSError as e:
            raise FakeBundleError(f"{file}: cannot read manifest ({e})") from None
        kwargs = {"backend": backend, "device": device, "memory": memory, "memory_budget_bytes": memory_budget_bytes}
        return cls(manifest, kwargs)

    # --- interface ------------------------------------------------------------------------------
    def reset_trial(self) -> None:
        self.calls.append(("reset_trial",))
        self.memory = FakeMemory()
        self.trial += 1
        self.episode = -1
        self.goal = None

    def begin_episode(self, goal: str) -> None:
        if goal not in self.raw["observation"]["goal_names"]:
            raise ValueError(f"goal: unknown {goal!r}")
        self.calls.append(("begin_episode", goal))
        self.episode += 1
        self.step = 0
        self.goal = goal

    def act(self, obs: dict[str, np.ndarray]) -> tuple[int, dict[str, Any]]:
        h, w = self.raw["observation"]["image_size"]
        rgb, odom = obs["rgb"], obs["odom"]
        if rgb.shape != (h, w, 3) or rgb.dtype != np.uint8:
            raise ValueError(f"rgb: expected ({h}, {w}, 3) uint8, got {rgb.shape} {rgb.dtype}")
        if odom.shape != (3,) or odom.dtype != np.float32 or not np.all(np.isfinite(odom)):
            raise ValueError(f"odom: expected finite (3,) float32, got {odom!r}")
        if self.goal is None:
            raise ValueError("act before begin_episode")
        goals = self.raw["observation"]["goal_names"]
        self.memory.append([self.episode, self.step, goals.index(self.goal), float(rgb.mean()), *map(float, odom)])
        self.calls.append(("act", self.episode, self.step))
        script = self.raw.get("fake", {}).get("script")
        n = len(self.raw["action"]["names"])
        if script:
            action = int(script[min(self.step, len(script) - 1)])
        else:
            digest = hashlib.sha256(np.asarray(self.memory, np.float32).tobytes()).digest()
            action = 1 + digest[0] % (n - 1)  # never stop: keeps episodes running in tests
        self.step += 1
        info = {"latency_ms": 0.1, "memory_tokens": len(self.memory), "memory_bytes": 28 * len(self.memory),
                "episode": self.episode, "trial": self.trial, "step": self.step - 1}
        self.infos.append(info)
        return action, info

    def snapshot(self, path: str) -> None:
        state = {"version": 1, "memory": self.memory, "trial": self.trial, "episode": self.episode,
                 "step": self.step, "goal": self.goal}
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(path)), suffix=".tmp")
        with os.fdopen(fd, "w") as f:
            json.dump(state, f)
        os.replace(tmp, path)

    def restore(self, path: str) -> None:
        try:
            with open(path) as f:
                state = json.load(f)
        except (OSError, ValueError) as e:
            raise FakeBundleError(f"{path}: cannot read snapshot ({e})") from None
        if state.get("version") != 1 or not isinstance(state.get("memory"), list):
            raise FakeBundleError(f"{path}: field 'version'/'memory' does not match this runner")
        self.memory, self.trial, self.episode = FakeMemory(state["memory"]), state["trial"], state["episode"]
        self.step, self.goal = state["step"], state["goal"]

    @property
    def step_in_episode(self) -> int:
        return self.step

    def close(self) -> None:
        self.closed = True
