"""In-context learning curves on held-out tasks.

This file is the command line only (``python training/evaluate.py ...``, the same as
``python -m icrl_ros.training.evaluate ...``); the code and its full description live in
:mod:`icrl_ros.training.evaluate`.
"""

import runpy

runpy.run_module("icrl_ros.training.evaluate", run_name="__main__", alter_sys=True)
