"""The training and evaluation CLIs end to end on tiny budgets (real processes)."""

import json
import signal
import os
import subprocess
import sys

import pytest
import torch

from icrl_ros.training.evaluate import main as evaluate_main

TINY = ["--set", "env.num_envs=4", "--set", "ppo.rollout_length=64", "--set", "total_steps=512",
        "--set", "model.d_model=32", "--set", "model.n_layers=1", "--set", "model.n_heads=4", "--no-progress"]


def run(args, **kw):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=300, env=env, **kw)


def refused(main, argv, capsys) -> str:
    """Run a CLI's ``main`` in this process (a fresh interpreter per refusal cost ~5 s each) and return what
    it printed to stderr; it must exit non-zero through SystemExit (any other exception fails the test, as a
    traceback would in the subprocess)."""
    capsys.readouterr()
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code not in (0, None)
    return capsys.readouterr().err


def test_train_resume_and_evaluate(tmp_path, capsys):
    r = run(["training/train.py", "--config", "config/train/darkroom.yaml", "--run-dir", str(tmp_path / "a"), *TINY])
    assert r.returncode == 0, r.stderr
    ckpt = tmp_path / "a" / "checkpoints" / "final.pt"
    blob = torch.load(ckpt, weights_only=False)
    assert blob["rollout"] == 2 and blob["env_steps"] == 512
    assert (tmp_path / "a" / "tb").is_dir()
    # resume continues the schedule instead of restarting it
    r = run(["training/train.py", "--config", "config/train/darkroom.yaml", "--run-dir", str(tmp_path / "a"),
             "--resume", str(tmp_path / "a" / "checkpoints" / "latest.pt"), *TINY[:-1], "--set", "total_steps=1024",
             "--no-progress"])
    assert r.returncode == 0, r.stderr
    assert "rollout 3/4" in r.stdout and "rollout 1/4" not in r.stdout
    out = tmp_path / "eval"
    r = run(["training/evaluate.py", str(ckpt), "--trials", "4", "--steps", "250", "--out", str(out),
             "--temperature", "0.5"])
    assert r.returncode == 0, r.stderr
    res = json.loads((out / "eval.json").read_text())
    (label, data), = res.items()
    assert [row["episode"] for row in data["episodes"]][:2] == [1, 2] and data["trials"] == 4
    assert data["temperature"] == 0.5 and data["greedy"] is False
    k = data["episodes_all_trials"]  # fixed-step trials: the all-trial prefix, then survivors only
    assert all(row["n"] == 4 for row in data["episodes"][:k]) and all(row["n"] < 4 for row in data["episodes"][k:])
    assert "--temperature must be positive" in refused(evaluate_main, [str(ckpt), "--temperature", "0", "--out", str(out)],
                                                       capsys)
    assert (out / "icl_curve.png").stat().st_size > 1000


def test_bad_config_fails_at_start_with_the_field():
    """The real process once (exit status, no traceback) ..."""
    r = run(["training/train.py", "--config", "config/train/darkroom.yaml", "--set", "env.id=Nope-v0", "--no-progress"])
    assert r.returncode != 0 and "env.id" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.parametrize(
    "args,needle",
    [(["--set", "model.sink=sinky"], "model.sink"), (["--set", "ppo.num_updates=-1"], "ppo.num_updates"),
     (["--config", "missing.yaml"], "missing.yaml"), (["--set", "ppo.teacher=cycle"], "does not play darkroom")],
)
def test_bad_config_is_refused_with_the_field(args, needle, capsys, one_thread):
    """... and the other refusals through the same ``main``, in process."""
    from icrl_ros.training.train import main

    assert needle in refused(main, ["--config", "config/train/darkroom.yaml", *args, "--no-progress"], capsys)


@pytest.mark.slow  # ~21 s, two training processes; `make test-all` runs it (make test sat at the 8-minute line)
def test_torchrun_two_processes_gloo(tmp_path):
    torchrun = os.path.join(os.path.dirname(sys.executable), "torchrun")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MASTER_ADDR": "127.0.0.1"}
    r = subprocess.run([torchrun, "--standalone", "--nproc_per_node", "2", "training/train.py", "--config",
                        "config/train/darkroom.yaml", "--run-dir", str(tmp_path / "d"), *TINY[:-1],
                        "--set", "total_steps=1024", "--no-progress"],
                       capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "2 process(es)" in r.stdout
    assert torch.load(tmp_path / "d" / "checkpoints" / "final.pt", weights_only=False)["env_steps"] == 1024


def test_evaluate_merge_combines_stored_results_and_refuses_bad_files(tmp_path, capsys):
    def result(means):
        return {"env": "icrl_ros/Darkroom-v0", "split": "test", "trials": 4, "memory_bytes": 1024,
                "memory_tokens_at_end": 8, "episodes": [{"episode": i + 1, "mean": m, "ci95": 1.0, "n": 4}
                                                        for i, m in enumerate(means)],
                "trial_return": {"mean": 1.0, "ci95": 0.1, "oracle_normalised": 0.5, "oracle_normalised_ci95": 0.1}}

    (tmp_path / "a.json").write_text(json.dumps({"relic": result([30.0, 80.0])}))
    (tmp_path / "b.json").write_text(json.dumps({"memo": result([25.0, 70.0, 75.0])}))
    r = run(["training/evaluate.py", "--merge", str(tmp_path / "a.json"), str(tmp_path / "b.json"),
             "--out", str(tmp_path / "all")])
    assert r.returncode == 0, r.stderr
    merged = json.loads((tmp_path / "all" / "eval.json").read_text())
    assert list(merged) == ["relic", "memo"] and merged["memo"]["episodes"][2]["mean"] == 75.0
    assert (tmp_path / "all" / "icl_curve.png").stat().st_size > 0
    assert "80.00" in r.stdout and "75.00" in r.stdout
    err = refused(evaluate_main, ["--merge", str(tmp_path / "a.json"), str(tmp_path / "a.json"), "--out",
                                  str(tmp_path / "dup")], capsys)
    assert "labels repeat" in err
    (tmp_path / "bad.json").write_text(json.dumps({"x": 1}))
    assert "not an eval.json" in refused(evaluate_main, ["--merge", str(tmp_path / "bad.json")], capsys)


def test_curves_mark_episodes_only_some_trials_reached(tmp_path):
    import numpy as np

    from icrl_ros.training.evaluate import episode_rows, episodes_all_trials, plot, print_table

    # 4 fixed-step trials: all finish 2 episodes, two finish a 3rd, one a 4th (the fast one, high return)
    R = np.array([[1, 2, np.nan, np.nan], [1, 2, 3, np.nan], [1, 2, 3, 9], [1, 2, np.nan, np.nan]], float)
    rows = episode_rows(R)
    assert [r["n"] for r in rows] == [4, 4, 2, 1] and rows[3]["mean"] == 9.0
    assert episodes_all_trials(rows, 4) == 2 and episodes_all_trials(rows[:2], 4) == 2
    result = {"env": "icrl_ros/Darkroom-v0", "split": "test", "trials": 4, "episodes": rows, "memory_bytes": 0,
              "memory_tokens_at_end": 0,
              "trial_return": {"mean": 1.0, "ci95": 0.1, "oracle_normalised": 0.5, "oracle_normalised_ci95": 0.1}}
    print_table([result], ["x"])
    plot([result], ["x"], tmp_path / "c.png")
    assert (tmp_path / "c.png").stat().st_size > 1000


def test_table_marks_survivor_rows(capsys, tmp_path):
    import numpy as np

    from icrl_ros.training.evaluate import episode_rows, print_table

    rows = episode_rows(np.array([[1, 2, 3], [1, 2, np.nan]], float))
    print_table([{"trials": 2, "episodes": rows, "memory_bytes": 0, "memory_tokens_at_end": 0,
                  "trial_return": {"mean": 1.0, "ci95": 0.1, "oracle_normalised": 0.5, "oracle_normalised_ci95": 0.1}}],
                ["x"])
    lines = capsys.readouterr().out.splitlines()
    assert lines[2].rstrip().endswith("(n=  2)") and lines[3].rstrip().endswith("(n=  1)*")
    assert any("faster trials only" in line for line in lines)


def test_seed_groups_summarise_seeds_and_the_difference():
    from icrl_ros.training.evaluate import seed_groups

    def res(x):
        return {"trial_return": {"oracle_normalised": x}}

    labels = ["relic/s0", "relic/s1", "relic/s2", "memo/s0", "memo/s1", "memo/s2", "single",
              "radt/checkpoint", "radt/bundle"]
    vals = [0.5, 0.6, 0.7, 0.6, 0.7, 0.8, 0.1, 0.3, 0.3]
    g = seed_groups([res(v) for v in vals], labels)
    assert list(g) == ["relic", "memo"]  # "single" and radt's two paths name no seed
    assert abs(g["relic"]["mean"] - 0.6) < 1e-9 and abs(g["relic"]["std"] - 0.1) < 1e-9
    assert abs(g["relic"]["ci95"] - 4.303 * 0.1 / 3 ** 0.5) < 1e-6  # t(2 df)
    v = g["memo"]["vs"]
    assert v["baseline"] == "relic" and abs(v["diff"] - 0.1) < 1e-9
    assert abs(v["welch_df"] - 4.0) < 1e-9 and abs(v["ci95"] - 2.776 * (0.02 / 3) ** 0.5) < 1e-6


def test_evaluate_runs_a_grid_world_bundle_as_its_checkpoint(tmp_path, capsys):
    """A directory must be a bundle. A grid-world bundle runs through PolicyRunner (ONNX Runtime)
    with its manifest's memory, on the tasks and seeds its checkpoint is evaluated on: with the
    same memory (full) the two give the same episodes; memory sizes stay the manifest's."""
    (tmp_path / "empty").mkdir()
    assert "not a bundle" in refused(evaluate_main, [str(tmp_path / "empty"), "--trials", "1"], capsys)
    bundle = tmp_path / "darkroom"
    r = run(["training/export.py", "checkpoints/darkroom_relic.pt", "--out", str(bundle)])
    assert r.returncode == 0, r.stderr
    out = tmp_path / "eval"
    r = run(["training/evaluate.py", "checkpoints/darkroom_relic.pt", str(bundle), "--label", "torch", "--label",
             "bundle", "--memory", "full", "--trials", "4", "--steps", "300", "--seed", "2", "--out", str(out)])
    assert r.returncode == 0, r.stderr
    doc = json.loads((out / "eval.json").read_text())
    got = doc["bundle"]
    assert got["bundle"] and got["backend"] == "onnxruntime" and got["memory"] == "full" and got["temperature"] == 1.0
    assert [e["mean"] for e in got["episodes"]] == [e["mean"] for e in doc["torch"]["episodes"]]
    assert len(got["episodes"]) == 3 and got["trial_return"]["mean"] > 0
    assert "manifest's" in refused(evaluate_main, [str(bundle), "--max-chunks", "4", "--trials", "1", "--out", str(out)],
                                   capsys)

@pytest.mark.parametrize("sig", [signal.SIGINT, pytest.param(signal.SIGTERM, marks=pytest.mark.slow)])  # one path
def test_interrupted_training_saves_and_resumes_without_its_config(sig, tmp_path):
    """Ctrl-C (or kill) mid-run: a resumable checkpoint at the last finished rollout, one line naming the
    command, exit 128 + the signal; that command (no --config: the checkpoint carries it) finishes the run. The run
    starts with SIGINT ignored, as a background job of a script (or a test runner's worker) does: it still obeys."""
    run_dir = tmp_path / "r"
    tiny = [*TINY[:-3], "--set", "total_steps=4096", "--no-progress"]  # 16 rollouts of 256 steps
    proc = subprocess.Popen([sys.executable, "training/train.py", "--config", "config/train/darkroom.yaml",
                             "--run-dir", str(run_dir), *tiny], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env={**os.environ, "OMP_NUM_THREADS": "1"},
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    for line in proc.stdout:
        if line.startswith("rollout 2/16"):
            break
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + sig, err
    last = err.strip().splitlines()[-1]
    assert "saved" in last and "Resume with: python training/train.py --resume" in last and "Traceback" not in err
    blob = torch.load(run_dir / "checkpoints" / "latest.pt", weights_only=False)
    assert 2 <= blob["rollout"] < 16 and "optimizer" in blob
    r = run(["training/train.py", "--resume", str(run_dir / "checkpoints" / "latest.pt"), "--no-progress"])
    assert r.returncode == 0, r.stderr
    assert f"rollout {blob['rollout'] + 1}/16" in r.stdout and "rollout 1/16" not in r.stdout
    assert torch.load(run_dir / "checkpoints" / "final.pt", weights_only=False)["rollout"] == 16


def test_a_wrong_file_is_refused_in_one_line(tmp_path, capsys):
    """A text file as config or checkpoint, a bundle directory where a checkpoint goes, nonsense sizes:
    one line saying what is wrong, a non-zero exit, no traceback (train, evaluate, export)."""
    from icrl_ros.training.export import main as export_main
    from icrl_ros.training.train import main as train_main

    text = tmp_path / "notes.txt"
    text.write_text("# not a config\n- just: [a list\n")
    assert "not YAML" in refused(train_main, ["--config", str(text)], capsys)
    assert "not a torch checkpoint file" in refused(train_main, ["--resume", str(text)], capsys)
    assert "a shipped checkpoint" in refused(train_main, ["--resume", "checkpoints/darkroom_relic.pt"], capsys)
    assert "--config: give a training config" in refused(train_main, [], capsys)
    assert "not a torch checkpoint file" in refused(evaluate_main, [str(text), "--out", str(tmp_path / "e")], capsys)
    assert "not a torch checkpoint file" in refused(export_main, [str(text), "--out", str(tmp_path / "x")], capsys)
    err = refused(export_main, ["bundles/house_relic", "--out", str(tmp_path / "y")], capsys)
    assert "a bundle directory" in err and "no such file" not in err
    assert "--verify-steps must be" in refused(export_main, ["checkpoints/darkroom_relic.pt", "--out",
                                                             str(tmp_path / "z"), "--verify", "--verify-steps", "-5"],
                                               capsys)


def test_default_labels_name_the_run_or_bundle_not_a_folder_above_it(tmp_path):
    from icrl_ros.training.evaluate import default_label

    (tmp_path / "runs" / "pipelines" / "house_x" / "bundle").mkdir(parents=True)
    (tmp_path / "bundles" / "house_y").mkdir(parents=True)
    assert default_label(str(tmp_path / "runs" / "pipelines" / "house_x" / "bundle")) == "house_x"
    assert default_label(str(tmp_path / "bundles" / "house_y")) == "house_y"
    assert default_label("runs/darkroom/checkpoints/final.pt") == "darkroom"
    assert default_label("checkpoints/house_relic_scan.pt") == "house_relic_scan"
