"""``agent_node``'s real ``main()`` (signals, executor, autostart, exit) with the scripted
:class:`FakeRunner` as its runner: for process-level tests that need known actions (a base that
is driving when the process is stopped). Run as ``python -m tests.nodes.fake_agent_main --ros-args ...``
with ``bundle_path`` a directory from :func:`write_fake_bundle`."""

from icrl_ros.nodes import agent_node
from tests.nodes.fake_runner import FakeRunner

agent_node.default_runner_factory = FakeRunner.from_bundle

if __name__ == "__main__":
    agent_node.main()
