"""The house task's extensions of the control step (:mod:`icrl_ros.extensions`).

* ``route``: the route memory (:mod:`icrl_ros.memory.route`), a map of the floor the robot stood
  on kept beside the KV cache, for models with ``model.house.route_memory``. Before the encoder the pose
  marks the map and the way back to the goal is written into the ``route`` input; each committed
  token's sightings enter the map; it is cleared with the memory and snapshotted with it. With
  ``model.house.forget_contradicted`` it forgets the goal's sightings that a fresh view contradicts, in the
  map and in the KV cache's object memory keys; with ``model.house.route_over_looked`` the way runs over the floor
  the camera looked at.
* ``frontier``: the frontier memory (:mod:`icrl_ros.house.frontier`), a map of the floor the camera looked
  at, for models with ``model.house.frontier_memory``: before the encoder the way to its nearest edge is written
  into the ``frontier`` input; each committed token's band distances enter the map.
* ``stop_rule``: for models with ``model.house.stop_gate`` / ``stop_sure``, the stop logit is masked or
  forced from what the frozen heads say of the image (:mod:`icrl_ros.models.stop_rule`).
* ``object_memory``: for models with ``model.house.object_memory``, the fixed heads of the first block
  (:mod:`icrl_ros.house.block_heads`): the object memory and, with ``model.house.place_memory``, the place memory.
"""

from __future__ import annotations

from icrl_ros.extensions import Extension, register_extension


def _route_state(args, batch: int):
    from icrl_ros.house.route_state import RouteState
    from icrl_ros.models.encoders import OBJECT_SCALE_M

    return RouteState(batch, args.n_goals, OBJECT_SCALE_M, per_episode=not args.iea,
                      forget_after=args.house.forget_contradicted, over_looked=args.house.route_over_looked)


def _frontier_state(args, batch: int):
    from icrl_ros.house.frontier import FrontierState
    from icrl_ros.models.encoders import OBJECT_SCALE_M

    return FrontierState(batch, OBJECT_SCALE_M, per_episode=not args.iea)


def _block_heads(args, layer: int):
    from icrl_ros.house.block_heads import house_heads

    return house_heads(args, layer)


def _stop_rule(args):
    from icrl_ros.models.stop_rule import StopRule

    return StopRule.from_args(args)


register_extension(Extension("route", applies=lambda a: bool(a.house.route_memory), owns=("route",),
                             state=_route_state))
register_extension(Extension("frontier", applies=lambda a: bool(a.house.frontier_memory),
                             owns=("frontier",), state=_frontier_state))
register_extension(Extension("stop_rule", logit_rule=_stop_rule,
                             applies=lambda a: a.house.stop_rule))
register_extension(Extension("object_memory", applies=lambda a: bool(a.house.object_memory),
                             block_heads=_block_heads))
