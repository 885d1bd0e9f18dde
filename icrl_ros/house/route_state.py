"""The route memory as the control step's extension state (:class:`~icrl_ros.extensions.StepState`)."""

from __future__ import annotations

from torch import Tensor

from icrl_ros.memory.route import RouteMemory


class RouteState(RouteMemory):
    """:class:`~icrl_ros.memory.route.RouteMemory` fed by the control step: it writes the ``route``
    input before the encoder and takes in each committed token's sightings. ``last_route`` is the
    ``route`` input it wrote for the last step (B, ROUTE_DIM), None after a reset (what a viewer shows
    as the way the policy was handed)."""

    owns = ("route",)
    last_route: Tensor | None = None

    def before_encode(self, inputs: dict[str, Tensor], episode: Tensor) -> None:
        self.last_route = self.fill(inputs, episode)

    def after_encode(self, token: Tensor) -> None:
        self.observe(token)

    def reset(self, envs=None) -> None:
        super().reset(envs)
        if envs is None:
            self.last_route = None

    def restored(self) -> None:
        super().restored()
        self.last_route = None
