"""Train a ReLIC in-context policy with PPO + partial updates.

This file is the command line only (``python training/train.py ...``, the same as
``python -m icrl_ros.training.train ...``); the code and its full description live in
:mod:`icrl_ros.training.train`.
"""

import runpy

runpy.run_module("icrl_ros.training.train", run_name="__main__", alter_sys=True)
