"""RA-DT: a decision transformer over the current episode's window plus sub-trajectories
retrieved from past episodes (``model.py``: :class:`RADTPolicy`; ``memory.py``:
:class:`SubTrajectoryMemory` over ``retrieval.py``'s faiss index; ``graphs.py``: its one
``policy`` graph; ``runner.py``: its deploy runner, which retrieves outside the graph; ``deploy.py``:
what its bundle holds, how it is checked, replayed and exported)."""

from icrl_ros.families import Family


def positions(a) -> dict:
    """No RoPE: step embeddings inside the window and the retrieved slots."""
    return {"step_embedding": "episode_step", "max_episode_steps": a.max_episode_steps,
            "window": a.context, "retrieved": a.top_k, "retrieved_len": 2 * a.context, "null_slot": True}


FAMILY = Family(
    kind="radt",
    policy="icrl_ros.families.radt.model:RADTPolicy",
    config="icrl_ros.families.radt.model:RADTArgs",
    runner="icrl_ros.families.radt.runner:RADTRunner",
    memories={"retrieval": "icrl_ros.families.radt.memory:SubTrajectoryMemory"},
    graphs="icrl_ros.families.radt.graphs",
    deploy="icrl_ros.families.radt.deploy",
    positions=positions,
    cached_step=False,
)
