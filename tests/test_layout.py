"""The package layout issue 14 asks for: the training code is an importable package
(``icrl_ros.training``); ``training/*.py`` are command lines only; nothing edits ``sys.path``;
only icrl_ros/nodes/ imports rclpy."""

from __future__ import annotations

import ast
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
ROS_PROGRAMS = {"demo_ros", "node_latency", "replay"}
"""Command lines that are ROS programs (the ROS demo, the node latency benchmark, the replay of a recorded run):
their code lives in icrl_ros/nodes/ with the nodes, the one package that imports rclpy."""


def _python_files(*tops: str) -> list[Path]:
    return sorted(p for top in tops for p in (REPO / top).rglob("*.py"))


def _imports(tree: ast.AST) -> set[str]:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
    return out


@pytest.mark.parametrize("folder,package", [("training", "icrl_ros.training"), ("experiments", "icrl_ros.experiments")])
def test_every_script_is_a_command_line_over_a_package_module(folder, package) -> None:
    """training/ holds what users train with, experiments/ the probes and benchmarks: both only command lines."""
    scripts = sorted((REPO / folder).glob("*.py"))
    assert scripts and not (REPO / folder / "__init__.py").exists()
    for script in scripts:
        tree = ast.parse(script.read_text())
        calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call)]
        assert len(calls) == 1 and ast.unparse(calls[0].func) == "runpy.run_module", script
        module = calls[0].args[0].value
        owner = "icrl_ros.nodes" if script.stem in ROS_PROGRAMS else package
        assert module == f"{owner}.{script.stem}", script
        spec = importlib.util.find_spec(module)
        assert spec is not None and '__name__ == "__main__"' in Path(spec.origin).read_text(), module


def test_no_code_edits_sys_path_and_only_ros_programs_import_rclpy() -> None:
    for path in _python_files("icrl_ros", "training", "experiments"):
        rel = path.relative_to(REPO).as_posix()
        tree = ast.parse(path.read_text())
        edits = [ast.unparse(n) for n in ast.walk(tree) if isinstance(n, ast.Attribute)
                 and ast.unparse(n) in ("sys.path.insert", "sys.path.append")]
        assert not edits, f"{rel} edits sys.path"
        ros = {m for m in _imports(tree) if m.split(".")[0] == "rclpy"}
        assert not ros or rel.startswith("icrl_ros/nodes/"), f"{rel} imports {sorted(ros)} outside icrl_ros/nodes/"


def test_a_script_runs_from_any_directory(tmp_path) -> None:
    """The command line works from outside the checkout (no sys.path fix-up needed)."""
    out = subprocess.run([sys.executable, str(REPO / "training" / "house_curves.py"), "--help"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "usage: house_curves.py" in out.stdout, out.stderr[-2000:]
