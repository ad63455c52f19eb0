# Two entry points: `make run` starts the exporter on the shipped config, `make test` runs every test.
# Both set up what they need on a fresh machine (a virtualenv, and for tests Prometheus/Chromium).
# `make check` is the quick loop (lint, types, the tests that need nothing built or installed from
# apt: under 3 minutes); `make dist` builds the sdist and wheel into dist/; `make image` builds the
# container image with docker or podman (scripts/build-image).
# `make generate` renders mixin/ into every generated file (rules, alerts, dashboards, their copies)
# and writes the command outputs the docs show (scripts/docs_examples.py).
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
# One virtualenv, filled in two steps, each with its stamp: the package and its runtime
# dependencies (all `make run` needs), then the dev extra on top (tests, linters, kubectl, the
# providers' SDKs: everything else). `make run` after `make test` installs nothing; `make test`
# after `make run` adds the dev extra; an edited pyproject.toml makes both stale.
RUNTIME := $(VENV)/.stamp-runtime
DEV     := $(VENV)/.stamp-dev

.PHONY: run test check setup test-deps lint types dist generate image

$(RUNTIME): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet -e .
	@touch $@

$(DEV): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	@touch $(RUNTIME) $@

setup: $(DEV)

# The demo's ports, in one place: `make run EXPORTER_PORT=9500 SIMULATOR_PORT=9600`. It listens
# on loopback only (a demo is nobody else's business): http://127.0.0.1:$(EXPORTER_PORT)/.
EXPORTER_PORT  ?= 9471
SIMULATOR_PORT ?= 9472

run: $(RUNTIME)
	SIMULATOR_PORT=$(SIMULATOR_PORT) $(BIN)/llm-probe-exporter --config.file config.yaml \
		--web.listen-address 127.0.0.1:$(EXPORTER_PORT) --log.format console

image:
	@IMAGE="$(IMAGE)" BASE_IMAGE="$(BASE_IMAGE)" bash scripts/build-image

generate: setup
	$(BIN)/python mixin/generate.py
	$(BIN)/python scripts/docs_examples.py

test-deps: setup
	@bash scripts/install-test-deps
	@bash scripts/install-real-servers

lint: setup
	$(BIN)/ruff check exporter tests benchmarks

types: setup
	$(BIN)/mypy

# The fast tests need no real server, nothing built or installed by test-deps and no network
# (the others are marked e2e, realservers, soak, tools, slow or container): config, decoders,
# protocols, prober and simulator over loopback, exposition, hints, records; on every core
# (pytest-xdist).
FAST := not e2e and not realservers and not soak and not tools and not slow and not container

check: lint types
	$(BIN)/pytest -q -p no:cacheprovider -n auto -m "$(FAST)"

dist: setup
	rm -rf dist
	$(BIN)/python -m build --outdir dist .

# Every test: the fast ones on every core, then the ones that start real servers, measure time
# or build an image one at a time (they share the machine with nothing else), the slowest named.
test: test-deps lint types
	$(BIN)/pytest -q -p no:cacheprovider -n auto -m "$(FAST)"
	$(BIN)/pytest -q -p no:cacheprovider -m "not ($(FAST))" --durations=15
