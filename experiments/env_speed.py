"""Frames per second of the MiniWorld house env (icrl_ros/MiniWorldHouse-v0) here.

This file is the command line only (``python experiments/env_speed.py ...``, the same as
``python -m icrl_ros.experiments.env_speed ...``); the code and its full description live in
:mod:`icrl_ros.experiments.env_speed`.
"""

import runpy

runpy.run_module("icrl_ros.experiments.env_speed", run_name="__main__", alter_sys=True)
