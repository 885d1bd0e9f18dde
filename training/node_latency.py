"""Per-step latency inside ``agent_node`` with a real bundle, against the house bridge in lockstep.

This file is the command line only (``python training/node_latency.py ...``, the same as
``python -m icrl_ros.nodes.node_latency ...``); the code and its full description live in
:mod:`icrl_ros.nodes.node_latency`.
"""

import runpy

runpy.run_module("icrl_ros.nodes.node_latency", run_name="__main__", alter_sys=True)
