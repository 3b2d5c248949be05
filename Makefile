# Loom monorepo. `make demo` runs Loom locally; `make test` runs every package's tests.
# Each concern keeps its targets in mk/<concern>.mk; this file holds the shared environment.

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV ?= .venv
PY := $(abspath $(VENV))/bin/python
PIP := $(PY) -m pip --disable-pip-version-check -q
PYTEST_ARGS ?=
export PYTHONDONTWRITEBYTECODE := 1

# Workflow and Lambda packages, their tools and their test support, installed editable into the dev
# environment (no Lambda zip installs anything but its requirements.txt). They build with the venv's own
# pinned hatchling (--no-build-isolation): an isolated build environment per package costs a minute and a half.
PACKAGES := engine-core workflows-examples worker sweeper control-plane cli local-runtime test-support

.PHONY: help venv lock test test-unit clean

help: ## List the targets
	@grep -hE '^[a-zA-Z_-]+:.*?## ' $(MAKEFILE_LIST) | sort | awk 'BEGIN {FS = ":.*?## "}; {printf "  make %-16s %s\n", $$1, $$2}'

venv: $(VENV)/.installed ## Create the dev environment (.venv) from the pinned requirements

$(VENV)/.installed: requirements-dev.txt $(foreach p,$(PACKAGES),packages/$(p)/pyproject.toml)
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -r requirements-dev.txt
	$(PIP) install --no-deps --no-build-isolation $(foreach p,$(PACKAGES),-e packages/$(p))
	@touch $@

lock: venv ## Re-pin requirements-dev.txt (pip-tools)
	$(VENV)/bin/pip-compile -q --strip-extras --no-emit-index-url --output-file requirements-dev.txt requirements-dev.in

# The package suites are independent (moto in-process, free ports, temporary directories): they run in
# UNIT_WORKERS pytest-xdist processes, one per core here. UNIT_WORKERS=0 runs them in this process.
UNIT_WORKERS ?= 2
test-unit: venv ## Package tests only (no Terraform, no local stack)
	$(PY) -m pytest $(if $(filter-out 0,$(UNIT_WORKERS)),-n $(UNIT_WORKERS)) $(PYTEST_ARGS) $(foreach p,$(PACKAGES),packages/$(p)/tests)

clean: ## Remove build outputs (keeps .venv)
	rm -rf build dist .loom

-include mk/*.mk

# `make test` is everything CI runs: each mk/*.mk adds its suites to TEST_TARGETS.
test: test-unit $(TEST_TARGETS) ## Run every test suite (what CI runs)
	@echo "all test suites passed"
