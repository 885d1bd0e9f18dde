"""Declare a parameter dataclass (see :mod:`icrl_ros.nodes.params`) as ROS parameters.

Each field becomes a parameter with a ``ParameterDescriptor`` (description, choices in
``additional_constraints``, numeric range, ``read_only`` for the start-only ones). What ROS users
type is accepted as they type it: an integer where a double is declared (``max_linear_speed: 1``
in a YAML file, ``ros2 param set ... control_rate_hz 20``) is that double, at start and at runtime.
A start-up value that breaks the field's rules does not crash the process: the parameter keeps its
default and the error is kept in :attr:`ParamBinding.start_errors` (the agent refuses to configure
and reports it). At runtime a set is validated by the dataclass's own rules, refused with the
reason when the field only applies at configure and the node is configured, and otherwise applied:
``on_live`` is called after the values are set.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, TypeVar

from rcl_interfaces.msg import FloatingPointRange, IntegerRange, ParameterDescriptor, SetParametersResult
from rclpy.node import Node
from rclpy.parameter import Parameter

from icrl_ros.nodes.params import APPLY_CONFIGURE, APPLY_LIVE, APPLY_START, ParamsBase, check_value, coerce

P = TypeVar("P", bound=ParamsBase)

_WHEN = {
    APPLY_LIVE: "Applied at once when set.",
    APPLY_CONFIGURE: "Read at configure; refused while the node is configured (clean up, set, configure).",
    APPLY_START: "Read-only: set at process start (--ros-args -p, a params file or the launch file).",
}


def _descriptor(f: dataclasses.Field) -> ParameterDescriptor:
    meta = f.metadata
    apply = meta.get("apply", APPLY_START)
    d = ParameterDescriptor(name=f.name, description=f"{meta.get('doc', '')} {_WHEN[apply]}".strip(),
                            read_only=apply == APPLY_START)
    constraints = []
    if meta.get("choices") is not None:
        constraints.append("one of " + ", ".join(repr(c) for c in meta["choices"]))
    lo, hi = meta.get("min"), meta.get("max")
    if lo is not None and hi is not None:  # a real interval: tools show and enforce it
        if isinstance(f.default, float):
            d.floating_point_range = [FloatingPointRange(from_value=float(lo), to_value=float(hi), step=0.0)]
        elif isinstance(f.default, int) and not isinstance(f.default, bool):
            d.integer_range = [IntegerRange(from_value=int(lo), to_value=int(hi), step=1)]
    elif lo is not None:  # one-sided: said in words (a range would need a made-up upper end)
        constraints.append(f">= {lo}")
    elif hi is not None:
        constraints.append(f"<= {hi}")
    d.additional_constraints = "; ".join(constraints)
    return d


def _as_declared(f: dataclasses.Field, param: Parameter) -> Parameter:
    """``param`` with an integer value turned into the double the field declares (else unchanged)."""
    value = coerce(f, param.value)
    return param if value is param.value else Parameter(param.name, Parameter.Type.DOUBLE, value)


class ParamBinding:
    """The ROS parameters of one node, bound to a parameter dataclass."""

    def __init__(self, node: Node, cls: type[P], *, is_configured: Callable[[], bool] | None = None,
                 on_live: Callable[[list[str]], None] | None = None,
                 check: Callable[[P], None] | None = None) -> None:
        self.node, self.cls = node, cls
        self.fields = {f.name: f for f in cls.field_specs()}
        self.start_errors: dict[str, str] = {}
        self._is_configured = is_configured or (lambda: False)
        self._on_live = on_live
        self._check = check
        overrides = getattr(node, "_parameter_overrides", {})  # rclpy: the --ros-args / params-file values
        for name, f in self.fields.items():
            if name in overrides:
                given = overrides[name].value
                try:
                    check_value(f, coerce(f, given))
                except ValueError as e:  # checked before rclpy sees it: a refusal there would raise
                    self.start_errors[name] = f"{e} (given at start; the default {f.default!r} is in force)"
                    del overrides[name]
                else:
                    overrides[name] = _as_declared(f, overrides[name])
            node.declare_parameter(name, f.default, _descriptor(f))
        node.add_pre_set_parameters_callback(self._pre_set)
        node.add_on_set_parameters_callback(self._on_set)
        node.add_post_set_parameters_callback(self._post_set)

    def _pre_set(self, params: list[Parameter]) -> list[Parameter]:
        return [_as_declared(self.fields[p.name], p) if p.name in self.fields else p for p in params]

    def _on_set(self, params: list[Parameter]) -> SetParametersResult:
        changes = {p.name: p.value for p in params if p.name in self.fields}
        if not changes:
            return SetParametersResult(successful=True)
        if self._is_configured():
            late = sorted(n for n in changes if self.fields[n].metadata.get("apply") == APPLY_CONFIGURE
                          and changes[n] != self.node.get_parameter(n).value)
            if late:
                return SetParametersResult(successful=False, reason=(
                    f"{', '.join(late)} applies at configure and the node is configured: deactivate, clean up, "
                    f"set it, then configure"))
        try:
            for name, value in changes.items():
                check_value(self.fields[name], coerce(self.fields[name], value))
            candidate = self.read(changes)
            if self._check is not None:
                self._check(candidate)
        except ValueError as e:
            return SetParametersResult(successful=False, reason=str(e))
        return SetParametersResult(successful=True)

    def _post_set(self, params: list[Parameter]) -> None:
        for p in params:
            self.start_errors.pop(p.name, None)  # a value set now replaces a refused start-up value
        live = [p.name for p in params if self.fields.get(p.name) is not None
                and self.fields[p.name].metadata.get("apply") == APPLY_LIVE]
        if live and self._on_live is not None:
            self._on_live(live)

    def read(self, changes: dict[str, Any] | None = None) -> P:
        """The current values (with ``changes`` on top) as a validated dataclass; ValueError names
        the bad one. A start-up value that was refused reads as the default (see :attr:`start_errors`)."""
        values = {name: self.node.get_parameter(name).value for name in self.fields} | (changes or {})
        return self.cls.from_dict(values)  # type: ignore[return-value]


def declare_params(node: Node, cls: type[P], **kwargs: Any) -> ParamBinding:
    """Declare every field of ``cls`` on ``node`` and validate later changes against it."""
    return ParamBinding(node, cls, **kwargs)


def read_params(node: Node, cls: type[P]) -> P:
    """Current parameter values as a validated ``cls`` instance (ValueError names the bad one)."""
    binding = getattr(node, "param_binding", None)
    if isinstance(binding, ParamBinding) and binding.cls is cls:
        return binding.read()  # type: ignore[return-value]
    return cls.from_dict({f.name: node.get_parameter(f.name).value for f in cls.field_specs()})  # type: ignore[return-value]
