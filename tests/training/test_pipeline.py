"""training/pipeline.py: stages run in order from the repository root, done stages are skipped on a rerun,
--from redoes a stage onward, a failing stage stops the pipeline with one line and a non-zero status."""

from __future__ import annotations

import json
import subprocess
import sys
import threading

from icrl_ros.training._cli import REPO_ROOT

PIPE = """\
name: tiny
description: a shipped checkpoint copied twice
stages:
  - name: ship
    run: tests/training/pipeline_stage.py checkpoints/darkroom_relic.pt {run}/a.pt
    creates: ["{run}/a.pt"]
  - name: copy
    run: tests/training/pipeline_stage.py {run}/a.pt {run}/b.pt
    creates: ["{run}/b.pt"]
"""


def run(*args):
    return subprocess.run([sys.executable, "training/pipeline.py", *map(str, args)], cwd=REPO_ROOT,
                          capture_output=True, text=True)


def test_pipeline_runs_resumes_and_redoes_from_a_stage(tmp_path):
    f = tmp_path / "tiny.yaml"
    f.write_text(PIPE)
    rd = tmp_path / "run"
    r = run(f, "--run-dir", rd)
    assert r.returncode == 0, r.stdout[-1500:] + r.stderr[-1500:]
    assert "[1/2] ship: done in" in r.stdout and "[2/2] copy: done in" in r.stdout
    record = json.loads((rd / "pipeline.json").read_text())
    assert [record["stages"][s]["exit"] for s in ("ship", "copy")] == [0, 0]
    assert (rd / "logs" / "copy.log").read_text().startswith("$ tests/training/pipeline_stage.py")
    first = (rd / "b.pt").stat().st_mtime_ns

    r = run(f, "--run-dir", rd)  # everything done: nothing runs
    assert r.returncode == 0 and r.stdout.count("done, skipped") == 2
    assert (rd / "b.pt").stat().st_mtime_ns == first
    assert "done" in run(f, "--run-dir", rd, "--list").stdout

    r = run(f, "--run-dir", rd, "--from", "copy")
    assert r.returncode == 0 and "[1/2] ship: done, skipped" in r.stdout and "[2/2] copy: done in" in r.stdout
    assert (rd / "b.pt").stat().st_mtime_ns > first


def test_pipeline_refuses_mistakes_in_one_line(tmp_path):
    f = tmp_path / "tiny.yaml"
    f.write_text(PIPE)
    bad = tmp_path / "bad.yaml"
    bad.write_text(PIPE.replace("checkpoints/darkroom_relic.pt", "checkpoints/no_such.pt"))
    for args, code, words in (((tmp_path / "none.yaml",), 2, "no such pipeline file"),
                              ((f, "--only", "train"), 2, "its stages are ship, copy"),
                              ((bad, "--run-dir", tmp_path / "b"), 1, "stage 'ship' exited with")):
        r = run(*args)
        assert r.returncode == code, r.stderr
        assert words in r.stderr.strip().splitlines()[-1] and "Traceback" not in r.stderr.splitlines()[-1]
    text = tmp_path / "text.yaml"
    text.write_text("stages: [{name: a, run: training/nothing.py, creates: x}]\n")
    r = run(text)
    assert r.returncode == 2 and "not a file of this repository" in r.stderr


def test_a_stage_stopped_by_a_signal_says_to_run_again(tmp_path):
    f = tmp_path / "sig.yaml"
    f.write_text(PIPE.replace("{run}/a.pt {run}/b.pt", "--signal 15"))
    r = run(f, "--run-dir", tmp_path / "run")
    assert r.returncode == 143 and "[1/2] ship: done in" in r.stdout, r.stderr
    last = r.stderr.strip().splitlines()[-1]
    assert "stage 'copy' was stopped by SIGTERM" in last and "run the same command again to go on" in last, last
    r = run(f, "--run-dir", tmp_path / "run", "--from", "ship")  # --from redoes its stage: name the stopped one
    last = r.stderr.strip().splitlines()[-1]
    assert r.returncode == 143 and "go on with --from copy in place of --from ship" in last, last


def test_every_pipeline_file_lists_stages_of_scripts_that_exist():
    """The repository's pipeline files read (--dry-run) and every stage runs a script of the repository."""
    import shlex

    from icrl_ros.training.pipeline import load_pipeline

    files = sorted((REPO_ROOT / "config" / "pipelines").glob("*.yaml"))
    assert files
    for path in files:
        r = run(path, "--dry-run")
        assert r.returncode == 0, (path.name, r.stderr)
        pipe = load_pipeline(str(path))
        for stage in pipe.stages:
            for text in (stage.run, stage.resume):
                if text:
                    script = shlex.split(pipe.expand(text))[0]
                    assert (REPO_ROOT / script).is_file(), (path.name, stage.name, script)
                    assert "{" not in pipe.expand(text), (path.name, stage.name, "a {name} left unexpanded")


def test_a_reader_that_stops_early_gets_no_traceback():
    """`pipeline.py FILE --dry-run | head -1`: the pipeline ends quietly when its reader closes the pipe."""
    proc = subprocess.Popen([sys.executable, "training/pipeline.py", "config/pipelines/house_relic_scan.yaml", "--dry-run"],
                            cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, bufsize=1)
    proc.stdout.readline()
    proc.stdout.close()  # the reader is gone
    err = proc.stderr.read()
    assert proc.wait(timeout=60) in (0, 141) and "Traceback" not in err, err


def test_a_resumed_stage_records_the_command_that_ran_and_the_thread_cap(tmp_path):
    """pipeline.json keeps, per stage, every run since its fresh start: the resume command when it resumed, and the
    --threads cap, which reaches the stage as OMP_NUM_THREADS (a config's ``threads: 0`` follows it)."""
    from icrl_ros.training.pipeline import stage_env

    f = tmp_path / "resume.yaml"
    f.write_text(PIPE.replace('    creates: ["{run}/b.pt"]\n', '    creates: ["{run}/b.pt"]\n'
                              '    resume_if: "{run}/a.pt"\n'
                              '    resume: tests/training/pipeline_stage.py checkpoints/darkroom_relic.pt {run}/b.pt\n'))
    rd = tmp_path / "run"
    r = run(f, "--run-dir", rd, "--threads", "1")
    assert r.returncode == 0, r.stdout[-1500:] + r.stderr[-1500:]
    stages = json.loads((rd / "pipeline.json").read_text())["stages"]
    assert [x["resumed"] for x in stages["ship"]["runs"]] == [False]
    (copy,) = stages["copy"]["runs"]
    assert copy["resumed"] and "checkpoints/darkroom_relic.pt" in copy["ran"] and copy["threads"] == 1
    assert "darkroom" not in stages["copy"]["command"]  # the stage's own command stays the record's
    assert stage_env(1)["OMP_NUM_THREADS"] == "1" and stage_env(0).get("OMP_NUM_THREADS") == __import__("os").environ.get("OMP_NUM_THREADS")
    assert run(f, "--threads", "-1").returncode == 2


def test_a_variant_extends_a_recipe_through_its_vars(tmp_path):
    """``extends`` takes the other file's stages and vars; the variant's ``vars`` override them; a ``{name}`` that no
    file defines, a variant that lists stages of its own and a circle of files are refused in one line."""
    base = tmp_path / "base.yaml"
    base.write_text(PIPE.replace("description:", "vars: {source: checkpoints/darkroom_relic.pt, out: a}\ndescription:")
                    .replace("checkpoints/darkroom_relic.pt {run}/a.pt", "{source} {run}/{out}.pt")
                    .replace('"{run}/a.pt"', '"{run}/{out}.pt"').replace("{run}/a.pt {run}/b.pt", "{run}/{out}.pt {run}/b.pt"))
    variant = tmp_path / "variant.yaml"
    variant.write_text("extends: base.yaml\nname: variant\nvars: {out: c}\n")
    r = run(variant, "--dry-run", "--run-dir", tmp_path / "rv")
    assert r.returncode == 0, r.stderr
    assert f"pipeline_stage.py checkpoints/darkroom_relic.pt {tmp_path}/rv/c.pt" in r.stdout
    assert f"pipeline_stage.py {tmp_path}/rv/c.pt {tmp_path}/rv/b.pt" in r.stdout
    r = run(variant, "--run-dir", tmp_path / "rv")
    assert r.returncode == 0, r.stdout[-1500:] + r.stderr[-1500:]
    assert (tmp_path / "rv" / "c.pt").is_file() and (tmp_path / "rv" / "b.pt").is_file()

    r = run(variant, "--dry-run", "--run-dir", tmp_path / "rv", "--var", "out=d")  # a var replaced for one run
    assert r.returncode == 0 and f"darkroom_relic.pt {tmp_path}/rv/d.pt" in r.stdout, r.stderr
    for bad_var, words in (("nothing=1", "has no var 'nothing'"), ("out", "give NAME=TEXT")):
        r = run(variant, "--dry-run", "--var", bad_var)
        assert r.returncode == 2 and words in r.stderr.strip().splitlines()[-1], r.stderr

    bad = {"unused.yaml": ("extends: base.yaml\nvars: {unused: c}\n", None),
           "typo.yaml": (PIPE.replace("{run}/a.pt {run}/b.pt", "{run}/{nothing}.pt {run}/b.pt"), "uses {nothing}"),
           "own_stages.yaml": ("extends: base.yaml\n" + PIPE.split("\n", 2)[2], "takes its stages"),
           "circle.yaml": ("extends: circle.yaml\n", "goes round in a circle")}
    for name, (text, words) in bad.items():
        f = tmp_path / name
        f.write_text(text)
        r = run(f, "--dry-run")
        if words is None:  # an extra var nobody uses is allowed
            assert r.returncode == 0, r.stderr
            continue
        assert r.returncode == 2 and words in r.stderr.strip().splitlines()[-1], (name, r.stderr)


def test_a_stage_finished_meanwhile_by_another_run_is_skipped(tmp_path):
    """The pipeline checks each stage's outputs when it reaches the stage, not only at its start, so a stage run beside
    it (``--only STAGE`` in a second process) is not run twice; the record keeps both runs' stages."""
    f = tmp_path / "tiny.yaml"
    f.write_text(PIPE.replace('creates: ["{run}/b.pt"]', 'creates: ["{run}/a.pt"]'))  # 'ship' also makes copy's output
    rd = tmp_path / "run"
    (rd).mkdir()
    (rd / "pipeline.json").write_text(json.dumps({"pipeline": str(f), "stages": {"other": {"exit": 0}}}))
    r = run(f, "--run-dir", rd)
    assert r.returncode == 0, r.stdout[-1500:] + r.stderr[-1500:]
    assert "[1/2] ship: done in" in r.stdout and "[2/2] copy: done, skipped" in r.stdout
    assert not (rd / "b.pt").exists()
    assert set(json.loads((rd / "pipeline.json").read_text())["stages"]) == {"other", "ship"}


def test_a_stage_another_run_holds_is_waited_for_and_a_dead_runs_lock_is_taken_over(tmp_path):
    f = tmp_path / "tiny.yaml"
    f.write_text(PIPE)
    rd = tmp_path / "run"
    (rd / "logs").mkdir(parents=True)
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3)"])
    reaper = threading.Thread(target=holder.wait)  # reaped when it ends: a zombie would still count as alive
    reaper.start()
    (rd / "logs" / "ship.lock").write_text(str(holder.pid))  # a live run is on 'ship'
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (rd / "logs" / "copy.lock").write_text(str(dead.pid))  # left by a run that was killed
    r = run(f, "--run-dir", rd)
    reaper.join()
    assert r.returncode == 0, r.stdout[-1500:] + r.stderr[-1500:]
    assert f"stage 'ship' is running in process {holder.pid}: waiting for it" in r.stdout
    assert "[1/2] ship: done in" in r.stdout and "[2/2] copy: done in" in r.stdout
    assert not list((rd / "logs").glob("*.lock"))
