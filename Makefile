# collbench: the two commands of the README's quick start are `make run` and `make test`.
# Everything they need is installed by `make setup` (Debian packages, then a venv in .venv).

SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# Debian packages: ssh and MPI for the nodes and the test cluster, iproute2 for its namespaces,
# chromium to check that the HTML report renders, Slurm and munge for the test cluster's scheduler;
# what the node checks' tools build with (roles/nvbandwidth: CMake and Boost program_options;
# roles/perftest: autotools and the rdma-core, umad and pci headers) and Debian's perftest package
# (the perftest role's distribution source).
APT_PACKAGES := openssh-server openssh-client openmpi-bin libopenmpi-dev iproute2 netcat-openbsd \
                iputils-ping procps rsync git make chromium slurmctld slurmd slurm-client munge \
                cmake g++ libboost-program-options-dev autoconf automake libtool pkg-config \
                libibverbs-dev librdmacm-dev libibumad-dev libpci-dev perftest
export ANSIBLE_HOME := $(CURDIR)/.ansible
export ANSIBLE_LOCAL_TEMP := $(CURDIR)/.ansible/tmp

.PHONY: setup run test lint unit cluster bench clean

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	@missing=$$(for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages: $$missing"; \
	  SUDO=$$([ "$$(id -u)" = 0 ] || echo sudo); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing; \
	fi
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	# torch pinned: an unpinned torch pulls gigabytes of CUDA wheels; 2.13.0 has a CPU build.
	$(BIN)/pip install -q "torch==2.13.0"
	$(BIN)/pip install -q -e ".[test]"
	touch $@

# Benchmark this machine with the embedded default inventory, then print where the report is.
run: setup
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/ansible-playbook bench.yml

lint: setup
	$(BIN)/ruff check collbench_py tests benchmarks action_plugins filter_plugins callback_plugins inventory
	$(BIN)/ruff format --check collbench_py tests benchmarks action_plugins filter_plugins callback_plugins inventory
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/ansible-lint

unit: setup
	$(BIN)/python -m pytest -q -m "not cluster"

# The cluster tests two modules at a time, each on a cluster of its own (see `test`).
CLUSTER_TESTS = -m cluster -n 2 --dist loadfile

cluster: setup
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/python -m pytest -q $(CLUSTER_TESTS)

# All the tests: lint, unit and fuzz tests, and the end-to-end tests on the SSH test cluster.
# The unit tests run on every core, a module whole on one worker (its fixtures built once), the
# modules marked `long` first; then the cluster tests two modules at a time. Each builds its own
# cluster, and much of a cluster test's wall is waiting (timeouts, ssh handshakes, Slurm's limit
# checks): on 2 cores two at a time took half the wall of one at a time, three hardly less than two.
test: setup lint
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/python -m pytest -q -m "not cluster" -n auto --dist loadfile --no-loadscope-reorder --durations=10
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/python -m pytest -q $(CLUSTER_TESTS) --durations=60

bench: setup
	$(BIN)/python benchmarks/parse_bench.py

clean:
	rm -rf $(VENV) .ansible .pytest_cache .hypothesis
