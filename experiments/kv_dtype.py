"""K/V storage dtypes of the memory (fp32 / fp16 / int8): step time beside the read floor, the
cache read's ONNX formulations, and logit parity on recorded trials.

This file is the command line only (``python experiments/kv_dtype.py ...``, the same as
``python -m icrl_ros.experiments.kv_dtype ...``); the code and its full description live in
:mod:`icrl_ros.experiments.kv_dtype`.
"""

import runpy

runpy.run_module("icrl_ros.experiments.kv_dtype", run_name="__main__", alter_sys=True)
