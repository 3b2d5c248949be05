# Benchmarks: what a step costs on the wire, in DynamoDB capacity and in dollars, and how that grows.
#
#   make bench        build the zips (make build / build-local), run every section, write
#                     docs/benchmarks.md and docs/bench/*.png (a few minutes; progress is printed)
#   make test-bench   the bench's own unit tests (capacity-unit and price arithmetic, and that the
#                     report's verdicts follow the data; seconds)
#
# One section alone: .venv/bin/python -m bench --only steps   (sections: steps, sweep, overhead, ledger,
# coldstart, local, fanout, recovery, chaos; the report is rebuilt from the cached results of the others in
# bench/.results/, and left as it is where they have none: that run's report goes to
# bench/.results/benchmarks.partial.md).

BENCH_ARGS ?=
# 0 skips `make build build-local` (the cold-start section then measures whatever zips dist/ holds).
BENCH_BUILD ?= 1
# The local-runtime section needs loom_local in the venv and the Terraform CLI config (provider mirror).
BENCH_LOCAL_PREREQS := local-runtime tf-config

.PHONY: bench bench-deps test-bench

# matplotlib (charts) comes with requirements-dev.txt.
bench-deps: venv

bench: bench-deps ## Measure requests, capacity units, dollars, sweeper, engine overhead, cold start per step
	@if [ "$(BENCH_BUILD)" = 1 ]; then $(MAKE) --no-print-directory build build-local; fi
	@$(MAKE) --no-print-directory $(BENCH_LOCAL_PREREQS)
	$(PY) -m bench $(BENCH_ARGS)

test-bench: venv ## Unit tests of the bench's arithmetic (capacity units, prices) and of its report's verdicts
	$(PY) -m pytest $(PYTEST_ARGS) bench/tests

TEST_TARGETS += test-bench
