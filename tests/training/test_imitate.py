"""The scripted Dark-Key-To-Door teacher and in-context imitation (DAgger) + PPO --init."""

import numpy as np
import torch

from icrl_ros.sim.gridworlds import DarkKeyToDoorVecEnv, DarkroomVecEnv
from tests.training.test_train_cli import refused, run
import pytest

from icrl_ros.training.teachers import KeyDoorExplorer, grid_cycle, make_teacher, snake_tour, teacher_trials

TINY = ["--set", "env.num_envs=4", "--set", "ppo.rollout_length=60", "--set", "total_steps=480",
        "--set", "model.d_model=32", "--set", "model.n_layers=1", "--set", "model.n_heads=4",
        "--set", "model.last_obs=true"]


@pytest.mark.parametrize("name", ["cycle", "explorer"])
def test_teacher_remembers_the_key_and_the_door(name):
    env = DarkKeyToDoorVecEnv(1, "all")
    env.set_tasks(np.array([[0, 2 * 9 + 1, 8 * 9 + 8]]))  # start (0,0), key (2,1), door in the far corner
    teacher = make_teacher(env, name)
    obs, lengths, steps, rewards = env.observe(), [], 0, []
    for _ in range(300):
        action = teacher.act(obs)
        obs, r, done, info = env.step(action)
        teacher.observe(info["final_obs"], r, done, action)
        steps += 1
        rewards.append(r[0])
        if done[0]:
            lengths.append(steps)
            steps = 0
    assert teacher.target[0].tolist() == [2 * 9 + 1, 8 * 9 + 8]  # both found and remembered
    # once both are known every episode is a shortest path: 3 steps to the key + 13 to the door
    assert lengths[-3:] == [16, 16, 16] and sum(rewards) >= 2 * (len(lengths) - 1)


def test_grid_cycle_is_a_closed_tour_of_every_cell_but_the_corner():
    tour = grid_cycle(9)
    assert len(tour) == len(set(tour)) == 80 and 80 not in tour
    xy = np.array([divmod(c, 9) for c in tour + tour[:1]])
    assert (np.abs(np.diff(xy, axis=0)).sum(1) == 1).all()
    with pytest.raises(ValueError, match="odd"):
        grid_cycle(8)


def test_snake_tour_visits_every_cell_by_neighbour_steps():
    tour = snake_tour(10)
    assert sorted(tour) == list(range(100)) and tour[0] == 0
    xy = np.array([divmod(c, 10) for c in tour])
    assert (np.abs(np.diff(xy, axis=0)).sum(1) == 1).all()


def test_darkroom_teacher_finds_the_goal_once_then_walks_to_it_and_stays():
    env = DarkroomVecEnv(1, "all")
    env.set_tasks(np.array([7 * 10 + 3]))  # goal (7, 3): 10 steps from the start corner
    teacher = make_teacher(env)
    obs, per_episode, total = env.observe(), [], 0.0
    for _ in range(400):
        action = teacher.act(obs)
        obs, r, done, info = env.step(action)
        teacher.observe(info["final_obs"], r, done, action)
        total += r[0]
        if done[0]:
            per_episode.append(total)
            total = 0.0
    assert teacher.target[0] == 73
    assert 0 < per_episode[0] < 91 and per_episode[1:] == [91.0, 91.0, 91.0]  # 100 - 10 + 1 steps on the goal


def test_darkroom_teacher_scores_near_the_oracle_on_held_out_goals():
    env = DarkroomVecEnv(200, "test", seed=0)
    env.reset_trial()
    oracle = env.oracle_trial_return(1000)
    assert 0.9 < (teacher_trials(env, 1000) / oracle).mean() <= 1.0


@pytest.mark.parametrize("name", ["cycle", "explorer"])
def test_teacher_scores_near_the_oracle_on_held_out_tasks(name):
    env = DarkKeyToDoorVecEnv(200, "test", seed=0)
    env.reset_trial()
    oracle = env.oracle_trial_return(500)
    norm = (teacher_trials(env, 500, name) / oracle).mean()
    assert 0.8 < norm <= 1.0
    # a random walk for comparison
    env.reset_trial()
    oracle = env.oracle_trial_return(500)
    rng, total = np.random.default_rng(0), np.zeros(200)
    for _ in range(500):
        total += env.step(rng.integers(0, 4, 200))[1]
    assert (total / oracle).mean() < 0.1


def test_teacher_reset_forgets_one_env_only():
    t = KeyDoorExplorer(2, 9)
    t.observe(np.array([5, 7]), np.array([1.0, 1.0]), np.array([False, False]))
    t.reset(np.array([0]))
    assert t.target[0].tolist() == [-1, -1] and t.target[1].tolist() == [7, -1] and t.has_key.tolist() == [False, True]


def test_imitate_then_ppo_init(tmp_path, capsys):
    cfg = "config/train/dark_key_to_door.yaml"
    r = run(["training/imitate.py", "--config", cfg, "--run-dir", str(tmp_path / "im"), *TINY])
    assert r.returncode == 0, r.stderr
    assert "iteration 2/2" in r.stdout and "agreement=" in r.stdout
    ckpt = tmp_path / "im" / "checkpoints" / "final.pt"
    blob = torch.load(ckpt, weights_only=False)
    assert blob["env_steps"] == 480 and blob["trainer"] == "imitate"
    r = run(["training/train.py", "--config", cfg, "--run-dir", str(tmp_path / "ppo"), "--init", str(ckpt), *TINY,
             "--no-progress"])
    assert r.returncode == 0, r.stderr
    # the fine-tune starts from the imitated weights
    tuned = torch.load(tmp_path / "ppo" / "checkpoints" / "final.pt", weights_only=False)
    assert tuned["model_args"] == blob["model_args"]
    # a config whose model differs is refused with the differing field named
    from icrl_ros.training.train import main as train_main

    assert "last_obs" in refused(train_main, ["--config", cfg, "--run-dir", str(tmp_path / "bad"), "--init", str(ckpt),
                                              *TINY[:-2], "--no-progress"], capsys)


def test_imitate_refuses_a_teacher_for_another_env_or_unknown(tmp_path, capsys, one_thread):
    from icrl_ros.training.imitate import main

    cfg = "config/train/dark_key_to_door.yaml"
    err = refused(main, ["--config", "config/train/darkroom.yaml", "--run-dir", str(tmp_path / "dr"), "--teacher", "cycle",
                         *TINY[:-2]], capsys)
    assert "does not play darkroom" in err
    assert "choose one of" in refused(main, ["--config", cfg, "--run-dir", str(tmp_path / "t"), "--teacher", "nope", *TINY],
                                      capsys)


@pytest.mark.slow  # an HCAM imitation run on the house (~20 s alone); HCAM's loss itself is checked in its family's tests
def test_imitate_adds_hcams_reconstruction_loss_on_request(tmp_path):
    cfg = "config/train/dark_key_to_door_hcam_imitate.yaml"
    hcam = ["--set", "model.hcam_chunk=8", "--set", "model.hcam_top_k=2", "--set", "model.depth_dropout=0.0"]
    r = run(["training/imitate.py", "--config", cfg, "--run-dir", str(tmp_path / "h"), "--hcam-recon", *TINY, *hcam])
    assert r.returncode == 0, r.stderr
    losses = [float(line.split("aux_loss=")[1].split()[0]) for line in r.stdout.splitlines() if "aux_loss=" in line]
    assert len(losses) == 2 and min(losses) > 0.1  # decoding the observed cell and last action is not free
    r = run(["training/imitate.py", "--config", cfg, "--run-dir", str(tmp_path / "h0"), *TINY, *hcam])
    assert r.returncode == 0 and "aux_loss=0 " in r.stdout, r.stderr  # off by default


def test_hcam_reconstruction_needs_an_hcam_model(tmp_path, capsys, one_thread):
    from icrl_ros.training.imitate import main

    err = refused(main, ["--config", "config/train/dark_key_to_door.yaml", "--run-dir", str(tmp_path / "r"),
                         "--hcam-recon", *TINY], capsys)
    assert "needs an HCAM model" in err


def test_house_teacher_defaults_to_the_mode_the_env_runs():
    """The house teacher runs inside the env: without a name, make_teacher takes the env's mode
    (a config that sets env.options.teacher=wiped needs no --teacher); a name that differs fails."""
    from types import SimpleNamespace
    from icrl_ros.training.teachers import HouseEnvTeacher
    for mode in ("memory", "wiped"):
        env = SimpleNamespace(name="house", task={"teacher": mode})
        assert isinstance(make_teacher(env), HouseEnvTeacher)
    env = SimpleNamespace(name="house", task={"teacher": "wiped"})
    with pytest.raises(ValueError, match="set env.options.teacher=memory"):
        make_teacher(env, "memory")
    with pytest.raises(ValueError, match="runs teacher=None; set env.options.teacher=memory"):
        make_teacher(SimpleNamespace(name="house", task={}))  # no teacher in the env: say what to set


def test_label_mask_keeps_unlabelled_steps_out_of_the_loss(tmp_path, capsys, one_thread):
    """``--route-steps-only`` stores a label mask: steps outside it change neither the imitation loss nor its
    agreement (any label there is ignored); without ``--teacher route`` the flag is refused."""
    from icrl_ros.models import build_policy
    from icrl_ros.sim import make_vec
    from icrl_ros.training.config import TrainConfig
    from icrl_ros.training.imitate import Imitator, main

    torch.manual_seed(0)
    cfg = TrainConfig.load("config/train/dark_key_to_door.yaml", ["model.d_model=32", "model.n_layers=1",
                                                                 "model.n_heads=4", "ppo.rollout_length=40"])
    env = make_vec(cfg.env.id, 2, seed=0)
    policy = build_policy(cfg.model_args(**env.model_fields()))
    im = Imitator(policy, env, cfg, iterations=1, mix_fraction=0.6, vf_coef=0.5)
    data, _ = im.collect(np.random.default_rng(0))
    assert torch.equal(data["label_mask"], torch.ones(2, 40))  # no flag: every step counts
    data = im.with_returns(data)
    mask = torch.zeros(2, 40)
    mask[:, ::3] = 1
    data["label_mask"] = mask
    mb = torch.arange(2)
    bc, _, agree, _ = im.losses(data, mb, None)
    other = dict(data, label=torch.where(mask > 0, data["label"], (data["label"] + 1) % policy.args.n_actions))
    bc2, _, agree2, _ = im.losses(other, mb, None)
    assert torch.allclose(bc, bc2) and torch.allclose(agree, agree2)
    assert not torch.allclose(im.losses(dict(data, label_mask=torch.ones(2, 40)), mb, None)[0], bc)
    assert "--route-steps-only needs --teacher route" in refused(
        main, ["--config", "config/train/dark_key_to_door.yaml", "--run-dir", str(tmp_path / "r"), "--route-steps-only",
               *TINY], capsys)


def test_a_route_skill_alone_trains_on_the_held_networks_cached_logits(one_thread):
    """``ppo.train_only=[route_skill]``: the imitator caches the held network's logits once per stored iteration
    (the full model's logits less the head's) and fits the head on the route steps only; nothing else moves, and a
    label the scan decides is learnt."""
    from pathlib import Path

    from icrl_ros.models import load_checkpoint
    from icrl_ros.models.policy import ICLPolicy
    from icrl_ros.training.config import TrainConfig
    from icrl_ros.training.imitate import Imitator

    shipped_path = Path("checkpoints/house_relic.pt")
    if not shipped_path.is_file():
        pytest.skip(f"{shipped_path} is missing")
    shipped, _ = load_checkpoint(shipped_path)
    policy = ICLPolicy(shipped.args.replace_section("house", route_memory=True, route_skill=16, scan_input=True))
    policy.load_state_dict(shipped.state_dict(), strict=False)
    cfg = TrainConfig.load("config/train/house_relic_ppo.yaml", ["ppo.train_only=[route_skill]", "ppo.lr=0.01",
                                                                "ppo.num_minibatches=2", "ppo.critic_warmup_rollouts=0"])
    im = Imitator(policy, None, cfg, iterations=1, mix_fraction=0.6, vf_coef=0.5, skill_epochs=60)
    assert im.skill_only
    g = torch.Generator().manual_seed(0)
    B, T = 4, 48
    data = {"rgb_feat": torch.randn(B, T, policy.args.feature_dim, generator=g), "odom": torch.randn(B, T, 3, generator=g),
            "prev_action": torch.randint(0, 4, (B, T), generator=g), "episode_step": torch.arange(T).repeat(B, 1),
            "episode_index": torch.zeros(B, T, dtype=torch.long), "goal": torch.randint(0, 3, (B, T), generator=g),
            "route": torch.randn(B, T, 6, generator=g), "scan": torch.randint(0, 2, (B, T, 12), generator=g).float(),
            "reward": torch.zeros(B, T), "done": torch.zeros(B, T), "schedule": None}
    data["route"][..., 0] = (torch.rand(B, T, generator=g) < 0.7).float()  # a route on ~70% of the steps
    data["label"] = torch.where(data["scan"][..., 1] > 0, 2, 3)  # left where 30 degrees left is free, else right
    data["label_mask"] = data["route"][..., 0].clone()
    before = {n: p.detach().clone() for n, p in policy.named_parameters()}
    on = data["route"][..., 0] > 0
    with torch.no_grad():
        held = policy.forward_sequence({k: data[k] for k in im.keys})[0]
    held_agreement = (held.argmax(-1)[on] == data["label"][on]).float().mean().item()
    assert held_agreement < 0.8
    torch.manual_seed(0)  # the minibatch order
    stats = im.update(data)
    stored = im.stored[-1]
    assert torch.allclose(stored["skill_base"], held, atol=1e-5)  # the head started at zero: base = held logits
    moved = [n for n, p in policy.named_parameters() if not torch.equal(p, before[n])]
    assert moved and all(n.startswith("route_skill.") for n in moved)
    with torch.no_grad():
        logits = policy.forward_sequence({k: data[k] for k in im.keys})[0]
    assert (logits.argmax(-1)[on] == data["label"][on]).float().mean() > 0.95
    assert stats["agreement"] > held_agreement + 0.1  # the mean over all passes, the first ones included
    assert torch.equal(logits[~on], held[~on])  # steps without a route act as the held network does


def _tiny_policy(config: str, extra: tuple[str, ...] = ()):
    from icrl_ros.models import build_policy
    from icrl_ros.sim import make_vec
    from icrl_ros.training.config import TrainConfig

    cfg = TrainConfig.load(config, ["model.d_model=32", "model.n_layers=1", "model.n_heads=4", "ppo.rollout_length=60",
                                    "model.depth_dropout=0.0", *extra])
    env = make_vec(cfg.env.id, 3, seed=0)
    return cfg, env, build_policy(cfg.model_args(**env.model_fields()))


def test_collected_trials_keep_each_steps_own_inputs(one_thread):
    """A stored step keeps the inputs it was acted on: the grid worlds count episode steps in place in one
    array, and the inputs shared it, so every stored step read the trial's last counters (imitation trained
    on inputs it never acted on). Darkroom's episodes are 100 steps: step t of a trial is t mod 100."""
    from icrl_ros.training.imitate import Imitator

    cfg, env, policy = _tiny_policy("config/train/darkroom.yaml", ("ppo.rollout_length=130",))
    data, _ = Imitator(policy, env, cfg, iterations=1, mix_fraction=0.6, vf_coef=0.5).collect(np.random.default_rng(0))
    t = torch.arange(130)
    assert torch.equal(data["episode_step"], (t % 100).expand(3, 130))
    assert torch.equal(data["episode_index"], (t // 100).expand(3, 130))


def test_a_trained_policy_teaches_by_its_action_probabilities(tmp_path, capsys, one_thread):
    """``--teacher-checkpoint``: a ReLIC checkpoint labels an HCAM student's own trials with its action
    probabilities, computed by stepping its own memory on the student's inputs: they equal its whole-trial
    pass over the same history (so it labels what it would do there); the loss is the cross-entropy to
    them and falls as the student fits them; a teacher that reads other inputs, or a scripted teacher as
    well, is refused with what to fix."""
    from icrl_ros.models import save_checkpoint
    from icrl_ros.training.imitate import Imitator, main

    torch.manual_seed(0)
    _, _, teacher = _tiny_policy("config/train/dark_key_to_door.yaml")
    with torch.no_grad():
        teacher.actor.weight.mul_(30.0)  # a decided teacher: near-uniform labels leave nothing to fit
    path = tmp_path / "teacher.pt"
    save_checkpoint(path, teacher)
    cfg, env, student = _tiny_policy("config/train/dark_key_to_door_hcam_imitate.yaml",
                                     ("model.hcam_chunk=8", "model.hcam_top_k=2"))
    im = Imitator(student, env, cfg, iterations=4, mix_fraction=0.6, vf_coef=0.5, teacher_checkpoint=str(path))
    data, stats = im.collect(np.random.default_rng(0))
    soft = data["soft"]
    assert soft.shape == (3, 60, student.args.n_actions) and torch.allclose(soft.sum(-1), torch.ones(3, 60))
    with torch.no_grad():
        whole = torch.softmax(im.teacher.policy.forward_sequence({k: data[k] for k in im.keys})[0].float(), -1)
    assert torch.allclose(soft, whole, atol=1e-4), (soft - whole).abs().max()
    assert "trial_return_normalised" in stats
    d = im.with_returns(data)
    mb = torch.arange(3)
    bc, _, agree, _ = im.losses(d, mb, None)
    with torch.no_grad():
        logp = torch.log_softmax(student.forward_sequence({k: d[k] for k in im.keys})[0].float(), -1)
    assert torch.allclose(bc, -(soft * logp).sum(-1).mean(), atol=1e-5)
    for _ in range(3):
        im.update(data)
    assert im.losses(d, mb, None)[0] < bc - 0.05  # fits the teacher's distribution
    args = ["--config", "config/train/dark_key_to_door_hcam_imitate.yaml", "--run-dir", str(tmp_path / "r"), *TINY]
    dr = tmp_path / "darkroom.pt"
    save_checkpoint(dr, _tiny_policy("config/train/darkroom.yaml")[2])
    assert "must read the student's inputs" in refused(main, [*args, "--teacher-checkpoint", str(dr)], capsys)
    assert "give one" in refused(main, [*args, "--teacher-checkpoint", str(path), "--teacher", "cycle"], capsys)
    assert "no such file" in refused(main, [*args, "--teacher-checkpoint", str(tmp_path / "none.pt")], capsys)


def test_the_frontier_teacher_labels_exploring_steps_from_the_policys_frontier_way():
    """--teacher frontier: the route follower where the route has a way; where neither the route nor the env's
    teacher knows the goal, the same follower toward the frontier waypoint (a turn on the spot at the frontier);
    the env teacher's label elsewhere. goal_known() marks the followers' steps."""
    from icrl_ros.training.teachers import FrontierFollower

    class Env:  # the HouseVecEnv surface the teacher reads
        num_envs = 4
        task = {"teacher": "memory"}
        teacher_action = np.array([1, 1, 1, 1])
        teacher_goal_known = np.array([False, False, True, False])

        def waypoint_actions(self, points, mask):
            self.asked = (np.asarray(points).copy(), np.asarray(mask).copy())
            return np.where(mask, 3, -1)

    env = Env()
    t = FrontierFollower(env, 5.0)
    route = torch.zeros(4, 6)
    route[0, :3] = torch.tensor([1.0, 0.2, 0.0])  # env 0: a way to the goal
    front = torch.zeros(4, 6)
    front[:, 0] = 1.0
    front[:, 1:3] = torch.tensor([0.4, 0.1])
    front[:, 5] = 0.5
    front[3, 1:3], front[3, 5] = torch.tensor([0.02, 0.0]), 0.0  # env 3 stands at its frontier
    labels = t.act({"route": route, "frontier": front})
    # env 0: the route's waypoint; env 1: the frontier's; env 2: the teacher knows the goal; env 3: look round
    assert labels.tolist() == [3, 3, 1, 2]
    points, mask = env.asked
    assert mask.tolist() == [True, True, False, True]
    assert np.allclose(points[0], [1.0, 0.0]) and np.allclose(points[1], [2.0, 0.5])
    assert t.goal_known().tolist() == [True, True, False, True]
    with pytest.raises(ValueError, match="frontier_memory"):
        t.act({"route": route})
