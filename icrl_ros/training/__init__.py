"""Training side: PPO with ReLIC partial updates, imitation, evaluation, export, pipelines (what users train
with; probes and benchmarks are in :mod:`icrl_ros.experiments`)."""
