"""Rebuild a shipped policy from one pipeline file, resumable stage by stage.

This file is the command line only (``python training/pipeline.py ...``, the same as
``python -m icrl_ros.training.pipeline ...``); the code and its full description live in
:mod:`icrl_ros.training.pipeline`.
"""

import runpy

runpy.run_module("icrl_ros.training.pipeline", run_name="__main__", alter_sys=True)
