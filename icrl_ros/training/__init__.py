"""Training side: PPO with ReLIC partial updates, evaluation, export and benchmarks."""
