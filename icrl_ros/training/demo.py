"""`make demo-darkroom`: the shipped Darkroom ReLIC checkpoint learning in context.

(`make demo` is the ROS 2 house demo, ``training/demo_ros.py``.)

Evaluates ``checkpoints/darkroom_relic.pt`` on the 20 held-out goals for 40 in-context
episodes (sink + sliding-window memory of the training context), prints the per-episode
table and writes ``demo_out/icl_curve.png`` and ``demo_out/eval.json``; then runs a short
PPO training to show the trainer end to end.
"""

from __future__ import annotations


import argparse

from icrl_ros.training import evaluate, train
from icrl_ros.training._cli import REPO_ROOT, fail

CHECKPOINT = REPO_ROOT / "checkpoints" / "darkroom_relic.pt"


def main(argv=None) -> int:
    argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter).parse_args(argv)
    if not CHECKPOINT.is_file():
        fail(f"{CHECKPOINT} is missing (it ships with the repository: restore it with `git checkout -- "
             "checkpoints/`), or train one with `make train-darkroom` and ship it with "
             "`training/ship_checkpoint.py runs/darkroom/checkpoints/final.pt checkpoints/darkroom_relic.pt`")
    print(f"== in-context learning of {CHECKPOINT.name} on 20 held-out Darkroom goals, 40 episodes each ==", flush=True)
    evaluate.main([str(CHECKPOINT), "--label", "relic", "--trials", "100", "--out", "demo_out"])
    print("\n== a short PPO run (partial updates, cached-KV rollouts) ==", flush=True)
    train.main(["--config", "config/train/darkroom.yaml", "--set", "total_steps=131072",
                "--run-dir", "demo_out/train_run"])
    return 0


if __name__ == "__main__":
    from icrl_ros.training._cli import run_main

    raise SystemExit(run_main(main))
