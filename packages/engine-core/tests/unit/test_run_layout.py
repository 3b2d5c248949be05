"""A delivery's run keeps its attributes where CPython reads them fastest.

CPython (3.11 and 3.12) stores an instance's attributes inline, sharing its class's key table, and
specializes the attribute reads and method calls on it, only while the instance has at most 30 attribute
names. One more, and that instance's attributes move into a dict of its own: every ``self.x`` and
``self.f()`` on the step path then takes the generic lookup (a code-first step cost about 2% more
instructions that way, measured with callgrind). ``CodeRun`` keeps its own attributes in slots for this
reason; these tests fail when either kind of run grows past the limit.
"""

from __future__ import annotations

import sys

import pytest

from engine_core import Registry, Status
from engine_core.durable import durable
from engine_core.durable import step as durable_step
from engine_core.durable.run import CodeRun
from engine_core.registry import build_workflow
from engine_core.step_run import StepRun
from engine_core.testing import LocalRunner

SHARED_KEYS_MAX = 30
"""CPython's ``SHARED_KEYS_MAX_SIZE``: the most attribute names an instance keeps inline."""


def _runs_above() -> list[StepRun]:
    """The delivery runs on the stack above this step body."""
    found, frame = [], sys._getframe(1)
    while frame is not None:
        owner = frame.f_locals.get("self")
        if isinstance(owner, StepRun) and not any(owner is f for f in found):
            found.append(owner)
        frame = frame.f_back
    return found


def _registry(seen: list[StepRun]) -> Registry:
    registry = Registry()

    def listed_body(ctx):
        seen.extend(_runs_above())
        return {"n": 1}

    def listed_after(ctx):
        return {"m": 2}

    registry.register(build_workflow("listed", [listed_body, listed_after], source="tests"))

    def coded_body():
        seen.extend(_runs_above())
        return 1

    @durable("coded", registry=registry)
    def coded(input):
        first = durable_step("first", coded_body)
        return durable_step("second", lambda: first + 1)

    return registry


@pytest.mark.parametrize(("workflow", "run_type"), [("listed", StepRun), ("coded", CodeRun)])
def test_a_delivery_run_keeps_its_instance_attributes_within_what_cpython_keeps_inline(workflow, run_type):
    # given a step body that finds the run driving it
    seen: list[StepRun] = []
    runner = LocalRunner(_registry(seen))

    # when an execution runs to its end
    assert runner.run_until_done(runner.start(workflow)).status is Status.COMPLETED

    # then the run it found is of the expected type and its instance dict holds at most 30 names
    assert [type(r) for r in seen] == [run_type]
    names = sorted(vars(seen[0]))
    assert len(names) <= SHARED_KEYS_MAX, (
        f"{run_type.__name__} has {len(names)} instance attributes ({', '.join(names)}): past {SHARED_KEYS_MAX}, "
        "CPython moves them into a dict of their own and stops specializing reads and calls on it. Keep a "
        "subclass's own attributes in __slots__, or drop one")
