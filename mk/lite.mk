# Loom without AWS: one process (worker, sweeper, the control plane's API) on one SQLite file
# (packages/lite, docs/lite.md).
#
#   make demo-lite    one order_fulfillment execution through a retry, a SIGKILL of the runtime process inside
#                     the charge (a new one resumes it: charged once) and a durable sleep; about 15 s
#   make dev          `loom dev` for the installed workflow packages (the examples here), on .loom/loom.db
#   make test-lite    the runtime's tests (also in `make test-unit`: packages/lite/tests)

.PHONY: demo-lite dev test-lite

demo-lite: venv ## Run one order on SQLite through a retry, a SIGKILL of the runtime and a sleep (no AWS, ~15 s)
	$(PY) -m loom_lite.demo

dev: venv ## Serve the installed workflows on SQLite (.loom/loom.db) with `loom dev` until Ctrl-C
	$(VENV)/bin/loom dev

test-lite: venv ## Only the one-process runtime's tests (packages/lite/tests)
	$(PY) -m pytest $(PYTEST_ARGS) packages/lite/tests
