"""Set a house checkpoint's stop rule (``model.house.stop_gate`` / ``stop_sure``, icrl_ros/models/stop_rule.py).

    python training/stop_rule.py runs/x/checkpoints/final.pt --gate 0.5 --out runs/x/gated.pt
    python training/stop_rule.py checkpoints/house_relic.pt --gate 0 --sure 0 --out /tmp/plain.pt   # rule off

The rule acts where actions are chosen, never in an imitation loss, so it is a deployment setting
like the sampling temperature: the weights are copied unchanged, and evaluation, export and the
node read the rule from the copy's model arguments. PPO fine-tunes a policy with its rule on: its
rollouts act through it and its update scores the same masked / forced logits
(``PPOTrainer.acted_logits``).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

from icrl_ros.models.checkpoint import FORMAT, model_args_from_dict
from icrl_ros.models.config import normalise_model_dict
from icrl_ros.training._cli import fail


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("checkpoint", help="a house checkpoint (.pt) with model.house.object_memory")
    p.add_argument("--gate", type=float, help="stop only while P(goal in view) >= this (0: off); default: kept")
    p.add_argument("--sure", type=float, help="stop when P(goal in view) >= this within --sure-m (0: off); default: kept")
    p.add_argument("--sure-m", type=float, help="metres for --sure; default: kept")
    p.add_argument("--out", required=True, help="where to write the copy (not the input file)")
    args = p.parse_args(argv)
    src, out = Path(args.checkpoint), Path(args.out)
    if not src.is_file():
        fail(f"{src}: no such checkpoint")
    if out.resolve() == src.resolve():
        fail("--out: write a copy, not over the input checkpoint")
    blob = torch.load(src, map_location="cpu", weights_only=False)
    if not isinstance(blob, dict) or blob.get("format") != FORMAT or "model_args" not in blob:
        fail(f"{src}: not a checkpoint of this project (format {FORMAT!r} with model_args)")
    changes = {k: v for k, v in (("stop_gate", args.gate), ("stop_sure", args.sure), ("stop_sure_m", args.sure_m))
               if v is not None}
    if not changes:
        fail("nothing to set: give --gate, --sure and/or --sure-m")
    try:
        new = model_args_from_dict(blob["model_args"]).replace_section("house", **changes)  # validates the rule
    except (TypeError, ValueError) as e:
        fail(f"{src}: {e}")
    blob["model_args"] = new.to_dict()
    if isinstance(blob.get("config"), dict) and isinstance(blob["config"].get("model"), dict):
        model = normalise_model_dict(blob["config"]["model"])
        model["house"] = {**(model.get("house") or {}), **changes}
        blob["config"]["model"] = model
    out.parent.mkdir(parents=True, exist_ok=True)
    torch.save(blob, out)
    rule = ", ".join(f"{k} {getattr(new.house, k)}" for k in ("stop_gate", "stop_sure", "stop_sure_m"))
    print(f"wrote {out}: {rule}")
    return 0


if __name__ == "__main__":
    from icrl_ros.training._cli import run_main

    raise SystemExit(run_main(main))
