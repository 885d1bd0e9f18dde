"""ReLIC policy: step encoder -> causal transformer core (Sink-KV, episode RoPE) -> heads.

Two entry points share every weight:

* :meth:`ICLPolicy.forward_sequence` runs whole trials (training, KV refresh);
* :meth:`ICLPolicy.step` runs one token per env against cached keys/values.

Step inputs are dicts of tensors, each (B, T, ...): the encoder inputs of
:meth:`ICLPolicy.input_spec` (``obs`` or ``rgb`` + ``odom``, ``prev_action``,
``prev_reward``, ``episode_step``, ``goal`` when the model has goals) and
``episode_index`` (RoPE position and IEA mask).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from icrl_ros.geometry import SCAN_BINS
from icrl_ros.models.attention import RMSNorm
from icrl_ros.models.config import ModelArgs
from icrl_ros.models.core import TransformerCore, sequence_mask
from icrl_ros.models.encoders import FREE_BANDS, StepEncoder
from icrl_ros.models.object_memory import ROUTE_DIM

STEP_KEYS = ("obs", "prev_action", "prev_reward", "episode_step", "episode_index")  # grid-world inputs


def skill_inputs(args: ModelArgs) -> list[str]:
    """Inputs of ``args``' route-following head (``model.house.route_skill``), in the heads graph's order."""
    if not args.house.route_skill:
        return []
    return ["route", "scan"] if args.house.scan_input else ["route"]


def frontier_inputs(args: ModelArgs) -> list[str]:
    """Inputs of ``args``' frontier-following head (``model.house.frontier_skill``): the ``frontier`` [and ``scan``] it
    reads, then the ``route`` whose "found" entry turns it off (with ``model.house.route_memory``)."""
    if not args.house.frontier_skill:
        return []
    return ["frontier"] + ["scan"] * bool(args.house.scan_input) + ["route"] * bool(args.house.route_memory)


def head_inputs(args: ModelArgs) -> list[str]:
    """Inputs the heads graph takes after ``hidden``, for the fixed heads whose logits add to the actor's
    (:meth:`ICLPolicy.extra_head`), each once; none for most models."""
    return list(dict.fromkeys(skill_inputs(args) + frontier_inputs(args)))


def skill_logits(head: nn.Module, *inputs: Tensor) -> Tensor:
    """The route-following head's logits (..., A) from ``route`` (..., ROUTE_DIM) [and ``scan``], zero where the
    route has no way to the goal (its "found" entry 0)."""
    return inputs[0][..., :1].float() * head(torch.cat([t.float() for t in inputs], -1))


def frontier_logits(head: nn.Module, frontier: Tensor, scan: Tensor | None, route: Tensor | None) -> Tensor:
    """The frontier-following head's logits (..., A) from ``frontier`` [and ``scan``], zero where the frontier memory
    has no way (its "found" entry 0) and where ``route`` has a way to the goal."""
    gate = frontier[..., :1].float()
    if route is not None:
        gate = gate * (1.0 - route[..., :1].float())
    x = frontier.float() if scan is None else torch.cat([frontier.float(), scan.float()], -1)
    return gate * head(x)


class SkillHead(nn.Module):
    """The fixed heads whose logits add to the actor's, as the heads graph calls them: the route-following head
    (``skill_logits``) and the frontier-following head (``frontier_logits``) on the :func:`head_inputs` in order."""

    def __init__(self, args: ModelArgs, route: nn.Module | None, frontier: nn.Module | None) -> None:
        super().__init__()
        self.head, self.frontier = route, frontier  # (the route head's name predates the frontier head)
        self.names, self.route_names = head_inputs(args), skill_inputs(args)

    def forward(self, *inputs: Tensor) -> Tensor:
        inp = dict(zip(self.names, inputs))
        out = 0.0
        if self.head is not None:
            out = out + skill_logits(self.head, *(inp[n] for n in self.route_names))
        if self.frontier is not None:
            out = out + frontier_logits(self.frontier, inp["frontier"], inp.get("scan"), inp.get("route"))
        return out


class ICLPolicy(nn.Module):
    def __init__(self, args: ModelArgs) -> None:
        super().__init__()
        self.args = args
        self.encoder = StepEncoder(args)
        self.core = TransformerCore(args)
        self.norm = RMSNorm(args.d_model)
        self.actor = nn.Linear(args.d_model, args.n_actions)
        self.critic = nn.Linear(args.d_model, 1)
        self.sink_token = nn.Parameter(torch.randn(args.d_model) * 0.02) if args.sink == "token" else None
        # training only: P(goal seen earlier in the trial) logit and its (forward, left) offset
        house = args.house
        self.memory_aux = nn.Linear(args.d_model, 3) if house.memory_aux else None
        # the route-following head (model.house.route_skill): route (+ scan) -> logits, added where a route exists
        self.route_skill = None
        if house.route_skill:
            self.route_skill = nn.Sequential(nn.Linear(ROUTE_DIM + SCAN_BINS * house.scan_input, house.route_skill),
                                             nn.ReLU(), nn.Linear(house.route_skill, args.n_actions))
        # the frontier-following head (model.house.frontier_skill): frontier (+ scan) -> logits, added where it
        # has a way
        self.frontier_skill = None
        if house.frontier_skill:
            self.frontier_skill = nn.Sequential(
                nn.Linear(ROUTE_DIM + SCAN_BINS * house.scan_input, house.frontier_skill), nn.ReLU(),
                nn.Linear(house.frontier_skill, args.n_actions))
        self.apply(self._init)
        nn.init.normal_(self.actor.weight, std=0.01)
        nn.init.zeros_(self.actor.bias)
        # inputs that start as none, so a trained model gains them by --init-partial unchanged (self.apply above
        # re-draws the place memory's read-out, which must start at zero too)
        late = [self.encoder.route, self.encoder.frontier] + [
            b.place_memory.out for b in self.core.blocks if hasattr(b, "place_memory")]
        for head in (self.route_skill, self.frontier_skill):  # hidden layer at torch's default scale, output zero
            if head is not None:
                head[0].reset_parameters()
                late.append(head[-1])
        for m in late:
            if m is not None:
                nn.init.zeros_(m.weight)
                nn.init.zeros_(m.bias)

    def extra_head(self) -> nn.Module | None:
        """A module from the :func:`head_inputs` to logits (..., A) that add to the actor's (the route- and
        frontier-following heads, their weights shared), or None for a model without one."""
        if self.route_skill is None and self.frontier_skill is None:
            return None
        return SkillHead(self.args, self.route_skill, self.frontier_skill)

    @staticmethod
    def _init(m: nn.Module) -> None:
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, std=0.02)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Embedding):
            nn.init.normal_(m.weight, std=0.02)

    @property
    def n_prefix(self) -> int:
        """Cache slots that exist before the first step (the StreamingLLM sink token)."""
        return 1 if self.sink_token is not None else 0

    def input_spec(self) -> dict[str, tuple[tuple[int, ...], torch.dtype]]:
        """Per-step encoder inputs: name -> (shape after the batch dim, dtype). The episode
        index is not an encoder input (it only sets RoPE positions and the IEA mask)."""
        a = self.args
        if a.obs_type == "image":
            spec = {"rgb": ((a.image_size, a.image_size, 3), torch.uint8), "odom": ((3,), torch.float32)}
        else:
            spec = {"obs": ((), torch.long)}
            if a.last_obs:
                spec["last_obs"] = ((), torch.long)
        spec["prev_action"] = ((), torch.long)
        if a.use_reward:
            spec["prev_reward"] = ((), torch.float32)
        spec["episode_step"] = ((), torch.long)
        if self.args.n_goals:
            spec["goal"] = ((), torch.long)
        if self.args.house.route_memory:  # written by the control step's route memory, not observed
            spec["route"] = ((ROUTE_DIM,), torch.float32)
        if self.args.house.frontier_memory:  # written by the control step's frontier memory, not observed
            spec["frontier"] = ((ROUTE_DIM,), torch.float32)
        if self.args.house.scan_input:  # the free headings around the robot (env option scan; a laser scan)
            spec["scan"] = ((SCAN_BINS,), torch.float32)
        if self.args.house.frontier_from_scan:  # the laser's floor per image band (env option scan_bands)
            spec["scan_bands"] = ((FREE_BANDS,), torch.float32)
        return spec

    def rollout_spec(self) -> dict[str, tuple[tuple[int, ...], torch.dtype]]:
        """What training stores per step: :meth:`input_spec` with the image replaced by its
        frozen features (``rgb_feat``) when the visual encoder is frozen."""
        spec = self.input_spec()
        if self.encoder.frozen_features:
            spec = {("rgb_feat" if k == "rgb" else k): (((self.args.feature_dim,), torch.float32) if k == "rgb" else v)
                    for k, v in spec.items()}
        return spec

    def rollout_inputs(self, inp: dict[str, Tensor]) -> dict[str, Tensor]:
        """Step inputs as training stores them: ``rgb`` -> ``rgb_feat`` for a frozen encoder."""
        if not self.encoder.frozen_features or "rgb" not in inp:
            return inp
        out = {k: v for k, v in inp.items() if k != "rgb"}
        out["rgb_feat"] = self.encoder.features(inp["rgb"])
        return out

    def encode(self, inp: dict[str, Tensor]) -> Tensor:
        return self.encoder(inp)

    def heads(self, h: Tensor) -> tuple[Tensor, Tensor]:
        h = self.norm(h)
        return self.actor(h), self.critic(h).squeeze(-1)

    @property
    def skill_inputs(self) -> list[str]:
        """The inputs the route-following head reads beside the hidden state (the heads graph's extra inputs)."""
        return skill_inputs(self.args)

    def with_skill(self, logits: Tensor, inp: dict[str, Tensor]) -> Tensor:
        """``logits`` plus the route- and frontier-following heads' where the model has them."""
        head = self.extra_head()
        if head is None:
            return logits
        return logits + head(*(inp[n] for n in head.names)).to(logits.dtype)

    def initial_cache(self, batch: int, device=None) -> tuple[Tensor, Tensor]:
        """Keys/values present at a trial start: empty, or the sink token's (L, B, H, 1, hd)."""
        if self.sink_token is None:
            return self.core.empty_cache(batch, device)
        x = self.sink_token.view(1, 1, -1).expand(batch, 1, -1)
        zeros = torch.zeros(batch, 1, dtype=torch.long, device=x.device)
        _, k, v = self.core(x, zeros, torch.ones(batch, 1, 1, dtype=torch.bool, device=x.device))
        return k, v

    def forward_sequence(self, inp: dict[str, Tensor], segments: list[int] | None = None, aux: bool = False):
        """Whole trials from their start. Returns logits (B, T, A), values (B, T), and the
        keys/values of the steps (L, B, H, T, hd), sink-token slot excluded; with ``aux``, also
        the ``memory_aux`` head's output (B, T, 3).
        ``segments`` is accepted for interface parity with Memo and ignored."""
        x = self.encode(inp)
        ep = inp["episode_index"]
        mask = sequence_mask(ep, self.args.iea, self.n_prefix)
        if self.sink_token is not None:
            past_k, past_v = self.initial_cache(x.shape[0], x.device)
            h, k, v = self.core(x, ep, mask, past_k, past_v)
        else:
            h, k, v = self.core(x, ep, mask)
        logits, value = self.heads(h)
        logits = self.with_skill(logits, inp)
        if aux:
            if self.memory_aux is None:
                raise ValueError("forward_sequence(aux=True): the model has no memory_aux head "
                                 "(model.house.memory_aux)")
            return logits, value, k, v, self.memory_aux(self.norm(h))
        return logits, value, k, v
