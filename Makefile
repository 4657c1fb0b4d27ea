# Set-up and everyday commands. `make demo` and `make test` create .venv when it is missing.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

# Python keeps its bytecode caches here even where the environment says not to
# (PYTHONDONTWRITEBYTECODE, set on this project's machines): the suites start hundreds of
# Python processes, and each compiled dlperf's own modules again (about 1 CPU s of the 4 a
# `dlperf run` takes to start), and pytest rewrote and compiled the 650 test modules in every
# worker of every session (51 CPU s a worker, 21 with the caches). User model files are still
# compiled from their source at each import (dlperf.models.registry). docs/benchmarks.md.
unexport PYTHONDONTWRITEBYTECODE

.PHONY: setup demo test test-scenarios test-faults test-slow test-all test-horovod test-gpu lint format bench stress-signals horovod horovod-deps horovod-wheel clean

# `--no-compile`: pip would compile every module of torch and its neighbours (about 17,000 files,
# 90 of the install's 160 CPU s on 2 cores) where a test run imports a small part of them, which
# Python then compiles and caches at first import (docs/benchmarks.md).
PIP_INSTALL := $(BIN)/pip install --quiet --no-compile

$(BIN)/dlperf: pyproject.toml constraints.txt
	test -d $(VENV) || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(PIP_INSTALL) -c constraints.txt -e '.[dev]'
	touch $(BIN)/dlperf

setup: $(BIN)/dlperf

demo: setup
	$(BIN)/dlperf demo

# The suites run on one pytest-xdist worker per core (tests/conftest.py caps them at 8): on
# 2 cores `make test` takes about half the wall time of one process (docs/benchmarks.md).
XDIST := -n auto --dist worksteal

test: setup
	$(BIN)/pytest -q $(XDIST) -m "not faults and not scenario and not horovod and not gpu"

# Whole workflows as the docs write them (tests/scenarios/, marked `scenario`): every block of
# docs/course.md, the README's quick start, the CLI walk-through and the transfer study.
test-scenarios: setup
	$(BIN)/pytest -q $(XDIST) -m scenario

# The slow fault tests (tests/faults/, marked `faults`: over about 10 s each on a busy machine,
# real processes killed and resumed, torchrun points failed, many processes on one store);
# CI runs both.
test-faults: setup
	$(BIN)/pytest -q $(XDIST) -m faults

# Both slow suites in one pytest session (CI runs this): one start-up of the workers, and one
# tail where a worker waits for the other's last long test, instead of two (about a minute on
# 2 cores: docs/benchmarks.md).
test-slow: setup
	$(BIN)/pytest -q $(XDIST) -m "faults or scenario"

# `make test` and `make test-slow` in one pytest session (CI runs this): each worker imports the
# test modules and their libraries once (about 30 CPU-s a worker), and one tail where a worker
# waits for the other's last long test, instead of two.
test-all: setup
	$(BIN)/pytest -q $(XDIST) -m "not horovod and not gpu"

# The studies under horovodrun (tests/distributed/test_horovod.py, marked `horovod`): they need a
# Horovod build (make horovod) and skip, saying so, without one.
test-horovod: setup
	$(BIN)/pytest -q -m horovod

# The CUDA code paths on a real GPU (tests/gpu/, marked `gpu`): runs, timers, NCCL, OOM,
# calibration, ONNX Runtime's CUDA provider. Each test skips, saying so, without CUDA.
test-gpu: setup
	$(BIN)/pytest -q -m gpu

lint: setup
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/ruff format --check src tests benchmarks
	$(BIN)/mypy src

format: setup
	$(BIN)/ruff format src tests benchmarks
	$(BIN)/ruff check --fix src tests benchmarks

bench: setup
	$(PIP_INSTALL) -c constraints.txt -e '.[dev,bench]'
	$(BIN)/python benchmarks/run_all.py

# SIGTERM and SIGINT at random moments of every long-running command: exit codes, runs, processes.
stress-signals: setup
	$(BIN)/python benchmarks/stress_signals.py

# Horovod 0.28.1 built from source for CPU (gloo) against this torch and TensorFlow, with
# tools/horovod-0.28.1-cpu-torch2.14-tf2.21.patch (the release does not build against them);
# under 9 minutes on 2 cores from a fresh clone. docs/scale.md#horovod. `horovod-wheel` only
# builds the wheel (it changes nothing in .venv, so CI builds it beside the tests);
# `horovod` installs it.
HOROVOD := build/horovod/horovod-0.28.1
horovod-deps: setup
	$(PIP_INSTALL) -c constraints.txt -e '.[dev,tensorflow]' cloudpickle psutil

horovod-wheel: horovod-deps
	rm -rf build/horovod && mkdir -p build/horovod
	$(BIN)/pip download --quiet --no-deps --no-binary :all: horovod==0.28.1 -d build/horovod
	tar xzf build/horovod/horovod-0.28.1.tar.gz -C build/horovod
	patch -d $(HOROVOD) -p1 < tools/horovod-0.28.1-cpu-torch2.14-tf2.21.patch
	HOROVOD_WITH_GLOO=1 HOROVOD_WITHOUT_MPI=1 HOROVOD_WITHOUT_MXNET=1 HOROVOD_WITHOUT_CUDA=1 \
	HOROVOD_WITH_PYTORCH=1 HOROVOD_WITH_TENSORFLOW=1 HOROVOD_CPU_OPERATIONS=GLOO MAKEFLAGS=-j2 \
		$(BIN)/pip wheel --quiet --no-deps --no-build-isolation -w build/horovod/dist ./$(HOROVOD)

horovod: horovod-deps
	test -n "$$(ls build/horovod/dist/horovod-*.whl 2>/dev/null)" || $(MAKE) horovod-wheel
	$(PIP_INSTALL) --no-deps build/horovod/dist/horovod-*.whl
	$(BIN)/horovodrun --check-build

clean:
	rm -rf dlperf_runs dlperf.db dlperf.db-wal dlperf.db-shm .pytest_cache build
