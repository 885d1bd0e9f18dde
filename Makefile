# Two commands: `make demo` and `make test`. Both create .venv on first use.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
# torch is pinned: an unpinned torch pulls several GB of CUDA wheels.
TORCH  := torch==2.13.0

.PHONY: venv test test-all test-habitat demo demo-darkroom train-darkroom train-dktd evaluate clean

$(STAMP): setup.py scripts/ensure_ros.sh scripts/ensure_sysdeps.sh
	bash scripts/ensure_sysdeps.sh
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q "$(TORCH)"
	$(PY) -m pip install -q -e ".[train,export,retrieval,test,record]"
	# rclpy from PyPI wheels only when no ROS 2 install provides it
	bash scripts/ensure_ros.sh $(PY)
	touch $(STAMP)

venv: $(STAMP)

# Two xdist workers (this machine has 2 cores), long tests handed out first (tests/conftest.py); each
# worker's DDS tests use a ROS_DOMAIN_ID range of their own (tests/nodes/conftest.py). loadgroup with no
# groups hands out one test at a time in collection order (load would deal them out in big batches).
XDIST  := -n 2 --dist loadgroup --no-loadscope-reorder

test: venv
	$(PY) -m pytest -q $(XDIST)

test-all: venv
	$(PY) -m pytest -q $(XDIST) -m ""

# The Habitat backend on the real habitat-sim (the root-only chroot of ../shared/habitat, built on first
# use): its contract suite inside the chroot, the host-side checks and the bridge + agent trials (marked
# slow, so not in `make test`); a missing chroot fails here instead of skipping as in `make test`.
test-habitat: venv
	bash scripts/habitat_prepare.sh
	ICRL_REQUIRE_HABITAT=1 $(PY) -m pytest -q -m "" tests/habitat

# The ROS 2 demo: sim bridge + agent node (shipped ReLIC bundle bundles/house_relic_scan, ONNX Runtime) as two processes,
# DDS on loopback, one trial of 8 episodes in an unseen house -> table + demo_out/.
demo: venv
	OMP_NUM_THREADS=1 $(PY) training/demo_ros.py

# The earlier demo: the Darkroom ReLIC checkpoint (checkpoints/darkroom_relic.pt) learning in context.
demo-darkroom: venv
	$(PY) training/demo.py

train-darkroom: venv
	$(PY) training/train.py --config config/train/darkroom.yaml

train-dktd: venv
	$(PY) training/train.py --config config/train/dark_key_to_door.yaml

clean:
	rm -rf $(VENV) runs .pytest_cache
