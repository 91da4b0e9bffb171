# seedance — the two commands of the README live here.
#   make run    set up (venv, pinned torch) and run the main job on its embedded default
#   make test   set up and run the default test suite (< 15 min on 2 cores)
#   make paper  every figure and table of paper/ in the paper's full size (hours; `make run` is its quick size);
#               make paper SCHEDULER=tcp://HOST:PORT runs every item's sweep on that Dask cluster
# CUDA users: make run TORCH_SPEC="torch==2.13.0 --index-url https://download.pytorch.org/whl/cu124"
PYTHON      ?= python3
VENV        ?= .venv
TORCH_SPEC  ?= torch==2.13.0
BIN         := $(VENV)/bin
STAMP       := $(VENV)/.seedance-installed
PYTEST_ARGS ?=

.PHONY: setup run test test-campaign test-slow test-consensus gpu-check bench paper clean

$(STAMP): pyproject.toml Makefile
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet $(TORCH_SPEC)
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

setup: $(STAMP)

run: $(STAMP)
	$(BIN)/seedance report --out out/report

test: $(STAMP)
	$(BIN)/python -m pytest -n 2 $(PYTEST_ARGS)

test-campaign: $(STAMP)
	$(BIN)/python -m pytest -n 2 -m campaign $(PYTEST_ARGS)

test-slow: $(STAMP)
	$(BIN)/python -m pytest -m slow $(PYTEST_ARGS)

# The seed's verification command: real training under the commit protocol with faults throughout, checked.
#   make test-consensus GPU_COUNT=4 TEST_DURATION=300s CONSISTENCY_CHECK_LEVEL=full MEMCHECK_ENABLE=true
# Also SCENARIO=F1..F8 VARIANT=buggy|fixed SEED NEMESIS COMMIT_EVERY METRICS_PORT MEMCHECK_DRIFT_PCT OUT; unset
# variables take the defaults listed by `seedance real test-consensus --help` and in the README.
test-consensus: $(STAMP)
	$(BIN)/seedance real test-consensus --from-env

# On one CUDA server (<= 5 min): GPUs, CUDA, NCCL and links; nccl-tests-shaped curves; the NCCL model fitted on 3
# sizes and validated on the others; training with F2 and F4 injected; a host profile -> out/gpu-check/. No CUDA: one
# line, exit 0.
gpu-check: $(STAMP)
	$(BIN)/seedance real gpu-check --out out/gpu-check

bench: $(STAMP)
	$(BIN)/python -m pip install --quiet -e '.[dev,bench]'
	for b in benchmarks/[!_]*.py; do $(BIN)/python $$b --out out/benchmarks || exit 1; done

paper: $(STAMP)
	$(MAKE) -C paper PYTHON=$(abspath $(BIN)/python) $(if $(SCHEDULER),SCHEDULER=$(SCHEDULER),)

clean:
	rm -rf out .pytest_cache .hypothesis
