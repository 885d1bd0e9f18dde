"""A torch policy's memory for training and evaluation, and the whole-sequence refresh.

Stepping itself is :class:`icrl_ros.runtime.control.ControlStep` (``ControlStep.live(policy,
memory)``), the step the deploy runtime runs. ReLIC uses a :class:`~icrl_ros.memory.KVCache`,
Memo a :class:`~icrl_ros.families.memo.memory.MemoMemory` (which summarises at segment ends), HCAM
an :class:`~icrl_ros.families.hcam.memory.HCAMMemory` (local window + chunk store); each memory
knows how to adopt a whole-sequence forward (``Memory.load_trial``).
"""

from __future__ import annotations

import torch
from torch import Tensor

from icrl_ros.families import family_of
from icrl_ros.memory import create_memory, default_memory, model_dims, trial_sizes
from icrl_ros.models.policy import ICLPolicy


def make_memory(policy: ICLPolicy, batch: int, steps: int, window: int | None = None, dtype=torch.float32,
                device=None, schedule: list[int] | None = None, max_sets: int | None = None,
                max_chunks: int | None = None):
    """A memory for trials of ``steps`` steps, built as the runtime builds one
    (:func:`~icrl_ros.memory.create_memory`): the whole trial (:func:`~icrl_ros.memory.trial_sizes`)
    unless bounded. ReLIC: full context, or sink + ``window`` newest steps. Memo: every summary set
    (or the ``max_sets`` newest: streaming), segments per ``schedule``. HCAM: every chunk (or the
    ``max_chunks`` newest). The sink token, where the model has one, is pinned."""
    a = policy.args
    name = default_memory(a.kind)
    if window and name == "full":
        name = "window"
    sizes = {"window": window} if name == "window" else trial_sizes(name, a, steps, schedule)
    if name == "memo":
        sizes["on_full"] = "evict_oldest"  # streaming when max_sets is given; never reached otherwise
        if max_sets:
            sizes["max_sets"] = max_sets
        if schedule:
            sizes.update(schedule=schedule, segment_capacity=max(schedule))
    if name == "hcam" and max_chunks:
        sizes["max_chunks"] = max_chunks
    mem = create_memory(name, **model_dims(a), batch=batch, n_prefix=policy.n_prefix, dtype=dtype, device=device,
                        **sizes)
    if policy.n_prefix:
        with torch.no_grad():
            mem.set_prefix(*policy.initial_cache(batch, device))
    return mem


@torch.no_grad()
def refresh(policy: ICLPolicy, mem, seq: dict[str, Tensor], schedule: list[int] | None = None
            ) -> tuple[Tensor, Tensor]:
    """Recompute the memory of a trial prefix with the current weights; returns the same forward's
    logits (B, T, A) and values (B, T)."""
    return mem.load_trial(policy, seq, schedule)


def build_policy(args, load_pretrained: bool = False) -> ICLPolicy:
    """The policy class for ``args.kind``; ``load_pretrained`` loads and freezes
    ``args.pretrained_encoder`` (at training start)."""
    fam = family_of(args)
    policy = fam.policy_class()(args)
    if load_pretrained and fam.cached_step:  # RA-DT: a DT over the episode window + retrieval, no frozen encoder
        policy.encoder.load_pretrained()
    return policy
