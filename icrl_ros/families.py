"""Model families: what differs between ReLIC, Memo, HCAM and RA-DT, decided here once.

Code that must treat a family differently asks :func:`family_of` (a kind name, a model's
arguments, or a policy) for the fact it needs instead of testing the policy's class:

=========  ===============  ========================  ===========  ========  ===========
kind       policy class     memory policies           cached step  segments  chunk store
=========  ===============  ========================  ===========  ========  ===========
relic      ICLPolicy        full, window              yes          no        no
memo       MemoPolicy       memo                      yes          yes       no
hcam       HCAMPolicy       hcam                      yes          no        yes
radt       RADTPolicy       retrieval                 no           no        no
=========  ===============  ========================  ===========  ========  ===========

* cached step: one token per step through :class:`~icrl_ros.runtime.control.ControlStep` over a
  K/V memory (encoder / core / heads graphs). RA-DT instead reads its episode window and
  retrieved sub-trajectories through one ``policy`` graph (:mod:`icrl_ros.runtime.radt_runner`).
* segments: Memo summarises at segment ends (a ``summarize`` graph); training draws one random
  segment schedule per rollout, shared by stepping and the updates.
* chunk store: HCAM's core reads a store of past chunks (extra core inputs, a reconstruction loss).

This module imports nothing heavy (classes are imported when asked for), so the memory package,
the runtime and the trainers can all read it.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Family:
    kind: str
    policy: str
    """``module:Class`` of the policy (imported by :meth:`policy_class`)."""
    memories: tuple[str, ...]
    """The memory policies that apply (:data:`icrl_ros.memory.MEMORY_POLICIES`); the first is the default."""
    cached_step: bool = True
    segments: bool = False
    chunk_store: bool = False

    def policy_class(self) -> type:
        module, name = self.policy.split(":")
        return getattr(importlib.import_module(module), name)


FAMILIES: dict[str, Family] = {f.kind: f for f in (
    Family("relic", "icrl_ros.models.policy:ICLPolicy", ("full", "window")),
    Family("memo", "icrl_ros.models.memo:MemoPolicy", ("memo",), segments=True),
    Family("hcam", "icrl_ros.models.hcam:HCAMPolicy", ("hcam",), chunk_store=True),
    Family("radt", "icrl_ros.models.radt:RADTPolicy", ("retrieval",), cached_step=False),
)}


def family_of(x: Any) -> Family:
    """The family of a kind name (``"memo"``), a model's arguments (``.kind``) or a policy
    (``.args.kind``)."""
    kind = x if isinstance(x, str) else getattr(getattr(x, "args", x), "kind", None)
    if kind not in FAMILIES:
        raise ValueError(f"model.kind: unknown {kind!r}; known: {sorted(FAMILIES)}")
    return FAMILIES[kind]


__all__ = ["Family", "FAMILIES", "family_of"]
