# Documentation checks: every code block in the README and the package READMEs runs in a test
# (tests/docs: python blocks run, toml parses, shell sessions name real make targets and loom command
# lines the CLI accepts).
.PHONY: test-docs

test-docs: venv ## Run every README code block (python, toml) and check its shell sessions
	$(PY) -m pytest $(PYTEST_ARGS) tests/docs

TEST_TARGETS += test-docs
