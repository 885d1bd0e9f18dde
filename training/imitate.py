"""In-context imitation of a scripted teacher (DAgger), for ReLIC and Memo policies.

This file is the command line only (``python training/imitate.py ...``, the same as
``python -m icrl_ros.training.imitate ...``); the code and its full description live in
:mod:`icrl_ros.training.imitate`.
"""

import runpy

runpy.run_module("icrl_ros.training.imitate", run_name="__main__", alter_sys=True)
