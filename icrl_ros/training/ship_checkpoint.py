"""Copy a training checkpoint without its optimiser state, for shipping in the repo.

    python training/ship_checkpoint.py runs/darkroom/checkpoints/final.pt checkpoints/darkroom_relic.pt
"""

from __future__ import annotations


import argparse

from icrl_ros.models import load_checkpoint, save_checkpoint
from icrl_ros.training._cli import fail


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("src")
    p.add_argument("dst")
    args = p.parse_args(argv)
    try:
        policy, blob = load_checkpoint(args.src)
    except (FileNotFoundError, ValueError) as e:
        fail(str(e))
    keep = {k: blob[k] for k in ("env_steps", "rollout") if k in blob}
    save_checkpoint(args.dst, policy, blob.get("config", {}), **keep)
    print(f"wrote {args.dst} ({sum(p.numel() for p in policy.parameters()):,} parameters, "
          f"{keep.get('env_steps', 0):,} env steps)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
