"""The one control step: training rollouts, evaluation, export checks and the robot all run it.

Per step (DESIGN.md, "One control step")::

    engine.encode(inputs)                   token x (B, D)
    memory.view() + the position / mask rule
      -> engine.core                        hidden, this token's K/V (HCAM: also reads the
                                            chunk store, returns the token's memory inputs)
      -> memory.commit                      append / ring-write (Memo: summarise at a
                                            segment end through engine.summarize; HCAM:
                                            a completed chunk enters the ring)
      -> engine.heads                       logits (B, A), value (B,)

The engine is a bundle's graphs at deploy (ONNX Runtime, torch, TensorRT:
:mod:`icrl_ros.runtime.engine`) or, in training, the live ``nn.Module`` behind the same graph
modules (:class:`~icrl_ros.runtime.torch_engine.LiveEngine`); the memory is one of
:mod:`icrl_ros.memory`. The rules that decide what a token sees live here and nowhere else:

* position: ReLIC and HCAM put RoPE on the episode index; Memo on the running position after
  its kept summaries (``pos_base + seg_count``);
* the stop rule (house models with ``model.stop_gate`` / ``stop_sure``): the stop logit is
  masked or forced from what the frozen heads say of the image (:mod:`icrl_ros.models.stop_rule`);
* the route memory (house models with ``model.route_memory``): before the encoder, the pose marks
  the map and the way back to the goal is written into the ``route`` input; after it, the token's
  sightings enter the map (:mod:`icrl_ros.memory.route`);
* mask: with in-episode attention only (``iea: false``) a token sees its own episode's slots and
  the sink token (episode -1); with IEA, and always for Memo, every valid slot.
"""

from __future__ import annotations

import torch
from torch import Tensor

from icrl_ros.memory.route import RouteMemory
from icrl_ros.models.encoders import OBJECT_SCALE_M
from icrl_ros.models.stop_rule import StopRule


class ControlStep:
    """One token per env through ``engine`` against ``memory`` (batch = ``memory.batch``).

    ``iea``: the model attends across episodes (its ``args.iea``). The position and mask are
    static buffers on the engine's device, as ORT / TensorRT bind them by address. ``route``:
    the model's ``route_memory`` (:meth:`route_for`), kept here beside ``memory``."""

    def __init__(self, engine, memory, iea: bool, stop_rule: StopRule | None = None,
                 route: RouteMemory | None = None) -> None:
        self.engine, self.memory, self.stop_rule, self.route = engine, memory, stop_rule, route
        self.own_mask = not iea and memory.episode_masked
        self.position = torch.zeros(memory.batch, dtype=torch.long, device=memory.valid.device)
        self.mask = torch.zeros_like(memory.valid) if self.own_mask else None

    @classmethod
    def live(cls, policy, memory) -> ControlStep:
        """The step of a live torch policy (training, evaluation, export checks)."""
        from icrl_ros.runtime.torch_engine import LiveEngine

        return cls(LiveEngine(policy), memory, policy.args.iea, StopRule.from_args(policy.args),
                   cls.route_for(policy.args, memory.batch))

    @staticmethod
    def route_for(args, batch: int) -> RouteMemory | None:
        """The route memory a model with ``args`` reads (None without ``route_memory``)."""
        if not getattr(args, "route_memory", False):
            return None
        return RouteMemory(batch, args.n_goals, OBJECT_SCALE_M, per_episode=not args.iea)

    def forget(self) -> None:
        """Clear the memory (a pinned sink-token prefix stays: ``Memory.reset``) and the route map with it."""
        self.memory.reset()
        if self.route is not None:
            self.route.reset()

    @property
    def memory_bytes(self) -> int:
        """Bytes the step keeps between calls: the memory's buffers and the route map."""
        return int(self.memory.nbytes) + (self.route.nbytes if self.route is not None else 0)

    @torch.no_grad()
    def __call__(self, inputs: dict[str, Tensor], episode: Tensor | None = None,
                 commit: bool = True) -> tuple[Tensor, Tensor]:
        """``inputs``: the encoder inputs, each (B, ...) (extra keys are ignored); ``episode``
        (B,) long, default ``inputs["episode_index"]``. Returns logits (B, A) and value (B,)
        (engine-owned: consume or copy before the next call). With ``commit`` the token
        enters memory; without, memory is untouched (a bootstrap value)."""
        eng, mem = self.engine, self.memory
        if episode is None:
            episode = inputs["episode_index"]
        if self.route is not None:
            self.route.fill(inputs, episode)
        x = eng.encode(inputs)
        if commit and self.route is not None:
            self.route.observe(x)
        mem.write_position(episode, self.position)  # RoPE index: the episode (Memo: its slot rule)
        past_k, past_v, valid, slot_episode = mem.view()
        mask = valid
        if self.own_mask:  # this episode's slots and the sink token only
            mask = torch.logical_and(valid, (slot_episode == episode[:, None]) | (slot_episode < 0), out=self.mask)
        h, k, v, *more = eng.core(x, self.position, mask, past_k, past_v, *mem.core_inputs())
        if commit:
            mem.commit_step(eng, k, v, episode, *more)  # HCAM: + the token's memory-layer inputs; Memo summarises
        logits, value = eng.heads(h, *(inputs[n] for n in eng.skill_inputs))  # + the route-following head's
        if self.stop_rule is not None:  # house models: stop on what the camera shows (models/stop_rule.py)
            logits = self.stop_rule(logits, x)
        return logits, value


__all__ = ["ControlStep"]
