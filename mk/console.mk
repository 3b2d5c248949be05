# The web console (`loom console`) and the MCP server (`loom mcp`) live in packages/cli; their tests run
# with the CLI's (make test-unit: a fake control plane, headless Chromium) and in tests/integration
# (make test-integration: the local stack). Chromium is Debian's (/usr/bin/chromium): .ci/run installs it,
# `make chromium` does the same on a machine of your own (apt-get; root).
#
#   make console               the console on the `make up` stack, opened in your browser (Ctrl-C stops it)
#   make console-screenshots   re-take docs/console/*.png from the browser tests (starts its own stack)

CHROMIUM ?= /usr/bin/chromium
CONSOLE_ARGS ?= --open

.PHONY: console console-screenshots chromium

console: venv ## Serve the web console for the `make up` stack on 127.0.0.1 and open it (CONSOLE_ARGS=--port 8080)
	$(VENV)/bin/loom console $(CONSOLE_ARGS)

console-screenshots: local-runtime build-local tf-config chromium ## Re-take docs/console/*.png (the console's browser tests on a fresh local stack)
	LOOM_CONSOLE_SCREENSHOTS=$(abspath docs/console) $(PY) -m pytest $(PYTEST_ARGS) tests/integration/test_e2e_console.py

chromium: ## Install Debian's Chromium for the console's browser tests, if it is missing (apt-get)
	@test -x $(CHROMIUM) || { apt-get update -qq && apt-get install -y -qq chromium; }
