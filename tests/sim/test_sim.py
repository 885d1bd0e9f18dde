import gymnasium as gym
import numpy as np
import pytest

import icrl_ros.sim as sim
from icrl_ros.sim import DarkKeyToDoorVecEnv, DarkroomVecEnv, make_vec


@pytest.mark.parametrize("env_id", sorted(sim.GRID_ENVS))
def test_conformance(env_id):
    """Every registered env: Gymnasium checker, determinism under a seed, trial semantics."""
    from gymnasium.utils.env_checker import check_env

    env = gym.make(env_id).unwrapped
    check_env(env, skip_render_check=True)
    a, b = make_vec(env_id, 8, seed=3), make_vec(env_id, 8, seed=3)
    oa, ob = a.reset_trial(), b.reset_trial()
    acts = np.random.default_rng(0).integers(0, a.n_actions, size=(200, 8))
    for act in acts:
        ra, rb = a.step(act), b.step(act)
        assert np.array_equal(ra[0], rb[0]) and np.array_equal(ra[1], rb[1])
        assert (a.episode_step < a.max_episode_steps).all()


def test_darkroom_split_and_goals():
    train, test = DarkroomVecEnv(1, "train"), DarkroomVecEnv(1, "test")
    assert len(train.goal_pool) == 80 and len(test.goal_pool) == 20
    assert not set(train.goal_pool) & set(test.goal_pool)
    assert np.array_equal(np.sort(np.concatenate([train.goal_pool, test.goal_pool])), np.arange(100))


def test_darkroom_oracle_matches_a_scripted_optimal_agent():
    env = DarkroomVecEnv(100, "all")
    env.set_tasks(np.arange(100))
    total = np.zeros(100)
    for _ in range(300):  # 3 episodes: walk right (x) then up (y), then stay
        x, y = env.pos[:, 0], env.pos[:, 1]
        act = np.where(x < env.goal[:, 0], 3, np.where(y < env.goal[:, 1], 0, 4))
        _, r, done, _ = env.step(act)
        total += r
    assert np.array_equal(total, env.oracle_trial_return(300))
    assert total.max() == 300 and total.min() == 3 * (100 + 1 - 18)


def test_darkroom_keeps_goal_across_episodes_and_reset_trial_changes_it():
    env = DarkroomVecEnv(16, "train", seed=0)
    env.reset_trial()
    goal = env.goal.copy()
    for _ in range(250):
        env.step(np.zeros(16, dtype=int))
    assert np.array_equal(env.goal, goal)
    env.reset_trial()
    assert not np.array_equal(env.goal, goal)


def test_key_to_door_rewards_and_oracle():
    env = DarkKeyToDoorVecEnv(1, "all")
    env.set_tasks(np.array([[0, 2, 2 * 9 + 2]]))  # start (0,0), key (0,2), door (2,2)
    plan = [0, 0, 3, 3]  # up, up (key), right, right (door)
    rewards = []
    for a in plan:
        _, r, done, info = env.step(np.array([a]))
        rewards.append(r[0])
    assert rewards == [0, 1, 0, 1] and done[0] and info["terminated"][0]
    assert env.pos[0].tolist() == [0, 0] and not env.has_key[0]  # reset to the trial's start
    assert info["final_obs"][0] == 2 * 9 + 2 and env.observe()[0] == 0  # the door, seen only there
    # the oracle collects 2 per 4-step episode: 500 // 4 = 125 episodes
    assert env.oracle_trial_return(500)[0] == 250
    assert env.oracle_trial_return(6)[0] == 2 + 1


def test_key_to_door_door_without_key_gives_nothing():
    env = DarkKeyToDoorVecEnv(1, "all")
    env.set_tasks(np.array([[0, 80, 2]]))  # door at (0,2), key far away
    for a in [0, 0]:
        _, r, done, _ = env.step(np.array([a]))
        assert r[0] == 0 and not done[0]


def test_key_to_door_split_is_disjoint():
    train = DarkKeyToDoorVecEnv(256, "train", seed=0)
    test = DarkKeyToDoorVecEnv(256, "test", seed=0)
    train.reset_trial()
    test.reset_trial()
    cells = lambda e: {tuple(x) for x in np.concatenate([e.start, e.key, e.door], 1).tolist()}  # noqa: E731
    assert not cells(train) & cells(test)


def test_unknown_env_id_lists_known_ids():
    with pytest.raises(ValueError, match="known ids"):
        make_vec("icrl_ros/Nope-v0", 1)
    with pytest.raises(ValueError, match="split"):
        DarkroomVecEnv(1, "validation")
