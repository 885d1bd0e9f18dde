"""Replay a recorded run (MCAP, e.g. make demo's demo_out/run.mcap) through a policy bundle and compare actions.

This file is the command line only (``python training/replay.py RUN.mcap --bundle DIR``, the same as
``python -m icrl_ros.nodes.replay ...``); the code and its full description live in :mod:`icrl_ros.nodes.replay`.
"""

import runpy

runpy.run_module("icrl_ros.nodes.replay", run_name="__main__", alter_sys=True)
