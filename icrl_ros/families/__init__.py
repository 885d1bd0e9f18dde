"""Model families: ReLIC, Memo, HCAM and RA-DT, one folder each, found here.

Each subpackage of :mod:`icrl_ros.families` is a family and owns what differs about it: its
``__init__`` declares ``FAMILY`` (a :class:`Family`), next to it live its model arguments
(``config.py``, a subclass of :class:`~icrl_ros.models.config.ModelArgs` with its own fields and
rules), its policy (``model.py``), its memories (``memory.py``), its deploy graphs (``graphs.py``)
and, for RA-DT, its runner and its bundle's extras (``deploy.py``, :attr:`Family.deploy`).
Adding a family means adding a folder here; code elsewhere asks :func:`family_of` (a kind name,
a model's arguments, or a policy) for the fact it needs instead of testing classes:

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
  retrieved sub-trajectories through one ``policy`` graph (:mod:`icrl_ros.families.radt.runner`).
* segments: Memo summarises at segment ends (a ``summarize`` graph); training draws one random
  segment schedule per rollout, shared by stepping and the updates.
* chunk store: HCAM's core reads a store of past chunks (extra core inputs, a reconstruction loss).

The shared parts (the transformer core, encoders, the KV cache, the engines) stay in
:mod:`icrl_ros.models`, :mod:`icrl_ros.memory` and :mod:`icrl_ros.runtime`; ReLIC, the plain
transformer over them, has the smallest folder. A family's ``__init__`` names its classes as
``module:Class`` strings and imports nothing heavy, so the memory package, the runtime and the
trainers can all read this registry without import cycles.
"""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass, field
from typing import Any, Callable


def _load(path: str) -> Any:
    module, name = path.split(":")
    return getattr(importlib.import_module(module), name)


@dataclass(frozen=True)
class Family:
    kind: str
    policy: str
    """``module:Class`` of the policy (imported by :meth:`policy_class`)."""
    memories: dict[str, str]
    """Memory policy name -> ``module:Class`` of the memories that apply; the first is the default."""
    config: str
    """``module:Class`` of the model's arguments (a dataclass with ``from_dict`` / ``to_dict``, saved in
    checkpoints and manifests; for the cached-step families a subclass of
    :class:`~icrl_ros.models.config.ModelArgs`)."""
    graphs: str
    """The module whose ``graph_specs(policy, precision)`` and ``graph_modules(policy)`` give the
    deploy graphs (:mod:`icrl_ros.runtime.graphs` for the shared encoder / core / heads)."""
    runner: str = ""
    """``module:Class`` of the family's own runner, for a family without the cached control step (RA-DT's
    window + retrieval); the others run in :class:`~icrl_ros.runtime.runner.PolicyRunner`."""
    positions: Callable[[Any], dict] = field(compare=False, default=lambda a: {})
    """Model arguments -> the manifest's ``positions`` section (how the runtime numbers steps)."""
    kv_dtypes: tuple[str, ...] = ("fp32",)
    """K / V storage dtypes its core graph reads (:mod:`icrl_ros.memory.quant`); its ``graph_specs`` takes a
    ``kv_dtype`` when there is more than fp32."""
    deploy: str = ""
    """For a family without the cached step: the module that knows its bundle (extra files and manifest
    sections, its sample, its memory from a bundle, replay and ``--verify``); RA-DT's
    :mod:`icrl_ros.families.radt.deploy` is the interface's reference. The runtime and the exporter call it
    instead of naming the family."""
    cached_step: bool = True
    segments: bool = False
    chunk_store: bool = False

    def policy_class(self) -> type:
        return _load(self.policy)

    def config_class(self) -> type:
        return _load(self.config)

    def runner_class(self) -> type | None:
        return _load(self.runner) if self.runner else None

    def memory_class(self, name: str) -> type:
        if name not in self.memories:
            raise ValueError(f"memory: policy {name!r} does not apply to a {self.kind} model; "
                             f"use one of {list(self.memories)}")
        return _load(self.memories[name])

    def graph_module(self):
        return importlib.import_module(self.graphs)

    def deploy_module(self):
        """The family's :attr:`deploy` module, or None (the shared cached-step bundle)."""
        return importlib.import_module(self.deploy) if self.deploy else None


def _discover() -> dict[str, Family]:
    found = {}
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if info.ispkg:
            fam = importlib.import_module(f"{__name__}.{info.name}").FAMILY
            if fam.kind != info.name:
                raise RuntimeError(f"icrl_ros/families/{info.name}: FAMILY.kind is {fam.kind!r}, not the folder's name")
            found[fam.kind] = fam
    order = ("relic", "memo", "hcam", "radt")  # the order tables and docs list them in; others after
    return {k: found[k] for k in sorted(found, key=lambda k: (order.index(k) if k in order else len(order), k))}


FAMILIES: dict[str, Family] = _discover()


def register_family(fam: Family) -> Family:
    """Add a family defined outside this package (a plug-in, a test); a kind or memory name already
    taken raises ValueError."""
    if fam.kind in FAMILIES:
        raise ValueError(f"family {fam.kind!r} is already registered")
    taken = set(fam.memories) & set(memory_policies())
    if taken:
        raise ValueError(f"family {fam.kind!r}: memory policies {sorted(taken)} belong to another family")
    FAMILIES[fam.kind] = fam
    return fam


def unregister_family(kind: str) -> None:
    """Remove a family added by :func:`register_family`."""
    FAMILIES.pop(kind, None)


def family_of(x: Any) -> Family:
    """The family of a kind name (``"memo"``), a model's arguments (``.kind``) or a policy
    (``.args.kind``)."""
    kind = x if isinstance(x, str) else getattr(getattr(x, "args", x), "kind", None)
    if kind not in FAMILIES:
        raise ValueError(f"model.kind: unknown {kind!r}; known: {sorted(FAMILIES)}")
    return FAMILIES[kind]


def memory_policies() -> dict[str, str]:
    """Every memory policy name -> ``module:Class``, over all families."""
    return {name: path for fam in FAMILIES.values() for name, path in fam.memories.items()}


__all__ = ["Family", "FAMILIES", "family_of", "memory_policies", "register_family", "unregister_family"]
