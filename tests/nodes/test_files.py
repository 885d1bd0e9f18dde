"""Parameter files, launch files, docker files and entry points, checked without ROS.

Launch files are compiled and their arguments read from the AST here (test_launch.py runs them
under the real ``ros2 launch``); Docker is not installable: the Dockerfiles' COPY sources must exist.
"""

from __future__ import annotations

import ast
import math
import os
import re
import subprocess

import pytest
import yaml

from icrl_ros.nodes.params import AgentParams, BridgeParams

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def ros_parameters(name: str) -> dict:
    with open(os.path.join(REPO, "config", name)) as f:
        doc = yaml.safe_load(f)
    assert list(doc) == ["/**"], f"{name}: parameters for every node name under /**"
    return doc["/**"]["ros__parameters"]


def test_parameter_files_validate_against_the_dataclasses() -> None:
    agent = ros_parameters("agent.yaml")
    AgentParams.from_dict(agent)
    fetch = AgentParams.from_dict({**agent, **ros_parameters("fetch.yaml")})
    assert fetch.camera_topic == "/head_camera/rgb/image_raw"
    assert (fetch.odom_topic, fetch.cmd_vel_topic, fetch.action_mode) == ("/odom", "/cmd_vel", "twist")
    assert fetch.control_rate_hz >= 10.0  # the Fetch base zeroes commands older than 0.25 s
    bridge = BridgeParams.from_dict(ros_parameters("bridge.yaml"))
    from icrl_ros.sim.house_render import CAMERA_HEIGHT, FOV_Y_DEG  # constants only, no GL

    # the published CameraInfo and camera transform are the house camera's (the config said 60 deg / 1 m)
    assert (bridge.camera_fov_y_deg, bridge.camera_height_m) == (FOV_Y_DEG, CAMERA_HEIGHT)


def test_memory_parameter_accepts_every_registered_memory_policy() -> None:
    from icrl_ros.memory import MEMORY_POLICIES as REGISTERED
    from icrl_ros.nodes.params import MEMORY_POLICIES

    assert set(MEMORY_POLICIES) == {"", *REGISTERED}
    assert AgentParams.from_dict({"memory": "hcam"}).memory == "hcam"
    assert AgentParams.from_dict({"memory": "retrieval"}).memory == "retrieval"


def test_parameter_validation_quotes_the_bad_value() -> None:
    with pytest.raises(ValueError, match="backend: 'tflite' is not one of"):
        AgentParams.from_dict({"backend": "tflite"})
    with pytest.raises(ValueError, match="control_rate_hz: 5.0 is below the minimum 10.0"):
        AgentParams.from_dict({"control_rate_hz": 5.0})
    with pytest.raises(ValueError, match="unknown parameter"):
        AgentParams.from_dict({"bundle": "x"})
    with pytest.raises(ValueError, match="env_kwargs"):
        BridgeParams.from_dict({"env_kwargs": "{oops"})
    with pytest.raises(ValueError, match=r"^seed: 1.5 is not allowed; it takes an integer >= 0$"):
        BridgeParams.from_dict({"seed": 1.5})
    # what the node answers to `ros2 param set /icrl_agent input_timeout_s .nan`: what is allowed, on one line
    for bad in (math.nan, math.inf, "1"):
        with pytest.raises(ValueError) as e:
            AgentParams.from_dict({"input_timeout_s": bad})
        assert str(e.value) == f"input_timeout_s: {bad!r} is not allowed; it takes a finite number >= 0.01 (not nan or inf)"
    with pytest.raises(ValueError, match=r"watchdog_margin_s: nan .* a finite number from 0.0 to 10.0 \(not nan or inf\)"):
        AgentParams.from_dict({"watchdog_margin_s": math.nan})


def launch_arguments(name: str) -> set[str]:
    path = os.path.join(REPO, "launch", name)
    with open(path) as f:
        tree = ast.parse(f.read(), path)
    compile(tree, path, "exec")
    assert any(isinstance(n, ast.FunctionDef) and n.name == "generate_launch_description" for n in tree.body)
    return {
        n.args[0].value for n in ast.walk(tree)
        if isinstance(n, ast.Call) and getattr(n.func, "id", "") == "DeclareLaunchArgument"
    }


def test_launch_files_compile_and_declare_their_arguments() -> None:
    assert launch_arguments("agent.launch.py") >= {"bundle", "backend", "device", "robot", "params_file", "namespace",
                                                   "use_sim_time", "autostart"}
    assert launch_arguments("sim.launch.py") >= {"bundle", "backend", "device", "env_id", "mode", "namespace"}
    assert launch_arguments("habitat.launch.py") >= {"bundle", "env_id", "env_kwargs"}


def test_entry_points_name_existing_main_functions() -> None:
    with open(os.path.join(REPO, "setup.py")) as f:
        setup = f.read()
    scripts = dict(re.findall(r'"(\w+) = (icrl_ros\.nodes\.\w+):main"', setup))
    assert set(scripts) == {"agent_node", "sim_bridge_node", "icrl_record"}
    for module in scripts.values():
        with open(os.path.join(REPO, *module.split(".")) + ".py") as f:
            tree = ast.parse(f.read())
        assert any(isinstance(n, ast.FunctionDef) and n.name == "main" for n in tree.body), module


@pytest.mark.parametrize("dockerfile", ["Dockerfile.deploy", "Dockerfile.habitat"])
def test_dockerfiles_copy_existing_files(dockerfile: str) -> None:
    with open(os.path.join(REPO, "docker", dockerfile)) as f:
        text = f.read()
    for line in re.findall(r"^COPY (.+)$", text, re.M):
        for src in line.split()[:-1]:
            assert os.path.exists(os.path.join(REPO, src)), (dockerfile, src)
    assert os.path.exists(os.path.join(REPO, "docker", dockerfile + ".dockerignore"))


def test_shell_scripts_parse() -> None:
    for script in ("scripts/ensure_ros.sh", "docker/entrypoint.sh"):
        path = os.path.join(REPO, script)
        assert os.access(path, os.X_OK), script
        subprocess.run(["bash", "-n", path], check=True)


def test_pure_modules_import_without_rclpy() -> None:
    """convert, action_executor and params must not need ROS (block rclpy with a meta-path hook)."""
    code = (
        "import sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] in ('rclpy', 'sensor_msgs', 'std_msgs', 'nav_msgs', 'geometry_msgs'):\n"
        "            raise ImportError('blocked ' + name)\n"
        "sys.meta_path.insert(0, Block())\n"
        "import icrl_ros.nodes, icrl_ros.nodes.convert, icrl_ros.nodes.action_executor, icrl_ros.nodes.params\n"
        "assert 'rclpy' not in sys.modules\n"
        "try:\n"
        "    import icrl_ros.nodes.agent_node\n"
        "except ImportError:\n"
        "    print('ok')\n"
    )
    out = subprocess.run([os.environ.get("PYTHON", __import__("sys").executable), "-c", code], cwd=REPO,
                         capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=REPO))
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]


def test_setup_installs_every_shipped_bundle_under_share() -> None:
    """setup.py data_files: bundles/<name>/* -> share/icrl_ros/bundles/<name>/ (what launch files default to)."""
    code = ("import runpy, setuptools, sys, json\n"
            "kw = {}\n"
            "setuptools.setup = lambda **k: kw.update(k)\n"
            "sys.argv = ['setup.py']\n"
            "runpy.run_path('setup.py')\n"
            "print(json.dumps(kw['data_files']))\n")
    out = subprocess.run([__import__("sys").executable, "-c", code], cwd=REPO, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    import json

    data = {dest: files for dest, files in json.loads(out.stdout)}
    shipped = os.path.join(REPO, "bundles")
    for name in sorted(os.listdir(shipped)) if os.path.isdir(shipped) else []:
        dest = f"share/icrl_ros/bundles/{name}"
        assert dest in data, (dest, sorted(data))
        assert f"bundles/{name}/manifest.yaml" in data[dest]
        assert set(data[dest]) == {f"bundles/{name}/{f}" for f in os.listdir(os.path.join(shipped, name))}


def test_bundle_path_resolution(tmp_path, monkeypatch) -> None:
    from icrl_ros.nodes import shipped

    default = os.path.join(REPO, "bundles", shipped.DEFAULT_BUNDLE)
    if os.path.isfile(os.path.join(default, "manifest.yaml")):
        assert shipped.resolve_bundle_path("")[0] == default  # empty: the checkout's shipped bundle
        monkeypatch.chdir(tmp_path)  # relative: the working directory first, then the checkout
        rel = f"bundles/{shipped.DEFAULT_BUNDLE}"
        assert shipped.resolve_bundle_path(rel)[0] == default
        (tmp_path / rel).mkdir(parents=True)
        assert shipped.resolve_bundle_path(rel)[0] == str(tmp_path / rel)
    found, tried = shipped.resolve_bundle_path(str(tmp_path / "nope"))
    assert found == "" and tried == [str(tmp_path / "nope")]
    found, tried = shipped.resolve_bundle_path("no/such/bundle")
    assert found == "" and len(tried) >= 2


def test_demo_runs_the_node_default_bundle() -> None:
    """`make demo` shows the bundle a user gets with an empty bundle_path (once it ran another bundle
    for two sessions after the default moved)."""
    from icrl_ros.nodes import shipped
    from icrl_ros.nodes.demo_ros import parser

    assert os.path.basename(parser().parse_args([]).bundle) == shipped.DEFAULT_BUNDLE


def test_shipped_dds_profile_is_selected_only_when_the_user_chose_nothing() -> None:
    from icrl_ros.nodes import dds

    path = dds.shipped_profile()
    assert path.endswith("config/fastdds_large_data.xml") and os.path.isfile(path)
    text = open(path).read()
    assert "<segment_size>67108864</segment_size>" in text and "UDPv4" not in text  # no network transport
    env: dict[str, str] = {}
    assert dds.use_shipped_profile(env) == path and env["FASTDDS_DEFAULT_PROFILES_FILE"] == path
    for chosen in ({"FASTDDS_DEFAULT_PROFILES_FILE": "/mine.xml"}, {"FASTRTPS_DEFAULT_PROFILES_FILE": "/mine.xml"},
                   {"RMW_IMPLEMENTATION": "rmw_cyclonedds_cpp"}, {"ICRL_ROS_DDS_PROFILE": "0"}):
        env = dict(chosen)
        assert dds.use_shipped_profile(env) == "" and env == chosen
    env = {"RMW_IMPLEMENTATION": "rmw_fastrtps_cpp"}
    assert dds.use_shipped_profile(env) == path
