"""Experiments, probes and benchmarks: the measurements behind design choices, not what users train with.

Each module is a command line (``python experiments/X.py``, the same as ``python -m icrl_ros.experiments.X``):
throughput and latency benchmarks of the runtime, the env and training (``benchmark``, ``env_speed``,
``throughput``, ``index_benchmark``), the teacher's curves on the house (``house_teacher_curves``), probes of
what the house memories and teachers need (``house_route_probe``, ``house_label_noise``, ``sensitivity``) and
the Habitat cross-simulator comparisons (``habitat_compare``, ``habitat_icl``). The training library is
:mod:`icrl_ros.training`.
"""
