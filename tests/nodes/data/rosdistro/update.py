"""Rebuild this folder: the rosdistro data package.xml's keys resolve against, cut from ros/rosdistro.

    python tests/nodes/data/rosdistro/update.py /path/to/rosdistro [COMMIT]

Copies, verbatim, the kilted entries of ``index-v4.yaml``, the ``kilted/distribution.yaml``
repositories that release a package named in ../../../../package.xml, and the ``rosdep/base.yaml``
and ``rosdep/python.yaml`` rules of its other keys. A key that is in neither stays out, so
``rosdep`` fails on it in tests/nodes/test_package_xml.py, as it would against the full index.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
PACKAGE_XML = HERE.parents[3] / "package.xml"


def keys() -> list[str]:
    text = re.sub(r"<!--.*?-->", "", PACKAGE_XML.read_text(), flags=re.S)
    return sorted(set(re.findall(r"<(?:exec_|build_|test_|buildtool_|build_export_)?depend>([^<]+)<", text)))


def main(root: str, commit: str = "") -> None:
    src = Path(root)
    wanted = keys()
    index = yaml.safe_load((src / "index-v4.yaml").read_text())
    kilted = dict(index["distributions"]["kilted"])
    kilted.pop("distribution_cache", None)  # offline: rosdep reads distribution.yaml itself
    distribution = yaml.safe_load((src / "kilted" / "distribution.yaml").read_text())
    repos = {}
    for name, repo in distribution["repositories"].items():
        packages = (repo.get("release") or {}).get("packages", [name])
        if "release" in repo and set(packages) & set(wanted):
            repos[name] = {"release": repo["release"]}
    released = {p for r in repos.values() for p in r["release"].get("packages", [])} | set(repos)
    header = f"# Cut from ros/rosdistro{' at ' + commit if commit else ''} by update.py: verbatim entries only.\n"
    out = {"type": "index", "version": 4, "distributions": {"kilted": kilted}}
    (HERE / "index-v4.yaml").write_text(header + yaml.safe_dump(out, sort_keys=False))
    (HERE / "kilted").mkdir(exist_ok=True)
    dist = {k: distribution[k] for k in ("release_platforms", "type", "version")} | {"repositories": repos}
    (HERE / "kilted" / "distribution.yaml").write_text(header + yaml.safe_dump(dist, sort_keys=False))
    for name in ("base.yaml", "python.yaml"):
        rules = yaml.safe_load((src / "rosdep" / name).read_text())
        subset = {k: rules[k] for k in wanted if k in rules and k not in released}
        (HERE / name).write_text(header + yaml.safe_dump(subset, sort_keys=False))
    print(f"{len(wanted)} keys; {len(released & set(wanted))} ROS packages from {sorted(repos)}")


if __name__ == "__main__":
    main(*sys.argv[1:])
