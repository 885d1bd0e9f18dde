"""Per-episode curves of house object search: success, SPL and steps per in-context episode.

This file is the command line only (``python training/house_curves.py ...``, the same as
``python -m icrl_ros.training.house_curves ...``); the code and its full description live in
:mod:`icrl_ros.training.house_curves`.
"""

import runpy

runpy.run_module("icrl_ros.training.house_curves", run_name="__main__", alter_sys=True)
