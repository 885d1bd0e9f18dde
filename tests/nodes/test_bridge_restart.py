"""A bridge restarted into another house starts a new trial in the agent (real processes).

The agent and the bridge run as their console scripts' ``main()`` in two processes (the shipped
``house_relic_scan`` bundle, the MiniWorld house, lockstep). The bridge is stopped (SIGINT) and a new
one started with another seed: it announces ``trial_start`` with trial index 0 again. The agent used
to deduplicate trial_start by that index alone and kept the first house's memory; every bridge run
now carries its own id in its events, and the agent resets its memory for the new run's trial 0.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.nodes.ros_support import REPO, require_house_bundle, require_ros, spin_until

require_ros()

from rclpy.executors import SingleThreadedExecutor  # noqa: E402

from tests.nodes.probe import Probe  # noqa: E402
from tests.nodes.test_agent_safety import _env, stop  # noqa: E402

NS = "/brestart"


def _bridge(tmp_path, seed: int, tag: str) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "icrl_ros.nodes.sim_bridge_node", "--ros-args", "-r", f"__ns:={NS}",
           "--params-file", f"{REPO}/config/bridge.yaml", "-p", f"seed:={seed}", "-p", "max_episode_steps:=400"]
    log = open(tmp_path / f"bridge_{tag}.log", "wb")
    return subprocess.Popen(cmd, cwd=REPO, env=_env(), stdout=log, stderr=subprocess.STDOUT)


def _agent(tmp_path) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "icrl_ros.nodes.agent_node", "--ros-args", "-r", f"__ns:={NS}",
           "--params-file", f"{REPO}/config/agent.yaml", "-p", "autostart:=true", "-p", "status_rate_hz:=5.0",
           "-p", f"memory_path:={tmp_path / 'mem'}"]
    log = open(tmp_path / "agent.log", "wb")
    return subprocess.Popen(cmd, cwd=REPO, env=_env(), stdout=log, stderr=subprocess.STDOUT)


def _events(probe: Probe, kind: str) -> list[dict]:
    out = []
    for m in probe.got["episode_events"]:
        e = json.loads(m.data)
        if e.get("event") == kind:
            out.append(e)
    return out


@pytest.mark.timeout(240)
def test_a_bridge_restarted_with_another_seed_starts_a_new_trial_in_the_agent(ros_context, tmp_path) -> None:
    require_house_bundle()
    ex = SingleThreadedExecutor(context=ros_context)
    probe = Probe(ros_context, namespace=NS)
    ex.add_node(probe)
    agent = _agent(tmp_path)
    bridge = second = None
    logs = lambda: "\n".join((tmp_path / f).read_text(errors="replace")[-2000:]  # noqa: E731
                             for f in ("agent.log", "bridge_first.log", "bridge_second.log") if (tmp_path / f).exists())
    try:
        def status() -> dict:
            return probe.status()

        # the agent subscribes to the (volatile) events at configure: start the first bridge after that,
        # so the agent sees its trial_start (trial 0), as it does in a running system
        assert spin_until(ex, lambda: status().get("state") == "active", 180), logs()
        bridge = _bridge(tmp_path, 0, "first")
        # the first house: the agent took its trial 0, acts, and its memory grows
        assert spin_until(ex, lambda: "trial_start event (trial 0): the trial this agent is in" in logs(), 90), logs()
        assert spin_until(ex, lambda: int(status().get("memory_tokens", 0)) >= 30, 120), logs()
        # the probe hears the bridge's latched events on its own discovery, not when the agent does: wait for them
        spin_until(ex, lambda: _events(probe, "trial_start"), 30)
        first = _events(probe, "trial_start")
        assert first and first[-1]["trial"] == 0 and first[-1]["run"], (
            [m.data for m in probe.got["episode_events"]], probe.get_publishers_info_by_topic(f"{NS}/episode_events"))
        resets_before = int(status()["memory_resets"])
        tokens_before = int(status()["memory_tokens"])

        bridge.send_signal(2)  # SIGINT: the bridge exits; a new one (another house) starts in its place
        bridge.wait(timeout=20)
        second = _bridge(tmp_path, 1, "second")
        assert spin_until(ex, lambda: any(e["run"] != first[-1]["run"] for e in _events(probe, "trial_start")), 60), \
            logs()
        restarted = [e for e in _events(probe, "trial_start") if e["run"] != first[-1]["run"]][-1]
        assert restarted["trial"] == 0 and restarted.get("house_seed") != first[-1].get("house_seed"), restarted
        # the agent took it as a new trial: memory reset, and it acts in the new house from an empty memory
        assert spin_until(ex, lambda: int(status().get("memory_resets", 0)) > resets_before, 30), logs()
        def after_reset() -> list[int]:  # memory tokens in every status since the reset, in order
            out = []
            for m in probe.got["agent_status"]:
                kv = {k.key: k.value for k in m.status[0].values}
                if int(kv.get("memory_resets", 0)) > resets_before:
                    out.append(int(kv["memory_tokens"]))
            return out
        assert spin_until(ex, lambda: any(0 < t < tokens_before for t in after_reset()), 60), \
            (tokens_before, after_reset()[-20:], logs())
        log = (tmp_path / "agent.log").read_text(errors="replace")
        # the first bridge's trial was the one the fresh agent was in (kept); the restarted bridge's reset it
        assert log.count("memory reset: trial_start event (trial 0") == 1, log[-3000:]
        assert log.count("trial_start event (trial 0): the trial this agent is in, memory kept") == 1, log[-3000:]
        assert f"trial 0, a new bridge run '{restarted['run']}'" in log, log[-3000:]
    finally:
        for proc in (bridge, second, agent):
            if proc is not None:
                stop(proc)
        ex.shutdown()
        probe.destroy_node()
