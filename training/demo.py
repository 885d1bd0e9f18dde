"""`make demo-darkroom`: the shipped Darkroom ReLIC checkpoint learning in context.

This file is the command line only (``python training/demo.py ...``, the same as
``python -m icrl_ros.training.demo ...``); the code and its full description live in
:mod:`icrl_ros.training.demo`.
"""

import runpy

runpy.run_module("icrl_ros.training.demo", run_name="__main__", alter_sys=True)
