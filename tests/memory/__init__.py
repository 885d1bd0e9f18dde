"""Tests of icrl_ros.memory."""
