"""Deploy runtime: bundles, engines (torch, onnxruntime, tensorrt) and the PolicyRunner.

    from icrl_ros.runtime import PolicyRunner
    runner = PolicyRunner.from_bundle("bundles/darkroom", backend="onnxruntime", memory="window")
    runner.reset_trial(); runner.begin_episode()
    action, info = runner.act({"obs": 12})

Imports neither rclpy nor any simulator; onnxruntime / tensorrt are imported by their
engines only when used.
"""

from icrl_ros.runtime.bundle import Bundle, BundleError, load_bundle
from icrl_ros.runtime.engine import BACKENDS, Engine, available_backends, make_engine
from icrl_ros.runtime.runner import PolicyRunner, build_memory

__all__ = ["PolicyRunner", "BundleError", "Bundle", "load_bundle", "Engine", "BACKENDS", "make_engine",
           "available_backends", "build_memory"]
