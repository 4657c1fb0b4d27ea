# Set-up and everyday commands. `make demo` and `make test` create .venv when it is missing.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: setup demo test test-faults lint format bench clean

$(BIN)/dlperf: pyproject.toml constraints.txt
	test -d $(VENV) || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -c constraints.txt -e '.[dev]'
	touch $(BIN)/dlperf

setup: $(BIN)/dlperf

demo: setup
	$(BIN)/dlperf demo

test: setup
	$(BIN)/pytest -q -m "not faults"

# The fault tests that take over a minute each (tests/faults/, marked `faults`); CI runs both.
test-faults: setup
	$(BIN)/pytest -q -m faults

lint: setup
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/ruff format --check src tests benchmarks

format: setup
	$(BIN)/ruff format src tests benchmarks
	$(BIN)/ruff check --fix src tests benchmarks

bench: setup
	$(BIN)/pip install --quiet -c constraints.txt -e '.[dev,bench]'
	$(BIN)/python benchmarks/run_all.py

clean:
	rm -rf dlperf_runs dlperf.db dlperf.db-wal dlperf.db-shm .pytest_cache
