"""ament_python package: `colcon build` installs launch/, config/ and the shipped export bundles
(bundles/<name>/) under share/icrl_ros; `pip install -e .` gives the same modules without ROS."""

import os
from glob import glob

from setuptools import find_packages, setup

PACKAGE = "icrl_ros"


def bundle_files() -> list[tuple[str, list[str]]]:
    """Every shipped export bundle: bundles/<name>/... -> share/icrl_ros/bundles/<name>/..."""
    out = []
    for top in sorted(glob("bundles/*/")):
        for root, _, files in sorted(os.walk(top)):
            if files:
                out.append((f"share/{PACKAGE}/{root.rstrip('/')}", sorted(os.path.join(root, f) for f in files)))
    return out


setup(
    name=PACKAGE,
    version="0.1.0",
    packages=find_packages(include=[PACKAGE, f"{PACKAGE}.*"]),
    data_files=[
        ("share/ament_index/resource_index/packages", [f"resource/{PACKAGE}"]),
        (f"share/{PACKAGE}", ["package.xml"]),
        (f"share/{PACKAGE}/launch", glob("launch/*.launch.py")),
        (f"share/{PACKAGE}/config",
         glob("config/*.yaml") + glob("config/*.xml") + glob("config/*.rviz") + glob("config/*.json")),
        (f"share/{PACKAGE}/config/train", glob("config/train/*.yaml")),
        *bundle_files(),
    ],
    python_requires=">=3.10",
    install_requires=["numpy", "scipy", "gymnasium>=1.0", "pyyaml", "torch", "miniworld>=2.1", "pyglet>=1.5.27,<2"],
    extras_require={
        "train": ["tensorboard", "tqdm", "matplotlib"],
        "export": ["onnx", "onnxruntime"],
        "retrieval": ["faiss-cpu>=1.8"],
        "test": ["pytest", "pytest-timeout", "pytest-xdist"],
        # MCAP recordings of runs (icrl_ros.nodes.recording) and their replay (training/replay.py)
        "record": ["mcap>=1.2", "mcap-ros2-support>=0.5", "rosbags>=0.10"],
    },
    zip_safe=True,
    maintainer="icrl_ros maintainers",
    description="In-context RL policies from training to a robot",
    license="Apache-2.0",
    tests_require=["pytest"],
    entry_points={"console_scripts": ["agent_node = icrl_ros.nodes.agent_node:main", "sim_bridge_node = icrl_ros.nodes.sim_bridge_node:main",
                                     "icrl_record = icrl_ros.nodes.recording:main"]},
)
