"""Code-first workflows for the main simulation: a seed's generated step specs run as a ``@durable``
function instead of a step list.

The function makes one durable call per spec, in order: ``step(name, body, previous_result)`` for a
task, ``sleep(seconds, name=...)`` for a sleep, and returns the list of its steps' results. So position
``i`` is spec ``i``, and the checker reads both styles with one spec list. Task names come from a small
pool and repeat, so a position is identified by its name and occurrence, as the engine's replay does.

Each body is handed the previous task's result by the function (what the replay returned for it) and
returns a result that names it: a replay that hands back a wrong recorded value changes every later
result and the return value, and the body reports it at once (``on_wrong_input``).
"""

from __future__ import annotations

import dataclasses
import random

from engine_core import Registry
from engine_core.durable import _current, durable, sleep, step
from engine_core.steps import WorkflowDef

from .workflows import StepSpec, WorkflowSpec, end_body

NAMES = ("fetch", "charge", "ship")
SHARE = 0.35
"""Share of the seeds in which one generated workflow runs as a code-first function."""


def pick(seed: int, workflows: list[WorkflowSpec]) -> None:
    """On its own draw (every other draw of the seed stays as it was), turn one of the seed's workflows
    into a code-first one in ``SHARE`` of the seeds: the same steps, run as a function."""
    rng = random.Random(f"loomsim-code:{seed}")
    if rng.random() >= SHARE:
        return
    i = rng.randrange(len(workflows))
    wf = workflows[i]
    steps = [s if s.kind == "sleep" else dataclasses.replace(s, name=rng.choice(NAMES)) for s in wf.steps]
    workflows[i] = dataclasses.replace(wf, steps=steps, code=True)


def code_result(execution_id: str, index: int, previous: dict | None) -> dict:
    """What the body at position ``index`` returns when handed ``previous`` (the last task's result)."""
    after = previous.get("at") if isinstance(previous, dict) else previous
    return {"at": f"{execution_id}:{index}", "after": after}


def expected_results(execution_id: str, spec: WorkflowSpec) -> dict[int, dict]:
    """Each task position's result when every replay returned what was recorded."""
    out: dict[int, dict] = {}
    previous = None
    for s in spec.steps:
        if s.kind != "sleep":
            previous = out[s.index] = code_result(execution_id, s.index, previous)
    return out


def expected_return(execution_id: str, spec: WorkflowSpec) -> list[dict]:
    results = expected_results(execution_id, spec)
    return [results[i] for i in sorted(results)]


def register(spec: WorkflowSpec, registry: Registry, on_body) -> WorkflowDef:
    bodies = {s.index: make_body(spec.name, s, on_body) for s in spec.steps if s.kind != "sleep"}

    def function(data):
        previous, results = None, []
        for s in spec.steps:
            if s.kind == "sleep":
                sleep(s.sleep_s, name=s.name)
                continue
            previous = step(s.name, bodies[s.index], previous, retry=s.retry, timeout_s=s.timeout_s)
            results.append(previous)
        return results

    function.__name__ = function.__qualname__ = spec.name
    durable(spec.name, registry=registry, retry=spec.retry, step_timeout_s=spec.step_timeout_s)(function)
    spec.definition = function.__loom_workflow__  # type: ignore[attr-defined]
    return spec.definition


def make_body(workflow: str, spec: StepSpec, on_body):
    sim = on_body.__self__

    def body(previous):
        ctx = _current.body()
        run = on_body(workflow, spec, ctx)
        want = expected_results(ctx.execution_id, sim.specs[workflow]).get(_previous_task(sim.specs[workflow], spec))
        if previous != want:
            sim.on_wrong_input(run, previous, want)
        end_body(sim, run, spec, ctx.attempt)
        return code_result(ctx.execution_id, spec.index, previous)

    body.__name__ = spec.name
    return body


def _previous_task(wf: WorkflowSpec, spec: StepSpec) -> int | None:
    earlier = [s.index for s in wf.steps[:spec.index] if s.kind != "sleep"]
    return earlier[-1] if earlier else None
