"""Offline training of an RA-DT policy on stored learning histories (cross-entropy on actions).

This file is the command line only (``python training/train_radt.py ...``, the same as
``python -m icrl_ros.training.train_radt ...``); the code and its full description live in
:mod:`icrl_ros.training.train_radt`.
"""

import runpy

runpy.run_module("icrl_ros.training.train_radt", run_name="__main__", alter_sys=True)
