"""Score frozen house encoders' recognition by object size on held-out houses.

This file is the command line only (``python training/encoder_recall.py ...``, the same as
``python -m icrl_ros.training.encoder_recall ...``); the code and its full description live in
:mod:`icrl_ros.training.encoder_recall`.
"""

import runpy

runpy.run_module("icrl_ros.training.encoder_recall", run_name="__main__", alter_sys=True)
