"""Torch modules: encoders, Sink-KV attention, the transformer core, policies, checkpoints."""

from icrl_ros.models.checkpoint import load_checkpoint, save_checkpoint
from icrl_ros.models.config import SINKS, ModelArgs
from icrl_ros.models.core import TransformerCore, sequence_mask
from icrl_ros.models.policy import STEP_KEYS, ICLPolicy
from icrl_ros.models.stepping import build_policy, make_memory, refresh

__all__ = ["ModelArgs", "SINKS", "ICLPolicy", "TransformerCore", "sequence_mask",
           "STEP_KEYS", "save_checkpoint", "load_checkpoint", "build_policy", "make_memory", "refresh"]
