# The only entry points humans and CI use.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
DATA   ?= .data
HOST   ?= 127.0.0.1
PORT   ?= 8080
PYTEST_ARGS ?=

.PHONY: venv run test test-fast lint fmt bench clean

venv: $(VENV)/.installed

$(VENV)/.installed: requirements.txt requirements-dev.txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -r requirements-dev.txt
	$(BIN)/pip install --quiet --no-deps -e .
	touch $@

## Run the service on the embedded backend at http://$(HOST):$(PORT)
run: venv
	$(BIN)/ams admin bootstrap --data-dir $(DATA)
	$(BIN)/ams serve --data-dir $(DATA) --host $(HOST) --port $(PORT)

## Run the whole test suite (a real server over a socket, the official client over HTTPS)
test: venv
	$(BIN)/pytest $(PYTEST_ARGS)

## The quick loop: skip the slow durability and concurrency tests
test-fast: venv
	$(BIN)/pytest -m "not slow" $(PYTEST_ARGS)

lint: venv
	$(BIN)/ruff check ams_app tests benchmarks
	$(BIN)/ruff format --check ams_app tests benchmarks
	$(BIN)/mypy

fmt: venv
	$(BIN)/ruff format ams_app tests benchmarks
	$(BIN)/ruff check --fix ams_app tests benchmarks

## Publish and pull throughput on this machine (numbers: docs/benchmarks.md)
bench: venv
	$(BIN)/python benchmarks/api_throughput.py

clean:
	rm -rf $(VENV) $(DATA) .pytest_cache .mypy_cache .ruff_cache *.egg-info
