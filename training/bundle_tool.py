"""Inspect or self-check a deploy bundle.

This file is the command line only (``python training/bundle_tool.py ...``, the same as
``python -m icrl_ros.training.bundle_tool ...``); the code and its full description live in
:mod:`icrl_ros.training.bundle_tool`.
"""

import runpy

runpy.run_module("icrl_ros.training.bundle_tool", run_name="__main__", alter_sys=True)
