"""Tests of icrl_ros.sim."""
