# Documentation checks: every code block in the README, the guides in docs/ and the package READMEs runs in a
# test (tests/docs: python blocks run, toml parses, shell sessions name real make targets and loom command
# lines the CLI accepts, links point at files). A python block that starts "# needs the local stack (make up)"
# drives the local stack: it compiles here and runs in tests/integration/test_e2e_docs.py.
.PHONY: test-docs

test-docs: venv ## Run every code block of the README and docs/ (python, toml) and check its shell sessions
	$(PY) -m pytest $(PYTEST_ARGS) tests/docs

TEST_TARGETS += test-docs
