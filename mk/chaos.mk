# Chaos runs: a mixed load of every example on a fresh local stack, under real faults, then the invariants
# checked and the figures measured from what the stack recorded (packages/local-runtime/src/loom_local/chaos).
#
#   make chaos                      the faults profile: 150 executions, 32 worker SIGKILLs (at every crash point,
#                                   then at random), 2 sweeper and 2 control-plane kills, 12 duplicated and 6
#                                   replayed messages, cancels, wakes, redrives, events and callbacks mid-flight
#   make chaos PROFILE=backlog      300 starts in 45 s and no faults: the stale share beside its 5% goal
#   make chaos PROFILE=both SEED=7 COUNT=40 DURATION=600
#                                   SEED: the load plan's (default 1); COUNT: executions per profile; DURATION:
#                                   each run's bound in seconds from its first start (faults 900, backlog 1200)
#
# The stack is `make up`'s (LOCAL_TF_VARS, LOCAL_SWEEP_EVERY) on 127.0.0.1, started fresh in
# .loom/chaos/runs/<run id>/ with a payment ledger of its own; it is stopped at the end. Each run's record
# (chaos-<profile>.json) and figures (chaos-<profile>-report.json) are written there; the report is printed.
# Exit status 1 when an invariant failed; a missed speed goal is printed, not an error.
# `python -m loom_local.chaos --check FILE` checks and reports a recorded run again.
# No defaults are set here: SEED and the others are also other targets' variables (mk/sim.mk).

CHAOS_ARGS ?=

.PHONY: chaos

chaos: local-runtime build-local tf-config ## Chaos run on the local stack: kills, duplicates, operator actions; checks the invariants
	$(PY) -m loom_local.chaos --profile $(or $(PROFILE),faults) $(if $(SEED),--seed $(SEED)) \
	  $(if $(COUNT),--count $(COUNT)) $(if $(DURATION),--duration $(DURATION)) \
	  --sweep-every $(LOCAL_SWEEP_EVERY) $(LOCAL_TF_ARGS) $(CHAOS_ARGS)
