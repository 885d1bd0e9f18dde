"""Per-step latency and memory of every memory policy and backend vs context length.

This file is the command line only (``python training/benchmark.py ...``, the same as
``python -m icrl_ros.training.benchmark ...``); the code and its full description live in
:mod:`icrl_ros.training.benchmark`.
"""

import runpy

runpy.run_module("icrl_ros.training.benchmark", run_name="__main__", alter_sys=True)
