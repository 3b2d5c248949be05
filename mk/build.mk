# Lambda artifacts. Wheels for the local packages -> locked requirements -> one zip per function.
#
#   make build-wheels   engine-core + workflows-examples wheels into dist/wheels (byte-reproducible)
#   make lock-lambdas   re-pin packages/{worker,sweeper,control-plane}/requirements.txt with hashes
#   make build          dist/lambda/<fn>.zip for Lambda python3.12 x86_64 (what Terraform deploys)
#   make build-local    dist/local/<fn>.zip for this machine's Python (the local stack)
#
# The locks pin the local wheels by sha256, so a change to engine-core or workflows-examples
# without a version bump stops `make build` with a message saying to bump and re-lock.

LAMBDAS := worker sweeper control-plane
WHEEL_DIR := dist/wheels
BUILD_LAMBDA := $(PY) tools/build_lambda.py
# pip-tools writes this into each requirements.txt header as the command that made it.
LOCK_ENV := CUSTOM_COMPILE_COMMAND="make lock-lambdas"
# --rebuild and --upgrade-package: pip-tools would otherwise keep the hash it cached for the same
# local version, and the lock would not follow a rebuilt wheel.
PIP_COMPILE_FLAGS := --quiet --generate-hashes --strip-extras --no-emit-index-url --no-emit-find-links \
	--find-links $(WHEEL_DIR) --rebuild --upgrade-package loom-engine-core --upgrade-package loom-workflows-examples

.PHONY: build-wheels lock-lambdas build build-local test-build

build-wheels: venv ## Build the engine-core and workflows-examples wheels into dist/wheels
	$(BUILD_LAMBDA) wheels --out $(WHEEL_DIR)

lock-lambdas: build-wheels ## Re-pin each Lambda's requirements.txt (pip-tools, hashes, local wheels)
	$(foreach f,$(LAMBDAS),$(LOCK_ENV) $(VENV)/bin/pip-compile $(PIP_COMPILE_FLAGS) \
		--output-file packages/$(f)/requirements.txt packages/$(f)/requirements.in &&) true

lock: lock-lambdas

build: build-wheels ## Build dist/lambda/{worker,sweeper,control-plane}.zip for Lambda python3.12
	$(BUILD_LAMBDA) check --wheels $(WHEEL_DIR) $(LAMBDAS)
	$(foreach f,$(LAMBDAS),$(BUILD_LAMBDA) zip $(f) --runtime lambda --wheels $(WHEEL_DIR) --out dist/lambda/$(f).zip &&) true
	cd dist/lambda && sha256sum $(addsuffix .zip,$(LAMBDAS)) > SHA256SUMS

build-local: build-wheels ## Build dist/local/<fn>.zip for this machine's Python (same pins)
	$(BUILD_LAMBDA) check --wheels $(WHEEL_DIR) $(LAMBDAS)
	$(foreach f,$(LAMBDAS),$(BUILD_LAMBDA) zip $(f) --runtime local --wheels $(WHEEL_DIR) --out dist/local/$(f).zip &&) true

test-build: venv ## Build tests: reproducible wheels and zips, locks match wheels, zips import in a clean venv
	$(PY) -m pytest $(PYTEST_ARGS) tests/packaging

TEST_TARGETS += test-build
