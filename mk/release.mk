# Releases (docs/releasing.md). Tags: loom-vX.Y.Z for the modules and the Lambdas (the version in
# terraform/modules/VERSION), engine-core-vX.Y.Z for the library (packages/engine-core's version).
# .github/workflows/release.yml runs these on a pushed tag.
#
#   make release RELEASE_TAG=loom-v0.1.0     check the tag against the version it names, build the
#                       wheels and the three Lambda zips twice from scratch, compare them byte for byte,
#                       and write them with SHA256SUMS to dist/release/ (an engine-core tag also puts
#                       the engine-core wheel alone in dist/release/engine-core/)
#   make github-release RELEASE_TAG=...      attach dist/release/ to the tag's GitHub release (gh CLI,
#                       GH_TOKEN in the environment)
#   make publish-engine-core RELEASE_TAG=engine-core-v0.2.0 ENGINE_CORE_INDEX_URL=https://...
#                       upload dist/release/engine-core/ to a package index (twine; the token in
#                       TWINE_PASSWORD; own venv .venv-twine)

RELEASE_TAG ?=
RELEASE_DIR := dist/release
ENGINE_CORE_INDEX_URL ?=
TWINE_VERSION ?= 7.0.0
TWINE_VENV ?= .venv-twine
RELEASE_ASSETS = $(wildcard $(RELEASE_DIR)/*.whl) $(wildcard $(RELEASE_DIR)/*.zip) $(RELEASE_DIR)/SHA256SUMS

.PHONY: release github-release publish-engine-core

release: venv ## Build a release (RELEASE_TAG=loom-vX.Y.Z or engine-core-vX.Y.Z): wheels and zips, twice, compared, with SHA256SUMS
	$(PY) tools/release.py --tag "$(RELEASE_TAG)" --out $(RELEASE_DIR)

github-release: ## Attach dist/release/ to the GitHub release of RELEASE_TAG (gh CLI; GH_TOKEN)
	@test -n "$(RELEASE_TAG)" || { echo "usage: make github-release RELEASE_TAG=loom-vX.Y.Z (after make release)" >&2; exit 2; }
	@test -f $(RELEASE_DIR)/SHA256SUMS || { echo "$(RELEASE_DIR)/SHA256SUMS missing: run make release RELEASE_TAG=$(RELEASE_TAG) first" >&2; exit 1; }
	cd $(RELEASE_DIR) && sha256sum --check --strict SHA256SUMS
	if gh release view "$(RELEASE_TAG)" >/dev/null 2>&1; then gh release upload "$(RELEASE_TAG)" --clobber $(RELEASE_ASSETS); \
	else gh release create "$(RELEASE_TAG)" --verify-tag --title "$(RELEASE_TAG)" --notes "Wheels and Lambda zips of $(RELEASE_TAG); check them with sha256sum --check SHA256SUMS. See docs/releasing.md." $(RELEASE_ASSETS); fi

$(TWINE_VENV)/.installed-$(TWINE_VERSION):
	@test -x $(TWINE_VENV)/bin/python || $(PYTHON) -m venv $(TWINE_VENV)
	@$(TWINE_VENV)/bin/python -m pip install --disable-pip-version-check -q "twine==$(TWINE_VERSION)"
	@touch $@

publish-engine-core: ## Upload the engine-core wheel of an engine-core-v* release to ENGINE_CORE_INDEX_URL (twine; TWINE_PASSWORD)
	@case "$(RELEASE_TAG)" in engine-core-v*) ;; *) echo "publish-engine-core publishes an engine-core-vX.Y.Z release; RELEASE_TAG='$(RELEASE_TAG)'" >&2; exit 2;; esac
	@test -n "$(ENGINE_CORE_INDEX_URL)" || { echo "ENGINE_CORE_INDEX_URL is empty: set it to the package index's upload URL (in CI, the repository variable of that name)" >&2; exit 2; }
	@test -n "$${TWINE_PASSWORD:-}" || { echo "TWINE_PASSWORD is empty: the index's API token (in CI, the secret ENGINE_CORE_INDEX_TOKEN)" >&2; exit 2; }
	@ls $(RELEASE_DIR)/engine-core/*.whl >/dev/null 2>&1 || { echo "$(RELEASE_DIR)/engine-core/ holds no wheel: run make release RELEASE_TAG=$(RELEASE_TAG) first" >&2; exit 1; }
	@$(MAKE) --no-print-directory $(TWINE_VENV)/.installed-$(TWINE_VERSION)
	TWINE_USERNAME=$${TWINE_USERNAME:-__token__} $(TWINE_VENV)/bin/twine upload --non-interactive \
	  --repository-url "$(ENGINE_CORE_INDEX_URL)" $(RELEASE_DIR)/engine-core/*.whl
