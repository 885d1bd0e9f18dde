"""Training throughput: env steps/s of the full PPO loop (rollout + partial updates).

This file is the command line only (``python training/throughput.py ...``, the same as
``python -m icrl_ros.training.throughput ...``); the code and its full description live in
:mod:`icrl_ros.training.throughput`.
"""

import runpy

runpy.run_module("icrl_ros.training.throughput", run_name="__main__", alter_sys=True)
