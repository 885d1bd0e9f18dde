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
"""

from __future__ import annotations

import argparse

from icrl_ros.models import load_checkpoint, save_checkpoint
from icrl_ros.training._cli import fail


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("src")
    p.add_argument("dst")
    p.add_argument("--share-encoder", action="store_true",
                   help="leave out the frozen image encoder; load it from model.pretrained_encoder (same SHA-256)")
    p.add_argument("--encoder", metavar="FILE",
                   help="with --share-encoder: the encoder file to refer to (its weights must be the policy's)")
    args = p.parse_args(argv)
    if args.encoder and not args.share_encoder:
        fail("--encoder: give it with --share-encoder (the file the shipped checkpoint refers to)")
    try:
        policy, blob = load_checkpoint(args.src)
    except (FileNotFoundError, ValueError) as e:
        fail(str(e))
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
