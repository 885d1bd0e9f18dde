"""The one control step: training rollouts, evaluation, export checks and the robot all run it.

Per step::

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
* extensions (:mod:`icrl_ros.extensions`): state kept beside the memory writes the inputs it
  owns before the encoder and takes in each committed token after it; logit rules change the
  logits actions are drawn from. The step runs whatever the model's arguments register and
  names none of them;
* mask: with in-episode attention only (``iea: false``) a token sees its own episode's slots and
  the sink token (episode -1); with IEA, and always for Memo, every valid slot.
"""

from __future__ import annotations

import torch
from torch import Tensor

from icrl_ros.extensions import LogitRule, StepState, apply_rules, logit_rules, owned_by, step_states


class ControlStep:
    """One token per env through ``engine`` against ``memory`` (batch = ``memory.batch``).

    ``iea``: the model attends across episodes (its ``args.iea``). The position and mask are
    static buffers on the engine's device, as ORT / TensorRT bind them by address. ``states``:
    the extensions' state kept here beside ``memory`` (by name); ``rules``: their logit rules
    (:meth:`for_model` builds both from the model's arguments)."""

    def __init__(self, engine, memory, iea: bool, states: dict[str, StepState] | None = None,
                 rules: list[LogitRule] | None = None) -> None:
        self.engine, self.memory = engine, memory
        self.states, self.rules = dict(states or {}), list(rules or [])
        self.edits = [s.edit_memory for s in self.states.values() if callable(getattr(s, "edit_memory", None))]
        self.owned_inputs = owned_by(self.states)
        """Encoder inputs the extensions' states write (callers leave them alone)."""
        self.own_mask = not iea and memory.episode_masked
        self.position = torch.zeros(memory.batch, dtype=torch.long, device=memory.valid.device)
        self.mask = torch.zeros_like(memory.valid) if self.own_mask else None

    @classmethod
    def live(cls, policy, memory) -> ControlStep:
        """The step of a live torch policy (training, evaluation, export checks)."""
        from icrl_ros.runtime.torch_engine import LiveEngine

        return cls.for_model(LiveEngine(policy), memory, policy.args)

    @classmethod
    def for_model(cls, engine, memory, args) -> ControlStep:
        """The step of a model with ``args``: its extensions' states (for ``memory.batch`` envs) and rules."""
        return cls(engine, memory, args.iea, step_states(args, memory.batch), logit_rules(args))

    def forget(self) -> None:
        """Clear the memory (a pinned sink-token prefix stays: ``Memory.reset``) and the extensions' state with it."""
        self.memory.reset()
        self.reset_states()

    def reset_states(self) -> None:
        """Clear the extensions' state only (the memory is cleared by its owner)."""
        for s in self.states.values():
            s.reset()

    def state_tensors(self) -> dict[str, Tensor]:
        """The extensions' state as tensors to snapshot beside the memory (loaded back in place)."""
        out: dict[str, Tensor] = {}
        for name, s in self.states.items():
            for key, t in s.tensors().items():
                if key in out:
                    raise ValueError(f"extension {name!r}: snapshot tensor {key!r} is also another extension's")
                out[key] = t
        return out

    def states_restored(self) -> None:
        for s in self.states.values():
            s.restored()

    @property
    def memory_bytes(self) -> int:
        """Bytes the step keeps between calls: the memory's buffers and the extensions' state."""
        return int(self.memory.nbytes) + sum(int(s.nbytes) for s in self.states.values())

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
        for s in self.states.values():  # the inputs they own
            s.before_encode(inputs, episode)
        x = eng.encode(inputs)
        if commit:
            for s in self.states.values():
                s.after_encode(x)
        mem.write_position(episode, self.position)  # RoPE index: the episode (Memo: its slot rule)
        past_k, past_v, valid, slot_episode = mem.view()
        mask = valid
        if self.own_mask:  # this episode's slots and the sink token only
            mask = torch.logical_and(valid, (slot_episode == episode[:, None]) | (slot_episode < 0), out=self.mask)
        h, k, v, *more = eng.core(x, self.position, mask, past_k, past_v, *mem.core_inputs())
        if commit:
            mem.commit_step(eng, k, v, episode, *more)  # HCAM: + the token's memory-layer inputs; Memo summarises
            for edit in self.edits:
                edit(mem)
        logits, value = eng.heads(h, *(inputs[n] for n in eng.head_inputs))  # + the heads graph's extra inputs
        return apply_rules(self.rules, logits, x), value


__all__ = ["ControlStep"]
