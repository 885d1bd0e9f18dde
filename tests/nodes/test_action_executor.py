"""ActionExecutor in a simulated kinematic loop: steps reached within tolerance, limits held."""

from __future__ import annotations

import math

import pytest

from icrl_ros.nodes.action_executor import ActionExecutor, ActionKind, ExecutorConfig
from icrl_ros.nodes.convert import InputError, relative_pose


def simulate(executor: ActionExecutor, kind: ActionKind, pose=(1.0, -2.0, 2.9), rate: float = 20.0,
             lag_ticks: int = 0, scale: float = 1.0, max_s: float = 20.0):
    """Unicycle base at ``rate`` Hz; commands act ``lag_ticks`` late and ``scale`` times as strong."""
    dt = 1.0 / rate
    start, t = pose, 0.0
    queue = [(0.0, 0.0)] * lag_ticks
    commands = []
    executor.start(kind, pose)
    while t < max_s:
        v, w, done = executor.update(pose, t)
        commands.append((t, v, w))
        if done:
            break
        queue.append((v, w))
        va, wa = queue.pop(0)
        x, y, th = pose
        pose = (x + scale * va * dt * math.cos(th), y + scale * va * dt * math.sin(th), th + scale * wa * dt)
        t += dt
    return relative_pose(start, pose), commands


@pytest.mark.parametrize("lag_ticks, scale", [(0, 1.0), (2, 1.0), (1, 0.7), (0, 1.3)])
def test_forward_step_reaches_quarter_metre(lag_ticks: int, scale: float) -> None:
    ex = ActionExecutor()
    rel, commands = simulate(ex, ActionKind.FORWARD, lag_ticks=lag_ticks, scale=scale)
    assert ex.result == "reached"
    assert abs(rel[0] - 0.25) <= 0.02 and abs(rel[1]) <= 0.005 and abs(rel[2]) <= math.radians(1)
    assert commands[-1][1:] == (0.0, 0.0)


@pytest.mark.parametrize("kind, sign", [(ActionKind.TURN_LEFT, 1), (ActionKind.TURN_RIGHT, -1)])
@pytest.mark.parametrize("lag_ticks, scale", [(0, 1.0), (2, 1.0), (1, 0.7)])
def test_turn_step_reaches_thirty_degrees(kind: ActionKind, sign: int, lag_ticks: int, scale: float) -> None:
    ex = ActionExecutor()
    rel, _ = simulate(ex, kind, pose=(0.0, 0.0, 3.0), lag_ticks=lag_ticks, scale=scale)  # crosses +-pi
    assert ex.result == "reached"
    assert abs(math.degrees(rel[2]) - sign * 30.0) <= 2.0
    assert math.hypot(rel[0], rel[1]) < 1e-9


def test_limits_hold_on_every_command() -> None:
    cfg = ExecutorConfig(max_linear_speed=0.2, max_angular_speed=0.5, max_linear_accel=0.4, max_angular_accel=1.0)
    for kind in (ActionKind.FORWARD, ActionKind.TURN_LEFT):
        ex = ActionExecutor(cfg)
        _, commands = simulate(ex, kind)
        prev_v = prev_w = 0.0
        for (_, v, w) in commands[:-1]:  # the final command is the zero at completion
            assert abs(v) <= cfg.max_linear_speed + 1e-9 and abs(w) <= cfg.max_angular_speed + 1e-9
            assert abs(v - prev_v) <= cfg.max_linear_accel * 0.05 + 1e-9
            assert abs(w - prev_w) <= cfg.max_angular_accel * 0.05 + 1e-9
            prev_v, prev_w = v, w


def test_distances_and_angles_come_from_config() -> None:
    ex = ActionExecutor(ExecutorConfig(forward_m=0.5, turn_rad=math.radians(45)))
    rel, _ = simulate(ex, ActionKind.FORWARD)
    assert abs(rel[0] - 0.5) <= 0.02
    rel, _ = simulate(ex, ActionKind.TURN_RIGHT)
    assert abs(math.degrees(rel[2]) + 45) <= 2


def test_stop_is_immediate_and_timeout_gives_up() -> None:
    ex = ActionExecutor()
    ex.start(ActionKind.STOP, (0, 0, 0))
    assert ex.update((0, 0, 0), 0.0) == (0.0, 0.0, True) and ex.result == "stopped"
    ex = ActionExecutor(ExecutorConfig(timeout_s=1.0))
    ex.start("forward", (0, 0, 0))
    t, done = 0.0, False
    while not done:  # the base never moves
        _, _, done = ex.update((0, 0, 0), t)
        t += 0.05
    assert ex.result == "timeout" and 1.0 <= t <= 1.2


def test_abort_and_idle() -> None:
    ex = ActionExecutor()
    assert ex.update((0, 0, 0), 0.0) == (0.0, 0.0, True)
    ex.start(ActionKind.TURN_LEFT, (0, 0, 0))
    ex.update((0, 0, 0), 0.0)
    ex.abort()
    assert not ex.busy and ex.result == "aborted" and ex.command == (0.0, 0.0)


def test_bad_inputs() -> None:
    with pytest.raises(ValueError, match="unknown 'jump'"):
        ActionKind.from_name("jump")
    assert ActionKind.from_name("Turn-Left") is ActionKind.TURN_LEFT
    with pytest.raises(ValueError, match="max_linear_speed"):
        ActionExecutor(ExecutorConfig(max_linear_speed=-1))
    ex = ActionExecutor()
    with pytest.raises(InputError):
        ex.start(ActionKind.FORWARD, (math.nan, 0, 0))
    ex.start(ActionKind.FORWARD, (0, 0, 0))
    with pytest.raises(InputError):
        ex.update((0, math.inf, 0), 0.0)
