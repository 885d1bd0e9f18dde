"""Offline RA-DT dataset for Darkroom: learning histories of one learner per training goal.

This file is the command line only (``python training/radt_collect.py ...``, the same as
``python -m icrl_ros.training.radt_collect ...``); the code and its full description live in
:mod:`icrl_ros.training.radt_collect`.
"""

import runpy

runpy.run_module("icrl_ros.training.radt_collect", run_name="__main__", alter_sys=True)
