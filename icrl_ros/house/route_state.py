"""The route memory as the control step's extension state (:class:`~icrl_ros.extensions.StepState`)."""

from __future__ import annotations

from torch import Tensor

from icrl_ros.memory.route import RouteMemory


class RouteState(RouteMemory):
    """:class:`~icrl_ros.memory.route.RouteMemory` fed by the control step: it writes the ``route``
    input before the encoder and takes in each committed token's sightings."""

    owns = ("route",)

    def before_encode(self, inputs: dict[str, Tensor], episode: Tensor) -> None:
        self.fill(inputs, episode)

    def after_encode(self, token: Tensor) -> None:
        self.observe(token)
