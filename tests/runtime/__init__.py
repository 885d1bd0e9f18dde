"""Tests of icrl_ros.runtime."""
