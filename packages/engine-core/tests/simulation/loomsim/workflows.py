"""Workflows generated per seed, and the ledger of step body executions.

Each step body reports to the simulation first (which counts it and may crash or pause the worker
there), then behaves as its spec says: succeed, fail its first ``fail_first`` attempts (retryable), or
fail permanently. Results are deterministic, so a COMPLETED context can be checked exactly.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from engine_core import PermanentStepError, Registry, RetryPolicy
from engine_core.registry import Sleep, Step, WorkflowDef, build_workflow


@dataclass(frozen=True)
class StepSpec:
    index: int
    name: str
    kind: str  # plain | flaky | permanent | sleep
    fail_first: int = 0
    sleep_s: float | None = None
    retry: RetryPolicy | None = None
    timeout_s: float | None = None


@dataclass
class WorkflowSpec:
    name: str
    steps: list[StepSpec]
    retry: RetryPolicy
    step_timeout_s: float
    definition: WorkflowDef | None = None
    code: bool = False
    """Runs as a code-first function (``code_first.py``): one durable call per step, in order."""

    def policy(self, index: int) -> RetryPolicy:
        return self.steps[index].retry or self.retry

    def timeout(self, index: int) -> float:
        return self.steps[index].timeout_s or self.step_timeout_s

    @property
    def completable(self) -> bool:
        """Can run to COMPLETED at all: no permanent step, no step failing all its attempts."""
        return all(s.kind != "permanent" and s.fail_first < self.policy(s.index).max_attempts for s in self.steps)

    def describe(self) -> str:
        parts = []
        for s in self.steps:
            if s.kind == "sleep":
                parts.append(f"sleep({s.sleep_s:g}s)")
                continue
            p = self.policy(s.index)
            extra = f" fail_first={s.fail_first}" if s.fail_first else ""
            parts.append(f"{s.name}[{s.kind}{extra} max_attempts={p.max_attempts} base={p.base:g} "
                         f"max_delay={p.max_delay:g} timeout={self.timeout(s.index):g}]")
        return f"{self.name}{' (code-first)' if self.code else ''}: " + ", ".join(parts)


def _policy(rng: random.Random) -> RetryPolicy:
    base = rng.choice([0.5, 1.0, 5.0, 30.0, 200.0])
    max_delay = max(base, rng.choice([2.0, 60.0, 600.0, 900.0, 1800.0]))
    return RetryPolicy(max_attempts=rng.choice([1, 2, 3, 3, 4, 5, 8]), base=base, max_delay=max_delay,
                       multiplier=rng.choice([1.0, 2.0, 3.0]), jitter=rng.random() < 0.5)


def generate(rng: random.Random, index: int, plain_only: bool = False) -> WorkflowSpec:
    """A random workflow: 1-5 positions of plain, flaky, permanently failing steps and sleeps."""
    # The reliable workflow keeps 8 attempts per step, so crashes alone practically never wear it down.
    wf_retry = _policy(rng) if not plain_only else RetryPolicy(max_attempts=8, base=rng.choice([1.0, 20.0]))
    step_timeout = rng.choice([5.0, 10.0, 30.0, 60.0, 300.0])
    n = rng.randint(1, 5)
    specs: list[StepSpec] = []
    for i in range(n):
        last = i == n - 1
        r = rng.random()
        retry = _policy(rng) if (not plain_only and rng.random() < 0.35) else None
        timeout = rng.choice([5.0, 20.0, 120.0, 900.0]) if rng.random() < 0.25 else None
        max_attempts = (retry or wf_retry).max_attempts
        if plain_only or r < 0.45:
            specs.append(StepSpec(i, f"s{i}", "plain", retry=retry, timeout_s=timeout))
        elif r < 0.65:
            specs.append(StepSpec(i, f"s{i}", "flaky", fail_first=rng.randint(1, max(1, max_attempts - 1)),
                                  retry=retry, timeout_s=timeout))
        elif r < 0.72:
            specs.append(StepSpec(i, f"s{i}", "flaky", fail_first=max_attempts + rng.randint(0, 2),
                                  retry=retry, timeout_s=timeout))
        elif r < 0.76:
            specs.append(StepSpec(i, f"s{i}", "permanent", retry=retry, timeout_s=timeout))
        elif not last:
            short = rng.random() < 0.6
            seconds = rng.choice([1.0, 30.0, 299.5, 900.0]) if short else rng.choice([901.0, 1800.0, 3600.0, 7200.0])
            specs.append(StepSpec(i, f"z{i}", "sleep", sleep_s=seconds))
        else:
            specs.append(StepSpec(i, f"s{i}", "plain", retry=retry, timeout_s=timeout))
    if plain_only:
        # keep the always-completable workflow interesting: a short and maybe a long sleep inside
        if n >= 3:
            specs[1] = StepSpec(1, "z1", "sleep", sleep_s=rng.choice([10.0, 1200.0]))
    return WorkflowSpec(f"wf{index}", specs, wf_retry, step_timeout)


def register(spec: WorkflowSpec, registry: Registry, on_body) -> WorkflowDef:
    items = []
    for s in spec.steps:
        if s.kind == "sleep":
            items.append(Sleep(seconds=s.sleep_s, name=s.name))
        else:
            items.append(Step(fn=make_body(spec.name, s, on_body), name=s.name, retry=s.retry, timeout_s=s.timeout_s))
    definition = build_workflow(spec.name, items, retry=spec.retry, step_timeout_s=spec.step_timeout_s,
                                source=f"loomsim.{spec.name}")
    registry.register(definition)
    spec.definition = definition
    return definition


def step_result(execution_id: str, spec: StepSpec) -> dict:
    return {spec.name: f"{execution_id}:{spec.index}"}


def end_body(sim, run, spec: StepSpec, attempt: int) -> None:
    """How a simulated body ends, told to the simulation: a permanent failure, a retried one, or success
    (the caller then returns its result)."""
    if spec.kind == "permanent":
        sim.on_body_end(run, "permanent")
        raise PermanentStepError(f"{spec.name} always fails")
    if attempt <= spec.fail_first:
        sim.on_body_end(run, "raised")
        raise RuntimeError(f"{spec.name} fails attempt {attempt} of its first {spec.fail_first}")
    sim.on_body_end(run, "ok")


def make_body(workflow: str, spec: StepSpec, on_body):
    def body(ctx):
        # ledger, simulated time, then maybe a crash or a pause inside the body; the simulation learns
        # how the body ended (a crash never returns here)
        run = on_body(workflow, spec, ctx)
        end_body(on_body.__self__, run, spec, ctx.attempt)
        return step_result(ctx.execution_id, spec)

    body.__name__ = spec.name
    return body


@dataclass
class Ledger:
    """Step body executions, by (execution, step index): the attempt number each one saw."""

    runs: dict[tuple[str, int], list[int]] = field(default_factory=dict)

    def record(self, execution_id: str, index: int, attempt: int) -> None:
        self.runs.setdefault((execution_id, index), []).append(attempt)

    def count(self, execution_id: str, index: int) -> int:
        return len(self.runs.get((execution_id, index), ()))
