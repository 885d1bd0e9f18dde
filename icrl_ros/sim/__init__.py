"""Environments. Importing this package registers the Gymnasium ids:

``icrl_ros/Darkroom-v0``, ``icrl_ros/DarkKeyToDoor-v0``, ``icrl_ros/MiniWorldHouse-v0``,
``icrl_ros/HabitatExtObjNav-v0`` (habitat-lab, where installed) and ``icrl_ros/RemoteEnv-v0`` (an env
served from another Python by ``icrl_ros.sim.env_server``). Training and evaluation use
the batched versions through :func:`make_vec`.
"""

from __future__ import annotations

import gymnasium as gym

from icrl_ros.sim.gridworlds import DarkKeyToDoorVecEnv, DarkroomVecEnv, VecTrialEnv
from icrl_ros.sim.house_vec import HouseVecEnv

GRID_ENVS: dict[str, type[VecTrialEnv]] = {
    "icrl_ros/Darkroom-v0": DarkroomVecEnv,
    "icrl_ros/DarkKeyToDoor-v0": DarkKeyToDoorVecEnv,
}


# Batched envs for training and evaluation, by registered id. HouseVecEnv imports no GL:
# MiniWorld and EGL load in its worker processes when it is built.
VEC_ENVS: dict[str, type] = {**GRID_ENVS, "icrl_ros/MiniWorldHouse-v0": HouseVecEnv}


def make_vec(env_id: str, num_envs: int, split: str = "train", seed: int | None = None, **options):
    """Batched trial env by registered id; unknown ids list the known ones. ``options`` go to
    the env (the house's ``pose_frame``, ``teacher``, task settings); grid worlds take none."""
    if env_id not in VEC_ENVS:
        raise ValueError(f"env_id: unknown id {env_id!r}; known ids: {sorted(VEC_ENVS)}")
    if options and env_id in GRID_ENVS:
        raise ValueError(f"env.options: {env_id} takes no options, got {sorted(options)}")
    return VEC_ENVS[env_id](num_envs, split=split, seed=seed, **options)


for _id, _cls in GRID_ENVS.items():
    if _id not in gym.registry:
        gym.register(id=_id, entry_point="icrl_ros.sim.gym_env:TrialEnv", kwargs={"vec_cls": _cls})

__all__ = ["VEC_ENVS", "GRID_ENVS", "make_vec", "VecTrialEnv", "DarkroomVecEnv", "DarkKeyToDoorVecEnv"]

# MiniWorld house (ExtObjNav in miniature): a Gymnasium env with dict observations, not a
# grid-world VEC_ENVS entry; HouseVecEnv (icrl_ros.sim.house_vec) batches it in processes.
# Registration imports nothing heavy: MiniWorld / EGL load when the env is first built.
if "icrl_ros/MiniWorldHouse-v0" not in gym.registry:
    gym.register(id="icrl_ros/MiniWorldHouse-v0", entry_point="icrl_ros.sim.house:HouseEnv")

# Habitat ExtObjNav (icrl_ros.sim.habitat_env): habitat-lab is imported when the env is built,
# so registering it costs nothing where habitat is not installed.
if "icrl_ros/HabitatExtObjNav-v0" not in gym.registry:
    gym.register(id="icrl_ros/HabitatExtObjNav-v0", entry_point="icrl_ros.sim.habitat_env:HabitatExtObjNavEnv")

# A served env in another Python (icrl_ros.sim.env_server): Habitat in its own Python, the bridge in ROS's.
if "icrl_ros/RemoteEnv-v0" not in gym.registry:
    gym.register(id="icrl_ros/RemoteEnv-v0", entry_point="icrl_ros.sim.env_server:RemoteEnv")
