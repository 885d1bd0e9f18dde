"""Scripted in-context teachers for the grid worlds (for :mod:`icrl_ros.training.imitate`).

This file is the command line only (``python training/teachers.py ...``, the same as
``python -m icrl_ros.training.teachers ...``); the code and its full description live in
:mod:`icrl_ros.training.teachers`.
"""

import runpy

runpy.run_module("icrl_ros.training.teachers", run_name="__main__", alter_sys=True)
