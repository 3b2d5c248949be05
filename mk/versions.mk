# Workflow versions before a deploy (DESIGN.md "Versions"): refuse a build whose worker zip drops a workflow
# version (or a whole workflow) that executions live on the stack still run on.
#
#   make versions-check                                  the local stack (`make up`) against dist/local/worker.zip
#   make versions-check VERSIONS_ZIP=dist/lambda/worker.zip LOOM_ARGS="--env-dir terraform/envs/prod"
#   make versions-check VERSIONS_WARN=1                  print what would be stranded, but do not fail

VERSIONS_ZIP ?= dist/local/worker.zip
VERSIONS_MANIFEST ?= build/workflows.json
VERSIONS_WARN ?=
LOOM_ARGS ?=

.PHONY: versions-check

versions-check: venv ## Refuse a deploy whose worker zip drops a workflow version live executions run on (VERSIONS_ZIP=, LOOM_ARGS=)
	$(PY) -m engine_core.manifest --zip $(VERSIONS_ZIP) --out $(VERSIONS_MANIFEST)
	$(abspath $(VENV))/bin/loom $(LOOM_ARGS) versions check --manifest $(VERSIONS_MANIFEST) $(if $(VERSIONS_WARN),--warn-only)
