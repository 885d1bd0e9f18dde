"""Both looks of one exported house side by side, from the same four episode starts (inside the Habitat chroot).

    ../shared/habitat/setup.sh run /opt/hvenv/bin/python /project/scripts/habitat_looks.py /project/runs/look 579362555

Writes OUT/looks_SEED.png: the top row MiniWorld's look, the bottom row the unseen one (``LOOKS`` in
``icrl_ros/sim/habitat_mesh.py``), 128 px frames of episodes 0-3 of the house's exported episodes.
"""

import sys
from pathlib import Path

import numpy as np
from PIL import Image

from icrl_ros.sim.habitat_env import HabitatExtObjNavEnv
from icrl_ros.sim.habitat_scene import export_houses


def main() -> None:
    out, seed = Path(sys.argv[1]), int(sys.argv[2])
    rows = []
    for look in ("miniworld", "unseen"):
        d = out / look
        if not (d / "datasets").exists():
            export_houses([seed], d, episodes_per_house=4, seed=0, look=look)
        env = HabitatExtObjNavEnv.for_houses(d, image_size=128)
        frames = [env.reset(options={"house_seed": seed, "new_trial": k == 0, "episode": k})[0]["rgb"] for k in range(4)]
        env.close()
        rows.append(np.concatenate(frames, 1))
    Image.fromarray(np.concatenate(rows, 0)).save(out / f"looks_{seed}.png")
    print("wrote", out / f"looks_{seed}.png")


if __name__ == "__main__":
    main()
