"""How much of the house teacher's labels a student could match: the teacher against itself.

This file is the command line only (``python experiments/house_label_noise.py ...``, the same as
``python -m icrl_ros.experiments.house_label_noise ...``); the code and its full description live in
:mod:`icrl_ros.experiments.house_label_noise`.
"""

import runpy

runpy.run_module("icrl_ros.experiments.house_label_noise", run_name="__main__", alter_sys=True)
