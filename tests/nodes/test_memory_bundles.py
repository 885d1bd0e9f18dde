"""The agent node on image HCAM and RA-DT bundles, against the sim bridge over real DDS.

Small randomly initialised image policies (``tests/image_bundles.py``: 32x32 rgb + odometry +
goal, no reward) exported to temp bundles run on ONNX Runtime in the agent, in lockstep with
the bridge on the test image env (cheap frames; the bridge caps episodes at 6 steps). Checked:
actions go out for every bridge step, the memory stays within ``memory_budget_bytes`` (node
status and every step), the memory carries across episode starts (HCAM: chunks keep
accumulating; RA-DT: finished episodes enter the index, with the bridge's returns as their
re-ranking utility), and ``~/reset_memory`` empties it.
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.nodes.ros_support import require_ros, spin_until

require_ros()
pytest.importorskip("onnxruntime")

from rclpy.executors import SingleThreadedExecutor  # noqa: E402
from rclpy.lifecycle import TransitionCallbackReturn  # noqa: E402
from rclpy.parameter import Parameter  # noqa: E402
from std_srvs.srv import Trigger  # noqa: E402

from icrl_ros.nodes.agent_node import AgentNode  # noqa: E402
from icrl_ros.nodes.sim_bridge_node import SimBridgeNode  # noqa: E402
from tests.image_bundles import export_image_bundle  # noqa: E402
from tests.nodes.probe import Probe  # noqa: E402

ENV_ID = "tests.nodes.fixture_env:icrl_ros_test/TinyImageNav-v0"
CAP = 6  # bridge steps per episode
BUDGET = {"hcam": 200_000, "radt": 1_000_000}


@pytest.mark.parametrize("kind", ["hcam", "radt"])
def test_agent_runs_memory_bundle_over_dds(ros_context, tmp_path, kind) -> None:
    if kind == "radt":
        pytest.importorskip("faiss")
    bundle = export_image_bundle(kind, tmp_path / "bundle")
    budget = BUDGET[kind]
    bridge = SimBridgeNode(context=ros_context, parameter_overrides=[Parameter(k, value=v) for k, v in {
        "env_id": ENV_ID, "env_kwargs": '{"max_steps": 50}', "seed": 5, "max_episode_steps": CAP,
        "republish_period_s": 0.3}.items()])
    agent = AgentNode(context=ros_context, parameter_overrides=[Parameter(k, value=v) for k, v in {
        "bundle_path": str(bundle), "action_mode": "discrete", "sample_seed": 1, "memory_budget_bytes": budget,
        "status_rate_hz": 10.0}.items()])
    probe = Probe(ros_context)
    ex = SingleThreadedExecutor(context=ros_context)
    for n in (bridge, agent, probe):
        ex.add_node(n)
    try:
        assert agent.trigger_configure() == TransitionCallbackReturn.SUCCESS
        assert agent.trigger_activate() == TransitionCallbackReturn.SUCCESS
        runner = agent.runner
        assert runner.memory.nbytes <= budget
        acts: list[tuple[dict, int, int]] = []  # (info, stored chunks / episodes after the step, index entries)
        act = runner.act

        def rec_act(obs):
            action, info = act(obs)
            mem = runner.memory
            acts.append((dict(info), mem.episodes if kind == "radt" else mem.chunks, len(mem) if kind == "radt" else 0))
            return action, info
        runner.act = rec_act
        told: list[tuple[float, bool]] = []
        if kind == "radt":
            end = runner.end_episode
            runner.end_episode = lambda r=None, episode=None: (told.append((r, res := end(r, episode))), res)[1]

        ends = lambda: [e for e in probe.events() if e["event"] == "episode_end"]  # noqa: E731
        assert spin_until(ex, lambda: len(ends()) >= 3 and len(acts) > sum(e["steps"] for e in ends()), 20), \
            (len(ends()), len(acts))
        assert spin_until(ex, lambda: int(probe.status().get("actions", 0)) >= len(acts) - 1, 2)
        status = probe.status()

        # actions out, one per bridge step; the memory within the budget throughout
        assert len(probe.got["action"]) >= sum(e["steps"] for e in ends())
        assert 0 < int(status["memory_bytes"]) <= budget and all(i["memory_bytes"] <= budget for i, _, _ in acts)
        assert agent.counters["runner_errors"] == 0

        # memory carries across the episode starts of trial 0
        e3 = ends()[:3]
        assert [e["episode"] for e in e3] == [0, 1, 2] and all(1 <= e["steps"] <= CAP for e in e3)
        # the runner's trial of these episodes: the bridge's trial_start (latched, so it arrives even when the
        # agent subscribes late) starts a new one over the runner's first, so it is not always trial 0
        trial0 = [a for a in acts if a[0]["trial"] == acts[-1][0]["trial"]]
        firsts = [i for i, a in enumerate(trial0) if a[0]["step"] == 0 and a[0]["episode"] > 0]
        assert firsts, [a[0]["episode"] for a in trial0]
        if kind == "hcam":  # a completed chunk per C steps of the trial, never dropped at a new episode
            C = runner.args.hcam_chunk
            assert [a[1] for a in trial0] == [(t + 1) // C for t in range(len(trial0))]
        else:  # every finished episode is stored (at the next episode's first step) and stays
            assert [trial0[i][1] for i in firsts] == [trial0[i][0]["episode"] for i in firsts]
            assert trial0[firsts[-1]][2] > 0 and int(status["memory_entries"]) > 0
            # the bridge's returns reached the runner and became the stored episodes' utility
            assert len(told) >= 2 and all(ok for _, ok in told[:2]), told
            rets = runner.memory.index.returns[:len(runner.memory)]
            assert len(rets) and all(np.isclose([r for r, _ in told], ret, atol=1e-5).any() for ret in rets), (rets, told)

        # ~/reset_memory clears it: the next step starts the next trial from an empty memory
        client = probe.create_client(Trigger, "/icrl_agent/reset_memory")
        assert client.wait_for_service(timeout_sec=5)
        n_before, nxt = len(acts), acts[-1][0]["trial"] + 1
        future = client.call_async(Trigger.Request())
        assert spin_until(ex, future.done, 5) and future.result().success
        assert spin_until(ex, lambda: any(a[0]["trial"] == nxt for a in acts[n_before:]), 10)
        first = next(a for a in acts[n_before:] if a[0]["trial"] == nxt)
        assert first[0]["episode"] == 0 and first[0]["step"] == 0 and first[1] == 0 and first[2] == 0
        assert first[0]["memory_tokens"] <= 1
    finally:
        ex.shutdown()
        for n in (probe, agent, bridge):
            n.destroy_node()
