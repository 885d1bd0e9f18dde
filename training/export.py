"""Export a trained checkpoint as a deploy bundle (what the ROS agent node loads).

This file is the command line only (``python training/export.py ...``, the same as
``python -m icrl_ros.training.export ...``); the code and its full description live in
:mod:`icrl_ros.training.export`.
"""

import runpy

runpy.run_module("icrl_ros.training.export", run_name="__main__", alter_sys=True)
