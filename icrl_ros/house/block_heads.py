"""The house's fixed heads in the first transformer block: the object memory (head 0, "where did I see
my goal?") and, with ``model.house.place_memory``, the place memory (heads 1..), as
:class:`~icrl_ros.extensions.BlockHeads`. Their modules keep the names ``object_memory`` and
``place_memory`` on the block, so checkpoints and Memo's summaries find them where they always were."""

from __future__ import annotations

from torch import Tensor

from icrl_ros.models.encoders import OBJECT_SCALE_M
from icrl_ros.models.object_memory import ObjectMemoryHead
from icrl_ros.models.place_memory import PlaceMemoryHeads


class HouseHeads:
    def __init__(self, args) -> None:
        self.om = ObjectMemoryHead(args.n_goals, args.head_dim, args.d_model)
        self.pm = PlaceMemoryHeads(args.head_dim, args.d_model, OBJECT_SCALE_M) if args.house.place_memory else None

    def modules(self) -> dict:
        return {"object_memory": self.om, **({"place_memory": self.pm} if self.pm is not None else {})}

    def fixed(self, x: Tensor) -> list:
        out = [(*self.om.qkv(x), self.om.sink_key)]
        if self.pm is not None:  # fed from the token's last entries (the pose the step encoder writes)
            out += self.pm.qkv(self.om.struct(x), x.dtype)
        return out

    def readout(self, ys: Tensor, x: Tensor) -> Tensor:
        a = self.om.readout(ys[:, 0], x)
        if self.pm is not None:
            a = a + self.pm.readout(ys[:, 1:], self.om.struct(x), x.dtype)
        return a


def house_heads(args, layer: int) -> HouseHeads | None:
    """Block 0 of a model with ``model.house.object_memory`` gets the house's fixed heads."""
    return HouseHeads(args) if layer == 0 else None
