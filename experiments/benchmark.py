"""Per-step latency and memory of every memory policy and backend vs context length.

This file is the command line only (``python experiments/benchmark.py ...``, the same as
``python -m icrl_ros.experiments.benchmark ...``); the code and its full description live in
:mod:`icrl_ros.experiments.benchmark`.
"""

import runpy

runpy.run_module("icrl_ros.experiments.benchmark", run_name="__main__", alter_sys=True)
