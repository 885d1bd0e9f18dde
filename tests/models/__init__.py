"""Tests of icrl_ros.models."""
