#!/bin/bash
# Make the Habitat chroot of ../shared/habitat ready for icrl_ros (idempotent; root).
#
#   scripts/habitat_prepare.sh        build the chroot if it is missing, then install into its
#                                     /opt/hvenv what icrl_ros's Habitat side imports
#
# Inside the chroot numpy must stay 1.26.4 (habitat-sim 0.2.2 segfaults with numpy 2) and torch
# must never be pulled (for Python 3.13 the index serves only the multi-GB CUDA build), so the
# project goes in with --no-deps plus the few packages icrl_ros.sim's Habitat path imports:
# gymnasium (the env API), miniworld (its texture and mesh files only: house layouts name
# portraits by file, the scene export reads the object meshes; never imported, no pyglet), pytest.
# No ROS inside: sim_bridge_node runs on the host and reaches Habitat through icrl_ros.sim.env_server.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
SETUP=${HABITAT_SETUP:-$ROOT/../shared/habitat/setup.sh}
CHROOT=${HABITAT_CHROOT:-/var/tmp/icrl-habitat/trixie}
[ -x "$SETUP" ] || { echo "no $SETUP: the Habitat chroot builder is not here" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "the Habitat chroot needs root (mount, chroot)" >&2; exit 2; }
cd "$ROOT"
if [ ! -x "$CHROOT/opt/hvenv/bin/python" ]; then
  "$SETUP"
fi
PIN="numpy==1.26.4"
if ! "$SETUP" run /opt/hvenv/bin/python -c "import gymnasium, pytest, icrl_ros, importlib.util as u; assert u.find_spec('miniworld')" >/dev/null 2>&1; then
  "$SETUP" run /opt/hvenv/bin/pip install -q "gymnasium>=1.0,<2" pytest pytest-timeout "$PIN"
  "$SETUP" run /opt/hvenv/bin/pip install -q --no-deps "miniworld==2.1.0"
  # The project itself, editable (the checkout is /project inside), without its torch dependencies.
  "$SETUP" run /opt/hvenv/bin/pip install -q --no-deps --no-build-isolation -e /project
fi
"$SETUP" run /opt/hvenv/bin/python -c "import numpy, sys; assert numpy.__version__ == '1.26.4', numpy.__version__; \
import icrl_ros.sim.house_layout, icrl_ros.sim.habitat_env, icrl_ros.sim.env_server; \
assert 'torch' not in sys.modules; print('habitat chroot ready for icrl_ros')"
