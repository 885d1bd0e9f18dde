"""Bridge + agent together over real rclpy / DDS on loopback.

Lockstep: the MiniWorld house env behind the bridge and the shipped Memo bundle
(``bundles/house_memo``) on ONNX Runtime in the agent run three whole episodes; memory carries
across them (summary tokens accumulate, nothing resets at a new goal), the agent sees exactly
the env's images and odometry, and a reference ``PolicyRunner`` fed the same inputs takes the
same actions. Real time: the Twist executor drives the bridge's ``cmd_vel`` integration to
0.25 m / 30 deg within tolerance (test-double env and scripted runner: the check needs a known
sequence of forward / turn actions, which a trained policy does not promise).
"""

from __future__ import annotations


import numpy as np
import pytest

from tests.nodes.ros_support import assert_action_steps, require_memo_bundle, require_ros, spin_until

require_ros()

from rclpy.executors import SingleThreadedExecutor  # noqa: E402
from rclpy.lifecycle import TransitionCallbackReturn  # noqa: E402
from rclpy.parameter import Parameter  # noqa: E402

from icrl_ros.nodes.agent_node import AgentNode  # noqa: E402
from icrl_ros.nodes.sim_bridge_node import SimBridgeNode  # noqa: E402
from tests.nodes.fake_runner import FakeRunner, write_fake_bundle  # noqa: E402
from tests.nodes.probe import Probe  # noqa: E402

ENV_ID = "tests.nodes.fixture_env:icrl_ros_test/TinyImageNav-v0"


def nodes(ctx, tmp_path, bridge: dict, agent: dict, script=None, fake: bool = True):
    if fake:
        agent = {"bundle_path": write_fake_bundle(str(tmp_path / "bundle"), script=script)} | agent
        bridge = {"env_id": ENV_ID} | bridge
    bridge_node = SimBridgeNode(context=ctx, parameter_overrides=[
        Parameter(k, value=v) for k, v in ({"seed": 5} | bridge).items()])
    agent_node = AgentNode(context=ctx, runner_factory=FakeRunner.from_bundle if fake else None,
                           parameter_overrides=[
                               Parameter(k, value=v) for k, v in ({"status_rate_hz": 5.0} | agent).items()])
    probe = Probe(ctx)
    ex = SingleThreadedExecutor(context=ctx)
    for n in (bridge_node, agent_node, probe):
        ex.add_node(n)
    return ex, bridge_node, agent_node, probe


def memo_tokens(steps: int, l_seg: int, l_sum: int) -> int:
    """Tokens a Memo memory holds after ``steps`` steps of one trial: every summary set so far + the open segment."""
    return (steps // l_seg) * l_sum + steps % l_seg


def test_lockstep_house_episodes_with_the_shipped_bundle_memory_carries(ros_context, tmp_path) -> None:
    bundle = require_memo_bundle()
    ex, bridge, agent, probe = nodes(
        ros_context, tmp_path, fake=False,
        bridge={"env_kwargs": '{"split": "test"}', "seed": 11, "max_episode_steps": 40, "republish_period_s": 0.3},
        agent={"bundle_path": bundle, "action_mode": "discrete", "sample_seed": 3})
    try:
        # what the bridge handed out: every observation the env produced, per (episode, step)
        env_obs: dict[tuple[int, int], dict] = {}
        publish_obs = bridge._publish_obs

        def record_obs(obs, publish_image, twist=(0.0, 0.0)):
            if publish_image and isinstance(obs, dict):
                env_obs.setdefault((bridge.episode, bridge.episode_step), {k: np.copy(v) for k, v in obs.items()})
            publish_obs(obs, publish_image, twist)
        bridge._publish_obs = record_obs

        assert agent.trigger_configure() == TransitionCallbackReturn.SUCCESS
        assert agent.trigger_activate() == TransitionCallbackReturn.SUCCESS
        runner = agent.runner
        trial_id = runner.trial_id
        calls: list[tuple] = []  # what the node asked of the runner, in order
        act, begin, reset = runner.act, runner.begin_episode, runner.reset_trial

        def rec_act(obs):
            action, info = act(obs)
            calls.append(("act", {k: np.copy(v) for k, v in obs.items()}, action, dict(info)))
            return action, info
        runner.act = rec_act
        runner.begin_episode = lambda goal=None: (calls.append(("begin", goal)), begin(goal))[1]
        runner.reset_trial = lambda: (calls.append(("reset",)), reset())[1]

        ends = lambda: [e for e in probe.events() if e["event"] == "episode_end"]  # noqa: E731
        # at least three episodes and enough steps to close a Memo segment (the shipped policy,
        # barely trained, often stops after a step or two)
        min_steps = runner.bundle.manifest.positions["l_seg"] + 6
        done = lambda: len(ends()) >= 3 and sum(e["steps"] for e in ends()) >= min_steps  # noqa: E731
        assert spin_until(ex, done, 120), (len(ends()), calls[-1:])
        bridge.params.auto_reset = False  # freeze: no new episode starts
        spin_until(ex, lambda: False, 0.2)
    finally:
        ex.shutdown()
        for n in (probe, agent, bridge):
            n.destroy_node()

    # whole episodes of trial 0, each ended by the policy's stop or by the 40-step cap
    e3 = ends()
    n = len(e3)
    assert n >= 3 and [(e["trial"], e["episode"]) for e in e3] == [(0, i) for i in range(n)]
    assert all(1 <= e["steps"] <= 40 and (e["truncated"] == (e["steps"] == 40)) for e in e3), e3
    assert all(len(e["trajectory"]) == e["steps"] + 1 and isinstance(e["house_seed"], int) for e in e3)
    starts = [e for e in probe.events() if e["event"] == "episode_start"][:n]

    # the agent: one begin_episode per bridge episode (its goal), one act per bridge step, no reset once
    # it acts (the bridge's latched trial_start may reach it after configure: one reset before any act)
    first_act = next(i for i, c in enumerate(calls) if c[0] == "act")
    assert ("reset",) not in calls[first_act:] and calls[:first_act].count(("reset",)) <= 1, calls[:first_act]
    assert (runner.trial_id == trial_id) == (("reset",) not in calls)
    begins = [c[1] for c in calls if c[0] == "begin"]
    assert begins[:n] == [s["goal"] for s in starts]
    acts = [c for c in calls if c[0] == "act" and c[3]["episode"] < n]
    assert [sum(1 for c in acts if c[3]["episode"] == ep) for ep in range(n)] == [e["steps"] for e in e3]

    # memory carries across the episodes: the token count follows the trial's total step count
    # (Memo: l_sum summary tokens per closed l_seg segment + the open segment), never restarting
    pos = runner.bundle.manifest.positions
    tokens = [c[3]["memory_tokens"] for c in acts]
    assert tokens == [memo_tokens(t + 1, pos["l_seg"], pos["l_sum"]) for t in range(len(acts))]
    assert len(acts) > pos["l_seg"] and acts[pos["l_seg"]][3]["episode"] > 0  # a summary of earlier episodes
    assert [c[3]["step"] for c in acts] == [s for e in e3 for s in range(e["steps"])]

    # the agent saw exactly the env's pixels and odometry (64x64: no resampling)
    for c in acts:
        obs = env_obs[(c[3]["episode"], c[3]["step"])]
        np.testing.assert_array_equal(c[1]["rgb"], obs["rgb"])
        d = np.asarray(c[1]["odom"], np.float64) - np.asarray(obs["odom"], np.float64)
        d[2] = (d[2] + np.pi) % (2 * np.pi) - np.pi  # yaw: +pi and -pi are one heading (float32 rounding)
        np.testing.assert_allclose(d, 0, atol=1e-5)
    np.testing.assert_allclose(acts[0][1]["odom"], 0, atol=1e-6)

    # a reference runner fed the same inputs takes the same actions (same seeded sampler) ...
    from icrl_ros.runtime import PolicyRunner

    ref = PolicyRunner.from_bundle(bundle)
    ref.greedy = False
    ref.generator.manual_seed(3)
    values = []
    for c in calls:
        if c[0] == "begin":
            ref.begin_episode(c[1])
        elif c[0] == "act" and c[3]["episode"] < n:
            action, info = ref.act(c[1])
            assert action == c[2] and info["memory_tokens"] == c[3]["memory_tokens"]
            assert abs(info["value"] - c[3]["value"]) < 1e-4
            values.append(info["value"])
    # ... and the memory matters: the same later-episode inputs with memory cleared at each
    # episode, everything else equal (the previous action carries over as in the original)
    fresh = PolicyRunner.from_bundle(bundle)
    diffs, last_action = [], fresh.args.n_actions
    for c in calls:
        if c[0] == "begin":
            fresh.reset_trial()
            fresh.begin_episode(c[1])
            fresh.prev_action = last_action
        elif c[0] == "act" and c[3]["episode"] < n:
            last_action = c[2]
            _, info = fresh.act(c[1])
            fresh.prev_action = c[2]  # follow the original's actions, not the fresh runner's
            if c[3]["episode"] > 0:
                diffs.append(abs(info["value"] - c[3]["value"]))
    assert max(diffs) > 1e-3, diffs
    assert agent.counters["bad_odometry"] == 0 and agent.counters["runner_errors"] == 0


@pytest.mark.slow  # ~25 s (an export and a house bridge); make test keeps the loop's and the runner's scan tests
def test_a_bundle_that_reads_a_scan_gets_the_bridges_laser_as_the_env_scan_it_trained_on(ros_context, tmp_path) -> None:
    """The bridge publishes the house env's 360-degree laser (``sensor_msgs/LaserScan``); an agent whose bundle reads a
    ``scan`` subscribes to it, and the free headings it hands the policy are exactly the env's ``scan`` observation
    (what training fed) at every step."""
    from pathlib import Path

    import torch

    from icrl_ros.models import load_checkpoint
    from icrl_ros.models.policy import ICLPolicy
    from icrl_ros.training.export import env_metadata, export_bundle

    shipped = Path(__file__).resolve().parents[2] / "checkpoints" / "house_relic.pt"
    if not shipped.is_file():
        pytest.skip(f"{shipped} is missing")
    model, blob = load_checkpoint(shipped)
    config = blob["config"]
    policy = ICLPolicy(model.args.replace_section("house", route_memory=True, route_skill=8, scan_input=True))
    policy.load_state_dict(model.state_dict(), strict=False)
    with torch.no_grad():
        policy.route_skill[-1].weight.normal_(0.0, 0.5, generator=torch.Generator().manual_seed(0))
    bundle = export_bundle(policy, tmp_path / "scan_bundle", config=config, env=env_metadata(config["env"]["id"]))
    ex, bridge, agent, probe = nodes(
        ros_context, tmp_path, fake=False,
        bridge={"env_kwargs": '{"split": "test", "scan": true}', "seed": 11, "max_episode_steps": 30,
                "republish_period_s": 0.3},
        agent={"bundle_path": str(bundle), "action_mode": "discrete", "sample_seed": 3})
    try:
        env_scan: dict[tuple[int, int], np.ndarray] = {}
        publish_obs = bridge._publish_obs

        def record_obs(obs, publish_image, twist=(0.0, 0.0)):
            if publish_image:
                env_scan.setdefault((bridge.episode, bridge.episode_step), np.copy(obs["scan"]))
            publish_obs(obs, publish_image, twist)
        bridge._publish_obs = record_obs
        assert agent.trigger_configure() == TransitionCallbackReturn.SUCCESS
        assert agent.trigger_activate() == TransitionCallbackReturn.SUCCESS
        runner, seen = agent.runner, []
        act = runner.act

        def rec_act(obs):
            action, info = act(obs)
            seen.append((info["episode"], info["step"], np.copy(obs["scan"])))
            return action, info
        runner.act = rec_act
        assert spin_until(ex, lambda: len(seen) >= 25, 90), len(seen)
    finally:
        ex.shutdown()
        for n in (probe, agent, bridge):
            n.destroy_node()
    for episode, step, scan in seen:
        np.testing.assert_array_equal(scan, env_scan[(episode, step)])
    assert any((scan == 0).any() for _, _, scan in seen) and agent.counters["bad_scan"] == 0


def test_twist_executor_reaches_steps_against_realtime_bridge(ros_context, tmp_path) -> None:
    ex, bridge, agent, probe = nodes(
        ros_context, tmp_path,
        bridge={"mode": "realtime", "realtime_rate_hz": 20.0, "camera_rate_hz": 10.0, "cmd_timeout_s": 0.25,
                "env_kwargs": '{"max_steps": 100}'},
        agent={"action_mode": "twist", "control_rate_hz": 20.0, "settle_s": 0.1, "input_timeout_s": 1.0},
        script=[1, 2, 3, 1, 0])
    env = bridge.env.unwrapped
    poses: list[tuple[int, tuple[float, float, float]]] = []
    try:
        agent.trigger_configure()
        agent.trigger_activate()
        # the env's true pose at the moment the agent publishes each action (before the bridge
        # can react to a stop by resetting the env)
        publish = agent.pub_action.publish

        def record(msg):
            poses.append((msg.data, tuple(float(v) for v in env.pose)))
            publish(msg)
        agent.pub_action.publish = record
        assert spin_until(ex, lambda: len(poses) >= 5, 40), poses
        assert_action_steps(poses)  # the pose change between consecutive actions, in the frame of the first
        # the stop action ends the episode in the bridge
        assert spin_until(ex, lambda: any(e["event"] == "episode_end" for e in probe.events()), 5)
        twists = probe.got["cmd_vel"]
        assert max(abs(t.linear.x) for t in twists) <= 0.3 + 1e-9
        assert max(abs(t.angular.z) for t in twists) <= 0.8 + 1e-9
        assert agent.counters["executor_timeouts"] == 0 and agent.counters["watchdog_trips"] == 0
    finally:
        ex.shutdown()
        for n in (probe, agent, bridge):
            n.destroy_node()
