"""Replay a recorded run through a policy and say, step by step, whether its actions agree.

    python training/replay.py demo_out/run.mcap --bundle bundles/house_relic_scan     # the demo's own run
    python training/replay.py run.mcap --bundle bundles/house_memo_scan --seed 3      # another policy / seed
    python training/replay.py run.mcap --bundle DIR --steps                           # every step, not only diffs

The recording is an MCAP file of the agent's topics (``icrl_ros.nodes.recording``: ``make demo`` writes
``demo_out/run.mcap``; ``icrl_record`` records a robot). Its inputs (episode events, goal, odometry, laser
scan, camera) go, in the order they were received, through the agent's own decision loop
(:class:`~icrl_ros.nodes.agent_loop.AgentLoop`: the same stamp gate, odometry / scan sync, episode and
trial handling, pose frame and image conversion as ``agent_node``) driving a :class:`PolicyRunner` on
``--bundle``; each action it takes is compared with the recorded agent's action of the same index.
No ROS install is needed: the messages are decoded from the schemas in the file (``mcap-ros2-support``).

The agent's parameters come from the recording (the demo stores them; ``--seed``, ``--selection``,
``--temperature``, ``--backend`` override). The same bundle with the same seed reproduces a lockstep
run action for action; another bundle or seed prints where they part (a diff table). Exit status 0
when every action agrees, 1 when some differ, 2 for a mistake on the command line (one line).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from icrl_ros.training._cli import fail

INPUTS = ("episode_events", "goal", "odom", "scan", "camera/image_raw")


@dataclass
class Step:
    """One action of the replay beside the recorded one of the same index."""

    index: int
    episode: int
    step: int
    stamp: float  # the camera frame acted on
    recorded: int | None
    replayed: int

    @property
    def agrees(self) -> bool:
        return self.recorded == self.replayed

    @property
    def compared(self) -> bool:
        """False for an action taken on the recording's last inputs that the recording has no answer to
        (it ended, as a run stopped by Ctrl-C does, before the recorded agent's action arrived)."""
        return self.recorded is not None


def read_recording(path: str) -> tuple[dict[str, str], list[tuple[int, str, Any]]]:
    """(the recorder's metadata, [(log_time_ns, topic relative to the namespace, decoded message)]) in
    log-time order, for the agent's inputs and recorded actions."""
    from mcap.exceptions import McapError
    from mcap.reader import make_reader
    from mcap_ros2.decoder import DecoderFactory

    metadata: dict[str, str] = {}
    rows: list[tuple[int, str, Any]] = []
    try:
        with open(path, "rb") as f:
            reader = make_reader(f, decoder_factories=[DecoderFactory()])
            for record in reader.iter_metadata():
                if record.name == "icrl_ros.run":
                    metadata = dict(record.metadata)
            namespace = metadata.get("namespace", "").rstrip("/")
            wanted = {f"{namespace}/{name}": name for name in (*INPUTS, "action")}
            for _schema, channel, message, decoded in reader.iter_decoded_messages(
                    topics=list(wanted), log_time_order=True):
                rows.append((message.log_time, wanted[channel.topic], decoded))
    except (McapError, ValueError, KeyError, EOFError) as e:
        raise ValueError(f"{path} is not a readable MCAP recording ({type(e).__name__}: {e})") from e
    return metadata, rows


def replay(rows: list[tuple[int, str, Any]], runner: Any, params: Any) -> tuple[list[Step], dict[str, int]]:
    """Feed the recorded inputs through an :class:`AgentLoop` on ``runner``; returns the steps (replayed beside
    recorded actions) and the loop's counters, with ``actions_before_first_frame``: recorded actions left
    uncompared."""
    from icrl_ros.nodes.action_executor import ActionExecutor
    from icrl_ros.nodes.agent_loop import AgentIO, AgentLoop, RunnerSetup, executor_config
    from icrl_ros.nodes.convert import (
        InputError, check_image_msg, image_msg_to_rgb, odometry_msg_to_pose, scan_msg_to_inputs, stamp_to_seconds,
    )

    setup = RunnerSetup.of(runner)
    now = [0.0]
    replayed: list[tuple[int, float, dict]] = []
    loop: AgentLoop

    def on_action(action: int) -> None:
        info = loop.last_info
        replayed.append((int(action), loop.gate.last_acted, {"episode": int(info.get("episode", -1)),
                                                            "step": int(info.get("step", -1))}))

    loop = AgentLoop(params, AgentIO(action=on_action, log=lambda level, msg: None, convert=image_msg_to_rgb),
                     clock=lambda: now[0])
    loop.attach(runner, pose_frame=setup.pose_frame, image_size=setup.image_size, goal_names=setup.goal_names,
                kinds=setup.kinds, executor=ActionExecutor(executor_config(params, runner.manifest.action)),
                twist=params.action_mode == "twist", scan=setup.reads_scan)
    loop.activate()
    recorded: list[int] = []
    framed = False  # actions before the first recorded frame answer frames the recording lacks: not compared
    unframed = 0
    for log_time, topic, msg in rows:
        now[0] = log_time * 1e-9
        if topic == "action":
            if framed:
                recorded.append(int(msg.data))
            else:
                unframed += 1
        elif topic == "episode_events":
            loop.event(msg.data)
        elif topic == "goal":
            loop.goal_message(msg.data)
        elif topic == "odom":
            try:
                loop.odometry(odometry_msg_to_pose(msg), stamp_to_seconds(msg.header.stamp))
            except InputError:
                loop.counters["bad_odometry"] += 1
        elif topic == "scan":
            if setup.reads_scan:
                try:
                    values = scan_msg_to_inputs(msg, setup.scan_inputs, setup.scan_step_m, params.scan_clearance_m)
                except InputError:
                    loop.counters["bad_scan"] += 1
                    continue
                loop.scan(values, stamp_to_seconds(msg.header.stamp))
        else:
            framed = True
            loop.image(msg, stamp_to_seconds(msg.header.stamp), check=check_image_msg)
    # replayed actions beyond the recorded ones are the answers to inputs the recording ends with
    steps = [Step(i, info["episode"], info["step"], stamp, recorded[i] if i < len(recorded) else None, action)
             for i, (action, stamp, info) in enumerate(replayed)]
    for i in range(len(replayed), len(recorded)):  # recorded actions the replay never took
        steps.append(Step(i, -1, -1, float("nan"), recorded[i], -1))
    return steps, {**loop.counters, "actions_before_first_frame": unframed}


def _names(runner: Any) -> list[str]:
    return [str(a) for a in runner.manifest.action.names]


def report(steps: list[Step], names: list[str], every: bool, out=sys.stdout) -> int:
    """The table (differences only unless ``every``) and the summary line; the number of disagreements."""
    name = lambda a: names[a] if a is not None and 0 <= a < len(names) else ("-" if a in (None, -1) else str(a))  # noqa: E731
    diffs = [s for s in steps if s.compared and not s.agrees]
    unanswered = [s for s in steps if not s.compared]
    compared = len(steps) - len(unanswered)
    rows = steps if every else diffs + unanswered
    if rows:
        print(f"{'#':>5} {'episode':>7} {'step':>5} {'image stamp':>12}  {'recorded':<11} {'replayed':<11} agree",
              file=out)
        for s in rows[:200]:
            verdict = ("yes" if s.agrees else "NO") if s.compared else "not recorded"
            print(f"{s.index:>5} {s.episode:>7} {s.step:>5} {s.stamp:>12.3f}  {name(s.recorded):<11} "
                  f"{name(s.replayed):<11} {verdict}", file=out)
        if len(rows) > 200:
            print(f"  ... {len(rows) - 200} more rows", file=out)
    first = diffs[0] if diffs else None
    print(f"{compared - len(diffs)} of {compared} actions agree"
          + (f"; first difference at action {first.index} (episode {first.episode}, step {first.step})" if first
             else ": the replay reproduces every recorded action")
          + (f" ({len(unanswered)} more replayed on the recording's last inputs, whose recorded answer the "
             "recording ends before)" if unanswered else ""), file=out)
    return len(diffs)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("recording", help="an MCAP recording of a run (make demo: demo_out/run.mcap)")
    p.add_argument("--bundle", required=True, help="export bundle directory to replay through")
    p.add_argument("--backend", default=None, choices=["onnxruntime", "torch", "tensorrt"],
                   help="default: the recorded agent's")
    p.add_argument("--seed", type=int, default=None, help="action-sampling seed (default: the recorded agent's)")
    p.add_argument("--selection", default=None, choices=["sample", "greedy"], help="default: the recorded agent's")
    p.add_argument("--temperature", type=float, default=None, help="default: the recorded agent's")
    p.add_argument("--steps", action="store_true", help="print every step, not only the differences")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    path = Path(args.recording)
    if not path.is_file():
        fail(f"{path}: no such recording (make demo writes demo_out/run.mcap)")
    bundle = Path(args.bundle)
    if not (bundle / "manifest.yaml").is_file():
        fail(f"--bundle {bundle}: not an export bundle (no manifest.yaml); export one with training/export.py")
    try:
        metadata, rows = read_recording(str(path))
    except ImportError as e:
        fail(f"{e.name} is missing: pip install 'mcap>=1.2' 'mcap-ros2-support>=0.5' (the package's record extra)")
    except (OSError, ValueError) as e:
        fail(str(e))
    from icrl_ros.nodes.params import AgentParams

    try:
        recorded = json.loads(metadata.get("agent_params", "{}"))
        params = AgentParams.from_dict({k: v for k, v in recorded.items() if k in AgentParams.__dataclass_fields__})
    except ValueError as e:
        fail(f"{path}: its recorded agent parameters are not valid here ({e})")
    if args.seed is not None:
        params.sample_seed = args.seed
    if args.selection is not None:
        params.action_selection = args.selection
    if args.temperature is not None:
        params.sample_temperature = args.temperature
    if args.backend is not None:
        params.backend = args.backend
    if not any(topic == "camera/image_raw" for _, topic, _ in rows):
        fail(f"{path}: no camera frames under namespace {metadata.get('namespace', '/')!r}: nothing to replay")

    from icrl_ros.runtime import PolicyRunner

    try:
        runner = PolicyRunner.from_bundle(str(bundle), backend=params.backend, device="cpu",
                                          memory=params.memory or None,
                                          memory_budget_bytes=params.memory_budget_bytes or None)
        runner.generator.manual_seed(params.sample_seed)
        runner.configure_actions(params.action_selection or None, params.sample_temperature or None)
        steps, counters = replay(rows, runner, params)
    except (OSError, ValueError, KeyError) as e:
        fail(f"--bundle {bundle}: cannot replay this recording through it ({type(e).__name__}: {e})")
    n_recorded = sum(1 for _, t, _ in rows if t == "action")
    selection = params.action_selection or "the bundle's"
    print(f"replay of {path} ({n_recorded} recorded actions) through {bundle} "
          f"({params.backend}, {selection} actions, seed {params.sample_seed})")
    early = counters["actions_before_first_frame"]
    if early:
        print(f"note: {early} recorded action(s) precede the recording's first camera frame: it begins steps into "
              "the run (the recorder matched the topics late): they are not compared, and the replay lacks those "
              "steps' memory, so later actions may part too; start the recorder before the agent acts")
    differ = report(steps, _names(runner), args.steps)
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
