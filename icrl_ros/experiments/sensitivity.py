"""How far one optimiser-sized step moves a grid-world policy: the KL between its action
distributions before and after every weight moves by +-``step`` (random signs: the size of an
Adam step at learning rate ``step``), over sampled trials of the policy's own env.

For HCAM it also reports, per step, whether the move changed the set of chunks a query reads
(top-k of the summary relevance) and the KL on those steps and on the others: a chunk that swaps
into the top k brings its read with it, so with the paper's softmax weights the policy jumps
there, which PPO's clipped ratio sees as a large move from a tiny weight change. Writes nothing;
prints one line per checkpoint and step size::

    python experiments/sensitivity.py checkpoints/darkroom_relic.pt CKPT ... --steps 1e-5,1e-4,3e-4
    python experiments/sensitivity.py CKPT --hcam-weights continuous   # the same weights read continuously
"""

from __future__ import annotations

import argparse
import copy

import torch
import torch.nn.functional as F

from icrl_ros.families.hcam.model import ChunkMemoryAttention
from icrl_ros.models import load_checkpoint
from icrl_ros.sim import make_vec
from icrl_ros.training._cli import fail
from icrl_ros.training.evaluate import held_out_tasks, run_trials


def record_trials(policy, env_id: str, trials: int, seed: int, split: str) -> dict[str, torch.Tensor]:
    """The inputs (B, T) of ``trials`` whole trials the policy acts in (sampled, T = 1), as
    ``evaluate.py`` runs them."""
    env = make_vec(env_id, trials, split=split, seed=seed)
    held_out_tasks(env, trials, seed)
    rec: list[dict[str, torch.Tensor]] = []
    run_trials(policy, env, env.trial_steps, seed=seed, record=rec)
    return {k: torch.stack([r[k] for r in rec], 1) for k in rec[0]}


def forward_with_topk(policy, inp: dict[str, torch.Tensor]) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """Log-probabilities (B, T, A) of a whole-trial forward and, for HCAM, the sorted chunk
    indices (B, T, k) each memory block selected (in call order; empty for other kinds)."""
    sets: list[torch.Tensor] = []
    blocks = [m for m in policy.modules() if isinstance(m, ChunkMemoryAttention)]

    def keep(out):
        sets.append(out[0].sort(-1).values)
        return out

    for m in blocks:  # an instance attribute over the class's method, removed again below
        m.select = lambda *a, sel=m.select: keep(sel(*a))
    try:
        logits = policy.forward_sequence(inp)[0]
    finally:
        for m in blocks:
            del m.select
    return F.log_softmax(logits.float(), -1), sets


@torch.no_grad()
def measure(policy, inp: dict[str, torch.Tensor], step: float, repeats: int) -> dict:
    """Mean KL(before || after) per step over ``repeats`` random moves; HCAM: split by top-k flips."""
    logp0, sets0 = forward_with_topk(policy, inp)
    kls, flips = [], []
    for r in range(repeats):
        moved = copy.deepcopy(policy)
        g = torch.Generator().manual_seed(r)
        for p in moved.parameters():
            p.add_(step * torch.sign(torch.randn(p.shape, generator=g)))
        logp1, sets1 = forward_with_topk(moved, inp)
        kls.append((logp0.exp() * (logp0 - logp1)).sum(-1))
        if sets0:
            flips.append(torch.stack([(a != b).any(-1) for a, b in zip(sets0, sets1)]).any(0))
    kl = torch.stack(kls)
    out = {"kl": kl.mean().item(), "kl_p99": kl.flatten().quantile(0.99).item()}
    if flips:
        f = torch.stack(flips)
        out.update(flipped=f.float().mean().item(), kl_flipped=kl[f].mean().item() if f.any() else float("nan"),
                   kl_other=kl[~f].mean().item())
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("checkpoints", nargs="+")
    p.add_argument("--steps", default="1e-5,1e-4,3e-4", help="comma list of per-weight step sizes")
    p.add_argument("--trials", type=int, default=16)
    p.add_argument("--repeats", type=int, default=3, help="random moves per step size")
    p.add_argument("--seed", type=int, default=5)
    p.add_argument("--split", default="train", choices=("train", "test"))
    p.add_argument("--hcam-weights", choices=("softmax", "continuous"), default=None,
                   help="read an HCAM checkpoint's chunks with these weights instead of its own")
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args(argv)
    try:
        steps = [float(s) for s in args.steps.split(",")]
    except ValueError:
        fail(f"--steps: {args.steps!r} must be a comma list of numbers, e.g. 1e-5,1e-4")
    torch.set_num_threads(args.threads)
    print(f"{'checkpoint':40s} {'step':>7s} {'KL mean':>10s} {'KL p99':>10s} {'top-k flip':>10s} "
          f"{'KL flipped':>10s} {'KL other':>10s}")
    for path in args.checkpoints:
        policy, blob = load_checkpoint(path)
        policy.eval()
        if args.hcam_weights:
            if policy.args.kind != "hcam":
                fail(f"--hcam-weights: {path} is a {policy.args.kind} policy, not hcam")
            for m in policy.modules():
                if isinstance(m, ChunkMemoryAttention):
                    m.continuous = args.hcam_weights == "continuous"
        env_id = blob["config"]["env"]["id"]
        if "House" in env_id:
            fail(f"{path}: a house policy; this measures grid-world policies only")
        inp = record_trials(policy, env_id, args.trials, args.seed, args.split)
        for s in steps:
            m = measure(policy, inp, s, args.repeats)
            hc = (f"{m['flipped']:10.4f} {m['kl_flipped']:10.3g} {m['kl_other']:10.3g}" if "flipped" in m
                  else f"{'-':>10s} {'-':>10s} {'-':>10s}")
            print(f"{path[-40:]:40s} {s:7.0e} {m['kl']:10.3g} {m['kl_p99']:10.3g} {hc}", flush=True)
    return 0


if __name__ == "__main__":
    from icrl_ros.training._cli import run_main

    raise SystemExit(run_main(main))
