"""`make demo`: the shipped house bundle (house_relic_scan, ReLIC) searching an unseen MiniWorld house over
ROS 2.

This file is the command line only (``python training/demo_ros.py ...``, the same as
``python -m icrl_ros.nodes.demo_ros ...``); the code and its full description live in
:mod:`icrl_ros.nodes.demo_ros`.
"""

import runpy

runpy.run_module("icrl_ros.nodes.demo_ros", run_name="__main__", alter_sys=True)
