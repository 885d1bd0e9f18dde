"""Cross-simulator in-context curve: a house bundle in MiniWorld and in Habitat, through the ROS nodes.

This file is the command line only (``python experiments/habitat_icl.py ...``, the same as
``python -m icrl_ros.experiments.habitat_icl ...``); the code and its full description live in
:mod:`icrl_ros.experiments.habitat_icl`.
"""

import runpy

runpy.run_module("icrl_ros.experiments.habitat_icl", run_name="__main__", alter_sys=True)
