"""How far one optimiser-sized step moves a grid-world policy (KL), HCAM split by top-k flips.

This file is the command line only (``python experiments/sensitivity.py ...``, the same as
``python -m icrl_ros.experiments.sensitivity ...``); the code and its full description live in
:mod:`icrl_ros.experiments.sensitivity`.
"""

import runpy

runpy.run_module("icrl_ros.experiments.sensitivity", run_name="__main__", alter_sys=True)
