"""Helpers shared by the training-side command-line scripts."""

from __future__ import annotations

import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent


def ensure_repo_on_path() -> None:
    """Let ``python training/x.py`` import ``training.*`` and ``icrl_ros`` from a checkout."""
    root = str(REPO_ROOT)
    if root not in sys.path:
        sys.path.insert(0, root)


def fail(message: str, code: int = 2) -> None:
    """Print a one-line error that says what to fix and exit non-zero."""
    print(f"error: {message}", file=sys.stderr)
    raise SystemExit(code)
