"""Declare a parameter dataclass (see :mod:`icrl_ros.nodes.params`) as ROS parameters.

Each field becomes a parameter with a ``ParameterDescriptor`` (description, choices in
``additional_constraints``, numeric range); a set-parameters callback rejects bad values with
the dataclass's own message, so ``ros2 param set`` and YAML files are validated the same way.
"""

from __future__ import annotations

import dataclasses
from typing import Any, TypeVar

from rcl_interfaces.msg import FloatingPointRange, IntegerRange, ParameterDescriptor, SetParametersResult
from rclpy.node import Node
from rclpy.parameter import Parameter

from icrl_ros.nodes.params import ParamsBase, check_value

P = TypeVar("P", bound=ParamsBase)


def _descriptor(f: dataclasses.Field) -> ParameterDescriptor:
    meta = f.metadata
    d = ParameterDescriptor(name=f.name, description=meta.get("doc", ""))
    if meta.get("choices") is not None:
        d.additional_constraints = "one of " + ", ".join(repr(c) for c in meta["choices"])
    lo, hi = meta.get("min"), meta.get("max")
    if lo is not None or hi is not None:
        if isinstance(f.default, float):
            d.floating_point_range = [FloatingPointRange(
                from_value=float(lo if lo is not None else -1e300), to_value=float(hi if hi is not None else 1e300),
                step=0.0)]
        elif isinstance(f.default, int) and not isinstance(f.default, bool):
            d.integer_range = [IntegerRange(
                from_value=int(lo if lo is not None else -(2**63)), to_value=int(hi if hi is not None else 2**63 - 1),
                step=1)]
    return d


def declare_params(node: Node, cls: type[P]) -> None:
    """Declare every field of ``cls`` on ``node`` and validate later changes against it."""
    fields = {f.name: f for f in cls.field_specs()}
    node.declare_parameters("", [(name, f.default, _descriptor(f)) for name, f in fields.items()])

    def on_set(params: list[Parameter]) -> SetParametersResult:
        for p in params:
            f = fields.get(p.name)
            if f is None:
                continue
            try:
                value = p.value
                if isinstance(f.default, float) and isinstance(value, int) and not isinstance(value, bool):
                    value = float(value)
                check_value(f, value)
            except ValueError as e:
                return SetParametersResult(successful=False, reason=str(e))
        return SetParametersResult(successful=True)

    node.add_on_set_parameters_callback(on_set)
    # start-up overrides bypass the callback: the node checks them with read_params()


def read_params(node: Node, cls: type[P]) -> P:
    """Current parameter values as a validated ``cls`` instance (ValueError names the bad one)."""
    values: dict[str, Any] = {}
    for f in cls.field_specs():
        value = node.get_parameter(f.name).value
        if isinstance(f.default, float) and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        values[f.name] = value
    return cls.from_dict(values)  # type: ignore[return-value]
