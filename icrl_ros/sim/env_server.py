"""An object-search env served over a local socket, and the Gymnasium env that drives it from another
Python: ``icrl_ros/RemoteEnv-v0``.

Why: Habitat lives in its own Python (conda, the Habitat docker image, here the Debian 13 chroot of
``../shared/habitat`` with Python 3.13 and numpy 1.26) while ROS 2 and the policy live in the
system's (here ``.venv``: Python 3.11, numpy 2, torch). ``sim_bridge_node`` runs where ROS is and
reaches the simulator through ``RemoteEnv``; the simulator's Python needs no ROS and no torch::

    # Habitat's Python (here: ../shared/habitat/setup.sh run /opt/hvenv/bin/python -m ...)
    python -m icrl_ros.sim.env_server --env-id icrl_ros/HabitatExtObjNav-v0 \\
        --env-kwargs '{"data_path": ".../{split}/{split}.json.gz", "scenes_dir": "..."}' --port 5731 --token-file T
    # ROS's Python
    sim_bridge_node --ros-args -p env_id:=icrl_ros/RemoteEnv-v0 \\
        -p env_kwargs:='{"address": "127.0.0.1:5731", "token_file": "T"}'

Protocol (one client at a time, TCP, 127.0.0.1 by default): each message is a 4-byte big-endian
length and a JSON object; numpy arrays travel as ``{"__nd__": [dtype, shape, base64 bytes]}`` (no
pickle: the two sides may run different Pythons and numpy majors, and a socket should not unpickle).
The client's first message carries the server's token (a shared secret from ``--token-file``). Calls:
``reset``, ``step``, ``observe``, ``move_continuous``, ``pose_in``, ``laser_scan`` (where the env has
one), ``close``; ``hello`` returns the env's spaces and names. The served env must have the object-search observation (``rgb``, ``goal``,
``odom``, ``prev_action``: the MiniWorld house and the Habitat backend).
"""

from __future__ import annotations

import argparse
import base64
import hmac
import json
import socket
import struct
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

MAX_MESSAGE = 64 * 2**20


# -- wire format -----------------------------------------------------------------------------------
def _encode(x: Any) -> Any:
    if isinstance(x, np.ndarray):
        # not ascontiguousarray: it turns a 0-d array into shape (1,); tobytes() is C order anyway
        return {"__nd__": [x.dtype.str, list(x.shape), base64.b64encode(x.tobytes()).decode("ascii")]}
    if isinstance(x, np.generic):
        return _encode(np.asarray(x))
    if isinstance(x, dict):
        return {str(k): _encode(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_encode(v) for v in x]
    return x


def _decode(x: Any) -> Any:
    if isinstance(x, dict):
        if "__nd__" in x:
            dtype, shape, data = x["__nd__"]
            a = np.frombuffer(base64.b64decode(data), dtype=np.dtype(dtype)).reshape(shape).copy()
            return a[()] if a.ndim == 0 else a  # 0-d arrays come back as numpy scalars
        return {k: _decode(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_decode(v) for v in x]
    return x


def send(sock: socket.socket, obj: Any) -> None:
    data = json.dumps(_encode(obj)).encode()
    sock.sendall(struct.pack(">I", len(data)) + data)


def recv(sock: socket.socket) -> Any:
    head = _read(sock, 4)
    (n,) = struct.unpack(">I", head)
    if n > MAX_MESSAGE:
        raise ConnectionError(f"message of {n} bytes exceeds {MAX_MESSAGE}")
    return _decode(json.loads(_read(sock, n)))


def _read(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("env server connection closed")
        buf += chunk
    return bytes(buf)


def parse_address(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"address must be HOST:PORT, got {address!r}")
    return host, int(port)


def read_token(token: str | None, token_file: str | None) -> str:
    if token_file:
        token = Path(token_file).read_text().strip()
    if not token:
        raise ValueError("an env server needs a token (token or token_file): a shared secret both sides read")
    return token


# -- server ------------------------------------------------------------------------------------------
def _hello(env: gym.Env) -> dict:
    base = env.unwrapped
    space = env.observation_space
    return {
        "image_size": int(space["rgb"].shape[0]), "n_goals": int(space["goal"].n),
        "odom_limit": float(space["odom"].high[0]), "n_actions": int(env.action_space.n),
        "goal_names": list(getattr(base, "goal_names", [])), "action_names": list(getattr(base, "action_names", [])),
        "pose_frame": getattr(base, "pose_frame", None), "move_continuous": hasattr(base, "move_continuous"),
        "pose_in": hasattr(base, "pose_in"), "observe": hasattr(base, "observe"),
        "laser_scan": callable(getattr(base, "laser_scan", None)), "scan": "scan" in space.spaces,
        "scan_bands": "scan_bands" in space.spaces,
    }


def _call(env: gym.Env, msg: dict) -> Any:
    base, op = env.unwrapped, msg.get("op")
    if op == "reset":
        return list(env.reset(seed=msg.get("seed"), options=msg.get("options")))
    if op == "step":
        return list(env.step(int(msg["action"])))
    if op == "observe":
        return base.observe()
    if op == "move_continuous":
        return bool(base.move_continuous(float(msg["linear_m"]), float(msg["angular_rad"])))
    if op == "pose_in":
        return base.pose_in(str(msg["frame"]))
    if op == "laser_scan":
        return list(base.laser_scan())
    if op == "hello":
        return _hello(env)
    raise ValueError(f"unknown op {op!r}")


def serve(env: gym.Env, port: int, token: str, host: str = "127.0.0.1", once: bool = True,
          ready: Path | None = None) -> None:
    """Serve ``env`` to one client at a time on (host, port); returns after the first client
    disconnects when ``once``. ``ready`` is written when the socket listens (for scripts to wait on)."""
    with socket.create_server((host, int(port))) as srv:
        if ready is not None:
            ready.write_text(str(srv.getsockname()[1]))
        while True:
            conn, _ = srv.accept()
            with conn:
                conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                try:
                    first = recv(conn)
                    if not hmac.compare_digest(str(first.get("token", "")), token):
                        send(conn, {"error": "bad token"})
                        continue
                    send(conn, {"ok": _hello(env)})
                    while True:
                        msg = recv(conn)
                        if msg.get("op") == "close":
                            send(conn, {"ok": None})
                            break
                        try:
                            send(conn, {"ok": _call(env, msg)})
                        except Exception as e:  # the client raises it; the server keeps serving
                            send(conn, {"error": f"{type(e).__name__}: {e}", "type": type(e).__name__})
                except ConnectionError:
                    pass
            if once:
                return


# -- client ------------------------------------------------------------------------------------------
_ERRORS = {"ValueError": ValueError, "RuntimeError": RuntimeError, "KeyError": KeyError, "TypeError": TypeError}


class RemoteEnv(gym.Env):
    """A served object-search env as a local Gymnasium env (what ``sim_bridge_node`` wraps)."""

    metadata = {"render_modes": []}

    def __init__(self, address: str = "127.0.0.1:5731", token: str | None = None, token_file: str | None = None,
                 timeout_s: float = 60.0, pose_frame: str | None = None) -> None:
        from icrl_ros.sim.house import observation_space

        host, port = parse_address(address)
        self._sock = socket.create_connection((host, port), timeout=timeout_s)
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            send(self._sock, {"token": read_token(token, token_file)})
            hello = self._reply()
            if pose_frame is not None and hello["pose_frame"] not in (None, pose_frame):
                raise ValueError(f"pose_frame {pose_frame!r} differs from the served env's {hello['pose_frame']!r}; "
                                 "start the server with that pose_frame in --env-kwargs")
        except BaseException:
            self._sock.close()  # the server goes back to accepting
            raise
        self.goal_names = tuple(hello["goal_names"])
        self.action_names = tuple(hello["action_names"])
        self.pose_frame = hello["pose_frame"]
        self.action_space = gym.spaces.Discrete(int(hello["n_actions"]))
        self.observation_space = observation_space(int(hello["image_size"]), int(hello["n_goals"]),
                                                   float(hello["odom_limit"]), bool(hello.get("scan", False)),
                                                   bool(hello.get("scan_bands", False)))
        if hello.get("laser_scan", False):  # only where the served env has a laser (the bridge publishes it then)
            self.laser_scan = self._laser_scan
        self._closed = False

    def _reply(self) -> Any:
        msg = recv(self._sock)
        if "error" in msg:
            raise _ERRORS.get(msg.get("type", ""), RuntimeError)(f"env server: {msg['error']}")
        return msg["ok"]

    def _ask(self, **msg) -> Any:
        send(self._sock, msg)
        return self._reply()

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        obs, info = self._ask(op="reset", seed=seed, options=options)
        return obs, info

    def step(self, action):
        obs, reward, terminated, truncated, info = self._ask(op="step", action=int(action))
        return obs, float(reward), bool(terminated), bool(truncated), info

    def observe(self) -> dict:
        return self._ask(op="observe")

    def move_continuous(self, linear_m: float, angular_rad: float) -> bool:
        return bool(self._ask(op="move_continuous", linear_m=float(linear_m), angular_rad=float(angular_rad)))

    def pose_in(self, frame: str) -> np.ndarray:
        return np.asarray(self._ask(op="pose_in", frame=str(frame)), np.float32)

    def _laser_scan(self) -> tuple[float, float, np.ndarray, float]:
        angle_min, increment, ranges, range_max = self._ask(op="laser_scan")
        return float(angle_min), float(increment), np.asarray(ranges, np.float32), float(range_max)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            try:
                self._ask(op="close")
            except (ConnectionError, OSError):
                pass
            self._sock.close()
        super().close()


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--env-id", required=True, help="registered Gymnasium id (icrl_ros.sim registers ours)")
    p.add_argument("--env-kwargs", default="{}", help="JSON keyword arguments for gymnasium.make")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=5731, help="TCP port (0 = any free one; see --ready-file)")
    p.add_argument("--token-file", required=True, help="file holding the shared secret clients must send")
    p.add_argument("--ready-file", default=None, help="written with the port once the server listens")
    p.add_argument("--forever", action="store_true", help="serve client after client (default: exit after one)")
    a = p.parse_args(argv)
    import icrl_ros.sim  # noqa: F401  (registers the ids)

    env = gym.make(a.env_id, **json.loads(a.env_kwargs))
    try:
        serve(env, a.port, read_token(None, a.token_file), a.host, once=not a.forever,
              ready=Path(a.ready_file) if a.ready_file else None)
    finally:
        env.close()


if __name__ == "__main__":
    main()
