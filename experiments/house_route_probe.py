"""How far knowing where the goal is gets a robot with no map: scripted navigators on the house episodes.

This file is the command line only (``python experiments/house_route_probe.py ...``, the same as
``python -m icrl_ros.experiments.house_route_probe ...``); the code and its full description live in
:mod:`icrl_ros.experiments.house_route_probe`.
"""

import runpy

runpy.run_module("icrl_ros.experiments.house_route_probe", run_name="__main__", alter_sys=True)
