"""house_diagnose's bookkeeping: outcomes split by what the teacher knew, agreement on the policy's states."""

import numpy as np
import pytest
import torch

from icrl_ros.sim.house import STOP
from icrl_ros.training.house_diagnose import Tally

FWD = 1


def step(tally, teach, known, action, done=(False, False), success=(False, False), done_eps=(0, 0)):
    info = [{"success": s} for s in success]
    tally((np.array(teach), np.array(known)), 0, torch.tensor(action), None, np.array(done), info, np.array(done_eps))


def test_outcomes_split_by_what_the_teacher_knew_at_the_episode_start():
    t = Tally(trials=2, episodes=2)
    # trial 0, episode 0: goal unknown at the start, the policy stops where the teacher would not -> wrong stop
    # trial 1, episode 0: goal known, policy and teacher agree, then stop together -> success
    step(t, [FWD, FWD], [False, True], [FWD, FWD])
    step(t, [FWD, STOP], [True, True], [STOP, STOP], done=(True, True), success=(False, True))
    # episode 1: trial 0 knew the goal at the start and ran out of steps; trial 1 did not and ran out too
    step(t, [FWD, FWD], [True, False], [FWD, 2], done=(True, True), success=(False, False), done_eps=(1, 1))
    d = t.summary()
    assert d["all"]["episodes"] == 4
    assert d["goal_known_at_start"]["episodes"] == 2 and d["goal_unknown_at_start"]["episodes"] == 2
    assert d["goal_known_at_start"]["success"] == 0.5 and d["goal_known_at_start"]["timeout"] == 0.5
    assert d["goal_unknown_at_start"]["wrong_stop"] == 0.5 and d["goal_unknown_at_start"]["timeout"] == 0.5
    s = d["steps"]
    assert s["stop_precision"] == 0.5 and s["stop_recall"] == 1.0  # two stops, one where the teacher stopped
    assert s["steps_goal_known"] == 4 and s["steps_goal_unknown"] == 2
    assert s["agreement_goal_known"] == 0.75 and s["agreement_goal_unknown"] == 0.5
    assert d["known_at_start_by_episode"] == [0.5, 0.5]
    assert d["per_trial"] == {"outcome": [[1, 2], [0, 2]], "known_at_start": [[0, 1], [1, 0]]}


def test_steps_after_the_last_episode_are_not_counted():
    t = Tally(trials=1, episodes=1)
    t((np.array([FWD]), np.array([False])), 0, torch.tensor([STOP]), None, np.array([True]), [{"success": False}],
      np.array([1]))  # env already ran its one episode: forced stop, ignored
    assert t.summary()["all"]["episodes"] == 0 and t.summary()["steps"]["steps_goal_unknown"] == 0


def test_paired_gap_of_a_policy_and_its_ablation():
    import pytest

    from icrl_ros.training.house_curves import paired_gap

    a = {"success": np.array([[0, 1, 1], [0, 1, 0]]), "spl": np.array([[0, .5, .5], [0, .5, 0]]),
         "steps": np.array([[200, 50, 50], [200, 50, 200]]), "house_seed": np.array([4, 9])}
    b = {"success": np.array([[0, 0, 0], [0, 1, 0]]), "spl": np.zeros((2, 3)),
         "steps": np.full((2, 3), 200), "house_seed": np.array([4, 9])}
    g = paired_gap(a, b, 2, 3)
    assert g["success"]["gap"] == 0.5 and g["success"]["n"] == 2 and g["success"]["window"] == [2, 3]
    assert g["spl"]["gap"] == 0.375 and g["steps"]["gap"] == -112.5
    with pytest.raises(ValueError, match="not paired"):
        paired_gap(a, {**b, "house_seed": np.array([4, 8])})


def test_teacher_likelihood_per_episode_and_drive_checks():
    import math

    import pytest

    from icrl_ros.training.house_diagnose import TeacherLikelihood
    from icrl_ros.training.house_eval import run_house_trials

    t = TeacherLikelihood(trials=1, episodes=2)
    even = torch.zeros(1, 4)  # uniform over 4 actions: log 1/4 whatever the teacher did
    sure = torch.tensor([[0.0, 20.0, 0.0, 0.0]])  # all but certain of FWD
    t((np.array([FWD]), np.array([True])), 0, torch.tensor([0]), even, np.array([False]), [{}], np.array([0]))
    t((np.array([FWD]), np.array([True])), 0, torch.tensor([0]), sure, np.array([True]), [{}], np.array([0]))
    t((np.array([STOP]), np.array([True])), 0, torch.tensor([0]), sure, np.array([True]), [{}], np.array([1]))
    t((np.array([-1]), np.array([False])), 0, torch.tensor([0]), sure, np.array([True]), [{}], np.array([1]))  # no label
    pe = t.per_episode()
    assert pe["logp"][0, 0] == pytest.approx((math.log(0.25) + 0.0) / 2, abs=1e-6)
    assert pe["agreement"][0].tolist() == [0.5, 0.0] and pe["logp"][0, 1] < -19
    with pytest.raises(ValueError, match="drive"):
        run_house_trials(None, 1, 1, drive="robot")
    with pytest.raises(ValueError, match="teacher="):
        run_house_trials(None, 1, 1, drive="teacher")
    with pytest.raises(ValueError, match="teacher_episodes"):
        run_house_trials(None, 1, 1, teacher_episodes=1)


def test_handover_needs_an_episode_for_the_policy(capsys):
    import pytest

    from icrl_ros.training.house_diagnose import main

    for k in ("3", "-1"):
        with pytest.raises(SystemExit) as e:
            main(["bundles/house_relic_scan", "--handover", k, "--episodes", "3"])
        assert e.value.code != 0
        assert "needs 0 < K < --episodes (3)" in capsys.readouterr().err


def test_stop_views_read_the_heads_at_each_stop_and_the_gate_masks_blind_stops():
    from icrl_ros.training.house_diagnose import StopViews

    class Heads:  # P(in view) of category c is 0.1 + 0.8 c for the 2 categories; distance 1 m
        def object_estimates(self, f, odom):
            p = torch.tensor([[0.1, 0.9]]).expand(f.shape[0], 2)
            return p, torch.zeros(f.shape[0], 2, 2), torch.ones(f.shape[0], 2)

    class Enc:
        heads = Heads()

    class Policy:
        encoder = Enc()

    class Stepper:
        policy, args, wipe_each_episode = Policy(), None, False

        def logits(self, inp):
            return torch.zeros(len(inp["goal"]), 4)  # stop as likely as anything

    inp = {"rgb_feat": torch.zeros(2, 8), "goal": torch.tensor([0, 1]), "odom": torch.zeros(2, 3)}
    views = StopViews(Stepper(), episodes=1)
    assert (views.logits(inp)[:, STOP] == 0).all()
    views(None, 0, torch.tensor([STOP, STOP]), None, np.array([True, True]),
          [{"success": False}, {"success": True}], np.array([0, 0]))
    d = views.summary()
    assert d["wrong_stops"]["n"] == 1 and d["wrong_stops"]["p_goal_below_0.5"] == 1.0
    assert d["right_stops"]["n"] == 1 and abs(d["right_stops"]["p_goal_quartiles"][1] - 0.9) < 1e-6
    gated = StopViews(Stepper(), episodes=1, gate=0.5).logits(inp)
    assert gated[0, STOP] < -1e3 and gated[1, STOP] == 0  # the goal of env 0 is not in view: no stop
    forced = StopViews(Stepper(), episodes=1, gate=0.5, auto=0.85, auto_m=1.0).logits(inp)
    assert forced[1].argmax() == STOP and (forced[1, 1:] < -1e3).all()  # env 1 sees its goal 1 m off: stop
    assert forced[0, STOP] < -1e3 and (forced[0, 1:] == 0).all()


def test_label_noise_the_teacher_is_deterministic_and_pose_noise_flips_labels(tmp_path):
    """house_label_noise: asked again at the same state with no pose noise the teacher gives the same
    label (a fresh plan at zero noise is the same function of the state), and the table and json
    carry every level; a bad --pose-noise exits with a message."""
    import json

    import pytest

    from icrl_ros.experiments import house_label_noise

    house_label_noise.main(["--trials", "1", "--steps", "40", "--pose-noise", "0:0,0.3:15", "--out", str(tmp_path)])
    r = json.loads((tmp_path / "label_noise.json").read_text())["same_label"]
    assert r["pose noise 0.0 m, 0.0 deg"]["all"] == 1.0 and r["pose noise 0.0 m, 0.0 deg"]["n"] == 40
    assert r["pose noise 0.3 m, 15.0 deg"]["all"] < 1.0  # 30 cm / 15 deg changes some labels
    with pytest.raises(SystemExit):
        house_label_noise.main(["--pose-noise", "0.1"])


def test_label_noise_sightings_compare_the_goals_size_with_the_encoders_view(tmp_path):
    """house_label_noise --encoder: every state lands in one size bin with the encoder's P(goal in
    view); first recognitions are at least the teacher's --teacher-pixels; a missing encoder file or
    a size below the recognition rule or a file that is no encoder exits with a message."""
    import json

    import pytest

    from icrl_ros.experiments import house_label_noise

    house_label_noise.main(["--trials", "1", "--steps", "40", "--pose-noise", "0:0", "--teacher-pixels", "20",
                            "--encoder", "checkpoints/house_encoder.pt", "--out", str(tmp_path)])
    s = json.loads((tmp_path / "label_noise.json").read_text())["sightings"]
    assert sum(b["n"] for b in s["by_goal_pixels"]) == 40
    assert all(0 <= b["mean_p"] <= 1 for b in s["by_goal_pixels"] if b["n"])
    first = s["first_recognition"]
    assert first["n"] == 0 or first["quartiles"][0] >= 20
    with pytest.raises(SystemExit):
        house_label_noise.main(["--encoder", str(tmp_path / "none.pt")])
    with pytest.raises(SystemExit):
        house_label_noise.main(["--teacher-pixels", "5"])
    import torch

    torch.save({"w": torch.zeros(1)}, tmp_path / "not_an_encoder.pt")  # a file that is no encoder: a message
    with pytest.raises(SystemExit):
        house_label_noise.main(["--encoder", str(tmp_path / "not_an_encoder.pt")])


def test_pool_joins_evaluations_on_different_seeds(tmp_path, capsys):
    """``house_curves.py pool``: one policy's curves from two evaluation seeds as one run of all
    their trials; the same seed twice (the same trials) is refused."""
    import json

    import pytest

    from icrl_ros.training.house_curves import main, window_rise

    def run(seed: int, success: list[list[int]]) -> str:
        s = np.array(success, dtype=float)
        raw = {"success": s.tolist(), "spl": (s / 2).tolist(), "steps": (200 - 100 * s).tolist(),
               "house_seed": [seed * 10 + i for i in range(len(s))], "goal": (s * 0 + seed % 19).astype(int).tolist()}
        path = tmp_path / f"s{seed}.json"
        path.write_text(json.dumps({"settings": {"seed": seed, "episodes": s.shape[1]}, "raw": {"p": raw}}))
        return str(path)

    a = run(61, [[0, 1, 1, 1], [0, 0, 1, 1]])
    b = run(71, [[1, 1, 1, 1], [0, 1, 0, 1], [0, 0, 0, 0]])
    assert main(["pool", a, b, "--out", str(tmp_path / "pooled"), "--label", "relic"]) == 0
    doc = json.loads((tmp_path / "pooled" / "curves.json").read_text())
    assert doc["settings"]["seed"] == [61, 71] and doc["settings"]["trials"] == 5
    assert len(doc["raw"]["relic"]["success"]) == 5 and len(doc["raw"]["relic"]["house_seed"]) == 5
    assert [g[0] for g in doc["raw"]["relic"]["goal"]] == [61 % 19] * 2 + [71 % 19] * 3  # the goals kept in order
    both = np.array([[0, 1, 1, 1], [0, 0, 1, 1], [1, 1, 1, 1], [0, 1, 0, 1], [0, 0, 0, 0]], dtype=float)
    want = window_rise(both, 1, 3, 4)  # a 4-episode trial: its second half, as summarise reads it
    got = doc["curves"]["relic"]["success"]["rise"]
    assert got["rise"] == pytest.approx(want["rise"]) and got["n"] == 5 and got["window"] == [3, 4]
    assert "5 trials pooled from seeds [61, 71]" in capsys.readouterr().out
    assert (tmp_path / "pooled" / "icl_curve.png").stat().st_size > 0
    with pytest.raises(SystemExit, match="different seeds"):
        main(["pool", a, a])
    with pytest.raises(SystemExit, match="two runs"):
        main(["gap", a, b, a])


def test_memory_readout_scores_the_remembered_goal_at_each_episode_start():
    import pytest

    from icrl_ros.models.encoders import OBJECT_SCALE_M
    from icrl_ros.models.object_memory import STRUCT_DIM, ObjectMemoryHead
    from icrl_ros.training.house_diagnose import MemoryReadout

    head = ObjectMemoryHead(n_cat=3, head_dim=8, d_model=16)

    class Stepper:  # what MemoryReadout needs of a TorchStepper
        policy, args, wipe_each_episode = torch.nn.ModuleList([head]), None, False

    class Envs:  # goal instances per env, in the house frame; the second env's goal moves at its reset
        num_envs, calls = 2, 0

        def call(self, name, frame):
            assert (name, frame) == ("target_positions", "house")
            Envs.calls += 1
            return [np.array([[2.0, 0.0]]), np.array([[0.0, 5.0]] if Envs.calls == 1 else [[9.0, 9.0]])]

    r = MemoryReadout(Stepper(), trials=2, episodes=2)
    r.bind_env(Envs())
    tally = Tally(trials=2, episodes=2)

    def read(mass, est_m):  # the head's output for one step of each env: mass, and est * mass in its units
        y0 = torch.zeros(2, 1, 8)
        y0[:, 0, 2] = torch.tensor(mass)
        y0[:, 0, 0:2] = torch.tensor(est_m) / OBJECT_SCALE_M * torch.tensor(mass)[:, None]
        head.readout(y0, torch.zeros(2, 1, 16 + STRUCT_DIM)[..., -16:])

    def observe(teach, act, done, success, done_eps, geo):
        info = [{"success": s, "geodesic_distance": g} for s, g in zip(success, geo)]
        args = ((np.array(teach), np.array([True, True])), 0, torch.tensor(act), None, np.array(done), info,
                np.array(done_eps))
        tally(*args)
        r(*args)

    # episode 0: env 0 remembers its goal 0.5 m off, env 1 holds no sighting
    read([0.9, 0.1], [[2.0, 0.5], [0.0, 0.0]])
    observe([FWD, FWD], [FWD, FWD], [False, False], [False, False], [0, 0], [4.0, 6.0])
    read([0.9, 0.1], [[2.0, 0.5], [0.0, 0.0]])
    observe([STOP, FWD], [STOP, STOP], [True, True], [True, False], [0, 0], [0.0, 3.0])  # env 0 succeeds; env 1 wrong stop
    # episode 1: env 1 now remembers (0, 5), but its new goal is at (9, 9): a wrong position
    read([0.2, 0.95], [[0.0, 0.0], [0.0, 5.0]])
    observe([FWD, FWD], [FWD, FWD], [True, True], [False, False], [1, 1], [5.0, 7.0])  # both time out
    assert r.mass[0].tolist() == pytest.approx([0.9, 0.2]) and r.mass[1].tolist() == pytest.approx([0.1, 0.95])
    assert r.err[0, 0] == pytest.approx(0.5) and np.isnan(r.err[0, 1]) and np.isnan(r.err[1, 0])
    assert r.err[1, 1] == pytest.approx(np.hypot(9, 4), abs=1e-4)
    assert r.passed_stop.tolist() == [[True, False], [False, False]]
    assert r.closest.tolist() == [[0.0, 5.0], [3.0, 7.0]]
    s = r.summary(tally, late_from=1)
    ok = s["all/goal_known/success"]
    assert ok["episodes"] == 1 and ok["memory_held_goal"] == 1.0 and ok["held_and_right"] == 1.0
    late = s["episodes_2_on/goal_known/timeout"]
    assert late["episodes"] == 2 and late["memory_held_goal"] == 0.5 and late["held_and_right"] == 0.0
    assert late["came_within_1m"] == 0.0 and late["closest_m_median"] == 6.0


def test_route_probe_navigators_run_the_same_episodes_and_the_teacher_starts_blind(tmp_path, capsys):
    """house_route_probe: every navigator meets the same goals and starts (drawn from the seed, whatever
    the actions); the oracle succeeds; the teacher knows no goal at a trial's first step; the table and
    its JSON come out."""
    import json

    from icrl_ros.experiments.house_route_probe import main

    main(["--trials", "2", "--episodes", "2", "--late-from", "1", "--noise", "0", "--navigators", "oracle", "greedy",
          "--out", str(tmp_path)])
    doc = json.loads((tmp_path / "route_probe.json").read_text())
    raw = doc["raw"]
    assert set(raw) == {"teacher", "oracle", "greedy"}
    assert np.all(np.array(raw["oracle"]["success"]) == 1)
    assert np.all(np.array(raw["teacher"]["known"])[:, 0] == 0)  # nothing seen before a trial's first step
    # same episodes whoever drives: every navigator's episodes have the same start-to-goal shortest paths
    assert raw["oracle"]["shortest_m"] == raw["teacher"]["shortest_m"] == raw["greedy"]["shortest_m"]
    assert np.all(np.array(raw["oracle"]["shortest_m"]) > 0) and doc["table"]["oracle"]["success_all"][2] == 4
    assert "| greedy |" in capsys.readouterr().out


def test_route_probe_reads_robot_frame_points_back_into_the_world():
    """teacher_route steers for the route memory's waypoint, given in the robot frame of the house-frame
    odometry: converting a goal instance's odometry-frame position that way lands on the instance."""
    import math

    from icrl_ros.sim.house import HouseEnv
    from icrl_ros.sim.house_oracle import FORWARD, TURN_LEFT, robot_frame_to_world

    env = HouseEnv(split="test")
    try:
        obs, _ = env.reset(seed=7, options={"new_trial": True})
        for a in (TURN_LEFT, TURN_LEFT, FORWARD, TURN_LEFT):  # turn and move, so the pose differs from the frame's origin
            obs, *_ = env.step(a)
        x, y, th = (float(v) for v in obs["odom"])
        o = env.target_instances()[0]
        gx, gy = env.target_positions("house")[0]
        dx, dy = gx - x, gy - y
        fwd, left = math.cos(th) * dx + math.sin(th) * dy, -math.sin(th) * dx + math.cos(th) * dy
        wx, wz = robot_frame_to_world(env, fwd, left)
        assert math.hypot(wx - o.x, wz - o.z) < 1e-6
    finally:
        env.close()


def test_census_classes_take_the_first_matching_reason():
    """Each episode gets one class: success, wrong stop, then for timeouts with the goal's place known at the start:
    whether the robot's encoder had recognised it earlier in the trial; then never seen at 10 px, seen but not
    recognised, recognised but not reached, reached without a stop."""
    from icrl_ros.training.house_census import CLASSES, Census

    c, tally = Census(1, 9, "checkpoints/house_encoder.pt", 64), Tally(1, 9)
    tally.outcome[0] = [0, 1, 2, 2, 2, 2, 2, 2, -1]
    tally.known_at_start[0] = [1, 1, 1, 1, 0, 0, 0, 0, -1]
    c.recognised_before[0] = [True, False, True, False, False, True, False, False, False]
    c.max_px[0] = [50, 0, 0, 0, 9.9, 30, 30, 30, 0]
    c.recognised[0] = [True, False, False, False, False, False, True, True, False]
    c.reached[0] = [True, False, False, False, False, False, False, True, False]
    got = [CLASSES[k] if k >= 0 else None for k in c.classes(tally)[0]]
    assert got == ["success", "wrong_stop", "timeout_goal_recognised_before", "timeout_goal_seen_not_recognised",
                   "never_saw", "saw_not_recognised", "recognised_not_reached", "reached_no_stop", None]
    s = c.summary(tally, late_from=4)
    assert s["episode_1"]["success"] == 1.0 and s["all"]["episodes"] == 8
    assert s["episodes_5_on"]["episodes"] == 4 and s["episodes_5_on"]["reached_no_stop"] == pytest.approx(1 / 4)


def test_goal_sight_sees_the_goal_the_oracle_reaches():
    """The env's privileged goal size in view and reach test: the oracle's successful episode ends with the
    goal in reach and view, covering well over 10 pixels; at the start (>= 3 m away, another room) it is not in reach."""
    from icrl_ros.sim.house import HouseEnv

    env = HouseEnv(split="test")
    env.reset(seed=3)
    assert env.goal_sight()[1] is False
    for _ in range(200):
        px, reach = env.goal_sight()
        goal = env.goal
        _, _, term, trunc, info = env.step(env.oracle_action())
        if term or trunc:
            break
    env.close()
    assert info["success"] and reach and px[goal] >= 10 and px.shape == (19,)
