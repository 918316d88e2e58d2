# Two entry points for a fresh machine: `make run` and `make test`.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
BIN := $(VENV)/bin

.PHONY: run test install bench clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test,notebooks,dist]'
	touch $@

install: $(VENV)/.installed

# The main job on built-in data: solve the shipped paper-like 128-GPU round with every
# mechanism and check each answer independently.
run: install
	$(BIN)/synergy-opt demo -o out/demo

test: install
	$(PY) -m pytest -q

bench: install
	$(PY) bench/run.py

clean:
	rm -rf $(VENV) out .pytest_cache .hypothesis
