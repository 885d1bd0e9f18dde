"""Why a house policy fails: its episodes by outcome, beside what the in-context teacher knew.

This file is the command line only (``python training/house_diagnose.py ...``, the same as
``python -m icrl_ros.training.house_diagnose ...``); the code and its full description live in
:mod:`icrl_ros.training.house_diagnose`.
"""

import runpy

runpy.run_module("icrl_ros.training.house_diagnose", run_name="__main__", alter_sys=True)
