"""PPO with ReLIC partial updates over in-context trials.

One rollout = one trial of ``rollout_length`` steps per env, collected with cached-KV
stepping. The rollout is cut into ``num_updates`` chunks. After each chunk but the last,
a *partial update* runs a forward over every step collected so far with the loss on the
newest chunk only; then each env's completed episodes are shuffled in its context and
the cached keys/values (and values) are recomputed with the new weights. The last update
of a rollout is a full update (loss on all steps).

With ``ppo.teacher`` a scripted teacher (:mod:`icrl_ros.training.teachers`) labels each step with
its action on the policy's own history, and ``ppo.teacher_coef`` x the cross-entropy to
those labels joins the loss (kickstarting): the teacher's search keeps shaping the early,
exploring episodes while PPO improves on it.

HCAM adds its input-reconstruction loss (``model.hcam_recon_weight`` x the unweighted
``losses/recon_loss``) on the same steps as the PPO loss: no gradient reaches the encoder
through the gradient-stopped chunk memory, so this is what trains it to keep what memory
needs (Lampinen et al., 2021). With the weight at 0 the decoder is not run (nor logged).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import Tensor

from icrl_ros.families import family_of
from icrl_ros.families.memo.model import segment_schedule
from icrl_ros.models import ICLPolicy, make_memory, refresh
from icrl_ros.extensions import apply_rules, logit_rules
from icrl_ros.runtime.control import ControlStep
from icrl_ros.sim import VecTrialEnv
from icrl_ros.training.config import PPOConfig
from icrl_ros.training.teachers import observe_teacher

# Per-step bookkeeping stored beside the policy inputs.
_EXTRA = {"episode_index": torch.long, "action": torch.long, "reward": torch.float32, "done": torch.float32,
          "logprob": torch.float32, "value": torch.float32, "chunk": torch.long}


def env_inputs(obs, device, final_obs=None) -> dict[str, Tensor]:
    """Observation of a batched env -> policy inputs: a cell index array (with ``last_obs``,
    the cell the last step arrived in: ``final_obs`` where given, else ``obs``), or a dict
    with ``rgb``, ``odom``, ``goal``, and ``scan`` / ``scan_bands`` where the env has them (the env's own
    ``prev_action`` is not used: the trainer tracks it)."""
    if isinstance(obs, dict):
        return {k: torch.as_tensor(np.asarray(obs[k]), device=device)
                for k in ("rgb", "odom", "goal", "scan", "scan_bands") if k in obs}
    return {"obs": torch.as_tensor(obs, device=device),
            "last_obs": torch.as_tensor(obs if final_obs is None else final_obs, device=device)}


def episode_steps(env, device) -> Tensor:
    """The env's within-episode step counters, copied: the grid worlds count in place in one array, which
    ``torch.as_tensor`` would share, so a kept step's input changed with every later env step (imitation
    stored every step of a trial with the trial's last counters: trained on other inputs than it acted on)."""
    return torch.tensor(np.asarray(env.episode_step), dtype=torch.long, device=device)


def trial_start_inputs(env, obs, n_actions: int, device) -> dict[str, Tensor]:
    """Policy inputs of a trial's first step: no previous action (index ``n_actions``) or reward."""
    B = env.num_envs
    return {**env_inputs(obs, device), "prev_action": torch.full((B,), n_actions, dtype=torch.long, device=device),
            "prev_reward": torch.zeros(B, device=device), "episode_step": episode_steps(env, device),
            "episode_index": torch.zeros(B, dtype=torch.long, device=device)}


def next_step_inputs(env, obs, action: Tensor, reward, done, cur: dict[str, Tensor], device,
                     info: dict | None = None) -> dict[str, Tensor]:
    """Policy inputs after an env step. The previous action and reward (and ``last_obs``,
    from ``info["final_obs"]``) carry across an episode boundary (the new episode's first
    token sees how the last one ended); ``done`` advances the episode index."""
    final = info.get("final_obs") if isinstance(info, dict) else None  # grid worlds; the house's info is a list
    return {**env_inputs(obs, device, final), "prev_action": action, "prev_reward": torch.as_tensor(reward, device=device),
            "episode_step": episode_steps(env, device),
            "episode_index": cur["episode_index"] + torch.as_tensor(done, device=device).long()}


def cosine_lr(cfg: PPOConfig, frac: float) -> float:
    """``cfg.lr`` on a cosine from 1 to ``cfg.min_lr_frac`` of itself at ``frac`` in [0, 1]."""
    return cfg.lr * (cfg.min_lr_frac + (1 - cfg.min_lr_frac) * 0.5 * (1 + math.cos(math.pi * frac)))


def episode_returns_matrix(episodes: list[list[float]]) -> np.ndarray:
    """Per-env lists of finished episodes' returns -> (N, E), NaN where an env finished fewer."""
    returns = np.full((len(episodes), max(map(len, episodes), default=0)), np.nan)
    for i, e in enumerate(episodes):
        returns[i, :len(e)] = e
    return returns


@dataclass
class RolloutStats:
    episode_returns: list[tuple[int, float]] = field(default_factory=list)  # (episode index in trial, return)
    trial_return_normalised: float = float("nan")  # rollout return / the oracle's over the same steps
    losses: dict[str, list[float]] = field(default_factory=dict)

    def add_loss(self, **kw: float) -> None:
        for k, v in kw.items():
            self.losses.setdefault(k, []).append(v)


def select_trainable(policy: torch.nn.Module, prefixes: list[str]) -> list[torch.nn.Parameter]:
    """``ppo.train_only``: freeze every parameter whose name starts with none of ``prefixes`` (all train when
    empty) and return the ones that train. A prefix that names no trainable parameter is an error."""
    named = [(n, p) for n, p in policy.named_parameters() if p.requires_grad]
    if not prefixes:
        return [p for _, p in named]
    for pre in prefixes:
        if not any(n.startswith(pre) for n, _ in named):
            tops = sorted({n.rsplit(".", 1)[0] for n, _ in named})
            raise ValueError(f"ppo.train_only: {pre!r} names no trainable parameter of this model; "
                             f"its layers: {', '.join(tops)}")
    keep = []
    for n, p in named:
        if any(n.startswith(pre) for pre in prefixes):
            keep.append(p)
        else:
            p.requires_grad_(False)
    return keep


class PPOTrainer:
    def __init__(self, policy: ICLPolicy, env: VecTrialEnv, cfg: PPOConfig, total_rollouts: int,
                 device: str = "cpu", world_size: int = 1) -> None:
        self.policy, self.env, self.cfg, self.device = policy, env, cfg, device
        self.world_size = world_size
        self.params = select_trainable(policy, cfg.train_only)
        self.opt = torch.optim.Adam(self.params, lr=cfg.lr, eps=1e-5)
        n_upd = cfg.num_updates if cfg.partial_updates else 1
        policy_rollouts = max(1, total_rollouts - cfg.critic_warmup_rollouts)
        self.total_opt_steps = max(1, policy_rollouts * n_upd * cfg.update_epochs * cfg.num_minibatches)
        self.opt_step = 0  # optimiser steps of the policy (critic warm-up steps not counted)
        self.rollout = 0  # rollouts done (train.py sets it on resume)
        self.schedule: list[int] | None = None
        self.keys = [*policy.rollout_spec(), "episode_index"]  # policy inputs stored per step
        self.logit_rules = logit_rules(policy.args)  # e.g. the house stop rule: the update scores what was acted on
        self.teacher = None
        if cfg.teacher:
            from icrl_ros.training.teachers import make_teacher  # raises for an env without a teacher

            self.teacher = make_teacher(env, cfg.teacher, policy)
            if cfg.teacher_when == "goal_known" and not hasattr(self.teacher, "goal_known"):
                raise ValueError(f"ppo.teacher_when=goal_known: teacher {cfg.teacher!r} does not say when it knows "
                                 "the goal (the house teacher does)")

    # -- schedule -----------------------------------------------------------------
    def lr_at(self, step: int) -> float:
        c = self.cfg
        if step < c.warmup_steps:
            return c.lr * (step + 1) / c.warmup_steps
        frac = min(1.0, (step - c.warmup_steps) / max(1, self.total_opt_steps - c.warmup_steps))
        return cosine_lr(c, frac)

    # -- rollout ------------------------------------------------------------------
    def _chunks(self) -> list[tuple[int, int]]:
        T, K = self.cfg.rollout_length, self.cfg.num_updates if self.cfg.partial_updates else 1
        edges = np.linspace(0, T, K + 1).round().astype(int)
        return list(zip(edges[:-1], edges[1:]))

    def rollout_and_update(self) -> RolloutStats:
        cfg, env, policy, dev = self.cfg, self.env, self.policy, self.device
        B, T, a = env.num_envs, cfg.rollout_length, policy.args
        stats = RolloutStats()
        spec = policy.rollout_spec()
        buf = {k: torch.zeros(B, T, *shape, dtype=dtype, device=dev) for k, (shape, dtype) in spec.items()}
        buf.update({k: torch.zeros(B, T, dtype=dtype, device=dev) for k, dtype in _EXTRA.items()})
        obs = env.reset_trial()
        if self.teacher is not None:
            buf["teacher_action"] = torch.zeros(B, T, dtype=torch.long, device=dev)
            buf["teacher_counts"] = torch.ones(B, T, device=dev)  # where the teacher term applies (teacher_when)
            self.teacher.reset()
        cur = policy.rollout_inputs(trial_start_inputs(env, obs, a.n_actions, dev))
        # Memo: one random segment schedule per rollout, shared by stepping and updates.
        self.schedule = segment_schedule(T, a.l_seg, a.seg_jitter) if family_of(policy).segments else None
        policy.eval()
        cache = make_memory(policy, B, T, dtype=torch.float16 if cfg.fp16_storage else torch.float32, device=dev,
                            schedule=self.schedule)
        step = ControlStep.live(policy, cache)  # with the model's logit rules, as self.logit_rules (see acted_logits)
        ep_return = np.zeros(B)
        chunks = self._chunks()
        for c, (t0, t1) in enumerate(chunks):
            for t in range(t0, t1):
                logits, value = step(cur)
                dist_ = torch.distributions.Categorical(logits=logits.float())
                action = dist_.sample()
                for key in self.keys:
                    buf[key][:, t] = cur[key]
                buf["action"][:, t], buf["logprob"][:, t] = action, dist_.log_prob(action)
                buf["value"][:, t], buf["chunk"][:, t] = value, c
                if self.teacher is not None:
                    seen = cur if getattr(self.teacher, "reads_inputs", False) else np.asarray(obs)
                    buf["teacher_action"][:, t] = torch.as_tensor(self.teacher.act(seen), device=dev)
                    if cfg.teacher_when == "goal_known":
                        buf["teacher_counts"][:, t] = torch.as_tensor(self.teacher.goal_known(), device=dev)
                action_np = action.cpu().numpy()
                obs, reward, done, info = env.step(action_np)
                if self.teacher is not None:
                    observe_teacher(self.teacher, info, reward, done, action_np)
                buf["reward"][:, t] = torch.as_tensor(reward, device=dev)
                buf["done"][:, t] = torch.as_tensor(done, dtype=torch.float32, device=dev)
                ep_return += reward
                ep_idx = cur["episode_index"].cpu().numpy()
                for i in np.flatnonzero(done):
                    stats.episode_returns.append((int(ep_idx[i]), float(ep_return[i])))
                ep_return[done] = 0.0
                cur = policy.rollout_inputs(next_step_inputs(env, obs, action, reward, done, cur, dev, info))
            last = c == len(chunks) - 1
            if last and hasattr(env, "oracle_trial_return"):
                oracle = env.oracle_trial_return(T)
                stats.trial_return_normalised = float((buf["reward"].sum(1).cpu().numpy() / oracle).mean())
            loss_mask = torch.ones(B, t1, dtype=torch.bool, device=dev) if last else buf["chunk"][:, :t1] == c
            boot = step(cur, commit=False)[1]
            if last and cfg.trial_returns:  # the trial ends with the rollout: nothing follows
                boot = torch.zeros_like(boot)
            self.update(buf, t1, loss_mask, buf["chunk"][:, :t1] == c, boot, stats)
            if not last:
                if cfg.shuffle_episodes:
                    self.shuffle_episodes(buf, t1, cur["episode_index"])
                self.refresh(buf, t1, cache)
        self.rollout += 1
        return stats

    # -- after-update bookkeeping ------------------------------------------------------
    @staticmethod
    def shuffle_episodes(buf: dict[str, Tensor], t1: int, current_episode: Tensor) -> None:
        """Permute each env's completed episodes (contiguous blocks) into a random order; the
        in-progress episode stays last. Episode indices are renumbered in the new order."""
        B = current_episode.shape[0]
        ep = buf["episode_index"][:, :t1]
        n_ids = int(max(current_episode.max().item(), ep.max().item())) + 1
        ids = torch.arange(n_ids, device=ep.device).expand(B, n_ids)
        keys = torch.rand(B, n_ids, device=ep.device)
        keys = torch.where(ids >= current_episode[:, None], 2.0 + ids.float(), keys)  # not completed: keep order, last
        rank = keys.argsort(dim=1).argsort(dim=1)  # new index of each episode id
        new_ep = rank.gather(1, ep)
        perm = (new_ep * t1 + torch.arange(t1, device=ep.device)).argsort(dim=1)
        for key, val in buf.items():
            src = new_ep if key == "episode_index" else val[:, :t1]
            idx = perm.view(B, t1, *([1] * (src.dim() - 2))).expand_as(src)
            val[:, :t1] = src.gather(1, idx)

    def refresh(self, buf: dict[str, Tensor], t1: int, cache) -> None:
        """Recompute the memory and the values of steps [0, t1) with the current weights.

        After an episode shuffle the log-probabilities of those steps' actions are recomputed too,
        in the new order: the ones stored while acting were conditioned on the old order, so the
        next update's ratio would compare two different contexts (measured: approx KL 0.015 on a
        Dark-Key-To-Door ReLIC and 0.03 on an HCAM with the learning rate at 1e-9, against 3e-9
        without the shuffle) and clip steps no weight change moved."""
        self.policy.eval()
        seq = {k: buf[k][:, :t1] for k in self.keys}
        logits, buf["value"][:, :t1] = refresh(self.policy, cache, seq, self.schedule)
        if self.cfg.shuffle_episodes:  # the same forward's logits: no second pass
            buf["logprob"][:, :t1] = self.log_probs(logits, seq, buf["action"][:, :t1])[0]

    # -- PPO update -------------------------------------------------------------------
    def gae(self, buf: dict[str, Tensor], t1: int, boot: Tensor) -> tuple[Tensor, Tensor]:
        g, lam = self.cfg.gamma, self.cfg.gae_lambda
        r, v, d = buf["reward"][:, :t1] * self.cfg.reward_scale, buf["value"][:, :t1], buf["done"][:, :t1]
        adv = torch.zeros_like(v)
        last = torch.zeros_like(boot)
        if self.cfg.trial_returns:  # no terminal inside a trial
            d = torch.zeros_like(d)
        for t in reversed(range(t1)):
            next_v = boot if t == t1 - 1 else v[:, t + 1]
            nonterm = 1.0 - d[:, t]
            delta = r[:, t] + g * next_v * nonterm - v[:, t]
            last = delta + g * lam * nonterm * last
            adv[:, t] = last
        return adv, adv + v

    def acted_logits(self, logits: Tensor, inp: dict[str, Tensor]) -> Tensor:
        """Logits (B, T, A) -> the ones the rollout sampled from: with the model's logit rules
        (:mod:`icrl_ros.extensions`; e.g. the house stop rule masks or forces the stop from each step's
        token) applied exactly as :class:`~icrl_ros.runtime.control.ControlStep` applied them when acting,
        so the ratio and the entropy are those of the acting policy (a forced action has log-probability
        0 and no gradient; a masked one, none). Without rules, the logits as they are (float)."""
        if not self.logit_rules:
            return logits.float()
        with torch.no_grad():  # rules read the token (the stop rule: the frozen heads' entries)
            x = self.policy.encode(inp)
        return apply_rules(self.logit_rules, logits, x)

    def log_probs(self, logits: Tensor, inp: dict[str, Tensor], action: Tensor) -> tuple[Tensor, Tensor]:
        """log pi(action) (B, T) and every action's log-probability (B, T, A) as acted on
        (:meth:`acted_logits`): what the rollout stores, the refresh recomputes and the update scores."""
        logp_all = F.log_softmax(self.acted_logits(logits, inp), dim=-1)
        return logp_all.gather(-1, action[..., None]).squeeze(-1), logp_all

    def update(self, buf: dict[str, Tensor], t1: int, loss_mask: Tensor, fresh: Tensor, boot: Tensor,
               stats: RolloutStats) -> None:
        """PPO epochs over the steps in ``loss_mask``. ``fresh`` (B, t1) marks the steps acted since the
        last update (for ``ppo.target_kl``: their stored log-probabilities are the policy's as this
        update starts, so their KL is how far this update has moved it)."""
        cfg, policy = self.cfg, self.policy
        adv, ret = self.gae(buf, t1, boot)
        B = adv.shape[0]
        recon = family_of(policy).chunk_store and policy.args.hcam_recon_weight > 0  # weight 0: skip the decoder
        warm = self.rollout < cfg.critic_warmup_rollouts  # the critic alone learns (see PPOConfig)
        recon, teach = recon and not warm, self.teacher is not None and not warm
        policy.train()
        stopped = False
        for _ in range(cfg.update_epochs):
            if stopped:
                break
            for mb in torch.randperm(B, device=adv.device).chunk(cfg.num_minibatches):
                m = loss_mask[mb]
                n = m.sum().clamp(min=1)
                a_mb = adv[mb]
                mean = a_mb[m].mean()
                std = a_mb[m].std() if m.sum() > 1 else torch.ones(())
                a_mb = (a_mb - mean) / (std + 1e-8)
                self.opt.zero_grad(set_to_none=True)
                logs = {"policy_loss": 0.0, "value_loss": 0.0, "entropy": 0.0, "approx_kl": 0.0, "clipfrac": 0.0}
                moved = torch.zeros(2)  # KL summed over the minibatch's fresh steps, their count
                if recon:
                    logs["recon_loss"] = 0.0
                if teach:
                    # agreement and share: per PPO step, so agreement / share is the agreement where the term counts
                    logs["teacher_loss"] = logs["teacher_agreement"] = logs["teacher_share"] = 0.0
                for micro in torch.arange(len(mb), device=adv.device).chunk(cfg.grad_accum):
                    idx = mb[micro]
                    inp = {k: buf[k][idx, :t1] for k in self.keys}
                    out = policy.forward_sequence(inp, self.schedule)
                    logits, values = out[:2]
                    logp, logp_all = self.log_probs(logits, inp, buf["action"][idx, :t1])
                    entropy = -(logp_all.exp() * logp_all).sum(-1)
                    mm = m[micro].float()
                    log_ratio = logp - buf["logprob"][idx, :t1]
                    ratio = log_ratio.exp()
                    A = a_mb[micro]
                    pg = torch.max(-A * ratio, -A * ratio.clamp(1 - cfg.clip_coef, 1 + cfg.clip_coef))
                    vl = 0.5 * (values - ret[idx]).pow(2)
                    pg_l, v_l, ent = ((x * mm).sum() / n for x in (pg, vl, entropy))
                    loss = cfg.vf_coef * v_l if warm else pg_l + cfg.vf_coef * v_l - cfg.ent_coef * ent
                    if teach:  # on the learnt logits: a stop the rule masks would score -1e4
                        label = buf["teacher_action"][idx, :t1, None]
                        mt = mm * buf["teacher_counts"][idx, :t1]
                        t_l = (F.cross_entropy(logits.float().transpose(1, 2), label.squeeze(-1), reduction="none")
                               * mt).sum() / n
                        loss = loss + cfg.teacher_coef * t_l
                        logs["teacher_loss"] += t_l.item()
                        agree = (logits.argmax(-1, keepdim=True) == label).squeeze(-1).float()
                        logs["teacher_agreement"] += (agree * mt).sum().item() / n.item()
                        logs["teacher_share"] += mt.sum().item() / n.item()
                    if recon:  # masked mean over this micro-batch, weighted like pg_l to a minibatch mean
                        rec = policy.recon_loss(inp, out[4]["hidden"], m[micro]) * (mm.sum() / n)
                        loss = loss + policy.args.hcam_recon_weight * rec
                        logs["recon_loss"] += rec.item()
                    loss.backward()
                    with torch.no_grad():
                        logs["policy_loss"] += pg_l.item()
                        logs["value_loss"] += v_l.item()
                        logs["entropy"] += ent.item()
                        logs["approx_kl"] += (((ratio - 1) - log_ratio) * mm).sum().item() / n.item()
                        logs["clipfrac"] += (((ratio - 1).abs() > cfg.clip_coef).float() * mm).sum().item() / n.item()
                        if cfg.target_kl > 0:
                            f = mm * fresh[idx].float()
                            moved += torch.stack([(((ratio - 1) - log_ratio) * f).sum(), f.sum()]).cpu()
                if not warm and self.kl_too_far(moved):  # before this minibatch's step
                    stats.add_loss(**logs)
                    stopped = True
                    break
                if self.world_size > 1:
                    for p in policy.parameters():
                        if p.grad is not None:
                            dist.all_reduce(p.grad)
                            p.grad /= self.world_size
                if warm:  # Adam leaves a parameter without a gradient as it is
                    for name, p in policy.named_parameters():
                        if not name.startswith("critic."):
                            p.grad = None
                grad_norm = torch.nn.utils.clip_grad_norm_(self.params, cfg.max_grad_norm)
                lr = cfg.critic_warmup_lr if warm else self.lr_at(self.opt_step)
                for group in self.opt.param_groups:
                    group["lr"] = lr
                self.opt.step()
                self.opt_step += 0 if warm else 1
                stats.add_loss(**logs, grad_norm=float(grad_norm), lr=lr)
        if cfg.target_kl > 0:
            stats.add_loss(kl_stop=float(stopped))
        policy.eval()

    def kl_too_far(self, moved: Tensor) -> bool:
        """``moved`` = (approx KL summed over a minibatch's fresh steps, their count): is their mean
        past 1.5 x ``ppo.target_kl``? Steps of earlier chunks are left out: without the episode
        shuffle their log-probabilities are from acting, older than this update (partial updates),
        so their KL also counts earlier updates' moves and would stop a final update before its
        first step. Every process agrees (sums over them)."""
        if self.cfg.target_kl <= 0:
            return False
        if self.world_size > 1:
            moved = moved.to(self.device)
            dist.all_reduce(moved)
        return moved[0].item() / max(moved[1].item(), 1.0) > 1.5 * self.cfg.target_kl
