# Two entry points: `make run` starts the exporter on the shipped config, `make test` runs every test.
# Both set up what they need on a fresh machine (a virtualenv, and for tests Prometheus/Chromium).
# `make generate` renders mixin/ into every generated file (rules, alerts, dashboards, their copies).
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin

.PHONY: run test setup test-deps lint generate

$(BIN)/llm-probe-exporter: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	@touch $@

setup: $(BIN)/llm-probe-exporter

run: setup
	$(BIN)/llm-probe-exporter --config.file config.yaml --log.format console

generate: setup
	$(BIN)/python mixin/generate.py

test-deps: setup
	@bash scripts/install-test-deps
	@bash scripts/install-real-servers

lint: setup
	$(BIN)/ruff check exporter tests benchmarks

test: test-deps lint
	$(BIN)/pytest -q -p no:cacheprovider
