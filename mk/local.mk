# The local stack: Loom's deployed functions run by packages/local-runtime on moto (127.0.0.1).
#
#   make demo               fresh clone -> venv, zips, moto, terraform apply, one live execution under
#                           real faults, its history; leaves nothing running (Ctrl-C too)
#   make up                 the same stack in the background: prints the Function URL, writes
#                           .loom/local.json (URL, pids); this run's logs, crash points and AWS calls in
#                           .loom/runs/<run id>/ (.loom/current is the newest; .loom/logs its logs)
#   make down               stop what `make up` started; its table is saved to .loom/state/table.json
#                           and the next `make up` restores it (executions survive; SQS messages do not)
#   make reset              stop it if it runs and delete the saved table: the next `make up` starts clean
#   make test-integration   tests/integration: end to end through the deployed functions, real kills
#   make test-local-runtime the local runtime's own tests (tiny zips, no Terraform)
#
# Your own workflow packages: `make up EXTRA_WHEELS=/path/to/wheels` (or `export EXTRA_WHEELS=...`)
# builds them into dist/local first, hash-locked (see mk/build.mk); the runtime runs those zips.
#
# LOCAL_TF_VARS are passed to terraform/envs/local as -var NAME=VALUE. The default lease_s=5 lets the
# sweeper re-drive a lost step message within seconds instead of after the 120 s visibility timeout.
# A killed worker's claimed step waits for that invocation's deadline (the local worker timeout is
# 20 s) before the sweeper may re-drive it.
# LOCAL_ARGS go to the runtime (python -m loom_local --help).

LOCAL_RUNTIME = $(PY) -m loom_local
LOCAL_SWEEP_EVERY ?= 5
LOCAL_TF_VARS ?= lease_s=5
LOCAL_ARGS ?=
LOCAL_TF_ARGS = $(foreach v,$(LOCAL_TF_VARS),--tf-var $(v))

.PHONY: local-runtime demo up down reset local-status test-integration test-local-runtime

# Installed editable with the other packages (PACKAGES in the root Makefile).
local-runtime: venv

LOCAL_PREREQS := local-runtime build-local tf-config

demo: $(LOCAL_PREREQS) ## Run Loom locally: one order, live, through a retry, a worker SIGKILL and a durable sleep
	$(LOCAL_RUNTIME) demo $(LOCAL_TF_ARGS) $(LOCAL_ARGS)

up: $(LOCAL_PREREQS) ## Start the local stack in the background; prints the Function URL (see .loom/local.json)
	$(LOCAL_RUNTIME) up --sweep-every $(LOCAL_SWEEP_EVERY) $(LOCAL_TF_ARGS) $(LOCAL_ARGS)

down: ## Stop the local stack started by `make up`; keeps its table (.loom/state) for the next `make up`
	@if [ -x $(PY) ]; then $(LOCAL_RUNTIME) down; \
	 else echo "nothing to stop: there is no .venv (make up creates it)"; fi

reset: ## Stop the local stack if it runs and delete its saved table: the next `make up` starts clean
	@if [ -x $(PY) ]; then $(LOCAL_RUNTIME) reset; \
	 else rm -rf .loom/state && echo "deleted .loom/state: the next \`make up\` starts with an empty table"; fi

local-status: ## Is the local stack up, and where
	@$(LOCAL_RUNTIME) status

test-local-runtime: local-runtime ## The local runtime's own tests (tiny zips, no Terraform)
	$(PY) -m pytest $(PYTEST_ARGS) packages/local-runtime/tests

# The end-to-end modules run in E2E_WORKERS processes (pytest-xdist, a module stays in one), each with a
# stack of its own: the tests mostly wait (leases, deadlines, sleeps), so three stacks share two cores
# well (`time make test-integration` here: 8 min 58 s on one stack, 5 min 46 s with three; 6.9 to 8.1 min
# with three while other jobs kept the load average at 6-8). E2E_WORKERS=0 runs them all on one stack.
E2E_WORKERS ?= 3
E2E_DIST ?= loadfile
test-integration: $(LOCAL_PREREQS) ## End-to-end tests through the deployed functions, with real process kills
	$(PY) -m pytest $(if $(filter-out 0,$(E2E_WORKERS)),-n $(E2E_WORKERS) --dist $(E2E_DIST)) $(PYTEST_ARGS) tests/integration

TEST_TARGETS += test-integration
