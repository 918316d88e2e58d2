# Two entry points for a fresh machine: `make run` and `make test`.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
BIN := $(VENV)/bin

.PHONY: run test install bench lint clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test,notebooks,dist]'
	touch $@

install: $(VENV)/.installed

# The main job on built-in data: solve the paper-like 128-GPU round with every mechanism
# and check each answer independently, then replay a generated paper workload (128 GPUs,
# FIFO, 9 jobs/h) under the heuristics and compare job completion times.
run: install
	$(BIN)/synergy-opt demo -o out/demo
	$(BIN)/synergy-opt compare --jobs 2000 --arrival-rate 9 --window 1000:1500 \
		--mechanisms proportional,greedy,tune,tune-sorted -o out/compare

test: install
	$(PY) -m pytest -q

# Style and types (not part of `make test`: the linters' verdicts move with their versions
# and numpy's stubs; run before committing).
lint: install
	$(PY) -m pip install --quiet ruff mypy
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy synergy_opt

bench: install
	$(PY) bench/run.py

clean:
	rm -rf $(VENV) out .pytest_cache .hypothesis
