"""The MiniWorld house and its Habitat export side by side: geodesic distance, success rule, frames/s.

This file is the command line only (``python experiments/habitat_compare.py ...``, the same as
``python -m icrl_ros.experiments.habitat_compare ...``); the code and its full description live in
:mod:`icrl_ros.experiments.habitat_compare`.
"""

import runpy

runpy.run_module("icrl_ros.experiments.habitat_compare", run_name="__main__", alter_sys=True)
