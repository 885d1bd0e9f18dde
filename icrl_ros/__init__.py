"""icrl_ros: in-context RL policies from training to a robot."""

__version__ = "0.1.0"
