"""The handlers' shared Lambda setup (Powertools is in every Lambda zip and in the dev environment)."""

from __future__ import annotations

import logging

import pytest

from engine_core import Registry
from engine_core.adapters.lambda_runtime import lambda_setup
from engine_core.adapters.memory import MemoryStore

ENV = {"LOOM_STORE": "memory", "LOOM_QUEUE_URL": "https://sqs.us-east-1.amazonaws.com/123456789012/loom-steps",
       "AWS_DEFAULT_REGION": "us-east-1", "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}


def test_lambda_setup_builds_logger_metrics_and_the_runtime_and_formats_engine_logs_like_the_handler(monkeypatch):
    # given
    for name, value in ENV.items():
        monkeypatch.setenv(name, value)
    # when
    setup = lambda_setup(registry=Registry(), load_workflows=False)
    # then
    assert isinstance(setup.runtime.engine.store, MemoryStore)
    assert setup.runtime.engine.store is setup.runtime.sweeper.store
    engine_log = logging.getLogger("engine_core")
    assert engine_log.handlers and type(engine_log.handlers[0].formatter) is type(setup.logger.handlers[0].formatter)


def test_the_runtime_builds_only_the_parts_a_function_asks_for_at_init_and_the_rest_on_first_use(monkeypatch):
    # given
    for name, value in ENV.items():
        monkeypatch.setenv(name, value)
    # when the sweeper's setup asks for the sweeper only
    runtime = lambda_setup(registry=Registry(), load_workflows=False, parts=("sweeper",)).runtime
    # then the sweeper is built and the engine is not, until something uses it
    assert "sweeper" in vars(runtime) and "engine" not in vars(runtime)
    assert runtime.engine.store is runtime.sweeper.store is runtime.store
    assert runtime.engine is runtime.engine


def test_a_part_the_runtime_does_not_have_is_refused_naming_the_parts_it_has(monkeypatch):
    # given
    for name, value in ENV.items():
        monkeypatch.setenv(name, value)
    # when / then
    with pytest.raises(ValueError, match=r"'sweepr' is not a part of a runtime; name any of \('engine', 'sweeper'\)"):
        lambda_setup(registry=Registry(), load_workflows=False, parts=("sweepr",))
