# CI on GitHub Actions (.github/workflows/ci.yml and release.yml). Every step they run is a make target
# (tests/packaging/test_ci_workflows.py checks it), so CI runs nothing a developer cannot run.
#
#   make test-ci     lint the workflows with jactionlint (actionlint's checks plus security rules:
#                    actions pinned by commit, token permissions, script injection, cache poisoning;
#                    config in .github/jactionlint.yaml; own venv .venv-jactionlint, installed from
#                    PyPI on first use), then check that they run make targets only
#   make ci-deps     what CI's Debian container lacks: Chromium (the console's browser tests) and unzip
#                    (hashicorp/setup-terraform); apt-get, as root
#   make tf-mirror   fill TF_PLUGIN_MIRROR with the hashicorp/aws provider the environments pin, from the
#                    registry (CI caches it; a machine with a mirror already has one and this does nothing)

JACTIONLINT_VERSION ?= 2.3.0
JACTIONLINT_VENV ?= .venv-jactionlint
WORKFLOWS := $(sort $(wildcard .github/workflows/*.yml))

.PHONY: test-ci ci-deps tf-mirror

$(JACTIONLINT_VENV)/.installed-$(JACTIONLINT_VERSION):
	@test -x $(JACTIONLINT_VENV)/bin/python || $(PYTHON) -m venv $(JACTIONLINT_VENV)
	@$(JACTIONLINT_VENV)/bin/python -m pip install --disable-pip-version-check -q "jactionlint==$(JACTIONLINT_VERSION)" || { \
	  echo "pip could not install jactionlint==$(JACTIONLINT_VERSION) into $(JACTIONLINT_VENV); check the package index, or delete $(JACTIONLINT_VENV) and retry" >&2; exit 1; }
	@touch $@

test-ci: venv $(JACTIONLINT_VENV)/.installed-$(JACTIONLINT_VERSION) ## Lint .github/workflows (jactionlint) and check every step they run is a make target
	$(JACTIONLINT_VENV)/bin/jactionlint --no-online --no-color --no-hints --strict-exit --config-file .github/jactionlint.yaml $(WORKFLOWS)
	$(PY) -m pytest $(PYTEST_ARGS) tests/packaging/test_ci_workflows.py

ci-deps: ## Install what CI's Debian container lacks: Chromium (console tests) and unzip (apt-get, as root)
	@command -v unzip >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq unzip; }
	@$(MAKE) --no-print-directory chromium

# The provider version the environments pin (terraform/envs/*/versions.tf; a test checks they agree).
TF_AWS_PROVIDER_VERSION := 5.100.0

tf-mirror: ## Fill TF_PLUGIN_MIRROR with the pinned hashicorp/aws provider from the registry (CI; needs network)
	@if [ -d "$(TF_PLUGIN_MIRROR)/registry.terraform.io/hashicorp/aws/$(TF_AWS_PROVIDER_VERSION)" ]; then \
	  echo "TF_PLUGIN_MIRROR=$(TF_PLUGIN_MIRROR) already holds hashicorp/aws $(TF_AWS_PROVIDER_VERSION)"; \
	else \
	  mkdir -p "$(TF_PLUGIN_MIRROR)" && env -u TF_CLI_CONFIG_FILE $(TF) -chdir=terraform/envs/dev providers mirror \
	    -platform=linux_amd64 "$(abspath $(TF_PLUGIN_MIRROR))"; \
	fi

TEST_TARGETS += test-ci
