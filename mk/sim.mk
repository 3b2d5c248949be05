# The deterministic simulation of the failure space (packages/engine-core/tests/simulation).
# `make test` already runs it: its 1,000 seeds (and the composition simulation's 400) are pytest tests
# under packages/*/tests, so test-unit collects them (no separate TEST_TARGETS entry, so they do not run
# twice). `make soak` runs more seeds from the command line, or replays one seed with its full trace; it
# runs the composition simulation (parallel, map, wait_for_event, compensation) after the main one.
SIM_DIR := packages/engine-core/tests/simulation
SEEDS ?= 10000
COMPOSITION_SEEDS ?= 2000
FIRST_SEED ?= 0
JOBS ?= 0
SEED ?=

.PHONY: soak soak-composition test-sim

soak: venv ## Simulate SEEDS=N seeds (default 10000), then COMPOSITION_SEEDS=N composition seeds (default 2000, 0 skips); SEED=n replays one main seed
	$(PY) $(SIM_DIR)/sim_main.py $(if $(SEED),--seed $(SEED) --trace,--seeds $(SEEDS) --first $(FIRST_SEED) --jobs $(JOBS))
	$(if $(SEED),,$(if $(filter-out 0,$(COMPOSITION_SEEDS)),$(PY) $(SIM_DIR)/composition_main.py --seeds $(COMPOSITION_SEEDS) --first $(FIRST_SEED) --jobs $(JOBS)))

soak-composition: venv ## Only the composition simulation: COMPOSITION_SEEDS=N seeds (default 2000); SEED=n replays one with its trace
	$(PY) $(SIM_DIR)/composition_main.py $(if $(SEED),--seed $(SEED) --trace,--seeds $(COMPOSITION_SEEDS) --first $(FIRST_SEED) --jobs $(JOBS))

test-sim: venv ## Only the simulation's tests (1,000 + 400 composition seeds and the self-tests; part of `make test` already)
	$(PY) -m pytest $(PYTEST_ARGS) $(SIM_DIR)
