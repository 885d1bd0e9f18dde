"""Copy a training checkpoint without its optimiser state, for shipping in the repo.

    python training/ship_checkpoint.py runs/darkroom/checkpoints/final.pt checkpoints/darkroom_relic.pt
    python training/ship_checkpoint.py runs/x/checkpoints/final.pt checkpoints/house_memo.pt --share-encoder

``--share-encoder`` (house policies on a frozen encoder): leave the encoder's weights out and refer
to ``model.pretrained_encoder`` (``checkpoints/house_encoder.pt``, kept beside the checkpoint, checked
by SHA-256 at load): a 7 MB house checkpoint becomes about 2.6 MB. ``--encoder FILE``: refer to that
file instead (the same weights, e.g. a candidate's encoder moved from ``checkpoints/resume/`` into
``checkpoints/`` when it ships); the policy's arguments then name it.

    python training/ship_checkpoint.py runs/x/house_relic_scan.pt checkpoints/house_relic_scan.pt --share-encoder \\
        --encoder checkpoints/house_encoder_pooled64.pt

``--set KEY=VALUE`` changes a model argument that leaves the weights as they are (a runtime option such as
``house.forget_contradicted=3``); one that would change the weights' shapes is refused.
"""

from __future__ import annotations

import argparse

from icrl_ros.models import load_checkpoint, save_checkpoint
from icrl_ros.training._cli import fail


def with_model_overrides(policy, blob: dict, overrides: list[str]):
    """The policy rebuilt with ``overrides`` applied to its arguments and its weights loaded unchanged (the
    blob's training config records the same change); exits with one line when an override is not a model
    argument or changes the weights' shapes."""
    from icrl_ros.models.checkpoint import model_args_from_dict
    from icrl_ros.models.stepping import build_policy
    from icrl_ros.training.config import apply_overrides

    try:
        new_args = model_args_from_dict(apply_overrides(policy.args.to_dict(), overrides))
        new = build_policy(new_args)
    except (ValueError, TypeError) as e:
        fail(f"--set {' '.join(overrides)}: {e}")
    try:
        new.load_state_dict(policy.state_dict())
    except RuntimeError:
        fail(f"--set {' '.join(overrides)}: changes the model's weights (a training setting, not a runtime one)")
    model_cfg = (blob.get("config") or {}).get("model")
    if isinstance(model_cfg, dict):
        apply_overrides(model_cfg, overrides)
    return new.eval()


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("src")
    p.add_argument("dst")
    p.add_argument("--share-encoder", action="store_true",
                   help="leave out the frozen image encoder; load it from model.pretrained_encoder (same SHA-256)")
    p.add_argument("--encoder", metavar="FILE",
                   help="with --share-encoder: the encoder file to refer to (its weights must be the policy's)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="a model argument to change (dotted, e.g. house.forget_contradicted=3); the weights must fit "
                        "the changed model unchanged")
    args = p.parse_args(argv)
    if args.encoder and not args.share_encoder:
        fail("--encoder: give it with --share-encoder (the file the shipped checkpoint refers to)")
    try:
        policy, blob = load_checkpoint(args.src)
    except (FileNotFoundError, ValueError) as e:
        fail(str(e))
    if args.set:
        policy = with_model_overrides(policy, blob, args.set)
    if args.encoder:  # the weights are compared with the file's when saving
        policy.args.pretrained_encoder = args.encoder
        model_cfg = (blob.get("config") or {}).get("model")
        if isinstance(model_cfg, dict):
            model_cfg["pretrained_encoder"] = args.encoder
    # the training record stays (steps, trainer, wall time, offline data); optimiser state and schedules go
    keep = {k: v for k, v in blob.items() if isinstance(v, (int, float, str)) and k != "format"}
    try:
        save_checkpoint(args.dst, policy, blob.get("config", {}), share_encoder=args.share_encoder, **keep)
    except ValueError as e:
        fail(str(e))
    record = f"{keep.get('env_steps', 0):,} env steps"
    if keep.get("offline_updates"):  # an offline fine-tune steps no env: say what it trained on
        record = f"{keep['offline_updates']:,} offline updates on {keep.get('offline_data', '?')}"
    print(f"wrote {args.dst} ({sum(p.numel() for p in policy.parameters()):,} parameters, {record})")
    return 0


if __name__ == "__main__":
    from icrl_ros.training._cli import run_main

    raise SystemExit(run_main(main))
