"""RA-DT retrieval index at scale: add, query, snapshot and restore a 1e6-entry index.

This file is the command line only (``python experiments/index_benchmark.py ...``, the same as
``python -m icrl_ros.experiments.index_benchmark ...``); the code and its full description live in
:mod:`icrl_ros.experiments.index_benchmark`.
"""

import runpy

runpy.run_module("icrl_ros.experiments.index_benchmark", run_name="__main__", alter_sys=True)
