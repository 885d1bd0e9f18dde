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
critic is ready for PPO fine-tuning. With ``--teacher-checkpoint`` a trained policy is the teacher
(:class:`~icrl_ros.training.teachers.PolicyTeacher`): the labels are its action probabilities on the
student's history and the loss the cross-entropy to them. Checkpoints are the trainer's format, so
``training/evaluate.py``, ``training/export.py`` and ``train.py --init`` take them.

Offline phase (cheap where env steps are dear, as on the house: ~100-300 env steps/s against
~3 gradient steps/s over 4 x 1,024-step trials): ``--save-trials DIR`` writes every
iteration's labelled trials (cached encoder features, not images), typically collected with
``--beta 1 --noise 0.2`` (the teacher acts, a random movement action replaces its choice
with probability 0.2 so the data hold recoveries); ``--offline DIR --updates N`` then takes
N gradient steps on the saved trials (held-out files report agreement), and a short online
DAgger run with ``--init`` fixes the student's own state distribution.

Why: on Dark-Key-To-Door, PPO alone stayed at ~0.09 of the oracle with no rise across
episodes after 3M steps on a 2-core CPU; the teachers are in
:mod:`icrl_ros.training.teachers`.
"""

from __future__ import annotations


import argparse
import math
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from icrl_ros.families import family_of
from icrl_ros.families.memo.model import segment_schedule
from icrl_ros.models import build_policy, make_memory, save_checkpoint
from icrl_ros.models.encoders import OBJECT_SCALE_M
from icrl_ros.runtime.control import ControlStep
from icrl_ros.sim import make_vec
from icrl_ros.training._cli import fail, load_init_weights
from icrl_ros.training.config import TrainConfig, config_from_cli
from icrl_ros.training.ppo import cosine_lr, next_step_inputs, select_trainable, trial_start_inputs
from icrl_ros.training.teachers import PolicyTeacher, RouteFollower, make_teacher, observe_teacher


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", required=True, help="YAML file in config/train/ (env, model, seed, run_dir, "
                   "total_steps = the imitation budget in env steps; ppo.rollout_length = trial length, "
                   "ppo.lr / num_minibatches / update_epochs / gamma / trial_returns are used)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a config field")
    p.add_argument("--run-dir", help="output directory (overrides run_dir)")
    p.add_argument("--mix-fraction", type=float, default=0.6,
                   help="fraction of the run over which the teacher's share of executed actions goes 1 -> 0")
    p.add_argument("--teacher", help="scripted teacher (training/teachers.py; default: the env's first). The house's "
                   "'route' (a model with model.house.route_memory, env.options.teacher=memory): on steps where the "
                   "policy's route memory has a way to the goal, a follower of its waypoint that senses free "
                   "headings (in the env workers); elsewhere the env's teacher. Reports route_label_share. "
                   "'frontier' (model.house.frontier_memory): as 'route', and where neither the route nor the env's "
                   "teacher knows the goal, the same follower toward the policy's frontier waypoint")
    p.add_argument("--teacher-checkpoint", metavar="PATH",
                   help="a trained policy's checkpoint as the teacher instead of a scripted one (policy distillation): "
                        "it steps on the student's inputs with a memory of its own; the loss is cross-entropy to its "
                        "action probabilities; its model must read the student's inputs")
    p.add_argument("--vf-coef", type=float, default=0.5, help="weight of the value regression")
    p.add_argument("--aux-coef", type=float, default=0.0,
                   help="weight of the memory_aux loss (model.house.memory_aux): predict whether the goal was seen "
                        "earlier in the trial and where it is now, from the heads' own sightings")
    p.add_argument("--hcam-recon", action="store_true",
                   help="HCAM: add its input-reconstruction loss (model.hcam_recon_weight x the loss), as PPO "
                        "does; reported as aux_loss. Off by default: the shipped Darkroom HCAM was imitated without")
    p.add_argument("--replay", type=int, default=1,
                   help="iterations of labelled trials each update trains on (the newest N: DAgger's dataset "
                        "aggregation, bounded); 1 = only the trials just collected")
    p.add_argument("--init", help="start from the weights of a checkpoint (e.g. a shipped checkpoints/house_*.pt), "
                   "with a fresh optimiser and schedule; its model must match the config's")
    p.add_argument("--init-partial", action="store_true",
                   help="with --init: the checkpoint may differ from the config; copy the weights whose names and "
                        "shapes match (printed), keep the rest fresh")
    p.add_argument("--beta", type=float, help="a constant teacher share of executed actions instead of the 1 -> 0 schedule")
    p.add_argument("--noise", type=float, default=0.0,
                   help="probability that a teacher-chosen action is replaced by a random one of --noise-actions")
    p.add_argument("--noise-actions", default="",
                   help="comma-separated action indices --noise draws from (default: all; the house: 1,2,3 = no stop)")
    p.add_argument("--skill-epochs", type=int, default=200,
                   help="with --set ppo.train_only=[route_skill] (a model with model.house.route_skill): the head "
                        "trains on the held network's logits, cached once per iteration, this many passes over the "
                        "stored route steps per iteration (each pass in ppo.num_minibatches minibatches)")
    p.add_argument("--route-steps-only", action="store_true",
                   help="with --teacher route: the imitation loss counts only the steps labelled from the policy's "
                        "route input (the rest are acted on but not learned from); pair with --set "
                        "ppo.train_only=[encoder.route.weight] to teach a shipped policy its route input alone")
    p.add_argument("--save-trials", metavar="DIR", help="write every iteration's labelled trials to DIR/trials_NNNN.pt")
    p.add_argument("--offline", metavar="DIR", help="train on the trials saved in DIR instead of collecting "
                   "(--updates gradient steps; the newest --val-files files are held out)")
    p.add_argument("--updates", type=int, default=2000,
                   help="gradient steps of --offline training; with --pool, gradient steps per iteration")
    p.add_argument("--pool", metavar="DIR", help="online DAgger with unbounded aggregation: the trials saved in DIR "
                   "plus every iteration collected in this run form the dataset; each iteration takes --updates "
                   "steps on minibatches half from the trials just collected, half from the rest; the same DIR as "
                   "--save-trials starts from an empty pool; on --resume, the run's own iterations saved under "
                   "--save-trials rejoin the pool")
    p.add_argument("--val-files", type=int, default=1, help="--offline: trial files held out for validation")
    p.add_argument("--resume", help="an imitation checkpoint of this run (latest.pt) to continue from: weights, "
                   "optimiser, iteration (the teacher-mixing and learning-rate schedules go on where they were)")
    return p.parse_args(argv)


def concat_trials(trials: list[dict], keys) -> dict[str, torch.Tensor]:
    """Saved iterations' trials -> one (N, T, ...) tensor per key."""
    return {k: torch.cat([t[k] for t in trials]) for k in keys}


SIGHTING_P = 0.8
"""A category counts as seen when the heads give P(in view) above this: on 1,511 test-house
frames the implied position was within 1.5 m of a true instance for 65% of sightings at 0.5
and 84% at 0.8 (false positives of P(in view) are the rest)."""
AUX_KEYS = ("aux_seen", "aux_vec", "aux_earlier")
METRICS = ("bc_loss", "value_loss", "agreement", "aux_loss")


@torch.no_grad()
def remembered_goal(heads, data: dict, within_episode: bool = False) -> dict[str, torch.Tensor]:
    """Where the goal is, as far as the student's own inputs tell: per step, whether the frozen
    heads saw the goal category (P(in view) > ``SIGHTING_P``) at this or an earlier step of the trial, and
    the robot-frame (forward, left) offset, in ``OBJECT_SCALE_M`` units, of the position that
    sighting implies (the nearest sighting so far; the latest among equals). ``aux_earlier``:
    that sighting was in an earlier episode (what only memory can give). ``within_episode``
    (a model without inter-episode attention, ``model.iea: false``): only this episode's
    sightings count, as only they are in its context."""
    odom, goal, ep = data["odom"].float(), data["goal"].long(), data["episode_index"].long()
    p, xy, dist = heads.object_estimates(data["rgb_feat"].float(), odom)  # (B,T,C), (B,T,C,2), (B,T,C)
    B, T, C = p.shape
    step = torch.arange(T, dtype=torch.float32).view(1, T, 1)
    quality = torch.where(p > SIGHTING_P, -dist + 1e-4 * step, torch.tensor(-math.inf))
    if within_episode:  # any sighting of a later episode outranks every earlier one (distances are < 1e4 m)
        quality = quality + 1e4 * ep[..., None].float()
    best, idx = quality.cummax(1)
    g = goal[..., None]
    at = idx.gather(2, g).squeeze(-1)
    have = best.gather(2, g).squeeze(-1) > -math.inf
    if within_episode:
        have = have & (ep.gather(1, at) == ep)
    est = xy.gather(1, idx[..., None].expand(B, T, C, 2)).gather(2, g[..., None].expand(B, T, 1, 2)).squeeze(2)
    d, yaw = est - odom[..., :2], odom[..., 2]
    vec = torch.stack([yaw.cos() * d[..., 0] + yaw.sin() * d[..., 1], -yaw.sin() * d[..., 0] + yaw.cos() * d[..., 1]], -1)
    return {"aux_seen": have.float(), "aux_vec": (vec / OBJECT_SCALE_M).clamp(-3, 3),
            "aux_earlier": have & (ep.gather(1, at) < ep)}


def aux_loss(out: torch.Tensor, seen: torch.Tensor, vec: torch.Tensor) -> torch.Tensor:
    """memory_aux head output (B, T, 3) against :func:`remembered_goal`'s targets: binary
    cross-entropy on "seen", smooth L1 on the offset where it was seen."""
    bce = F.binary_cross_entropy_with_logits(out[..., 0].float(), seen)
    l1 = (F.smooth_l1_loss(out[..., 1:].float(), vec, reduction="none").sum(-1) * seen).sum() / seen.sum().clamp(min=1)
    return bce + l1


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
                 teacher: str | None = None, replay: int = 1, beta: float | None = None, noise: float = 0.0,
                 noise_actions: tuple[int, ...] = (), aux_coef: float = 0.0, hcam_recon: bool = False,
                 route_steps_only: bool = False, skill_epochs: int = 200, teacher_checkpoint: str | None = None) -> None:
        self.policy, self.env, self.cfg = policy, env, cfg
        if teacher_checkpoint and env is not None:
            self.teacher = PolicyTeacher(teacher_checkpoint, env.num_envs, cfg.ppo.rollout_length, policy)
        else:
            self.teacher = make_teacher(env, teacher, policy) if env is not None else None
        self.reads_inputs = getattr(self.teacher, "reads_inputs", False)  # labels from the policy's inputs
        self.routes = isinstance(self.teacher, RouteFollower)
        if route_steps_only and env is not None and not self.routes:
            raise ValueError("--route-steps-only needs --teacher route (the steps it labels from the route memory)")
        self.route_steps_only = route_steps_only
        self.fixed_beta, self.noise = beta, noise
        self.noise_actions = np.asarray(noise_actions or range(policy.args.n_actions))
        self.iterations, self.mix_fraction, self.vf_coef = iterations, mix_fraction, vf_coef
        self.aux_coef, self.hcam_recon = aux_coef, hcam_recon
        if aux_coef and getattr(policy, "memory_aux", None) is None:
            raise ValueError("--aux-coef needs a model with memory_aux: true (ReLIC)")
        if hcam_recon and not hasattr(policy, "recon_loss"):
            raise ValueError("--hcam-recon needs an HCAM model (model.kind: hcam)")
        self.aux_weight = policy.args.hcam_recon_weight if hcam_recon else aux_coef
        self.heads = getattr(policy.encoder, "heads", None)  # the frozen label heads, when inputs
        self.params = select_trainable(policy, cfg.ppo.train_only)
        self.opt = torch.optim.Adam(self.params, lr=cfg.ppo.lr, eps=1e-5)
        # only the route- / frontier-following heads train: the held network's logits are cached once per collected
        # trial and the heads fit on top of them (skill_epochs passes over their steps), no sequence model per step
        names = [n for n, p in policy.named_parameters() if p.requires_grad]
        self.skill_only = bool(names) and all(n.startswith(("route_skill.", "frontier_skill.")) for n in names)
        self.skill_epochs = skill_epochs
        self.keys = [*policy.rollout_spec(), "episode_index"]
        self.it = 0
        self.replay = replay
        self.stored: list[dict] = []  # the newest ``replay`` iterations' labelled trials

    def beta(self) -> float:
        if self.fixed_beta is not None:
            return self.fixed_beta
        span = max(1.0, self.mix_fraction * self.iterations)
        return max(0.0, 1.0 - self.it / span)

    def lr(self) -> float:
        return cosine_lr(self.cfg.ppo, self.it / max(1, self.iterations - 1))

    @torch.no_grad()
    def collect(self, g: np.random.Generator) -> tuple[dict[str, torch.Tensor], dict[str, float]]:
        env, policy, T = self.env, self.policy, self.cfg.ppo.rollout_length
        a, B = policy.args, env.num_envs
        schedule = segment_schedule(T, a.l_seg, a.seg_jitter) if family_of(policy).segments else None
        soft = isinstance(self.teacher, PolicyTeacher)  # its action probabilities are the labels
        buf = {k: [] for k in (*self.keys, "label", "label_mask", "reward", "done", *(("soft",) if soft else ()))}
        obs = env.reset_trial()
        self.teacher.reset()
        cur = policy.rollout_inputs(trial_start_inputs(env, obs, a.n_actions, "cpu"))
        mem = make_memory(policy, B, T, schedule=schedule)
        step = ControlStep.live(policy, mem)
        ended = {"success": [], "spl": []}
        routed = []
        beta = self.beta()
        policy.eval()
        for _ in range(T):
            logits, _ = step(cur)
            # the route teacher reads cur["route"], which this step's route memory wrote
            label = self.teacher.act(cur if self.reads_inputs else np.asarray(obs))
            counted = np.ones(B, bool)
            if soft:
                buf["soft"].append(self.teacher.probs)
            if self.routes:
                on_route = self.teacher.goal_known()
                routed.append(float(on_route.mean()))
                if self.route_steps_only:
                    counted = on_route
            student = torch.distributions.Categorical(logits=logits.float()).sample().numpy()
            teacher_acts = g.random(B) < beta
            action = np.where(teacher_acts, label, student)
            if self.noise:
                noisy = teacher_acts & (g.random(B) < self.noise)
                action = np.where(noisy, g.choice(self.noise_actions, B), action)
            for k in self.keys:
                buf[k].append(cur[k])
            buf["label"].append(torch.as_tensor(label))
            buf["label_mask"].append(torch.as_tensor(counted, dtype=torch.float32))
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
        if routed:
            stats["route_label_share"] = float(np.mean(routed))
        if hasattr(env, "oracle_trial_return"):
            oracle = env.oracle_trial_return(T)
            stats["trial_return_normalised"] = float((data["reward"].sum(1).numpy() / oracle).mean())
        if ended["success"]:
            stats.update(episodes=len(ended["success"]), success=float(np.mean(ended["success"])),
                         spl=float(np.mean(ended["spl"])))
        return data, stats

    def with_returns(self, data: dict) -> dict:
        """Adds the discounted returns and, for a model with the frozen heads, the remembered-goal targets."""
        cfg = self.cfg.ppo
        out = {**data, "return": discounted(data["reward"] * cfg.reward_scale, data["done"], cfg.gamma,
                                            cfg.trial_returns)}
        if self.heads is not None and "rgb_feat" in data:
            out.update(remembered_goal(self.heads, data, within_episode=not self.policy.args.iea))
        return out

    def data_keys(self, data: dict) -> tuple[str, ...]:
        return (*self.keys, "label", "return", *(k for k in (*AUX_KEYS, "label_mask", "soft") if k in data))

    def losses(self, data: dict, mb: torch.Tensor, schedule) -> tuple[torch.Tensor, ...]:
        """Cross-entropy to the teacher, value regression, agreement and the auxiliary loss (memory_aux with
        ``--aux-coef``, HCAM's unweighted input reconstruction with ``--hcam-recon``, else 0) of trials ``mb``."""
        inp = {k: data[k][mb] for k in self.keys}
        out = self.policy.forward_sequence(inp, schedule, aux=True) if self.aux_coef else \
            self.policy.forward_sequence(inp, schedule)
        logits, values = out[:2]
        label = data["label"][mb]
        # the steps whose labels count (--route-steps-only; trials saved before it have no mask: all)
        mask = data["label_mask"][mb] if "label_mask" in data else torch.ones(label.shape)
        n = mask.sum().clamp(min=1)
        if "soft" in data:  # a policy teacher: cross-entropy to its action probabilities, agreement with its mode
            soft = data["soft"][mb]
            ce = -(soft * F.log_softmax(logits.float(), -1)).sum(-1).reshape(-1)
            label = soft.argmax(-1)
        else:
            ce = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), label.reshape(-1), reduction="none")
        bc = (ce * mask.reshape(-1)).sum() / n
        vl = 0.5 * (values - data["return"][mb]).pow(2).mean()
        if self.hcam_recon:
            aux = self.policy.recon_loss(inp, out[4]["hidden"])
        elif self.aux_coef:
            aux = aux_loss(out[4], data["aux_seen"][mb], data["aux_vec"][mb])
        else:
            aux = bc.new_zeros(())
        return bc, vl, ((logits.argmax(-1) == label).float() * mask).sum() / n, aux

    def step(self, data: dict, mb: torch.Tensor, schedule, lr: float) -> np.ndarray:
        """One gradient step on trials ``mb`` of ``data``; the ``METRICS``."""
        bc, vl, agree, aux = self.losses(data, mb, schedule)
        for group in self.opt.param_groups:
            group["lr"] = lr
        self.opt.zero_grad(set_to_none=True)
        (bc + self.vf_coef * vl + self.aux_weight * aux).backward()
        torch.nn.utils.clip_grad_norm_(self.params, self.cfg.ppo.max_grad_norm)
        self.opt.step()
        return np.array([bc.item(), vl.item(), agree.item(), aux.item()])

    def update(self, data: dict) -> dict[str, float]:
        """``update_epochs`` passes over the aggregated data: this iteration's trials and those of
        the ``replay - 1`` iterations before (DAgger's dataset aggregation, bounded), each pass
        in ``num_minibatches`` minibatches per stored iteration (a minibatch never mixes
        iterations: Memo's segment schedule belongs to one rollout)."""
        cfg, policy = self.cfg.ppo, self.policy
        self.stored.append(self.with_returns(data))
        del self.stored[:-self.replay]
        if self.skill_only:
            return self.update_skill()
        policy.train()
        totals = np.zeros(len(METRICS))
        n = 0
        for _ in range(cfg.update_epochs):
            batches = [(d, mb) for d in self.stored for mb in torch.randperm(d["return"].shape[0]).chunk(cfg.num_minibatches)]
            for j in torch.randperm(len(batches)).tolist():
                d, mb = batches[j]
                totals += self.step(d, mb, d["schedule"], self.lr())
                n += 1
        policy.eval()
        self.it += 1
        return dict(zip(METRICS, totals / n))

    @torch.no_grad()
    def skill_rows(self, d: dict) -> dict[str, torch.Tensor]:
        """The steps of stored iteration ``d`` where a fixed head acts (the route's or the frontier's "found" entry
        on) and the label mask counts them: the held network's logits without the heads (computed once per
        iteration and kept), the heads' inputs, the labels."""
        policy = self.policy
        head = policy.extra_head()
        if "skill_base" not in d:
            policy.eval()
            base = []
            for mb in torch.arange(d["label"].shape[0]).chunk(self.cfg.ppo.num_minibatches):
                inp = {k: d[k][mb] for k in self.keys}
                logits = policy.forward_sequence(inp, d["schedule"])[0]
                base.append(logits - head(*(inp[n] for n in head.names)))
            d["skill_base"] = torch.cat(base)
        on = torch.zeros(d["label"].shape, dtype=torch.bool)
        for name in ("route", "frontier"):
            if name in d and name in head.names:
                on |= d[name][..., 0] > 0
        if "label_mask" in d:
            on &= d["label_mask"] > 0
        return {"base": d["skill_base"][on], "label": d["label"][on], "inputs": [d[n][on].float() for n in head.names]}

    def update_skill(self) -> dict[str, float]:
        """``skill_epochs`` passes, in ``num_minibatches`` minibatches, over the fixed heads' steps of the stored
        iterations: cross-entropy of (held logits + heads) to the labels. Only the heads have gradients."""
        head = self.policy.extra_head()
        rows = [self.skill_rows(d) for d in self.stored]
        base = torch.cat([r["base"] for r in rows])
        label = torch.cat([r["label"] for r in rows])
        inputs = [torch.cat(x) for x in zip(*(r["inputs"] for r in rows))]
        totals, n = np.zeros(len(METRICS)), 0
        for group in self.opt.param_groups:
            group["lr"] = self.lr()
        head.train()
        for _ in range(self.skill_epochs if len(label) else 0):
            for mb in torch.randperm(len(label)).chunk(self.cfg.ppo.num_minibatches):
                logits = base[mb] + head(*(x[mb] for x in inputs))
                loss = F.cross_entropy(logits, label[mb])
                self.opt.zero_grad(set_to_none=True)
                loss.backward()
                self.opt.step()
                totals += [loss.item(), 0.0, (logits.argmax(-1) == label[mb]).float().mean().item(), 0.0]
                n += 1
        self.policy.eval()
        self.it += 1
        return dict(zip(METRICS, totals / max(n, 1)))

    def aggregate_update(self, data: dict, pool: list[dict], updates: int, batch: int) -> dict[str, float]:
        """DAgger with the whole dataset: ``updates`` gradient steps, each on ``batch`` trials,
        half of them from ``data`` (just collected) and half from ``pool`` (everything before),
        then ``data`` joins the pool."""
        policy, a = self.policy, self.policy.args
        memo = family_of(policy).segments
        new = self.with_returns(data)
        keys = self.data_keys(new)
        old = concat_trials(pool, keys) if pool else None
        T = new["label"].shape[1]
        n_new = batch - batch // 2 if old is not None else batch
        totals = np.zeros(len(METRICS))
        policy.train()
        for _ in range(updates):
            mb_new = torch.randint(new["label"].shape[0], (n_new,))
            mb = {k: new[k][mb_new] for k in keys}
            if old is not None:
                mb_old = torch.randint(old["label"].shape[0], (batch - n_new,))
                mb = {k: torch.cat([mb[k], old[k][mb_old]]) for k in keys}
            schedule = segment_schedule(T, a.l_seg, a.seg_jitter) if memo else None
            totals += self.step(mb, torch.arange(batch), schedule, self.lr())
        policy.eval()
        pool.append(new)
        self.it += 1
        return dict(zip(METRICS, totals / updates))

    def offline(self, trials: list[dict], val: list[dict], updates: int, batch: int, log_every: int,
                save=None) -> dict[str, float]:
        """``updates`` gradient steps on minibatches of ``batch`` trials drawn from ``trials``
        (saved iterations; a fresh Memo segment schedule per step, since cached features do not
        depend on it), with validation on ``val`` every ``log_every`` steps."""
        policy, a = self.policy, self.policy.args
        memo = family_of(policy).segments
        keys = self.data_keys(trials[0])
        data = concat_trials(trials, keys)
        held = concat_trials(val, keys) if val else None
        n_trials, T = data["label"].shape
        totals, n, logs = np.zeros(len(METRICS)), 0, {}
        t0 = time.perf_counter()
        for u in range(updates):
            policy.train()
            mb = torch.randint(n_trials, (batch,))
            schedule = segment_schedule(T, a.l_seg, a.seg_jitter) if memo else None
            totals += self.step(data, mb, schedule, cosine_lr(self.cfg.ppo, u / max(1, updates - 1)))
            n += 1
            if (u + 1) % log_every == 0 or u + 1 == updates:
                logs = dict(zip(METRICS, totals / n))
                if held is not None:
                    logs.update(self.validate(held, batch))
                logs["updates_per_s"] = n / (time.perf_counter() - t0)
                print(f"update {u + 1}/{updates} " + " ".join(f"{k}={v:.3g}" for k, v in logs.items()), flush=True)
                totals, n, t0 = np.zeros(len(METRICS)), 0, time.perf_counter()
                if save is not None:
                    save()
        return logs

    @torch.no_grad()
    def validate(self, held: dict, batch: int) -> dict[str, float]:
        """Held-out loss and agreement, plus how the student's stop compares with the teacher's."""
        policy = self.policy
        policy.eval()
        memo = family_of(policy).segments
        T = held["label"].shape[1]
        bc, agree, stop_tp, stop_pred, stop_true, k = 0.0, 0.0, 0, 0, 0, 0
        split = np.zeros(4)  # agreeing / all steps whose goal was seen in an earlier episode, then the rest
        aux_err, aux_n = 0.0, 0
        with_aux = getattr(policy, "memory_aux", None) is not None and "aux_seen" in held
        for mb in torch.arange(held["label"].shape[0]).split(batch):
            schedule = segment_schedule(T, policy.args.l_seg, 0.0) if memo else None
            inp = {key: held[key][mb] for key in self.keys}
            out = policy.forward_sequence(inp, schedule, aux=True) if with_aux else policy.forward_sequence(inp, schedule)
            logits, label = out[0].float(), held["label"][mb]
            bc += F.cross_entropy(logits.reshape(-1, logits.shape[-1]), label.reshape(-1)).item()
            pred = logits.argmax(-1)
            agree += (pred == label).float().mean().item()
            stop_tp += int(((pred == 0) & (label == 0)).sum())
            stop_pred += int((pred == 0).sum())
            stop_true += int((label == 0).sum())
            if "aux_earlier" in held:
                earlier, ok = held["aux_earlier"][mb], pred == label
                split += [int((ok & earlier).sum()), int(earlier.sum()), int((ok & ~earlier).sum()), int((~earlier).sum())]
            if with_aux:
                seen = held["aux_seen"][mb] > 0
                aux_err += float((out[4][..., 1:] - held["aux_vec"][mb]).norm(dim=-1)[seen].sum()) * OBJECT_SCALE_M
                aux_n += int(seen.sum())
            k += 1
        logs = {"val_bc": bc / k, "val_agreement": agree / k,
                "val_stop_precision": stop_tp / max(1, stop_pred), "val_stop_recall": stop_tp / max(1, stop_true)}
        if split[1] + split[3]:
            logs.update(val_agree_remembered=split[0] / max(1, split[1]), val_agree_rest=split[2] / max(1, split[3]),
                        val_remembered_share=split[1] / (split[1] + split[3]))
        if aux_n:
            logs["val_aux_err_m"] = aux_err / aux_n
        return logs


def main(argv=None) -> int:
    args = parse_args(argv)
    cfg = config_from_cli(args.config, args.set, args.run_dir)
    if not 0.0 <= args.mix_fraction <= 1.0:
        fail(f"--mix-fraction must be in [0, 1], got {args.mix_fraction}")
    if args.skill_epochs < 1:
        fail(f"--skill-epochs must be >= 1, got {args.skill_epochs}")
    if args.replay < 1:
        fail(f"--replay must be >= 1, got {args.replay}")
    if args.beta is not None and not 0.0 <= args.beta <= 1.0:
        fail(f"--beta must be in [0, 1], got {args.beta}")
    if not 0.0 <= args.noise <= 1.0:
        fail(f"--noise must be in [0, 1], got {args.noise}")
    try:
        noise_actions = tuple(int(x) for x in args.noise_actions.split(",") if x.strip())
    except ValueError:
        fail(f"--noise-actions must be comma-separated action indices, got {args.noise_actions!r}")
    offline_files: list[Path] = []
    if args.teacher_checkpoint and args.teacher:
        fail("--teacher and --teacher-checkpoint: give one (a scripted teacher or a trained policy)")
    if args.offline and args.pool:
        fail("--offline and --pool: give one (--offline trains on saved trials only, --pool collects as well)")
    if args.offline:
        offline_files = sorted(Path(args.offline).glob("trials_*.pt"))
        if len(offline_files) <= args.val_files:
            fail(f"--offline {args.offline}: {len(offline_files)} trials_*.pt files, need more than "
                 f"--val-files {args.val_files} (write them with --save-trials)")
        if args.updates < 1:
            fail(f"--updates must be >= 1, got {args.updates}")
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    torch.manual_seed(cfg.seed)
    try:
        env = make_vec(cfg.env.id, 1 if args.offline else cfg.env.num_envs, split="train", seed=cfg.seed,
                       **cfg.env.options)
    except (TypeError, ValueError) as e:
        fail(f"env.options: {e}")
    try:
        policy = build_policy(cfg.model_args(**env.model_fields()), load_pretrained=True)
    except (FileNotFoundError, ValueError) as e:
        fail(str(e))
    steps_per_it = cfg.env.num_envs * cfg.ppo.rollout_length
    iterations = math.ceil(cfg.total_steps / steps_per_it)
    try:
        imitator = Imitator(policy, None if args.offline else env, cfg, iterations, args.mix_fraction, args.vf_coef,
                            args.teacher, args.replay, args.beta, args.noise, noise_actions, args.aux_coef,
                            args.hcam_recon, args.route_steps_only, args.skill_epochs, args.teacher_checkpoint)
    except (FileNotFoundError, ValueError) as e:
        fail(str(e))
    if noise_actions and not all(0 <= x < policy.args.n_actions for x in noise_actions):
        fail(f"--noise-actions {args.noise_actions}: indices must be in [0, {policy.args.n_actions})")
    run_dir = Path(cfg.run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "config.yaml").write_text(__import__("yaml").safe_dump(cfg.to_dict(), sort_keys=False))
    g = np.random.default_rng(cfg.seed)
    wall_before = 0.0
    if args.init and args.resume:
        fail("--init and --resume: give one (--resume continues a run, --init starts one from given weights)")
    if args.init:
        load_init_weights(args.init, policy, partial=args.init_partial)
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

    def save(name: str, **extra) -> None:
        save_checkpoint(run_dir / "checkpoints" / name, policy, cfg.to_dict(), rollout=imitator.it,
                        env_steps=imitator.it * steps_per_it, trainer="imitate", optimizer=imitator.opt.state_dict(),
                        wall_s=wall_before + time.perf_counter() - t_start, **extra)

    t_start = time.perf_counter()
    if args.offline:
        env.close()
        load = [imitator.with_returns(torch.load(f, map_location="cpu", weights_only=False)) for f in offline_files]
        val, train = load[len(load) - args.val_files:], load[:len(load) - args.val_files]
        steps = sum(int(t["label"].numel()) for t in train)
        batch = max(1, cfg.env.num_envs // cfg.ppo.num_minibatches)
        print(f"offline imitation on {len(train)} files ({steps:,} labelled steps), {len(val)} held out; "
              f"{args.updates} updates of {batch} trials", flush=True)
        imitator.offline(train, val, args.updates, batch, log_every=max(1, min(200, args.updates // 10)),
                         save=lambda: save("latest.pt", offline_updates=args.updates, offline_data=str(args.offline)))
        save("final.pt", offline_updates=args.updates, offline_data=str(args.offline))
        print(f"done: {args.updates} offline updates in {time.perf_counter() - t_start:.0f}s; "
              f"checkpoint {run_dir / 'checkpoints' / 'final.pt'}", flush=True)
        return 0
    print(f"imitating {type(imitator.teacher).__name__} on {env.name}: {iterations} iterations of {steps_per_it:,} steps, run dir {run_dir}",
          flush=True)
    if args.save_trials:
        Path(args.save_trials).mkdir(parents=True, exist_ok=True)
    batch = max(1, cfg.env.num_envs // cfg.ppo.num_minibatches)
    pool = None
    if args.pool:
        mine = Path(args.save_trials) if args.save_trials else None
        own = mine is not None and Path(args.pool).resolve() == mine.resolve()
        files = [] if own else sorted(Path(args.pool).glob("trials_*.pt"))  # the pool: trials saved by other runs
        if not files and not own:
            fail(f"--pool {args.pool}: no trials_*.pt files (write them with --save-trials, or give the same "
                 f"directory as --save-trials to aggregate this run's own iterations from an empty pool)")
        if args.resume and mine is not None:
            # the iterations this run collected before it stopped rejoin the dataset, as if it had not stopped
            # (only those: a later file in the directory is one the resumed run collects again)
            earlier = [mine / f"trials_{i:04d}.pt" for i in range(imitator.it)]
            if missing := [str(f) for f in earlier if not f.exists()]:
                fail(f"--resume with --save-trials {args.save_trials}: this run's iterations {', '.join(missing)} "
                     f"are gone, so its dataset cannot be rebuilt; resume without --save-trials to aggregate "
                     f"with --pool alone")
            files += earlier
        pool = [imitator.with_returns(torch.load(f, map_location="cpu", weights_only=False)) for f in files]
        print(f"aggregating with {len(files)} saved files ({sum(int(t['label'].numel()) for t in pool):,} labelled "
              f"steps); {args.updates} updates of {batch} trials per iteration", flush=True)
    for i in range(imitator.it, iterations):
        t0 = time.perf_counter()
        data, stats = imitator.collect(g)
        if args.save_trials:
            torch.save({k: v for k, v in data.items() if k != "schedule"}, Path(args.save_trials) / f"trials_{i:04d}.pt")
        if pool is not None:
            stats.update(imitator.aggregate_update(data, pool, args.updates, batch))
        else:
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
    from icrl_ros.training._cli import run_main

    raise SystemExit(run_main(main))
