"""Rebuild a shipped policy from one file that lists its stages, resumable stage by stage.

    python training/pipeline.py config/pipelines/darkroom_relic.yaml            # run what is not done yet
    python training/pipeline.py config/pipelines/house_relic_scan.yaml --list   # stages and whether done
    python training/pipeline.py PIPELINE --dry-run        # the commands, nothing run
    python training/pipeline.py PIPELINE --from dagger    # redo that stage and every one after it
    python training/pipeline.py PIPELINE --only evaluate  # one stage (its inputs must exist)

A pipeline file (YAML)::

    name: darkroom_relic
    description: one line on what it builds
    run_dir: runs/pipelines/darkroom_relic   # where every stage writes ({run} below)
    stages:
      - name: train
        run: training/train.py --config config/train/darkroom.yaml --run-dir {run}/train
        creates: [{run}/train/checkpoints/final.pt]      # the stage is done when these exist
        resume_if: {run}/train/checkpoints/latest.pt     # optional: a half-done stage resumes ...
        resume: training/train.py --resume {run}/train/checkpoints/latest.pt   # ... with this command

``run`` is a script of this repository with its arguments (run with this Python, from the repository
root); ``{run}`` is the run directory. ``vars`` names text that ``{name}`` stands for in the commands and
paths (a value may itself hold ``{run}``), and ``extends: other.yaml`` (beside this file) takes that
file's stages and vars, which this file's ``vars`` override: a variant of a recipe is its differences::

    extends: house_relic_scan.yaml
    name: house_relic_scan_patch128
    vars:
      encoder_options: --image-size 128 --stem patch
      student: --set model.pretrained_encoder={run}/encoder/encoder.pt --set env.options.image_size=128

A stage whose ``creates`` all exist is skipped, so after a crash, a Ctrl-C or a lost machine the same
command carries on at the first stage not done. Every stage's output goes to ``{run}/logs/<stage>.log``
and to the terminal; ``{run}/pipeline.json`` records each stage's command, exit status and wall time. A
stage that needs none of the ones before it can run beside them (``--only STAGE`` in a second process,
e.g. a teacher's pool on the second core): a run skips a stage whose outputs exist when it reaches it, and
waits for a stage another run is running (``{run}/logs/<stage>.lock``). The last stage of a shipped
policy's pipeline is its held-out evaluation, so a rebuild ends with the curve to compare with the
shipped one.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from icrl_ros.training._cli import REPO_ROOT, fail, run_main


@dataclass
class Stage:
    name: str
    run: str
    creates: list[str]
    resume_if: str = ""
    resume: str = ""
    note: str = ""


@dataclass
class Pipeline:
    name: str
    run_dir: Path
    stages: list[Stage]
    description: str = ""
    path: Path = field(default_factory=Path)
    vars: dict[str, str] = field(default_factory=dict)

    def expand(self, text: str) -> str:
        return substitute(text, self.vars).replace("{run}", str(self.run_dir))

    def done(self, s: Stage) -> bool:
        return all((REPO_ROOT / self.expand(c)).exists() for c in s.creates)

    def command(self, s: Stage) -> tuple[list[str], bool]:
        """(argv, resumed) of a stage: its ``resume`` command when ``resume_if`` exists."""
        resumed = bool(s.resume and s.resume_if and (REPO_ROOT / self.expand(s.resume_if)).exists())
        words = shlex.split(self.expand(s.resume if resumed else s.run))
        return [sys.executable, *words], resumed


VAR = re.compile(r"\{(\w+)\}")
"""``{name}`` in a stage's command or paths: ``run`` (the run directory) or one of the file's ``vars``."""


def substitute(text: str, variables: dict[str, str]) -> str:
    """``text`` with each ``{name}`` of ``variables`` replaced by its value (others, ``{run}`` among them, kept)."""
    return VAR.sub(lambda m: variables.get(m.group(1), m.group(0)), text)

TOP_KEYS = ("name", "description", "run_dir", "stages", "vars", "extends")


def _read(path: Path, chain: tuple[Path, ...] = ()) -> dict:
    """A pipeline file as a mapping, with what it ``extends`` merged under it (its stages and vars)."""
    if not path.is_file():
        raise ValueError(f"{path}: no such pipeline file (see config/pipelines/)")
    try:
        d = yaml.safe_load(path.read_text())
    except yaml.YAMLError as e:
        raise ValueError(f"{path}: not YAML ({str(e).splitlines()[0]})") from None
    if not isinstance(d, dict):
        raise ValueError(f"{path}: expected a mapping with 'name' and a non-empty list 'stages'")
    unknown = set(d) - set(TOP_KEYS)
    if unknown:
        raise ValueError(f"{path}: unknown keys {sorted(unknown)} ({', '.join(TOP_KEYS)})")
    own_vars = d.get("vars") or {}
    if not isinstance(own_vars, dict) or not all(isinstance(v, (str, int, float)) for v in own_vars.values()):
        raise ValueError(f"{path}: 'vars' must map names to text")
    if "extends" in d:
        base_path = path.parent / str(d["extends"])
        if base_path.resolve() in chain:
            raise ValueError(f"{path}: 'extends' goes round in a circle through {base_path}")
        base = _read(base_path, (*chain, path.resolve()))
        if "stages" in d:
            raise ValueError(f"{path}: a file that extends {d['extends']} takes its stages; change them through 'vars'")
        d = {**d, "stages": base["stages"], "vars": {**base.get("vars", {}), **own_vars}}
    return d


def load_pipeline(path: str, run_dir: str | None = None, overrides: dict[str, str] | None = None) -> Pipeline:
    """Read and check a pipeline file; ValueError says what is wrong in one line. ``overrides`` replace the
    file's ``vars`` (each must be one of them)."""
    p = Path(path)
    d = _read(p)
    if not isinstance(d.get("stages"), list) or not d["stages"]:
        raise ValueError(f"{path}: expected a mapping with 'name' and a non-empty list 'stages'")
    variables = {str(k): str(v) for k, v in (d.get("vars") or {}).items()}
    for k, v in (overrides or {}).items():
        if k not in variables:
            raise ValueError(f"--var {k}: {path} has no var {k!r} (its vars: {', '.join(sorted(variables)) or 'none'})")
        variables[k] = v
    if "run" in variables:
        raise ValueError(f"{path}: 'run' is the run directory; give the variable another name")
    stages, seen = [], set()
    for k, s in enumerate(d["stages"]):
        if not isinstance(s, dict) or not s.get("name") or not s.get("run"):
            raise ValueError(f"{path}: stage {k + 1} needs a 'name' and a 'run' command")
        extra = set(s) - {"name", "run", "creates", "resume_if", "resume", "note"}
        if extra:
            raise ValueError(f"{path}: stage {s['name']!r}: unknown keys {sorted(extra)}")
        if s["name"] in seen:
            raise ValueError(f"{path}: two stages named {s['name']!r}")
        seen.add(s["name"])
        creates = s.get("creates") or []
        creates = [creates] if isinstance(creates, str) else list(creates)
        if not creates:
            raise ValueError(f"{path}: stage {s['name']!r} needs 'creates' (the files that show it is done)")
        for text in (s["run"], s.get("resume", ""), s.get("resume_if", ""), *creates):
            for name in VAR.findall(substitute(text, variables)):
                if name != "run":
                    raise ValueError(f"{path}: stage {s['name']!r} uses {{{name}}}, which is not in 'vars' "
                                     f"({', '.join(sorted(variables)) or 'none'})")
        script = shlex.split(substitute(s["run"], variables))[0]
        if not (REPO_ROOT / script).is_file():
            raise ValueError(f"{path}: stage {s['name']!r} runs {script}, which is not a file of this repository")
        stages.append(Stage(s["name"], s["run"], creates, s.get("resume_if", ""), s.get("resume", ""), s.get("note", "")))
    name = str(d.get("name") or p.stem)
    return Pipeline(name, Path(run_dir or d.get("run_dir") or f"runs/pipelines/{name}"), stages,
                    str(d.get("description", "")), p, variables)


def run_stage(argv: list[str], resumed: bool, log: Path, threads: int = 0) -> tuple[int, float]:
    """Run a stage's command (:meth:`Pipeline.command`) from the repository root, its output to the terminal and
    ``log``; (exit status, wall s). SIGINT / SIGTERM go to the stage (which saves what it can) and end the pipeline
    after it. ``threads`` > 0 caps the stage's torch / OpenMP threads (``OMP_NUM_THREADS``), which a config's
    ``threads: 0`` follows."""
    log.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    with log.open("a") as f:
        f.write(f"$ {shlex.join(argv[1:])}{'  (resumed)' if resumed else ''}\n")
        f.flush()
        proc = subprocess.Popen(argv, cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                bufsize=1, env=stage_env(threads))
        stop = []

        def forward(signum, frame):
            stop.append(signum)
            proc.send_signal(signum)

        old = {sig: signal.signal(sig, forward) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            for line in proc.stdout:
                sys.stdout.write(line)
                f.write(line)
            rc = proc.wait()
        finally:
            for sig, h in old.items():
                signal.signal(sig, h)
    if stop and rc == 0:
        rc = 128 + stop[0]
    return rc, time.perf_counter() - t0


def stage_lock(path: Path, name: str, poll_s: float = 2.0) -> Path:
    """Hold ``path`` (it names this process) while a stage runs, so that two runs of one pipeline never run the same
    stage at once: while another live process holds it, wait; a lock whose process is gone is taken over."""
    path.parent.mkdir(parents=True, exist_ok=True)
    waiting = False
    while True:
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            try:
                pid = int(path.read_text().strip() or 0)
            except (OSError, ValueError):
                pid = 0
            if pid > 0 and _alive(pid):
                if not waiting:
                    print(f"stage {name!r} is running in process {pid}: waiting for it", flush=True)
                    waiting = True
                time.sleep(poll_s)
            else:
                path.unlink(missing_ok=True)
            continue
        with os.fdopen(fd, "w") as f:
            f.write(str(os.getpid()))
        return path


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, another user's
        pass
    return True


def stage_env(threads: int) -> dict[str, str]:
    """The environment of a stage: this one, unbuffered, with ``threads`` > 0 as the OpenMP / MKL thread count."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    if threads > 0:
        env.update(OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    return env


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("pipeline", help="a pipeline file (config/pipelines/*.yaml)")
    ap.add_argument("--run-dir", help="where the stages write (default: the file's run_dir)")
    ap.add_argument("--list", action="store_true", help="print the stages and whether each is done, run nothing")
    ap.add_argument("--dry-run", action="store_true", help="print the commands that would run, run nothing")
    ap.add_argument("--from", dest="start", metavar="STAGE", help="redo this stage and every one after it")
    ap.add_argument("--only", metavar="STAGE", help="run this stage alone (done or not)")
    ap.add_argument("--var", action="append", default=[], metavar="NAME=TEXT",
                    help="replace one of the file's vars for this run (repeatable), e.g. a seed for a second "
                         "draw of a recipe: --var 'student=... --set seed=2' (give it its own --run-dir)")
    ap.add_argument("--threads", type=int, default=0,
                    help="torch threads of every stage (OMP_NUM_THREADS; default: the stage's own). Give 1 when "
                         "other jobs share the cores: torch's threads spinning against another process made "
                         "small matrix products over 100x slower on a 2-core machine")
    args = ap.parse_args(argv)
    if args.threads < 0:
        fail(f"--threads {args.threads}: give a count >= 1, or 0 for each stage's own")
    overrides = {}
    for v in args.var:
        name, eq, text = v.partition("=")
        if not eq or not name:
            fail(f"--var {v!r}: give NAME=TEXT, NAME one of the pipeline file's vars")
        overrides[name.strip()] = text
    try:
        pipe = load_pipeline(args.pipeline, args.run_dir, overrides)
    except ValueError as e:
        fail(str(e))
    names = [s.name for s in pipe.stages]
    for opt in (args.start, args.only):
        if opt is not None and opt not in names:
            fail(f"no stage {opt!r} in {args.pipeline}: its stages are {', '.join(names)}")
    if args.start and args.only:
        fail("--from and --only: give one")
    first = names.index(args.start) if args.start else 0
    todo = []
    for k, s in enumerate(pipe.stages):
        if args.only:
            todo.append(s.name == args.only)
        else:
            todo.append(k >= first if args.start else not pipe.done(s))
    n = len(pipe.stages)
    print(f"pipeline {pipe.name}: {n} stages, run directory {pipe.run_dir}"
          + (f"\n  {pipe.description}" if pipe.description else ""))
    if args.list or args.dry_run:
        for k, (s, t) in enumerate(zip(pipe.stages, todo)):
            argv_, resumed = pipe.command(s)
            state = "to run" + (" (resumes)" if resumed else "") if t else "done"
            print(f"  [{k + 1}/{n}] {s.name:<16} {state}")
            if args.dry_run and t:
                print(f"        {shlex.join(['python', *argv_[1:]])}")
        return 0
    record_path = REPO_ROOT / pipe.run_dir / "pipeline.json"

    def read_record() -> dict:  # read afresh before each write: a second `--only STAGE` run may share the file
        return (json.loads(record_path.read_text()) if record_path.is_file()
                else {"pipeline": str(pipe.path), "stages": {}})

    t_all = time.perf_counter()
    for k, (s, t) in enumerate(zip(pipe.stages, todo)):
        if t:
            lock = stage_lock(REPO_ROOT / pipe.run_dir / "logs" / f"{s.name}.lock", s.name)
            # a stage that another run (`--only STAGE` beside this one) finished meanwhile is done too
            if not (args.start or args.only) and pipe.done(s):
                lock.unlink()
                t = False
        if not t:
            print(f"[{k + 1}/{n}] {s.name}: done, skipped")
            continue
        argv_, resumed = pipe.command(s)
        print(f"[{k + 1}/{n}] {s.name}{' (resumes)' if resumed else ''}: {shlex.join(argv_[1:])}", flush=True)
        try:
            rc, wall = run_stage(argv_, resumed, REPO_ROOT / pipe.run_dir / "logs" / f"{s.name}.log", args.threads)
        finally:
            lock.unlink(missing_ok=True)
        finished = time.strftime("%Y-%m-%d %H:%M:%S")
        # every run of the stage since its fresh start: what ran (its resume command when resumed), where, how long
        record = read_record()
        runs = record["stages"].get(s.name, {}).get("runs", []) if resumed else []
        runs.append({"ran": shlex.join(argv_[1:]), "resumed": resumed, "threads": args.threads or None, "exit": rc,
                     "wall_s": round(wall, 1), "finished": finished})
        record["stages"][s.name] = {"command": pipe.expand(s.run), "exit": rc, "wall_s": round(sum(r["wall_s"] for r in runs), 1),
                                    "finished": finished, "runs": runs}
        record_path.parent.mkdir(parents=True, exist_ok=True)
        record_path.write_text(json.dumps(record, indent=1))
        sig = -rc if rc < 0 else rc - 128 if rc > 128 else 0
        if sig:
            try:
                name = signal.Signals(sig).name
            except ValueError:
                name = f"signal {sig}"
            again = ("run the same command again to go on (done stages are skipped" if args.start in (None, s.name)
                     else f"go on with --from {s.name} in place of --from {args.start} (that redoes {args.start} and "
                          "what follows it")
            fail(f"stage {s.name!r} was stopped by {name} after {wall:.0f} s; {again}"
                 f"{'; this one resumes if it saved its state' if s.resume else ''})", code=128 + sig)
        if rc != 0:
            fail(f"stage {s.name!r} exited with {rc} after {wall:.0f} s; its log: {pipe.run_dir}/logs/{s.name}.log. "
                 f"Fix it and run the same command again: done stages are skipped", code=1)
        missing = [c for c in s.creates if not (REPO_ROOT / pipe.expand(c)).exists()]
        if missing:
            fail(f"stage {s.name!r} ended without writing {pipe.expand(missing[0])}: check {pipe.run_dir}/logs/{s.name}.log",
                 code=1)
        print(f"[{k + 1}/{n}] {s.name}: done in {wall:.0f} s", flush=True)
    done = f"stage {args.only!r} done" if args.only else f"all {n} stages done"
    print(f"pipeline {pipe.name}: {done} ({time.perf_counter() - t_all:.0f} s this run); "
          f"record: {pipe.run_dir}/pipeline.json")
    return 0


if __name__ == "__main__":
    raise SystemExit(run_main(main))
