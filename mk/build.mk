# Lambda artifacts. Wheels for the local packages -> locked requirements -> one zip per function.
#
#   make build-wheels   engine-core + workflows-examples wheels into dist/wheels (byte-reproducible),
#                       plus any earlier version a Lambda still pins (kept, or rebuilt from git history)
#   make lock-lambdas   re-pin packages/<fn>/requirements.txt with hashes (LAMBDAS=sweeper: only that one)
#   make build          dist/lambda/<fn>.zip for Lambda python3.12 x86_64 (what Terraform deploys), with
#                       bytecode compiled ahead by a CPython 3.12 (LAMBDA_PYTHON=...; see below);
#                       LAMBDA_ARCH=arm64 builds dist/lambda-arm64/<fn>.zip for Graviton (architecture = "arm64")
#   make build-local    dist/local/<fn>.zip for this machine's Python (the local stack: make up, make demo)
#   make bump-engine-core VERSION=0.1.1 [LAMBDAS=sweeper]
#                       release engine-core: moves its version, __version__ and the chosen Lambdas'
#                       pins together, then re-locks those Lambdas (the others keep their pins)
#
# EXAMPLES=0 (any build target) leaves Loom's example workflows (packages/workflows-examples: a poison
# pill, a fake payment ledger, ...) out of every zip: each zip installs its Lambda's lock minus that
# entry and whatever only it required, so nothing is re-locked and the zips stay hash-locked. Pass it
# with your own workflows (EXTRA_WHEELS) for production, or `export EXAMPLES=0` once.
#
# Each Lambda builds from its own lock, so Lambdas may pin different engine-core versions. The locks
# pin the local wheels by sha256, so a change to engine-core or workflows-examples without a version
# bump stops `make build` with a message saying to bump (or, while developing, `make lock-lambdas`).
#
# Your own workflows, from outside this repository (nothing here to edit):
#
#   make build build-local EXTRA_WHEELS=/path/acme_flows-1.0-py3-none-any.whl   # files or directories
#   make build EXTRA_REQUIREMENTS=/path/requirements.txt     # hash-locked (pip-compile --generate-hashes)
#   make up EXTRA_WHEELS=/path/wheels/                       # the local stack runs the dist/local zips
#
# EXTRA_WHEELS (space-separated) go into every zip; their sha256 are recorded in EXTRA_LOCK (default
# dist/extra-workflows.lock; point it at a file in your own repository to keep the record; every
# version ever built stays in it) and checked on every later build: a wheel with the same name and
# version but other bytes is refused
# (`make lock-extras EXTRA_WHEELS=...` re-records on purpose). Everything in a zip is installed with
# pip --require-hashes, so the zips stay hash-locked and byte-reproducible. Make also reads these
# from the environment (`export EXTRA_WHEELS=...`); a build without them holds Loom's packages only.

LAMBDAS := worker sweeper control-plane
WHEEL_DIR := dist/wheels
# x86_64 (default) or arm64; tools/build_lambda.py refuses anything else. x86_64 zips go to dist/lambda
# (what envs/dev and envs/prod deploy by default), arm64 ones to dist/lambda-arm64.
LAMBDA_ARCH ?= x86_64
LAMBDA_DIST = dist/lambda$(if $(filter x86_64,$(LAMBDA_ARCH)),,-$(LAMBDA_ARCH))
# The CPython 3.12 that compiles the Lambda zips' bytecode (empty: python3.12 on PATH, else pyenv's newest 3.12;
# none found: the zips ship sources only and the build says so). Local zips are compiled by the venv's Python.
LAMBDA_PYTHON ?=
# 1 (default) or 0; tools/build_lambda.py refuses anything else.
EXAMPLES ?= 1
EXAMPLES_ARG = --examples $(EXAMPLES)
BUILD_LAMBDA := $(PY) tools/build_lambda.py
EXTRA_WHEELS ?=
EXTRA_REQUIREMENTS ?=
EXTRA_LOCK ?= dist/extra-workflows.lock
EXTRA_ARGS = $(foreach w,$(EXTRA_WHEELS),--extra-wheels $(w)) \
	$(if $(strip $(EXTRA_REQUIREMENTS)),--extra-requirements $(EXTRA_REQUIREMENTS)) --extra-lock $(EXTRA_LOCK)
# pip-tools writes this into each requirements.txt header as the command that made it.
LOCK_ENV := CUSTOM_COMPILE_COMMAND="make lock-lambdas"
# --rebuild and --upgrade-package: pip-tools would otherwise keep the hash it cached for the same
# local version, and the lock would not follow a rebuilt wheel.
PIP_COMPILE_FLAGS := --quiet --generate-hashes --strip-extras --no-emit-index-url --no-emit-find-links \
	--find-links $(WHEEL_DIR) --rebuild --upgrade-package loom-engine-core --upgrade-package loom-workflows-examples

.PHONY: build-wheels lock-lambdas lock-extras bump-engine-core build build-local test-build

build-wheels: venv ## Build the engine-core and workflows-examples wheels (and the versions still pinned) into dist/wheels
	$(BUILD_LAMBDA) wheels --out $(WHEEL_DIR)

# $(call lock-lambdas-of,worker sweeper): pip-compile each one's requirements.in into requirements.txt.
lock-lambdas-of = $(foreach f,$(1),$(LOCK_ENV) $(VENV)/bin/pip-compile $(PIP_COMPILE_FLAGS) \
		--output-file packages/$(f)/requirements.txt packages/$(f)/requirements.in &&) true

lock-lambdas: build-wheels ## Re-pin each Lambda's requirements.txt (LAMBDAS=sweeper for one; pip-tools, hashes)
	$(call lock-lambdas-of,$(LAMBDAS))

lock: lock-lambdas

lock-extras: venv ## Re-record the sha256 of EXTRA_WHEELS in EXTRA_LOCK (after replacing a wheel on purpose)
	$(BUILD_LAMBDA) lock-extras $(EXTRA_ARGS)

bump-engine-core: venv ## Release engine-core: VERSION=x.y.z [LAMBDAS=sweeper] moves every pin, re-locks
	@test -n "$(VERSION)" || { echo "usage: make bump-engine-core VERSION=0.1.1 [LAMBDAS=\"worker sweeper\"]"; exit 2; }
	$(BUILD_LAMBDA) set-version engine-core $(VERSION) --lambdas $(LAMBDAS)
	$(BUILD_LAMBDA) wheels --out $(WHEEL_DIR)
	$(call lock-lambdas-of,$(LAMBDAS))

build: build-wheels ## Build dist/lambda/{worker,sweeper,control-plane}.zip for Lambda python3.12 (LAMBDA_ARCH=arm64, EXAMPLES=0, EXTRA_WHEELS=...)
	$(BUILD_LAMBDA) check --wheels $(WHEEL_DIR) $(EXTRA_ARGS) $(EXAMPLES_ARG) $(LAMBDAS)
	$(foreach f,$(LAMBDAS),$(BUILD_LAMBDA) zip $(f) --runtime lambda --arch $(LAMBDA_ARCH) $(if $(LAMBDA_PYTHON),--lambda-python $(LAMBDA_PYTHON)) --wheels $(WHEEL_DIR) $(EXTRA_ARGS) $(EXAMPLES_ARG) --out $(LAMBDA_DIST)/$(f).zip &&) true
	cd $(LAMBDA_DIST) && sha256sum $(addsuffix .zip,$(LAMBDAS)) > SHA256SUMS

build-local: build-wheels ## Build dist/local/<fn>.zip for this machine's Python (same pins; EXAMPLES=0, EXTRA_WHEELS=...)
	$(BUILD_LAMBDA) check --wheels $(WHEEL_DIR) $(EXTRA_ARGS) $(EXAMPLES_ARG) $(LAMBDAS)
	$(foreach f,$(LAMBDAS),$(BUILD_LAMBDA) zip $(f) --runtime local --wheels $(WHEEL_DIR) $(EXTRA_ARGS) $(EXAMPLES_ARG) --out dist/local/$(f).zip &&) true

# The build tests run in BUILD_WORKERS pytest-xdist processes, a file per process (its module fixtures, e.g. the
# wheels, are built once): the one-Lambda release on a clone (tests/packaging/test_release_engine_core.py, the
# longest: it runs the other files' tests again on mixed pins) beside the rest. BUILD_WORKERS=0 runs them in
# this process.
BUILD_WORKERS ?= 2
test-build: venv ## Build tests: reproducible wheels and zips, locks match wheels, zips import in a clean venv
	$(PY) -m pytest $(if $(filter-out 0,$(BUILD_WORKERS)),-n $(BUILD_WORKERS) --dist loadfile) $(PYTEST_ARGS) tests/packaging

TEST_TARGETS += test-build
