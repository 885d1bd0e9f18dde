"""ReLIC: the plain causal transformer over the shared parts (:mod:`icrl_ros.models.policy`,
:mod:`icrl_ros.memory.kv_cache`, the encoder / core / heads graphs of :mod:`icrl_ros.runtime.graphs`).

Its memories: ``full`` (every step up to a capacity) and ``window`` (sink + the newest W steps).
"""

from icrl_ros.families import Family


def positions(a) -> dict:
    """RoPE over episode indices, a learnt embedding of the step within the episode."""
    return {"rope": "episode_index", "step_embedding": "episode_step",
            "max_episode_steps": a.max_episode_steps, "rope_base": a.rope_base}


FAMILY = Family(
    kind="relic",
    policy="icrl_ros.models.policy:ICLPolicy",
    config="icrl_ros.models.config:ModelArgs",
    memories={"full": "icrl_ros.memory.kv_cache:FullContextMemory",
              "window": "icrl_ros.memory.kv_cache:SinkWindowMemory"},
    graphs="icrl_ros.families.relic.graphs",
    positions=positions,
    kv_dtypes=("fp32", "fp16", "int8", "int8_gqa"),  # int8_gqa: ONNX Runtime's GroupQueryAttention kernel
)
