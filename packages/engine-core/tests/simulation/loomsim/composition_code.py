"""Code-first workflows in the composition simulation: a seed's generated workflow run as a ``@durable``
function instead of a step list, under the same operator actions (cancels, redrives, wakes, events) and
faults.

The function makes one durable call per position, in order: ``step(name, task, compensate=undo)``,
``parallel(name, *branches)``, ``map(name, item, input["items"])``, ``wait_for_event(event, ...)``,
``sleep(...)``; and returns what a step list's context would hold after the same steps (each task's
result merged, a fan-out's results and a wait's data under the position's name), which the end checks
compare as they compare a step list's context. The bodies are the step list's (they read the step
context the engine hands them through ``_current.body()``). A task's compensation runs under the task's
own retry policy (a code-first ``compensate`` is a plain function), and its bodies hand out no callback
tokens (only ``wait_for_callback``'s submit function may).
"""

from __future__ import annotations

import dataclasses
import random
from typing import Any

from engine_core import Registry
from engine_core.durable import _current, durable, map, parallel, sleep, step, wait_for_event  # noqa: A004

from .composition_workflows import CWorkflow, _branch_body, _task_body, _undo_body, event_model

SHARE = 0.3
"""Share of the seeds in which one generated workflow runs as a code-first function."""


def pick(seed: int, workflows: list[CWorkflow]) -> None:
    """On its own draw (every other draw of the seed stays as it was), turn one of the seed's workflows into
    a code-first one in ``SHARE`` of the seeds."""
    rng = random.Random(f"loomsim-composition-code:{seed}")
    if rng.random() >= SHARE:
        return
    i = rng.randrange(len(workflows))
    wf = workflows[i]
    steps = [dataclasses.replace(s, undo_retry=None) for s in wf.steps]
    workflows[i] = dataclasses.replace(wf, steps=steps, code=True)


def _with_context(body):
    """A step-list body (``body(ctx)``) as a code-first call's function (any arguments, context from the run)."""
    def call(*_: Any) -> Any:
        return body(_current.body())

    call.__name__ = body.__name__
    return call


def register(wf: CWorkflow, registry: Registry, sim) -> None:
    calls: dict[int, Any] = {}
    for s in wf.steps:
        if s.kind == "task":
            calls[s.index] = (_with_context(_task_body(sim, wf, s)),
                              _with_context(_undo_body(sim, wf, s)) if s.undo else None)
        elif s.kind == "parallel":
            calls[s.index] = [_with_context(_branch_body(sim, wf, s, b)) for b in range(s.branches)]
        elif s.kind == "map":
            calls[s.index] = _with_context(_branch_body(sim, wf, s, None))

    def function(data):
        out: dict[str, Any] = {}
        for s in wf.steps:
            if s.kind == "sleep":
                sleep(s.sleep_s, name=s.name)
            elif s.kind == "task":
                fn, undo = calls[s.index]
                out.update(step(s.name, fn, retry=s.retry, timeout_s=s.timeout_s, compensate=undo))
            elif s.kind == "parallel":
                out[s.name] = parallel(s.name, *calls[s.index], max_concurrency=s.max_concurrency, retry=s.retry)
            elif s.kind == "map":
                out[s.name] = map(s.name, calls[s.index], data.get("items", []), max_concurrency=s.max_concurrency,
                                  retry=s.retry)
            else:
                kwargs: dict[str, Any] = {"timeout": s.wait_timeout, "retry": wf.policy(s.index),
                                          "model": event_model(s.event)}
                if s.default is not None:
                    kwargs["default"] = s.default
                out[s.name] = wait_for_event(s.event, **kwargs)
        return out

    function.__name__ = function.__qualname__ = wf.name
    durable(wf.name, registry=registry, retry=wf.retry, step_timeout_s=wf.step_timeout_s)(function)
    wf.definition = function.__loom_workflow__  # type: ignore[attr-defined]
