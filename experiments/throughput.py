"""Training throughput: env steps/s of the full PPO loop (rollout + partial updates).

This file is the command line only (``python experiments/throughput.py ...``, the same as
``python -m icrl_ros.experiments.throughput ...``); the code and its full description live in
:mod:`icrl_ros.experiments.throughput`.
"""

import runpy

runpy.run_module("icrl_ros.experiments.throughput", run_name="__main__", alter_sys=True)
