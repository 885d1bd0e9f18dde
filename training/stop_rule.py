"""Set a house checkpoint's stop rule.

This file is the command line only (``python training/stop_rule.py ...``, the same as
``python -m icrl_ros.training.stop_rule ...``); the code and its full description live in
:mod:`icrl_ros.training.stop_rule`.
"""

import runpy

runpy.run_module("icrl_ros.training.stop_rule", run_name="__main__", alter_sys=True)
