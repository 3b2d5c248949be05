# The deterministic simulation of the failure space (packages/engine-core/tests/simulation).
# `make test` already runs it: its 1,000 seeds are pytest tests under packages/*/tests, so test-unit
# collects them (no separate TEST_TARGETS entry, so they do not run twice). `make soak` runs more
# seeds from the command line, or replays one seed with its full trace.
SIM_DIR := packages/engine-core/tests/simulation
SEEDS ?= 10000
FIRST_SEED ?= 0
JOBS ?= 0
SEED ?=

.PHONY: soak test-sim

soak: venv ## Simulate SEEDS=N seeds (default 10000, from FIRST_SEED=0; JOBS=processes); SEED=n replays one with its trace
	$(PY) $(SIM_DIR)/sim_main.py $(if $(SEED),--seed $(SEED) --trace,--seeds $(SEEDS) --first $(FIRST_SEED) --jobs $(JOBS))

test-sim: venv ## Only the simulation's tests (1,000 seeds and its self-tests; part of `make test` already)
	$(PY) -m pytest $(PYTEST_ARGS) $(SIM_DIR)
