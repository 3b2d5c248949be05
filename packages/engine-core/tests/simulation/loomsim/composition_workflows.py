"""Workflows of the composition simulation, generated per seed: tasks (some with a compensation), parallel
and map steps, event waits, sleeps; and the bodies that report each run to the simulation's journal.

Every body reports to the simulation first (which counts it, gives it simulated time and may crash or
pause the worker there), then behaves as its spec says. Results are deterministic, so a COMPLETED
context can be checked exactly.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from engine_core import PermanentStepError, Registry, RetryPolicy, map_, parallel, step, wait_for_event
from engine_core.registry import Sleep, build_workflow

if TYPE_CHECKING:
    from .composition import CompositionSim


@dataclass(frozen=True)
class CSpec:
    """One position of a generated workflow."""

    index: int
    name: str
    kind: str  # task | parallel | map | wait | sleep
    fail_first: int = 0
    permanent: bool = False
    retry: RetryPolicy | None = None
    timeout_s: float | None = None
    # compensation (tasks)
    undo: bool = False
    undo_fail_first: int = 0
    undo_permanent: bool = False
    undo_retry: RetryPolicy | None = None
    # fan-out
    branches: int = 0
    """parallel: its functions; map: 0 (the input's list decides)."""
    branch_fail: tuple[int, ...] = ()
    """Per branch (map: per item, cycled): attempts that fail first."""
    branch_permanent: int | None = None
    """This branch (or item) always fails."""
    max_concurrency: int | None = None
    # waits
    event: str = ""
    wait_timeout: float = 0.0
    default: dict | None = None
    unsent: bool = False
    """No sender sends this wait's event in the quiet phase (it times out unless the fault phase sent it)."""
    # sleeps
    sleep_s: float = 0.0


@dataclass
class CWorkflow:
    name: str
    steps: list[CSpec]
    retry: RetryPolicy
    step_timeout_s: float
    definition: Any = None
    code: bool = False
    """Runs as a code-first function (``composition_code.py``)."""

    def policy(self, index: int) -> RetryPolicy:
        s = self.steps[index]
        if s.kind == "wait":
            return s.retry or RetryPolicy(max_attempts=1)
        return s.retry or self.retry

    def undo_policy(self, index: int) -> RetryPolicy:
        return self.steps[index].undo_retry or self.policy(index)

    def timeout(self, index: int) -> float:
        return self.steps[index].timeout_s or self.step_timeout_s

    def window(self, index: int, total: int) -> int:
        return max(1, min(self.steps[index].max_concurrency or total, total))

    def describe(self) -> str:
        parts = []
        for s in self.steps:
            if s.kind == "sleep":
                parts.append(f"sleep({s.sleep_s:g}s)")
            elif s.kind == "wait":
                parts.append(f"{s.name}[wait {s.event!r} timeout={s.wait_timeout:g} "
                             f"attempts={self.policy(s.index).max_attempts}{' default' if s.default is not None else ''}]")
            elif s.kind in ("parallel", "map"):
                what = f"{s.branches} fns" if s.kind == "parallel" else "over items"
                parts.append(f"{s.name}[{s.kind} {what} max_concurrency={s.max_concurrency} fail={list(s.branch_fail)}"
                             f"{f' permanent={s.branch_permanent}' if s.branch_permanent is not None else ''} "
                             f"attempts={self.policy(s.index).max_attempts}]")
            else:
                extra = " permanent" if s.permanent else f" fail_first={s.fail_first}" if s.fail_first else ""
                undo = ""
                if s.undo:
                    undo = (f" undo(fail_first={s.undo_fail_first}{' permanent' if s.undo_permanent else ''} "
                            f"attempts={self.undo_policy(s.index).max_attempts})")
                parts.append(f"{s.name}[task{extra} attempts={self.policy(s.index).max_attempts}{undo}]")
        return f"{self.name}{' (code-first)' if self.code else ''}: " + ", ".join(parts)


EVENTS = ("approve", "ship", "ping")


def _policy(rng: random.Random, lo: int = 1, hi: int = 5) -> RetryPolicy:
    base = rng.choice([0.5, 1.0, 5.0, 30.0])
    return RetryPolicy(max_attempts=rng.randint(lo, hi), base=base, max_delay=max(base, rng.choice([2.0, 60.0, 600.0])),
                       multiplier=rng.choice([1.0, 2.0]), jitter=rng.random() < 0.5)


def generate(rng: random.Random, index: int, reliable: bool = False, long_s: float | None = None) -> CWorkflow:
    """A random composition workflow of 2-5 positions. ``reliable``: can always complete (faults aside).
    ``long_s`` (seeds whose retention is short): some waits, sleeps and fan-outs (branches retrying slowly)
    outlive it while their execution is live."""
    wf_retry = RetryPolicy(max_attempts=8, base=rng.choice([1.0, 10.0])) if reliable else _policy(rng, 2, 6)
    step_timeout = rng.choice([5.0, 30.0, 120.0])
    n = rng.randint(2, 5)
    specs: list[CSpec] = []
    wait_names = 0
    for i in range(n):
        r = rng.random()
        retry = _policy(rng, 2, 5) if rng.random() < 0.3 else None
        attempts = (retry or wf_retry).max_attempts
        if r < 0.3:
            undo = rng.random() < 0.7
            fail = 0 if reliable or rng.random() < 0.6 else rng.randint(1, attempts + 1)
            permanent = not reliable and i > 0 and rng.random() < 0.25
            undo_retry = _policy(rng, 2, 4) if undo and rng.random() < 0.4 else None
            undo_attempts = (undo_retry or retry or wf_retry).max_attempts
            undo_fail = 0 if reliable or rng.random() < 0.6 else rng.randint(1, undo_attempts + (0 if rng.random() < 0.8 else 1))
            specs.append(CSpec(i, f"t{i}", "task", fail_first=fail, permanent=permanent, retry=retry,
                               undo=undo, undo_fail_first=undo_fail,
                               undo_permanent=undo and not reliable and rng.random() < 0.05, undo_retry=undo_retry))
        elif r < 0.5 or (r < 0.62 and i == n - 1):
            k = rng.randint(1, 4)
            fails = tuple(0 if rng.random() < 0.6 else rng.randint(1, attempts - (1 if reliable else 0) or 1)
                          for _ in range(k))
            if reliable:
                fails = tuple(min(f, attempts - 1) for f in fails)
            perm = rng.randrange(k) if not reliable and rng.random() < 0.1 else None
            specs.append(CSpec(i, f"p{i}", "parallel", retry=retry, branches=k, branch_fail=fails, branch_permanent=perm,
                               max_concurrency=rng.choice([None, 1, 2, 3])))
        elif r < 0.7:
            k = rng.randint(1, 4)
            fails = tuple(0 if rng.random() < 0.6 else rng.randint(1, attempts - (1 if reliable else 0) or 1)
                          for _ in range(k))
            if reliable:
                fails = tuple(min(f, attempts - 1) for f in fails)
            perm = rng.randrange(6) if not reliable and rng.random() < 0.1 else None
            specs.append(CSpec(i, f"m{i}", "map", retry=retry, branch_fail=fails, branch_permanent=perm,
                               max_concurrency=rng.choice([None, 1, 2, 3])))
        elif r < 0.9 or i == n - 1:
            name = rng.choice(EVENTS[:2]) if wait_names and rng.random() < 0.3 else EVENTS[min(wait_names, 2)]
            wait_names += 1
            wretry = None if rng.random() < 0.6 else RetryPolicy(max_attempts=rng.randint(2, 3), base=1.0, jitter=False)
            default = None if reliable or rng.random() < 0.7 else {f"got_{name}": "default"}
            if default is not None:  # a timeout takes the default at once: a retry would never apply (refused)
                wretry = None
            specs.append(CSpec(i, f"w{i}", "wait", retry=wretry, event=name,
                               wait_timeout=rng.choice([30.0, 300.0, 3600.0]) * (4 if reliable else 1), default=default))
        else:
            specs.append(CSpec(i, f"z{i}", "sleep", sleep_s=rng.choice([5.0, 120.0, 1200.0])))
    if specs[-1].kind == "sleep":
        specs[-1] = CSpec(n - 1, f"t{n - 1}", "task")
    if not reliable and rng.random() < 0.45:
        specs = _saga(rng, specs, wf_retry)
    if long_s is not None:
        specs = [_outliving(rng, s, long_s) if rng.random() < 0.35 else s for s in specs]
    return CWorkflow(f"cw{index}", specs, wf_retry, step_timeout)


def retuned(rng: random.Random, old: CWorkflow) -> CWorkflow:
    """``old`` redeployed compatibly under its name: each sleep's length changed and, when it has no sleep or
    half the time, a task appended (docs/workflows.md, versions: a run in flight goes on under it when every step
    it still has to run is unchanged; a sleep it has begun may be retuned, one ahead of it may not)."""
    steps = [replace(s, sleep_s=rng.choice([x for x in (5.0, 120.0, 1200.0, 3000.0) if x != s.sleep_s]))
             if s.kind == "sleep" else s for s in old.steps]
    if steps == old.steps or rng.random() < 0.5:
        i = len(steps)
        steps.append(CSpec(i, f"t{i}", "task"))
    return CWorkflow(old.name, steps, old.retry, old.step_timeout_s, code=old.code)


def _outliving(rng: random.Random, s: CSpec, long_s: float) -> CSpec:
    """``s`` made to last longer than ``long_s`` (retention plus grace) while its execution is live."""
    if s.kind == "wait":
        return replace(s, wait_timeout=round(long_s * rng.uniform(1.2, 2.0)))
    if s.kind == "sleep":
        return replace(s, sleep_s=round(long_s * rng.uniform(1.1, 1.5)))
    if s.kind in ("parallel", "map") and long_s <= 2 * 3600 and rng.random() < 0.5:
        # its first branch fails once and retries after longer than retention (the others do not fail: the
        # parent's reconcile runs every lease period all that time, which is what makes it slow to simulate)
        slow = RetryPolicy(max_attempts=2, base=round(long_s * 1.2), max_delay=round(long_s * 1.2), jitter=False)
        fails = (1,) + (0,) * (max(len(s.branch_fail), 6) - 1)
        return replace(s, retry=slow, branch_fail=fails, branch_permanent=None)
    return s


def _saga(rng: random.Random, specs: list[CSpec], wf_retry: RetryPolicy) -> list[CSpec]:
    """Make the workflow a saga that often fails: compensable tasks (some undos flaky, a few failing for
    good) before its later steps, and a last step that fails for good (a task, a branch, or a wait that
    times out), so compensation runs after every kind of step."""
    out = []
    for s in specs:
        if s.kind == "task" and rng.random() < 0.8:
            attempts = (s.undo_retry or s.retry or wf_retry).max_attempts
            s = CSpec(s.index, s.name, "task", fail_first=min(s.fail_first, attempts - 1), retry=s.retry, undo=True,
                      undo_fail_first=rng.choice([0, 0, 1, 2]) if rng.random() < 0.9 else attempts,
                      undo_permanent=rng.random() < 0.03, undo_retry=s.undo_retry)
        out.append(s)
    last = out[-1]
    i = len(out)
    how = rng.random()
    if how < 0.4:
        out.append(CSpec(i, f"t{i}", "task", permanent=rng.random() < 0.5, fail_first=99, retry=RetryPolicy(
            max_attempts=rng.randint(1, 3), base=1.0, jitter=False)))
    elif how < 0.6:
        out.append(CSpec(i, f"p{i}", "parallel", branches=2, branch_fail=(0, 99), max_concurrency=rng.choice([None, 1]),
                         retry=RetryPolicy(max_attempts=2, base=1.0, jitter=False)))
    elif how < 0.75 and last.kind != "wait":
        out.append(CSpec(i, f"w{i}", "wait", event="never", wait_timeout=rng.choice([10.0, 60.0]), unsent=True))
    else:
        out.append(CSpec(i, f"t{i}", "task", permanent=True))
    return out


def branch_result(execution_id: str, index: int, branch: int, item: Any, run: str) -> dict:
    return {"r": f"{execution_id}:{index}:{branch}", "item": item, "run": run}


def task_result(execution_id: str, spec: CSpec, run: str) -> dict:
    return {spec.name: {"v": f"{execution_id}:{spec.index}", "run": run}}


def event_data(name: str, event_id: str, run: str) -> dict:
    """An event's data names the run it was sent to: a run must never see another run's. An id starting
    ``misfit-`` carries data that no code-first wait's model accepts (``event_model``)."""
    if is_misfit(event_id):
        return {"run": run, "misfit": event_id}
    return {f"got_{name}": event_id, "run": run}


MISFIT_PREFIX = "misfit-"


def is_misfit(event_id: str | None) -> bool:
    """An event whose data the code-first waits' models refuse (no send can check it: nothing is declared)."""
    return bool(event_id) and event_id.startswith(MISFIT_PREFIX)


_MODELS: dict[str, type] = {}


def event_model(name: str) -> type:
    """The model of a code-first wait for ``name``: ``got_<name>`` required (a misfit lacks it), the rest kept
    as sent (``run``), so a fitting event's data, and a default's, come back as they were."""
    if name not in _MODELS:
        from pydantic import ConfigDict, create_model

        _MODELS[name] = create_model(f"Event_{name}", __config__=ConfigDict(extra="allow"),
                                     **{f"got_{name}": (str, ...)})
    return _MODELS[name]


def run_tags(value: Any) -> set[str]:
    """Every run named in ``value`` (results and event data carry the run they were made for)."""
    if isinstance(value, dict):
        found = {value["run"]} if isinstance(value.get("run"), str) else set()
        for v in value.values():
            found |= run_tags(v)
        return found
    if isinstance(value, (list, tuple)):
        return set().union(*(run_tags(v) for v in value)) if value else set()
    return set()


def register(wf: CWorkflow, registry: Registry, sim: CompositionSim) -> None:
    items: list[Any] = []
    for s in wf.steps:
        if s.kind == "sleep":
            items.append(Sleep(seconds=s.sleep_s, name=s.name))
        elif s.kind == "task":
            undo = None
            if s.undo:
                undo = _undo_body(sim, wf, s)
                if s.undo_retry is not None:
                    undo = step(undo, retry=s.undo_retry)
            items.append(step(_task_body(sim, wf, s), name=s.name, retry=s.retry, compensate=undo))
        elif s.kind == "parallel":
            items.append(parallel(*[_branch_body(sim, wf, s, b) for b in range(s.branches)], name=s.name, retry=s.retry,
                                  max_concurrency=s.max_concurrency))
        elif s.kind == "map":
            items.append(map_(_branch_body(sim, wf, s, None), over="items", name=s.name, retry=s.retry,
                              max_concurrency=s.max_concurrency))
        else:
            kwargs: dict[str, Any] = {"timeout": s.wait_timeout, "name": s.name, "retry": s.retry}
            if s.default is not None:
                kwargs["default"] = s.default
            items.append(wait_for_event(s.event, **kwargs))
    wf.definition = build_workflow(wf.name, items, retry=wf.retry, step_timeout_s=wf.step_timeout_s,
                                   source=f"loomsim.composition.{wf.name}")
    registry.register(wf.definition)


def _task_body(sim, wf: CWorkflow, s: CSpec):
    def body(ctx):
        run = sim.on_cbody("task", ctx, wf, s)
        sim.maybe_issue_token(ctx, wf, s, run)
        if s.permanent:
            sim.on_cbody_end(run, "permanent")
            raise PermanentStepError(f"{s.name} always fails")
        if ctx.attempt <= s.fail_first:
            sim.on_cbody_end(run, "raised")
            raise RuntimeError(f"{s.name} fails attempt {ctx.attempt}")
        sim.on_cbody_end(run, "ok")
        return task_result(ctx.execution_id, s, run.run)

    body.__name__ = s.name
    return body


def _undo_body(sim, wf: CWorkflow, s: CSpec):
    def undo(ctx):
        run = sim.on_cbody("undo", ctx, wf, s)
        # ctx.result is None only for a step a cancel caught mid-attempt with no success recorded.
        recorded = sim.recorded_success(ctx.execution_id, s.index, run.run)
        expected = task_result(ctx.execution_id, s, run.run) if recorded else None
        if ctx.result != expected or ctx.idempotency_key != f"{ctx.execution_id}:{s.index}":
            sim.violation(f"{ctx.execution_id[:8]} step {s.index}: compensation handed result {ctx.result!r} and key "
                          f"{ctx.idempotency_key!r}, not its step's")
        if s.undo_permanent:
            sim.on_cbody_end(run, "permanent")
            raise PermanentStepError(f"undo of {s.name} always fails")
        if ctx.attempt <= s.undo_fail_first:
            sim.on_cbody_end(run, "raised")
            raise RuntimeError(f"undo of {s.name} fails attempt {ctx.attempt}")
        sim.on_cbody_end(run, "ok")
        return {"undone": s.name}

    undo.__name__ = f"undo_{s.name}"
    return undo


def _branch_body(sim, wf: CWorkflow, s: CSpec, fixed: int | None):
    def branch(ctx):
        run = sim.on_cbody("branch", ctx, wf, s)
        b = ctx.branch
        if fixed is not None and b != fixed:
            sim.violation(f"{ctx.execution_id[:8]} step {s.index}: branch function {fixed} ran as branch {b}")
        sim.maybe_issue_token(ctx, wf, s, run)
        fails = s.branch_fail[b % len(s.branch_fail)] if s.branch_fail else 0
        if s.branch_permanent is not None and b == s.branch_permanent:
            sim.on_cbody_end(run, "permanent")
            raise PermanentStepError(f"branch {b} of {s.name} always fails")
        if ctx.attempt <= fails:
            sim.on_cbody_end(run, "raised")
            raise RuntimeError(f"branch {b} of {s.name} fails attempt {ctx.attempt}")
        sim.on_cbody_end(run, "ok")
        return branch_result(ctx.execution_id, s.index, b, ctx.item, run.run)

    branch.__name__ = f"{s.name}_b{fixed}" if fixed is not None else f"{s.name}_item"
    return branch
