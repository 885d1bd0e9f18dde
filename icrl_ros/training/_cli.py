"""Helpers shared by the training-side command-line scripts."""

from __future__ import annotations

import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
"""The checkout (icrl_ros/training/ -> ..): the scripts find checkpoints/, bundles/, config/ there."""


def fail(message: str, code: int = 2) -> None:
    """Print a one-line error that says what to fix and exit non-zero."""
    print(f"error: {message}", file=sys.stderr)
    raise SystemExit(code)


def run_main(main) -> int:
    """``main()``'s exit status; a reader that closed the output early (``| head``) ends it quietly, as ``cat`` does,
    with 141 (SIGPIPE) instead of a traceback."""
    import os

    try:
        return main()
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # the interpreter's last flush writes nowhere
        return 141


def load_init_weights(path: str, policy, map_location="cpu", partial: bool = False) -> None:
    """``--init``: copy a checkpoint's weights into ``policy``, or exit naming the model arguments
    that differ from the config's. ``partial`` (``--init-partial``): the arguments may differ;
    every weight whose name and shape match is copied and the rest keep their fresh values
    (printed), e.g. to add an input or a head to a trained model."""
    from icrl_ros.models import load_checkpoint

    try:
        init, _ = load_checkpoint(path, map_location=map_location)
    except (OSError, RuntimeError, ValueError) as e:
        fail(f"--init {path}: {e}")
    have, want = init.args.to_dict(), policy.args.to_dict()
    diff = sorted(k for k in have.keys() | want.keys() if have.get(k) != want.get(k))
    if diff and not partial:
        fail(f"--init {path}: its model arguments differ from the config's in {diff}; use the config it "
             "was trained with (its config.yaml), or --init-partial to copy only the weights that fit")
    if not partial:
        policy.load_state_dict(init.state_dict())
        return
    mine, theirs = policy.state_dict(), init.state_dict()
    fits = {k: v for k, v in theirs.items() if k in mine and mine[k].shape == v.shape}
    policy.load_state_dict(fits, strict=False)
    fresh = sorted(k for k in mine if k not in fits)
    print(f"--init-partial {path}: arguments differ in {diff}; copied {len(fits)} of {len(mine)} tensors; "
          f"fresh: {fresh or 'none'}; not used: {sorted(k for k in theirs if k not in fits) or 'none'}", flush=True)
