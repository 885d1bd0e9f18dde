"""Cross-simulator in-context curve: a house bundle in MiniWorld and in Habitat, through the ROS nodes.

For each ``--seed`` (the bridge seed: it picks the test-split house, as in ``make demo``) this runs
``training/demo_ros.py`` twice, once on the MiniWorld house and once with ``--habitat`` (the same
house exported to a Habitat scene, served from the chroot of ``../shared/habitat``): one trial of
``--episodes`` episodes each, ``agent_node`` on the bundle driving ``sim_bridge_node`` in lockstep over
loopback DDS. The Habitat trial replays the MiniWorld trial's episodes (its starts and goals, through
the bridge's ``replay_episodes``), so the two curves are paired episode by episode; ``--own-draws``
lets each simulator draw its own (MiniWorld's env, Habitat's exported episode set, same task rules).
Then success and SPL per in-context episode, averaged over the trials, side by side:

    .venv/bin/python experiments/habitat_icl.py --seeds 0 1 2 3 4 --episodes 12 --out runs/habitat_icl
    .venv/bin/python experiments/habitat_icl.py --seeds 0 1 2 3 4 --episodes 12 --out runs/habitat_icl --look unseen

``--look unseen`` draws the Habitat houses with room textures and a light no training house has
(``icrl_ros.sim.habitat_mesh.LOOKS``); the MiniWorld trials of the same ``--out`` are reused, so both looks pair
with the same MiniWorld episodes.

The bundle defaults to the agent node's shipped one. Per simulator it prints the per-episode means
and, with 95% CIs over the trials (n = trials that finished), episode 1, the later half of the
episodes and their difference (the in-context rise); ``icl_curve.png`` plots both curves.
"""

from __future__ import annotations


import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from icrl_ros.nodes.shipped import DEFAULT_BUNDLE
from icrl_ros.training._cli import REPO_ROOT
from icrl_ros.training.house_curves import plot, summarise


def mean_ci(x: np.ndarray) -> tuple[float, float]:
    """Mean and 95% CI half-width (normal approximation) over trials."""
    x = np.asarray(x, dtype=float)
    if len(x) < 2:
        return float(x.mean()) if len(x) else float("nan"), float("nan")
    return float(x.mean()), float(1.96 * x.std(ddof=1) / np.sqrt(len(x)))


def run_trial(sim: str, seed: int, a: argparse.Namespace, out: Path) -> dict | None:
    run_dir = out / (f"{sim}_seed{seed}" if sim == "miniworld" or a.look == "miniworld" else f"{sim}_{a.look}_seed{seed}")
    replay = None
    if sim == "habitat" and not a.own_draws:
        replay = out / f"miniworld_seed{seed}" / "episodes.json"
        if not replay.exists():
            print(f"{sim:9s} seed {seed}: no MiniWorld trial to replay; left out", flush=True)
            return None
    if (run_dir / "episodes.json").exists():  # resume: a finished trial is not run again
        done = json.loads((run_dir / "episodes.json").read_text())
        if done.get("replay_episodes") == (str(replay) if replay else None):
            return done
    cmd = [sys.executable, "training/demo_ros.py", "--bundle", a.bundle, "--episodes", str(a.episodes),
           "--max-steps", str(a.max_steps), "--seed", str(seed), "--sample-seed", str(seed), "--out", str(run_dir),
           "--timeout", str(a.timeout)]
    if sim == "habitat":
        cmd += ["--habitat", "--habitat-look", a.look]
    if replay is not None:
        cmd += ["--replay-episodes", str(replay)]
    t0 = time.monotonic()
    r = subprocess.run(cmd, cwd=REPO_ROOT, env={**os.environ, "OMP_NUM_THREADS": "1"}, capture_output=True, text=True)
    (out / f"{sim}_seed{seed}.log").write_text(r.stdout + r.stderr)
    if r.returncode != 0:  # reported and left out of the curve, not hidden: the summary counts them
        print(f"{sim:9s} seed {seed}: FAILED ({r.returncode}) after {time.monotonic() - t0:.0f} s; "
              f"log {out / f'{sim}_seed{seed}.log'}, node logs {run_dir / 'logs'}", flush=True)
        return None
    print(f"{sim:9s} seed {seed}: {time.monotonic() - t0:.0f} s", flush=True)
    return json.loads((run_dir / "episodes.json").read_text())


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--bundle", default=str(REPO_ROOT / "bundles" / DEFAULT_BUNDLE),
                   help="export bundle directory (default: the agent node's shipped default)")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    p.add_argument("--episodes", type=int, default=12)
    p.add_argument("--max-steps", type=int, default=200)
    p.add_argument("--timeout", type=float, default=300.0, help="per trial (a 12-episode trial takes 15-40 s here)")
    p.add_argument("--out", default=str(REPO_ROOT / "runs" / "habitat_icl"))
    p.add_argument("--look", default="miniworld", choices=("miniworld", "unseen"),
                   help="how the Habitat houses are drawn: MiniWorld's textures and light, or textures and a light "
                        "no training house has (a proxy for a camera the encoder never saw); MiniWorld's runs are "
                        "shared between looks in one --out")
    p.add_argument("--own-draws", action="store_true",
                   help="each simulator draws its own starts and goals (default: Habitat replays MiniWorld's)")
    a = p.parse_args(argv)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    curves: dict[str, dict] = {}
    failed: dict[str, list[int]] = {}
    matrices: dict[str, dict[str, np.ndarray]] = {}
    for sim in ("miniworld", "habitat"):
        runs = {s: run_trial(sim, s, a, out) for s in a.seeds}
        failed[sim] = [s for s, t in runs.items() if t is None]
        trials = [t for t in runs.values() if t is not None]
        success = np.array([[float(e["success"]) for e in t["episodes"]] for t in trials])  # (trials, episodes)
        spl = np.array([[float(e["spl"]) for e in t["episodes"]] for t in trials])
        steps = np.array([[float(e["steps"]) for e in t["episodes"]] for t in trials])
        matrices[sim] = {"success": success, "spl": spl, "steps": steps}
        curves[sim] = {"houses": [t["house_seed"] for t in trials], "failed_seeds": failed[sim],
                       "success": success.mean(0).tolist(),
                       "spl": spl.mean(0).tolist(), "steps": steps.mean(0).tolist(),
                       "success_all": float(success.mean()), "spl_all": float(spl.mean()),
                       "success_matrix": success.tolist(), "spl_matrix": spl.tolist()}
        later = slice(a.episodes // 2, a.episodes)
        for name, m in (("success", success), ("spl", spl)):
            curves[sim][f"{name}_ep1"] = mean_ci(m[:, 0])
            curves[sim][f"{name}_later"] = mean_ci(m[:, later].mean(1))
            curves[sim][f"{name}_rise"] = mean_ci(m[:, later].mean(1) - m[:, 0])
    if not a.own_draws:  # paired: the same houses, starts and goals; differences per house
        kept = {sim: [s for s in a.seeds if s not in failed[sim]] for sim in failed}  # the matrices' rows
        both = [s for s in kept["habitat"] if s in kept["miniworld"]]
        mw, hb = ([kept[sim].index(s) for s in both] for sim in ("miniworld", "habitat"))
        for name in ("success", "spl"):
            d = matrices["habitat"][name][hb].mean(1) - matrices["miniworld"][name][mw].mean(1)
            curves[f"paired_{name}_diff"] = mean_ci(d)
    (out / f"curves{'' if a.look == 'miniworld' else '_' + a.look}.json").write_text(json.dumps({
        "bundle": a.bundle, "seeds": a.seeds, "episodes": a.episodes, "look": a.look,
                                                 "max_steps": a.max_steps, "paired": not a.own_draws,
                                                 "curves": curves}, indent=1))
    tag = "" if a.look == "miniworld" else "_" + a.look
    hab = "Habitat" if a.look == "miniworld" else f"Habitat, {a.look} look"
    plot({name: summarise(matrices[sim]) for sim, name in (("miniworld", "MiniWorld"), ("habitat", hab))},
         out / f"icl_curve{tag}.png", f"{Path(a.bundle).name} through the ROS nodes in the same {len(a.seeds)} test houses; "
                                + ("each simulator draws its own starts and goals" if a.own_draws else
                                   "Habitat replays MiniWorld's starts and goals"))
    print(f"\n{'episode':>7} | {'MiniWorld success':>17} {'SPL':>5} {'steps':>5} | {'Habitat success':>15} {'SPL':>5} "
          f"{'steps':>5}")
    m, h = curves["miniworld"], curves["habitat"]
    for k in range(a.episodes):
        print(f"{k + 1:>7} | {m['success'][k]:>17.2f} {m['spl'][k]:>5.2f} {m['steps'][k]:>5.0f} | "
              f"{h['success'][k]:>15.2f} {h['spl'][k]:>5.2f} {h['steps'][k]:>5.0f}")
    print(f"{'all':>7} | {m['success_all']:>17.3f} {m['spl_all']:>5.3f} {'':>5} | {h['success_all']:>15.3f} "
          f"{h['spl_all']:>5.3f}")
    lo = a.episodes // 2 + 1
    for sim, c in (("MiniWorld", m), ("Habitat", h)):
        print(f"{sim:9s} n={len(c['houses'])}: " + "; ".join(
            f"{name} ep 1 {c[name + '_ep1'][0]:.3f}+-{c[name + '_ep1'][1]:.3f}, eps {lo}-{a.episodes} "
            f"{c[name + '_later'][0]:.3f}+-{c[name + '_later'][1]:.3f}, rise {c[name + '_rise'][0]:+.3f}+-"
            f"{c[name + '_rise'][1]:.3f}" for name in ("success", "spl")))
    if not a.own_draws:
        for name in ("success", "spl"):
            print(f"paired over {len(both)} houses (same starts and goals), Habitat - MiniWorld {name} over all "
                  f"episodes: {curves[f'paired_{name}_diff'][0]:+.3f} +- {curves[f'paired_{name}_diff'][1]:.3f}")
    print(f"houses {m['houses']} (test split); trials: MiniWorld {len(m['houses'])}, Habitat {len(h['houses'])}; "
          f"failed seeds: {failed}; {out / f'curves{tag}.json'}")


if __name__ == "__main__":
    main()
