import numpy as np
import pytest
import torch

from icrl_ros.models import ICLPolicy, ModelArgs
from icrl_ros.sim import make_vec
from icrl_ros.training.config import PPOConfig, TrainConfig
from icrl_ros.models import STEP_KEYS
from icrl_ros.training.ppo import _EXTRA, PPOTrainer


def _trainer(env_id="icrl_ros/Darkroom-v0", num_envs=4, depth_dropout=0.1, **ppo):
    env = make_vec(env_id, num_envs, seed=0)
    args = ModelArgs(n_obs=env.n_obs, n_actions=env.n_actions, max_episode_steps=env.max_episode_steps,
                     d_model=32, n_layers=1, n_heads=4, d_mlp=64, depth_dropout=depth_dropout)
    cfg = PPOConfig(**{"rollout_length": 64, "num_updates": 4, **ppo})
    return PPOTrainer(ICLPolicy(args), env, cfg, total_rollouts=2)


def test_shuffle_keeps_episodes_whole_and_in_progress_last():
    torch.manual_seed(0)
    B, T = 3, 20
    # episodes of length 4 (the last one in progress at t1 = 18)
    ep = (torch.arange(T) // 4).expand(B, T).clone()
    buf = {k: torch.zeros(B, T, dtype=torch.long) for k in (*STEP_KEYS, *_EXTRA)}
    buf["episode_index"] = ep.clone()
    buf["obs"] = torch.arange(T).expand(B, T).clone()  # original time stamps ride along
    current = torch.full((B,), 4)
    PPOTrainer.shuffle_episodes(buf, 18, current)
    for b in range(B):
        t = buf["obs"][b, :18]
        e = buf["episode_index"][b, :18]
        blocks = t[:16].view(4, 4)
        for i, blk in enumerate(blocks):  # each block is one original episode, in time order
            assert (blk[1:] - blk[:-1] == 1).all() and blk[0] % 4 == 0
            assert (e[4 * i: 4 * i + 4] == i).all()
        assert t[16:].tolist() == [16, 17] and (e[16:] == 4).all()  # in-progress episode stays last
        assert sorted(t.tolist()) == list(range(18))
    assert not all(buf["obs"][b, :16].tolist() == list(range(16)) for b in range(B))


@pytest.mark.parametrize("trial_returns", [False, True])
def test_gae_matches_reference_loop(trial_returns):
    tr = _trainer(trial_returns=trial_returns)
    g, lam = tr.cfg.gamma, tr.cfg.gae_lambda
    rng = np.random.default_rng(0)
    B, T = 2, 10
    buf = {"reward": torch.tensor(rng.random((B, T)), dtype=torch.float32),
           "value": torch.tensor(rng.random((B, T)), dtype=torch.float32),
           "done": torch.tensor(rng.random((B, T)) < 0.3, dtype=torch.float32)}
    boot = torch.tensor(rng.random(B), dtype=torch.float32)
    adv, ret = tr.gae(buf, T, boot)
    for b in range(B):
        for t in range(T):
            total, disc = 0.0, 1.0
            for s in range(t, T):
                nv = boot[b] if s == T - 1 else buf["value"][b, s + 1]
                nt = 1.0 if trial_returns else 1 - buf["done"][b, s]  # trial returns: no terminal inside
                delta = buf["reward"][b, s] + g * nv * nt - buf["value"][b, s]
                total += disc * delta
                disc *= g * lam * nt
                if nt == 0:
                    break
            assert abs(adv[b, t].item() - float(total)) < 1e-5


@pytest.mark.parametrize("env_id", ["icrl_ros/Darkroom-v0", "icrl_ros/DarkKeyToDoor-v0"])
@pytest.mark.parametrize("partial", [True, False])
def test_rollout_and_update_runs_and_changes_weights(env_id, partial):
    torch.manual_seed(0)
    tr = _trainer(env_id, partial_updates=partial, fp16_storage=partial)
    before = [p.detach().clone() for p in tr.policy.parameters()]
    stats = tr.rollout_and_update()
    assert stats.losses["policy_loss"] and all(np.isfinite(v).all() for v in stats.losses.values())
    assert len(stats.losses["policy_loss"]) == (4 if partial else 1) * tr.cfg.num_minibatches
    assert any(not torch.equal(a, b) for a, b in zip(before, tr.policy.parameters()))


def test_refresh_makes_cache_equal_to_a_fresh_forward():
    """After an update + refresh, cached stepping continues exactly like a full forward."""
    torch.manual_seed(0)
    tr = _trainer(rollout_length=48, num_updates=2)
    from icrl_ros.memory import KVCache
    from icrl_ros.runtime.control import ControlStep

    B, a = tr.env.num_envs, tr.policy.args
    T = 30
    buf = {k: torch.zeros(B, T, dtype=torch.long) for k in STEP_KEYS}
    buf["obs"] = torch.randint(0, a.n_obs, (B, T))
    buf["episode_step"] = torch.arange(T).expand(B, T) % 10
    buf["episode_index"] = torch.arange(T).expand(B, T) // 10
    buf["prev_reward"] = torch.rand(B, T)
    buf["value"], buf["logprob"] = torch.zeros(B, T), torch.zeros(B, T)
    buf["action"] = torch.randint(0, a.n_actions, (B, T))
    cache = KVCache(a.n_layers, B, a.n_heads, a.head_dim, 40)
    tr.refresh(buf, 25, cache)
    one = {k: buf[k][:, 25] for k in STEP_KEYS}
    with torch.no_grad():
        step_logits = ControlStep.live(tr.policy, cache)(one)[0]
        full_logits = tr.policy.forward_sequence({k: buf[k][:, :26] for k in STEP_KEYS})[0][:, 25]
    assert (step_logits - full_logits).abs().max() < 1e-5


@pytest.mark.parametrize("shuffle", [True, False])
def test_update_ratio_starts_at_one_after_the_episode_shuffle(shuffle):
    """With the weights held still (lr ~0, no dropout), every partial update's approx KL is ~0:
    after the completed episodes are shuffled the update scores each action in the new order
    against a log-probability recomputed in that order, not the one stored in the old order."""
    torch.manual_seed(0)
    tr = _trainer("icrl_ros/DarkKeyToDoor-v0", rollout_length=200, num_updates=4, lr=1e-12, warmup_steps=1,
                  shuffle_episodes=shuffle, depth_dropout=0.0)
    stats = tr.rollout_and_update()
    kl = stats.losses["approx_kl"]
    assert len(kl) == 4 * tr.cfg.num_minibatches and max(abs(k) for k in kl) < 1e-7, kl  # 6e-6 before the fix


def test_target_kl_stops_an_update_before_the_step_that_would_exceed_it():
    """With ppo.target_kl an update takes minibatch steps only while the approx KL on the steps acted
    since the previous update stays under 1.5 x target. A large learning rate moves the policy past
    it with one step, so each of the 4 updates takes exactly one step (the last, full update too:
    the earlier chunks' older log-probabilities do not count); without target_kl all 24 run."""
    def run(target_kl):
        torch.manual_seed(0)
        tr = _trainer("icrl_ros/DarkKeyToDoor-v0", rollout_length=200, num_updates=4, lr=0.05, warmup_steps=1,
                      num_minibatches=2, update_epochs=3, depth_dropout=0.0, shuffle_episodes=False,
                      target_kl=target_kl)
        return tr.rollout_and_update().losses
    free, capped = run(0.0), run(1e-6)
    assert len(free["grad_norm"]) == 4 * 3 * 2 and "kl_stop" not in free
    assert capped["kl_stop"] == [1.0] * 4 and len(capped["grad_norm"]) == 4
    assert len(capped["approx_kl"]) == 8  # per update: the minibatch stepped, the one that stopped


@pytest.mark.parametrize(
    "override,needle",
    [("env.id=icrl_ros/Nope-v0", "env.id"), ("model.sink=kvv", "model.sink"), ("ppo.rollout_length=-5", "ppo.rollout_length"),
     ("env.num_envs=0", "env.num_envs"), ("ppo.gamma=1.5", "ppo.gamma"), ("ppo.learning_rate=1", "learning_rate"),
     ("model.d_model=-64", "model.d_model"), ("bogus=1", "bogus"), ("ppo.lr=fast", "ppo.lr: must be a number")],
)
def test_bad_config_names_the_field(override, needle):
    with pytest.raises(ValueError, match=needle):
        TrainConfig.load("config/train/darkroom.yaml", [override])


def test_a_route_model_needs_the_episode_shuffle_off():
    """The route input is written while acting: PPO's episode shuffle would pair it with another context."""
    route = ["model.house.route_memory=true"]
    with pytest.raises(ValueError, match="ppo.shuffle_episodes"):
        TrainConfig.load("config/train/house_relic_ppo.yaml", route)
    cfg = TrainConfig.load("config/train/house_relic_ppo.yaml", route + ["ppo.shuffle_episodes=false"])
    assert cfg.model["house"]["route_memory"]


def test_exponents_without_a_dot_are_numbers():
    """YAML 1.1 reads ``1e-9`` as a string (its floats need a dot); configs and --set read it as Python does."""
    cfg = TrainConfig.load("config/train/darkroom.yaml", ["ppo.lr=1e-9", "ppo.clip_coef=2E-1", "ppo.gamma=0.99"])
    assert (cfg.ppo.lr, cfg.ppo.clip_coef, cfg.ppo.gamma) == (1e-9, 0.2, 0.99)
    assert TrainConfig.load("config/train/darkroom.yaml", ["run_dir=runs/1e5"]).run_dir == "runs/1e5"


def test_shipped_configs_load():
    """Every config in config/train/ loads with the trainer it is for: the offline RA-DT ones
    (they name a ``data`` file) with train_radt.py's config, the rest with train.py's."""
    import glob

    import yaml

    from icrl_ros.training.train_radt import RADTTrainConfig

    paths = sorted(glob.glob("config/train/*.yaml"))
    offline = [p for p in paths if "data" in (yaml.safe_load(open(p)) or {})]
    assert offline and len(offline) < len(paths)
    for path in paths:
        (RADTTrainConfig if path in offline else TrainConfig).load(path)
    with pytest.raises(ValueError, match="train_radt.py"):
        TrainConfig.load(offline[0])


def test_teacher_term_pulls_the_policy_to_the_teachers_labels():
    """Kickstarting: with ``ppo.teacher`` every step is labelled by the scripted teacher on the
    policy's own history; ``teacher_coef`` > 0 raises agreement with those labels, 0 does not."""
    agreement = {}
    for coef in (0.0, 5.0):
        torch.manual_seed(0)
        tr = _trainer("icrl_ros/DarkKeyToDoor-v0", num_envs=8, rollout_length=100, num_updates=2, num_minibatches=2,
                      update_epochs=4, lr=3e-3, ent_coef=0.0, teacher="cycle", teacher_coef=coef)
        for _ in range(6):
            stats = tr.rollout_and_update()
        assert len(stats.losses["teacher_loss"]) == 2 * 4 * 2
        agreement[coef] = float(np.mean(stats.losses["teacher_agreement"][-4:]))
    assert agreement[5.0] > 0.6 and agreement[5.0] > agreement[0.0] + 0.2, agreement


def test_teacher_term_counts_only_where_the_teacher_knows_the_goal_with_teacher_when_goal_known():
    """``ppo.teacher_when=goal_known`` (the house teacher's ``goal_known``): the teacher term is
    zero on the steps where the teacher does not know the goal, and the same as always where it does."""
    got = {}
    for when, known in (("always", None), ("goal_known", True), ("goal_known", False)):
        torch.manual_seed(0)
        tr = _trainer("icrl_ros/DarkKeyToDoor-v0", num_envs=4, rollout_length=50, num_updates=1, num_minibatches=1,
                      update_epochs=1, teacher="cycle", teacher_coef=1.0)
        if known is not None:  # a grid teacher stands in for the house's, which says when it knows the goal
            tr.cfg.teacher_when = when
            tr.teacher.goal_known = lambda k=known: np.full(4, k)
        stats = tr.rollout_and_update()
        got[(when, known)] = (stats.losses["teacher_loss"][0], stats.losses["teacher_share"][0])
    assert got[("goal_known", True)] == got[("always", None)] and got[("always", None)][1] == 1.0
    assert got[("goal_known", False)] == (0.0, 0.0) and got[("always", None)][0] > 0


def test_teacher_when_goal_known_needs_a_teacher_that_says_so():
    with pytest.raises(ValueError, match="does not say when it knows"):
        _trainer("icrl_ros/DarkKeyToDoor-v0", teacher="cycle", teacher_coef=0.1, teacher_when="goal_known")
    with pytest.raises(ValueError, match="teacher_when"):
        PPOConfig(teacher_when="sometimes").validate()


def test_teacher_needs_a_grid_world_it_plays():
    with pytest.raises(ValueError, match="does not play darkroom"):
        _trainer("icrl_ros/Darkroom-v0", teacher="cycle", teacher_coef=0.1)
    with pytest.raises(ValueError, match="ppo.teacher"):
        PPOConfig(teacher_coef=0.1).validate()


def test_critic_warmup_moves_only_the_critic_and_fits_the_returns_first():
    """``ppo.critic_warmup_rollouts``: in those rollouts only the critic learns (value loss alone,
    at ``critic_warmup_lr``) and the policy's learning-rate schedule does not advance; after them
    every parameter learns as before."""
    torch.manual_seed(0)
    tr = _trainer(critic_warmup_rollouts=1, critic_warmup_lr=1e-2, num_updates=2, num_minibatches=2, update_epochs=4)
    before = {k: v.clone() for k, v in tr.policy.state_dict().items()}
    stats = tr.rollout_and_update()
    after = {k: v.clone() for k, v in tr.policy.state_dict().items()}
    moved = {k for k in before if not torch.equal(before[k], after[k])}
    assert moved == {"critic.weight", "critic.bias"}, moved
    assert tr.opt_step == 0 and set(stats.losses["lr"]) == {1e-2}
    first = stats.losses["value_loss"][:8]  # the first update: 4 epochs over the same steps, 2 minibatches each
    assert sum(first[-2:]) < sum(first[:2])
    tr.rollout_and_update()
    assert tr.opt_step == 2 * 4 * 2 and any(not torch.equal(after[k], tr.policy.state_dict()[k])
                                         for k in after if not k.startswith("critic."))


def test_train_only_moves_only_the_named_parameters():
    """``ppo.train_only``: the update moves the parameters under the given prefixes and no other (a shipped
    policy learns a new input through its own layer); a prefix that names nothing, or the critic warm-up
    (which trains the held critic), is refused."""
    torch.manual_seed(0)
    tr = _trainer(train_only=["actor.weight", "encoder.prev_action"], num_updates=2)
    before = {k: v.clone() for k, v in tr.policy.state_dict().items()}
    tr.rollout_and_update()
    moved = {k for k, v in tr.policy.state_dict().items() if not torch.equal(before[k], v)}
    assert moved == {"actor.weight", "encoder.prev_action.weight"}, moved
    with pytest.raises(ValueError, match="'decoder' names no trainable parameter"):
        _trainer(train_only=["decoder"])
    with pytest.raises(ValueError, match="ppo.train_only with ppo.critic_warmup_rollouts"):
        TrainConfig.load("config/train/darkroom.yaml", ["ppo.train_only=[actor]", "ppo.critic_warmup_rollouts=1"])
    with pytest.raises(ValueError, match="ppo.train_only: a list"):
        TrainConfig.load("config/train/darkroom.yaml", ["ppo.train_only=actor"])
