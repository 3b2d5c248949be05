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
# Python keeps the bytecode it compiles (__pycache__, git-ignored; no wheel or zip takes it): the test tiers start
# a hundred or more Python processes, and each would otherwise compile the packages and the test modules anew.
unexport PYTHONDONTWRITEBYTECODE

# Workflow and Lambda packages, their tools and their test support, installed editable into the dev
# environment (no Lambda zip installs anything but its requirements.txt). They build with the venv's own
# pinned hatchling (--no-build-isolation): an isolated build environment per package costs a minute and a half.
PACKAGES := engine-core workflows-examples worker sweeper control-plane cli local-runtime lite test-support

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

# `make test` is everything CI runs: each mk/*.mk adds its suites to TEST_TARGETS. The tiers run TEST_JOBS at a
# time in four lanes: the package tests (test-unit, both cores; they need no zips, so they start at once), the
# other quick tiers one after another (build, bench, ci, docs: one process or two, partly waiting on pip, git and
# subprocesses), and the end-to-end and Terraform tiers (mostly waiting on leases, sleeps and the emulator's SQS
# settling). The zips, the local runtime and the Terraform CLI config are built once, beside the package tests,
# before any other tier starts. Side by side they keep both cores busy to the end instead of leaving one idle
# behind a single-process tier. A tier's output goes to build/test-logs/<tier>.log while it runs and is printed
# whole when it ends; a table of every tier's result (wall time and CPU seconds) closes the run. `make -k test`
# runs every tier whatever fails; `make test` stops starting tiers after the first failure. TEST_JOBS=1 runs
# every tier one after another.
TEST_JOBS ?= 4
TEST_WAITING_TIERS = $(filter test-integration test-terraform,$(TEST_TARGETS))
TEST_SERIAL_TIERS = $(filter-out $(TEST_WAITING_TIERS),$(TEST_TARGETS))
TEST_TIERS = test-unit $(TEST_TARGETS)
TEST_PREREQS := build build-local local-runtime tf-config
TIERS := $(PY) tools/test_tiers.py
# A tier's own make run takes the zips built above as they are (-o: never rebuilt by a tier).
TIER_MAKE = $(MAKE) --no-print-directory -o build -o build-local -o build-wheels
KEEP_GOING = $(findstring k,$(firstword -$(MAKEFLAGS)))

.PHONY: test-tiers test-serial-tiers test-prereqs $(addprefix tier-,$(TEST_TIERS))

test: venv ## Run every test suite (what CI runs): zips built once, tiers side by side (TEST_JOBS=4)
	@rm -rf build/test-logs
	@$(MAKE) --no-print-directory -j$(TEST_JOBS) test-tiers; rc=$$?; $(TIERS) summary $(TEST_TIERS) || rc=1; exit $$rc
	@echo "all test suites passed"

# The Lambda zips and the local ones build side by side (each mostly waits on pip and the compiler processes).
test-prereqs: venv
	@$(MAKE) --no-print-directory -j2 -O $(TEST_PREREQS)

test-serial-tiers $(addprefix tier-,$(TEST_WAITING_TIERS)): test-prereqs

ifeq ($(TEST_JOBS),1)
test-tiers: test-serial-tiers
test-serial-tiers: TEST_SERIAL_TIERS = $(TEST_TIERS)
else
test-tiers: tier-test-unit test-serial-tiers $(addprefix tier-,$(TEST_WAITING_TIERS))
endif

test-serial-tiers:
	@rc=0; for t in $(TEST_SERIAL_TIERS); do $(TIERS) run $$t -- $(TIER_MAKE) $$t || { rc=1; $(if $(KEEP_GOING),:,break); }; done; exit $$rc

$(addprefix tier-,test-unit $(TEST_WAITING_TIERS)): tier-%:
	@$(TIERS) run $* -- $(TIER_MAKE) $*
