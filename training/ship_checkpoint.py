"""Copy a training checkpoint without its optimiser state, for shipping in the repo.

This file is the command line only (``python training/ship_checkpoint.py ...``, the same as
``python -m icrl_ros.training.ship_checkpoint ...``); the code and its full description live in
:mod:`icrl_ros.training.ship_checkpoint`.
"""

import runpy

runpy.run_module("icrl_ros.training.ship_checkpoint", run_name="__main__", alter_sys=True)
