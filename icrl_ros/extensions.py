"""Extensions: what a task adds to the generic control step, registered in one place.

The control step (:class:`~icrl_ros.runtime.control.ControlStep`) runs encode -> core over the
memory -> commit -> heads for every policy. A task that needs more registers an
:class:`Extension`; the step, the runner, export and training then find it by the model's
arguments and never name it. An extension may add:

* **inputs it writes itself** (``owns``): encoder inputs the runner does not take from the
  observation but leaves to the extension's state (e.g. a route computed from a map);
* **state kept beside the KV cache** (``state``): built per batch, fed before the encoder
  (``before_encode``) and with each committed token (``after_encode``), cleared with the memory,
  counted in the step's bytes and written into (and loaded from) the runner's snapshots; a state may
  also edit the memory after each commit (``edit_memory``: e.g. forget entries its fixed heads read);
* **an action-logit rule** (``logit_rule``): applied to the logits wherever actions are chosen
  (acting, the logits PPO scores, the reference an export is checked against);
* **fixed attention heads** in a transformer block (``block_heads``): heads whose query, key and
  value the extension computes from the token (not learnt projections), read out into the block's
  output; they read the KV cache like any head, so memory, export and streaming are unchanged.

Extra model inputs belong to the policy's own modules and graphs; the step sees them only as
encoder / heads graph inputs.

Registration is loud: a second extension of one name raises. Packages in :data:`BUILTIN` register
on first use, so the runtime needs no import of them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

from torch import Tensor

from icrl_ros.registry import Registry

BUILTIN = ("icrl_ros.house",)
"""Packages whose import registers the extensions that ship with icrl_ros."""


class StepState(Protocol):
    """State an extension keeps beside the KV cache, one per env of the batch. The inputs it writes are its
    extension's :attr:`Extension.owns`."""

    nbytes: int

    def before_encode(self, inputs: dict[str, Tensor], episode: Tensor) -> None:
        """Write the inputs it owns (into ``inputs``, in place) before the encoder runs."""

    def after_encode(self, token: Tensor) -> None:
        """Take in a committed step's token (B, D)."""

    def edit_memory(self, memory) -> None:
        """Optional: change the memory after a step was committed (called only where the state defines it)."""

    def reset(self) -> None:
        """Forget everything (a new trial, or the memory cleared)."""

    def tensors(self) -> dict[str, Tensor]:
        """Buffers to snapshot with the memory (loaded back in place; unique names)."""

    def restored(self) -> None:
        """Called after the snapshot's tensors were loaded into :meth:`tensors`' buffers."""


class BlockHeads(Protocol):
    """Fixed attention heads of one transformer block (the first heads of its attention)."""

    def modules(self) -> dict[str, Any]:
        """The modules (``nn.Module``) that hold its weights, attached to the block under these names."""

    def fixed(self, x: Tensor) -> list[tuple[Tensor, Tensor, Tensor, Tensor]]:
        """Tokens (B, T, D) -> per fixed head (query, key, value, sink key) for the attention."""

    def readout(self, ys: Tensor, x: Tensor) -> Tensor:
        """The fixed heads' attention outputs (B, n_fixed, T, hd) and the tokens -> (B, T, D) added to the block's
        attention output."""


LogitRule = Callable[[Tensor, Tensor], Tensor]
"""(logits (..., A), tokens (..., D)) -> the logits actions are drawn from."""


@dataclass(frozen=True)
class Extension:
    name: str
    applies: Callable[[Any], bool]
    """Model arguments -> whether a model with them uses this extension."""
    owns: tuple[str, ...] = ()
    """Encoder inputs its state writes (see :class:`StepState`)."""
    state: Callable[[Any, int], StepState] | None = field(default=None, compare=False)
    """(model arguments, batch) -> its state for one control step."""
    logit_rule: Callable[[Any], LogitRule] | None = field(default=None, compare=False)
    """Model arguments -> its rule on the acting logits."""
    block_heads: Callable[[Any, int], BlockHeads | None] | None = field(default=None, compare=False)
    """(model arguments, layer index) -> the fixed heads of that block, or None for a block without."""


_REGISTRY: Registry[Extension] = Registry("extension", BUILTIN)


def register_extension(ext: Extension) -> Extension:
    """Add ``ext`` to the registry (a second one of the same name raises ValueError)."""
    if ext.owns and ext.state is None:
        raise ValueError(f"extension {ext.name!r} owns inputs {ext.owns} but has no state to write them")
    return _REGISTRY.add(ext.name, ext)


def unregister_extension(name: str) -> None:
    """Remove a registered extension (tests that register their own)."""
    _REGISTRY.remove(name)


def registered() -> dict[str, Extension]:
    """Every registered extension by name (the built-in ones loaded)."""
    return _REGISTRY.entries()


def extensions_for(args) -> list[Extension]:
    """The extensions a model with ``args`` uses, in registration order (none for a family without the
    cached control step, RA-DT)."""
    from icrl_ros.families import family_of

    if not family_of(args).cached_step:
        return []
    return [e for e in registered().values() if e.applies(args)]


def owned_inputs(args) -> tuple[str, ...]:
    """Encoder inputs of a model with ``args`` that its extensions write (not observations)."""
    return tuple(n for e in extensions_for(args) for n in e.owns)


def owned_by(states: dict[str, StepState]) -> tuple[str, ...]:
    """Encoder inputs the states of a control step write (``states`` by extension name: the ``owns`` of
    those registered extensions)."""
    exts = registered()
    missing = [n for n in states if n not in exts]
    if missing:
        raise ValueError(f"step states {missing} belong to no registered extension")
    return tuple(n for name in states for n in exts[name].owns)


def step_states(args, batch: int) -> dict[str, StepState]:
    """The states a control step of ``batch`` envs keeps for a model with ``args``, by extension name."""
    return {e.name: e.state(args, batch) for e in extensions_for(args) if e.state is not None}


def logit_rules(args) -> list[LogitRule]:
    """The action-logit rules of a model with ``args``."""
    return [e.logit_rule(args) for e in extensions_for(args) if e.logit_rule is not None]


def block_heads(args, layer: int) -> BlockHeads | None:
    """The fixed heads an extension puts in block ``layer`` of a model with ``args`` (at most one extension may)."""
    found = [(e.name, h) for e in extensions_for(args) if e.block_heads is not None
             for h in [e.block_heads(args, layer)] if h is not None]
    if len(found) > 1:
        raise ValueError(f"block {layer}: fixed heads from more than one extension ({[n for n, _ in found]})")
    return found[0][1] if found else None


def apply_rules(rules: list[LogitRule], logits: Tensor, tokens: Tensor) -> Tensor:
    """``logits`` after every rule in turn (unchanged without rules)."""
    for rule in rules:
        logits = rule(logits, tokens)
    return logits


__all__ = ["BUILTIN", "BlockHeads", "Extension", "LogitRule", "StepState", "apply_rules", "block_heads",
           "extensions_for", "logit_rules",
           "owned_by", "owned_inputs", "register_extension", "registered", "step_states", "unregister_extension"]
