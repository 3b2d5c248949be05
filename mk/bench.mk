# Benchmarks: what a step costs on the wire, in DynamoDB capacity and in dollars, and how that grows.
#
#   make bench        build the zips (make build / build-local), run every section, write
#                     docs/benchmarks.md and docs/bench/*.png (a few minutes; progress is printed)
#   make test-bench   the bench's own unit tests (capacity-unit and price arithmetic; seconds)
#
# One section alone: .venv/bin/python -m bench --only steps   (sections: steps, sweep, overhead,
# coldstart, local; the report is rebuilt from the cached results of the others in bench/.results/).

# matplotlib draws the charts. Until it is in requirements-dev.in, install the pinned version here.
MATPLOTLIB_PIN := matplotlib==3.10.3
BENCH_ARGS ?=
# 0 skips `make build build-local` (the cold-start section then measures whatever zips dist/ holds).
BENCH_BUILD ?= 1
# The local-runtime section needs loom_local in the venv and the Terraform CLI config (provider mirror).
BENCH_LOCAL_PREREQS := $(strip $(if $(wildcard mk/local.mk),local-runtime) $(if $(wildcard mk/terraform.mk),tf-config))

.PHONY: bench bench-deps test-bench

bench-deps: venv
	@$(PY) -c "import matplotlib" 2>/dev/null || $(PIP) install $(MATPLOTLIB_PIN)

bench: bench-deps ## Measure requests, capacity units, dollars, sweeper, engine overhead, cold start per step
	@if [ "$(BENCH_BUILD)" = 1 ] && $(MAKE) -n build build-local >/dev/null 2>&1; then \
		$(MAKE) --no-print-directory build build-local || echo "bench: make build failed; zip figures will be missing" >&2; \
	fi
	@if [ -n "$(BENCH_LOCAL_PREREQS)" ]; then \
		$(MAKE) --no-print-directory $(BENCH_LOCAL_PREREQS) || echo "bench: the local runtime is not ready; its section will say pending" >&2; \
	fi
	$(PY) -m bench $(BENCH_ARGS)

test-bench: venv ## Unit tests of the bench's arithmetic (capacity units from item sizes, prices)
	$(PY) -m pytest $(PYTEST_ARGS) bench/tests

TEST_TARGETS += test-bench
