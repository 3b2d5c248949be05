"""What the control plane's cold start builds: the pydantic models its requests need, and none that only a
deployment with schedules, a Scheduler firing or a reply needs (each is built on its first use), nor the
schedule expression parser when no schedule is deployed."""

from __future__ import annotations

import json

from loom_test_support.cold_start import run_fresh

COLD_START = """
import json
import sys

import loom_control_plane.handler
from pydantic import BaseModel

def below(cls):
    for sub in cls.__subclasses__():
        yield sub
        yield from below(sub)

built = sorted({f"{c.__module__}.{c.__qualname__}" for c in below(BaseModel)
                if c.__module__.startswith(("engine_core", "loom_control_plane")) and c.__pydantic_complete__})
print(json.dumps({"built": built, "modules": sorted(sys.modules)}))
"""
ON_FIRST_USE = {"engine_core.schedules.config.ScheduleDef", "loom_control_plane.schedules.ScheduleEvent",
                "loom_control_plane.responses.ExecutionView", "loom_control_plane.request_models.StartExecutionRequest"}


def cold_start(**env: str) -> tuple[set[str], set[str]]:
    """The engine-core and control-plane models complete once the handler module is imported in a fresh process,
    and the modules it imported."""
    seen = run_fresh(COLD_START, **env)
    return set(seen["built"]), set(seen["modules"])


def test_a_cold_start_builds_the_models_requests_need_and_none_of_those_only_schedules_or_replies_need():
    # when
    built, modules = cold_start()

    # then: what every request reads is ready; what a firing, a schedule or a reply needs waits for it
    assert {"engine_core.model.Execution", "engine_core.model.StepRecord", "engine_core.settings.EngineSettings"} <= built
    assert not ON_FIRST_USE & built
    assert "loom_control_plane.routes" in modules and "engine_core.schedules.expressions" not in modules
    # the routes are matched by app.py: Powertools' resolver would load every event source's (asyncio with them)
    assert not {m for m in modules if m.startswith("aws_lambda_powertools.event_handler")}
    assert "asyncio" not in modules


def test_with_schedules_deployed_the_cold_start_validates_them_so_a_bad_one_is_logged_at_once():
    # when
    schedules = [{"name": "nightly", "workflow": "flaky_greeting", "expression": "rate(1 hour)"}]
    built, modules = cold_start(LOOM_SCHEDULES=json.dumps(schedules))

    # then
    assert "engine_core.schedules.config.ScheduleDef" in built and "engine_core.schedules.expressions" in modules
    assert "loom_control_plane.schedules.ScheduleEvent" not in built
