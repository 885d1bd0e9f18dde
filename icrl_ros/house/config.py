"""The house task's model options: the ``house:`` section of a model's arguments.

Registered with :func:`icrl_ros.models.config.register_section`, so every model's arguments read it
(``args.house.route_memory``; all off for a model without the section) and configs write it nested::

    model:
      visual_encoder: features
      house: {object_memory: true, place_memory: true, stop_gate: 0.5}

The extensions these options turn on are registered in :mod:`icrl_ros.house`.
"""

from __future__ import annotations

from dataclasses import dataclass

from icrl_ros.models.config import SLOT_SINKS, check_positive, register_section


@dataclass(frozen=True)
class HouseArgs:
    """Options of a house model: the frozen heads' readouts, the fixed memory heads, the route and
    frontier memories with their following heads, the stop rule."""

    goal_readout: bool = False
    """``model.visual_encoder: features``: also feed the frozen encoder's own label heads for the goal
    category (in view, bearing bins, distance bins) and the free space ahead, read from
    ``pretrained_encoder``'s ``heads.*`` weights: "is my goal in view, where, how far" is then an
    input rather than a product of the goal and 128 features the policy must learn."""
    object_readout: bool = False
    """``model.visual_encoder: features``: also feed, for every category, the heads' P(in view) and the
    house-frame position it implies (odometry + expected bearing and distance). A token then
    says "a cone was about there", whatever the goal of its episode was, so a later episode can
    find a remembered object by attention (the product's memory) instead of search."""
    object_memory: bool = False
    """ReLIC or Memo with the frozen heads: head 0 of layer 0 becomes a fixed "where did I see my goal"
    lookup over the KV cache (:mod:`icrl_ros.models.object_memory`); the block adds the goal's
    remembered offset in the robot frame. The token's last few entries carry what it reads."""
    place_memory: bool = False
    """With ``object_memory``: heads 1 and 2 of layer 0 become fixed lookups of how much floor
    around the robot and 2 m ahead of it the camera already looked at, and where that floor
    lies (:mod:`icrl_ros.models.place_memory`); the block adds them in the robot frame."""
    route_memory: bool = False
    """With ``object_memory``: the runtime keeps a bounded map of the floor the robot stood on and
    hands the policy, as the ``route`` input, the way back over it to where the goal was seen
    (:mod:`icrl_ros.memory.route`); needs ``pose_frame: house`` odometry to mean anything."""
    route_skill: int = 0
    """``route_memory``: > 0 adds a route-following head, an MLP with this many hidden units from the ``route``
    input (and the ``scan`` with ``scan_input``) to action logits that add to the actor's, gated by the route's
    "found" entry: where the route memory has no way to the goal the policy acts exactly as without it. 0: none."""
    frontier_memory: bool = False
    """With ``object_memory``: the step encoder also writes the frozen heads' floor distance per column band into
    the token, the runtime keeps a bounded map of the floor the camera looked at and hands the policy, as the
    ``frontier`` input, the way to the nearest edge of it (:mod:`icrl_ros.house.frontier`): search without
    memory of the house walks to floor it has not looked at."""
    frontier_from_scan: bool = False
    """With ``frontier_memory``: the floor distance per band the step encoder writes into the token (what the frontier
    memory, and the route memory's ``route_over_looked``, map the looked-at floor from) is the laser's, the
    ``scan_bands`` input (the env's ``scan_bands`` option; on a robot its ``sensor_msgs/LaserScan``), not the frozen
    heads' estimate from the image."""
    frontier_skill: int = 0
    """``frontier_memory``: > 0 adds a frontier-following head, an MLP with this many hidden units from the
    ``frontier`` input (and the ``scan`` with ``scan_input``) to action logits that add to the actor's, gated by
    the frontier's "found" entry and, with ``route_memory``, off where the route has a way to the goal. 0: none."""
    scan_input: bool = False
    """With ``route_skill``: the head also reads the ``scan`` input, which of the 12 headings around the robot a
    forward step can take (:data:`~icrl_ros.geometry.SCAN_BINS`; the env's ``scan`` option, a laser scan on a
    robot): following a route round walls needs what is free nearby."""
    route_over_looked: bool = False
    """With ``route_memory`` and ``frontier_memory``: the ``route`` input's way to a remembered goal runs over the
    floor the camera looked at (the frontier memory's map, kept for the route alone) to within
    :data:`~icrl_ros.house.frontier.APPROACH_M` of the goal, where that floor reaches it; elsewhere over the floor
    the robot stood on. A goal seen across a room is then reached round what stands between (over stood floor the
    way leads back to where it was seen from, and a follower stepping off it turns back). The input's meaning is
    unchanged (a waypoint and a length), so a route-following head trained on either follows both."""
    forget_contradicted: int = 0
    """With ``route_memory``, when acting: after this many steps in a row with the goal's remembered position in
    front of the camera (within :data:`~icrl_ros.house.route_state.CHECK_M` and
    :data:`~icrl_ros.house.route_state.CHECK_DEG`) and the goal not recognised, forget the goal category's
    sightings: the route memory's, and the object memory head's keys in a KV cache of raw steps (full / window
    memory). A sighting a fresh view contradicts (a false alarm, a place odometry drift has moved) stops steering
    the robot; later sightings rebuild it. 0: off (the trained behaviour)."""
    stop_gate: float = 0.0
    """With ``object_memory``: when acting, the stop may not be chosen while the frozen
    heads give P(goal in view) below this (0: no gate; :mod:`icrl_ros.models.stop_rule`)."""
    stop_sure: float = 0.0
    """Like ``stop_gate``: when acting, stop as soon as the heads give P(goal in view) at least this
    with an expected goal distance within ``stop_sure_m`` (0: never forced)."""
    stop_sure_m: float = 0.6
    """``stop_sure``: the heads' expected distance to the goal, in metres, within which it stops."""
    memory_aux: bool = False
    """A training-only head that predicts, at every step, whether the goal category was seen
    earlier in the trial and where it is relative to the robot (``training/imitate.py
    --aux-coef``); deployment ignores it."""

    def validate(self, m) -> None:
        """Checked against the model's arguments ``m`` (messages name ``model.house.<field>``)."""
        if self.object_memory and (m.kind not in ("relic", "memo") or m.sink not in SLOT_SINKS):
            raise ValueError(f"model.house.object_memory: only for kind relic or memo with a sink slot (kv, kv0, "
                             f"k0v0), got kind {m.kind!r}, sink {m.sink!r}")
        for name in ("place_memory", "route_memory", "frontier_memory"):
            if getattr(self, name) and not self.object_memory:
                raise ValueError(f"model.house.{name}: needs model.house.object_memory (it reads the entries that "
                                 f"writes into each token)")
        if self.route_skill < 0 or (self.route_skill and not self.route_memory):
            raise ValueError(f"model.house.route_skill: a hidden width >= 0 for the route-following head, used with "
                             f"model.house.route_memory, got {self.route_skill} (route_memory {self.route_memory})")
        if self.frontier_skill < 0 or (self.frontier_skill and not self.frontier_memory):
            raise ValueError(f"model.house.frontier_skill: a hidden width >= 0 for the frontier-following head, used "
                             f"with model.house.frontier_memory, got {self.frontier_skill} "
                             f"(frontier_memory {self.frontier_memory})")
        if self.scan_input and not (self.route_skill or self.frontier_skill):
            raise ValueError("model.house.scan_input: the scan is read by the route- or frontier-following head; set "
                             "model.house.route_skill or model.house.frontier_skill > 0")
        if self.frontier_from_scan and not self.frontier_memory:
            raise ValueError("model.house.frontier_from_scan: the frontier memory's floor from the laser; needs "
                             "model.house.frontier_memory")
        if self.route_over_looked and not (self.route_memory and self.frontier_memory):
            raise ValueError("model.house.route_over_looked: plans the route memory's way over the frontier memory's "
                             "floor; needs model.house.route_memory and model.house.frontier_memory")
        if self.forget_contradicted < 0 or (self.forget_contradicted and not self.route_memory):
            raise ValueError(f"model.house.forget_contradicted: steps >= 0 (0 = off), used with model.house.route_memory, "
                             f"got {self.forget_contradicted} (route_memory {self.route_memory})")
        if self.place_memory and m.n_heads < 4:
            raise ValueError(f"model.house.place_memory: heads 0-2 of layer 0 become fixed; model.n_heads must be at "
                             f"least 4 (one learnt head left), got {m.n_heads}")
        for name in ("stop_gate", "stop_sure"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"model.house.{name}: a probability in [0, 1] (0 = off), got {getattr(self, name)}")
        check_positive("model.house.stop_sure_m", self.stop_sure_m)
        if (self.stop_gate or self.stop_sure) and not self.object_memory:
            raise ValueError("model.house.stop_gate / stop_sure: need model.house.object_memory (the rule reads the "
                             "entries it writes into each token)")
        if self.memory_aux and m.kind != "relic":
            raise ValueError(f"model.house.memory_aux: only for kind relic, got {m.kind!r}")

    @property
    def stop_rule(self) -> bool:
        """Whether the stop rule acts (a gate or a forced stop is set)."""
        return self.stop_gate > 0 or self.stop_sure > 0


register_section("house", HouseArgs)
