"""Bounded memory managers that own the key/value cache between steps."""

from icrl_ros.memory.kv_cache import KVCache

__all__ = ["KVCache"]
