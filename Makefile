# Every target creates and owns .venv, so a machine with only Python 3.11 is enough.
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: up test typecheck unit bench clean

$(STAMP): pyproject.toml
	@command -v $(PYTHON) >/dev/null || { echo "needs $(PYTHON)"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev,fast]'
	touch $(STAMP)

## start one nsqd on 4150 (TCP) / 4151 (HTTP) in the foreground
up: $(STAMP)
	$(BIN)/nsqd --data-path=$(or $(DATA_PATH),.) $(ARGS)

## run every test: type checks, unit tests, functional tests against real processes
test: $(STAMP) typecheck
	$(BIN)/pytest -q $(PYTEST_ARGS)

typecheck: $(STAMP)
	$(BIN)/mypy

unit: $(STAMP)
	$(BIN)/pytest -q tests/unit

## throughput benchmark (see bench/README.md)
bench: $(STAMP)
	$(BIN)/python -m bench.run $(ARGS)

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache
