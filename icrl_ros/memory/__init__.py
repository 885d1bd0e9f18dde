"""Bounded memory managers that own the key/value cache between steps."""

from icrl_ros.memory.kv_cache import KVCache
from icrl_ros.memory.memo import MemoMemory

__all__ = ["KVCache", "MemoMemory"]
