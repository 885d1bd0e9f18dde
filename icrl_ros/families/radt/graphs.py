"""RA-DT's deploy graphs: one ``policy`` graph (the episode window and the retrieved
sub-trajectories -> logits; the retrieval itself runs outside it, in faiss) and, for image
models, an ``encoder`` graph that makes the step features. fp32 only."""

from __future__ import annotations

from torch import Tensor, nn

from icrl_ros.families.radt.model import RETRIEVED_KEYS, WINDOW_KEYS, RADTArgs, RADTPolicy
from icrl_ros.families.radt.model import input_spec as radt_input_spec
from icrl_ros.runtime.graphs import dtype_name, io_spec

RADT_DTYPES = {"obs": "int64", "prev_action": "int64", "action": "int64", "prev_reward": "float32",
               "reward": "float32", "rtg": "float32", "episode_step": "int64", "valid": "bool"}
RETRIEVED_PREFIX = "retrieved_"


def graph_specs(policy: RADTPolicy | RADTArgs, precision: str = "fp32") -> dict[str, dict[str, list[dict]]]:
    """RA-DT's graphs (of a policy or its arguments), static but for the batch. ``policy``: the
    window (WINDOW_KEYS, each (batch, C)), the retrieved sub-trajectories (``retrieved_`` +
    RETRIEVED_KEYS, each (batch, k, 2C); the learnt null slot is inside the graph) -> the last
    position's logits (batch, A). Inputs and logits are float32 / int64 / bool.

    Image models: ``obs`` inputs are step features (..., F) float32, and an ``encoder``
    graph (rgb, odom, goal, each (batch, ...)) -> x (batch, F) makes them; ``use_reward:
    false`` drops the reward and return-to-go inputs, ``use_rtg: false`` the return-to-go."""
    a = getattr(policy, "args", policy)
    C, k, F = a.context, a.top_k, a.obs_features

    def io(name: str, lead: list) -> dict:
        if name == "obs" and F:
            return io_spec(name, "float32", lead + [F])
        return io_spec(name, RADT_DTYPES[name], lead)

    keep = lambda names: [n for n in names if a.reads(n)]  # noqa: E731
    window = [io(n, ["batch", C]) for n in keep(WINDOW_KEYS)]
    retrieved = [io(n, ["batch", k, 2 * C]) for n in keep(RETRIEVED_KEYS)]
    for r in retrieved:
        r["name"] = RETRIEVED_PREFIX + r["name"]
    specs = {"policy": {"inputs": window + retrieved, "outputs": [io_spec("logits", "float32", ["batch", a.n_actions])]}}
    if F:
        enc = radt_input_spec(a)
        specs = {"encoder": {"inputs": [io_spec(n, dtype_name(dt), ["batch", *shape]) for n, (shape, dt) in enc.items()],
                             "outputs": [io_spec("x", "float32", ["batch", F])]}, **specs}
    return specs


class RADTGraph(nn.Module):
    """``RADTPolicy.forward`` at the acting (last) window position, inputs in
    :func:`graph_specs` order -> logits (B, A) float32."""

    def __init__(self, policy: RADTPolicy) -> None:
        super().__init__()
        self.policy = policy
        self.names = [io["name"] for io in graph_specs(policy)["policy"]["inputs"]]

    def forward(self, *inputs: Tensor) -> Tensor:
        named = dict(zip(self.names, inputs))
        window = {n: named[n] for n in WINDOW_KEYS if n in named}
        retrieved = {n: named[RETRIEVED_PREFIX + n] for n in RETRIEVED_KEYS if RETRIEVED_PREFIX + n in named}
        return self.policy(window, retrieved)[:, -1].float()


class RADTEncoderGraph(nn.Module):
    """Image RA-DT: rgb (B, S, S, 3), odom (B, 3), goal (B,) -> step features x (B, F) float32."""

    def __init__(self, policy: RADTPolicy) -> None:
        super().__init__()
        self.policy = policy

    def forward(self, rgb: Tensor, odom: Tensor, goal: Tensor) -> Tensor:
        return self.policy.step_features(rgb, odom, goal).float()


def graph_modules(policy: RADTPolicy) -> dict[str, nn.Module]:
    graphs: dict[str, nn.Module] = {"policy": RADTGraph(policy)}
    if policy.args.obs_type == "image":
        graphs = {"encoder": RADTEncoderGraph(policy), **graphs}
    return graphs


def build_graphs(policy: RADTPolicy, precision: str = "fp32") -> dict[str, nn.Module]:
    if precision != "fp32":
        raise ValueError(f"precision: RA-DT bundles are fp32 only, got {precision!r}")
    return {k: g.eval() for k, g in graph_modules(policy.eval()).items()}
