"""Tests of icrl_ros.training."""
