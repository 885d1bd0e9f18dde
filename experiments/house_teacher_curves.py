"""Benchmark: the in-context house teacher beside its ceiling and its floor.

This file is the command line only (``python experiments/house_teacher_curves.py ...``, the same as
``python -m icrl_ros.experiments.house_teacher_curves ...``); the code and its full description live in
:mod:`icrl_ros.experiments.house_teacher_curves`.
"""

import runpy

runpy.run_module("icrl_ros.experiments.house_teacher_curves", run_name="__main__", alter_sys=True)
