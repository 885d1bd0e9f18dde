"""In-context imitation of a scripted teacher (DAgger), for ReLIC and Memo policies.

    python training/imitate.py --config config/train/dark_key_to_door.yaml --set total_steps=2000000
    python training/train.py --config config/train/dark_key_to_door.yaml --init runs/x/checkpoints/final.pt

Each iteration plays one trial per env with cached-KV stepping, as PPO does; the executed
action is the teacher's with probability ``beta`` (1 at the start, decaying linearly to 0
over ``--mix-fraction`` of the run) and the student's sample otherwise, and every step is
labelled with the teacher's action for the student's own history (DAgger: the student
learns to recover from its own mistakes). The loss is cross-entropy to the teacher's
actions over whole trials (the same sequence forward as PPO's, Memo's random segment
schedule included), plus a value regression on the trial's discounted returns so the
critic is ready for PPO fine-tuning. Checkpoints are the trainer's format, so
``training/evaluate.py``, ``training/export.py`` and ``train.py --init`` take them.

Why: on Dark-Key-To-Door, PPO alone stayed at ~0.09 of the oracle with no rise across
episodes after 3M steps on this machine (BENCHMARKS.md); the teachers are in
:mod:`training.teachers`.
"""

from __future__ import annotations

if __package__ in (None, ""):
    from _cli import ensure_repo_on_path  # type: ignore[no-redef]

    ensure_repo_on_path()

import argparse
import math
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from icrl_ros.models import MemoPolicy, act, build_policy, make_memory, save_checkpoint, segment_schedule
from icrl_ros.sim import make_vec
from training._cli import fail, load_init_weights
from training.config import TrainConfig, config_from_cli
from training.ppo import cosine_lr, next_step_inputs, trial_start_inputs
from training.teachers import make_teacher, observe_teacher


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", required=True, help="YAML file in config/train/ (env, model, seed, run_dir, "
                   "total_steps = the imitation budget in env steps; ppo.rollout_length = trial length, "
                   "ppo.lr / num_minibatches / update_epochs / gamma / trial_returns are used)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a config field")
    p.add_argument("--run-dir", help="output directory (overrides run_dir)")
    p.add_argument("--mix-fraction", type=float, default=0.6,
                   help="fraction of the run over which the teacher's share of executed actions goes 1 -> 0")
    p.add_argument("--teacher", help="scripted teacher (training/teachers.py; default: the env's first)")
    p.add_argument("--vf-coef", type=float, default=0.5, help="weight of the value regression")
    p.add_argument("--replay", type=int, default=1,
                   help="iterations of labelled trials each update trains on (the newest N: DAgger's dataset "
                        "aggregation, bounded); 1 = only the trials just collected")
    p.add_argument("--init", help="start from the weights of a checkpoint (e.g. a shipped checkpoints/house_*.pt), "
                   "with a fresh optimiser and schedule; its model must match the config's")
    p.add_argument("--resume", help="an imitation checkpoint of this run (latest.pt) to continue from: weights, "
                   "optimiser, iteration (the teacher-mixing and learning-rate schedules go on where they were)")
    return p.parse_args(argv)


def discounted(reward: torch.Tensor, done: torch.Tensor, gamma: float, trial_returns: bool) -> torch.Tensor:
    """Discounted return of every step (B, T), to the trial end or (trial_returns=False) the episode end."""
    out = torch.zeros_like(reward)
    acc = torch.zeros_like(reward[:, 0])
    for t in reversed(range(reward.shape[1])):
        if not trial_returns:
            acc = acc * (1.0 - done[:, t])
        acc = reward[:, t] + gamma * acc
        out[:, t] = acc
    return out


class Imitator:
    def __init__(self, policy, env, cfg: TrainConfig, iterations: int, mix_fraction: float, vf_coef: float,
                 teacher: str | None = None, replay: int = 1) -> None:
        self.policy, self.env, self.cfg = policy, env, cfg
        self.teacher = make_teacher(env, teacher)
        self.iterations, self.mix_fraction, self.vf_coef = iterations, mix_fraction, vf_coef
        self.opt = torch.optim.Adam(policy.parameters(), lr=cfg.ppo.lr, eps=1e-5)
        self.keys = [*policy.rollout_spec(), "episode_index"]
        self.it = 0
        self.replay = replay
        self.stored: list[dict] = []  # the newest ``replay`` iterations' labelled trials

    def beta(self) -> float:
        span = max(1.0, self.mix_fraction * self.iterations)
        return max(0.0, 1.0 - self.it / span)

    def lr(self) -> float:
        return cosine_lr(self.cfg.ppo, self.it / max(1, self.iterations - 1))

    @torch.no_grad()
    def collect(self, g: np.random.Generator) -> tuple[dict[str, torch.Tensor], dict[str, float]]:
        env, policy, T = self.env, self.policy, self.cfg.ppo.rollout_length
        a, B = policy.args, env.num_envs
        schedule = segment_schedule(T, a.l_seg, a.seg_jitter) if isinstance(policy, MemoPolicy) else None
        buf = {k: [] for k in (*self.keys, "label", "reward", "done")}
        obs = env.reset_trial()
        self.teacher.reset()
        cur = policy.rollout_inputs(trial_start_inputs(env, obs, a.n_actions, "cpu"))
        mem = make_memory(policy, B, T, schedule=schedule)
        ended = {"success": [], "spl": []}
        beta = self.beta()
        policy.eval()
        for _ in range(T):
            logits, _ = act(policy, cur, mem)
            label = self.teacher.act(np.asarray(obs))
            student = torch.distributions.Categorical(logits=logits.float()).sample().numpy()
            action = np.where(g.random(B) < beta, label, student)
            for k in self.keys:
                buf[k].append(cur[k])
            buf["label"].append(torch.as_tensor(label))
            obs, reward, done, info = env.step(action)
            observe_teacher(self.teacher, info, reward, done, action)
            if isinstance(info, list):  # the house: how the finished episodes went
                for i in np.flatnonzero(done):
                    ended["success"].append(float(info[i]["success"]))
                    ended["spl"].append(float(info[i]["spl"]))
            buf["reward"].append(torch.as_tensor(reward, dtype=torch.float32))
            buf["done"].append(torch.as_tensor(done, dtype=torch.float32))
            cur = policy.rollout_inputs(next_step_inputs(env, obs, torch.as_tensor(action), reward, done, cur, "cpu", info))
        data = {k: torch.stack(v, 1) for k, v in buf.items()}
        data["schedule"] = schedule
        stats = {"beta": beta}
        if hasattr(env, "oracle_trial_return"):
            oracle = env.oracle_trial_return(T)
            stats["trial_return_normalised"] = float((data["reward"].sum(1).numpy() / oracle).mean())
        if ended["success"]:
            stats.update(episodes=len(ended["success"]), success=float(np.mean(ended["success"])),
                         spl=float(np.mean(ended["spl"])))
        return data, stats

    def update(self, data: dict) -> dict[str, float]:
        """``update_epochs`` passes over the aggregated data: this iteration's trials and those of
        the ``replay - 1`` iterations before (DAgger's dataset aggregation, bounded), each pass
        in ``num_minibatches`` minibatches per stored iteration (a minibatch never mixes
        iterations: Memo's segment schedule belongs to one rollout)."""
        cfg, policy = self.cfg.ppo, self.policy
        data = {**data, "return": discounted(data["reward"] * cfg.reward_scale, data["done"], cfg.gamma,
                                             cfg.trial_returns)}
        self.stored.append(data)
        del self.stored[:-self.replay]
        policy.train()
        logs = {"bc_loss": 0.0, "value_loss": 0.0, "agreement": 0.0}
        n = 0
        for _ in range(cfg.update_epochs):
            batches = [(d, mb) for d in self.stored for mb in torch.randperm(d["return"].shape[0]).chunk(cfg.num_minibatches)]
            for j in torch.randperm(len(batches)).tolist():
                data, mb = batches[j]
                ret = data["return"]
                out = policy.forward_sequence({k: data[k][mb] for k in self.keys}, data["schedule"])
                logits, values = out[:2]
                bc = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), data["label"][mb].reshape(-1))
                vl = 0.5 * (values - ret[mb]).pow(2).mean()
                loss = bc + self.vf_coef * vl
                for group in self.opt.param_groups:
                    group["lr"] = self.lr()
                self.opt.zero_grad(set_to_none=True)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(policy.parameters(), cfg.max_grad_norm)
                self.opt.step()
                logs["bc_loss"] += bc.item()
                logs["value_loss"] += vl.item()
                logs["agreement"] += (logits.argmax(-1) == data["label"][mb]).float().mean().item()
                n += 1
        policy.eval()
        self.it += 1
        return {k: v / n for k, v in logs.items()}


def main(argv=None) -> int:
    args = parse_args(argv)
    cfg = config_from_cli(args.config, args.set, args.run_dir)
    if not 0.0 <= args.mix_fraction <= 1.0:
        fail(f"--mix-fraction must be in [0, 1], got {args.mix_fraction}")
    if args.replay < 1:
        fail(f"--replay must be >= 1, got {args.replay}")
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    torch.manual_seed(cfg.seed)
    try:
        env = make_vec(cfg.env.id, cfg.env.num_envs, split="train", seed=cfg.seed, **cfg.env.options)
    except (TypeError, ValueError) as e:
        fail(f"env.options: {e}")
    try:
        policy = build_policy(cfg.model_args(**env.model_fields()), load_pretrained=True)
    except (FileNotFoundError, ValueError) as e:
        fail(str(e))
    steps_per_it = cfg.env.num_envs * cfg.ppo.rollout_length
    iterations = math.ceil(cfg.total_steps / steps_per_it)
    try:
        imitator = Imitator(policy, env, cfg, iterations, args.mix_fraction, args.vf_coef, args.teacher, args.replay)
    except ValueError as e:
        fail(str(e))
    run_dir = Path(cfg.run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "config.yaml").write_text(__import__("yaml").safe_dump(cfg.to_dict(), sort_keys=False))
    g = np.random.default_rng(cfg.seed)
    wall_before = 0.0
    if args.init and args.resume:
        fail("--init and --resume: give one (--resume continues a run, --init starts one from given weights)")
    if args.init:
        load_init_weights(args.init, policy)
        print(f"initialised from {args.init}", flush=True)
    if args.resume:
        blob = torch.load(args.resume, map_location="cpu", weights_only=False)
        if blob.get("trainer") != "imitate" or "optimizer" not in blob:
            fail(f"--resume {args.resume}: not an imitation checkpoint with an optimiser (latest.pt of imitate.py)")
        policy.load_state_dict(blob["state_dict"])
        imitator.opt.load_state_dict(blob["optimizer"])
        imitator.it = int(blob["rollout"])
        wall_before = float(blob.get("wall_s", 0.0))
        g = np.random.default_rng([cfg.seed, imitator.it])
        print(f"resumed {args.resume} at iteration {imitator.it} ({wall_before:.0f} s of training so far)", flush=True)
    print(f"imitating {type(imitator.teacher).__name__} on {env.name}: {iterations} iterations of {steps_per_it:,} steps, run dir {run_dir}",
          flush=True)

    def save(name: str) -> None:
        save_checkpoint(run_dir / "checkpoints" / name, policy, cfg.to_dict(), rollout=imitator.it,
                        env_steps=imitator.it * steps_per_it, trainer="imitate", optimizer=imitator.opt.state_dict(),
                        wall_s=wall_before + time.perf_counter() - t_start)

    t_start = time.perf_counter()
    for i in range(imitator.it, iterations):
        t0 = time.perf_counter()
        data, stats = imitator.collect(g)
        stats.update(imitator.update(data))
        stats["SPS"] = steps_per_it / (time.perf_counter() - t0)
        print(f"iteration {i + 1}/{iterations} steps {(i + 1) * steps_per_it:,} " +
              " ".join(f"{k}={v:.3g}" for k, v in stats.items()), flush=True)
        if (i + 1) % cfg.checkpoint_every == 0:
            save("latest.pt")
    save("latest.pt")
    save("final.pt")
    print(f"done: {iterations * steps_per_it:,} steps in {time.perf_counter() - t_start:.0f}s; "
          f"checkpoint {run_dir / 'checkpoints' / 'final.pt'}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
