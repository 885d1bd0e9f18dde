"""Pretrain the house policy's visual encoder on labels the simulator gives for free.

This file is the command line only (``python training/house_encoder.py ...``, the same as
``python -m icrl_ros.training.house_encoder ...``); the code and its full description live in
:mod:`icrl_ros.training.house_encoder`.
"""

import runpy

runpy.run_module("icrl_ros.training.house_encoder", run_name="__main__", alter_sys=True)
