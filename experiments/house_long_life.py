"""A long life in one house: trials of many episodes through a deployed bundle.

This file is the command line only (``python experiments/house_long_life.py ...``, the same as
``python -m icrl_ros.experiments.house_long_life ...``); the code and its full description live in
:mod:`icrl_ros.experiments.house_long_life`.
"""

import runpy

runpy.run_module("icrl_ros.experiments.house_long_life", run_name="__main__", alter_sys=True)
