"""What the API's documents mean for a reader, shared by the terminal (``render``, ``watch``) and the
console: which step to name, where a sleep sleeps, what a fan-out's attempts add up to. Pure functions of
SDK models, no I/O."""

from __future__ import annotations

import datetime as dt
from collections import Counter
from dataclasses import dataclass

from .sdk.models import BranchRecord, Execution, FanOutProgress, History, Operation, StepRecord, Workflow

UNNAMED_WAIT = ("an event this deployment cannot name: the definition it waits on is not deployed here, or changed "
                "under it (`loom workflows` lists what is); its next delivery fails it, a send or `loom wake` brings "
                "that on")
"""What a WAITING execution waits for when the API cannot name the event (``waiting_for.event`` null)."""


def step_label(e: Execution, index: int | None = None, name: str | None = None) -> str:
    """A step as every command numbers it: its index (the ``#`` of ``loom history``, counted from 0) out
    of the step count, and its name: ``3/5 ship_order``; ``5/5 (done)`` once past the last."""
    index = e.current_step if index is None else index
    if name is None and index == e.current_step:
        name = e.current_step_name
    count = e.step_count
    if not count:
        return f"{index} {name}".strip() if name else str(index)
    name = name or ("(done)" if index >= count else "")
    return f"{index}/{count} {name}".strip()


def _is_sleep_record(r: StepRecord | None) -> bool:
    return r is not None and wake_at(r) is not None


def sleeping_step(e: Execution, wf: Workflow | None, history: History | None = None) -> int | None:
    """The step a SLEEPING execution sleeps in. The engine has pointed ``current_step`` both at the sleep
    step itself and at the step after it (the sleep's record already written), so either is read right."""
    if e.status != "SLEEPING" or e.timer not in (None, "sleep"):
        return None
    current, before = e.current_step, e.current_step - 1
    if wf is not None and wf.steps:
        here, prior = wf.step(current), wf.step(before)
        if here is not None and here.kind == "sleep":
            return current
        if prior is not None and prior.kind == "sleep":
            return before
        return current
    records = {r.step_index: r for r in (history.records() if history else [])}
    if _is_sleep_record(records.get(before)) and not _is_sleep_record(records.get(current)):
        return before
    return current


def where(e: Execution, wf: Workflow | None = None, history: History | None = None) -> str:
    """The step an execution's header names: the sleep it sleeps in, else its current step."""
    index = sleeping_step(e, wf, history)
    if index is None or index == e.current_step:
        return step_label(e)
    spec = wf.step(index) if wf is not None else None
    record = next((r for r in (history.records() if history else []) if r.step_index == index), None)
    return step_label(e, index, (spec.name if spec else None) or (record.name if record else None))


@dataclass(frozen=True)
class FanOutSummary:
    """A parallel or map step's branches: how many, in which state, and their attempts."""

    branches: int
    states: dict[str, int]
    attempts: int
    retried: int
    """Attempts beyond each branch's first: 0 when no branch was retried."""

    def states_text(self) -> str:
        """``12 branches: 11 done, 1 failed``"""
        return f"{self.branches} branches: " + ", ".join(f"{n} {state}" for state, n in sorted(self.states.items()))

    def attempts_text(self) -> str:
        """``115 attempts (15 retried)``, or ``100 attempts (none retried)``: a branch's first attempt is no retry."""
        return f"{self.attempts} attempts ({f'{self.retried} retried' if self.retried else 'none retried'})"

    def text(self) -> str:
        return f"{self.states_text()}; {self.attempts_text()}"


def state_word(status: str | None) -> str:
    return {"SUCCEEDED": "done", "FAILED": "failed"}.get(status or "", str(status or "running").lower())


def fanout_summary(branches: list[BranchRecord]) -> FanOutSummary:
    states = Counter(state_word(b.status) for b in branches)
    attempts = sum(b.attempts for b in branches)
    retried = sum(max(0, b.attempts - 1) for b in branches)
    return FanOutSummary(len(branches), dict(states), attempts, retried)


def wake_at(r: StepRecord) -> str | None:
    """When a sleep's record says it was due to end (written when the sleep began), or None: not a sleep."""
    result = r.result if isinstance(r.result, dict) else None
    if result is None or not isinstance(result.get("wake_at"), str) or r.kind not in ("sleep", "task"):
        return None
    return result["wake_at"]


def parse_ts(text: object) -> dt.datetime | None:
    """An API time (ISO-8601, ``Z`` or an offset; a naive one is UTC), or None when there is none or it is no time."""
    if not text or not isinstance(text, str):
        return None
    try:
        when = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return when if when.tzinfo else when.replace(tzinfo=dt.timezone.utc)


def sleep_ended_early(r: StepRecord, h: History) -> str | None:
    """How a sleep that did not sleep its time ended, from the operations: woken early (``loom wake``), or cut
    short by a cancel while it slept; None when it ran its time (or sleeps still). Its record, written when
    it began, says SUCCEEDED and when it was due whatever came after. Who and when: the operations."""
    due = parse_ts(wake_at(r))
    if due is None:
        return None
    ops = [op for op in h.operations if isinstance(op, Operation)]
    for op in ops:
        if op.op == "wake" and op.detail.get("was") == "sleep" and parse_ts(op.detail.get("due")) == due:
            return "woken early"
    later = any(isinstance(x, StepRecord) and x.kind != "compensation" and x.step_index > r.step_index
                for x in h.steps)
    began = parse_ts(r.started_at)
    for op in ops:
        at = parse_ts(op.at)
        if op.op == "cancel" and not later and at is not None and at < due and (began is None or at >= began):
            return "cancelled while sleeping"
    return None


def redriven_after(detail: dict) -> str:
    """What a redrive operation says of the failure it left behind, its error aside: the step and its attempts,
    or only where it stood when no step's attempts failed it (its version not deployed, a replay that went
    another way)."""
    step = detail.get("step_name", detail.get("step_index"))
    if detail.get("attempts") is None:
        return "after it failed" + ("" if step is None else f" at step {step}")
    n = detail["attempts"]
    return f"after {step} failed ({n} attempt{'s' if n != 1 else ''})"


def branches_not_counted(e: Execution, wf: Workflow | None = None) -> str:
    """What an execution's ``total_attempts`` leaves out, where it can: the step attempts it counts are its
    task steps' (and undos'); a map's or parallel's branches count their own (``loom history`` shows them), so a
    batch of 100 images reads ``2 in all``. Empty when the execution has no fan-out step to leave out."""
    fans = e.fanout is not None or e.style == "code" or (
        wf is not None and any(s.kind in ("map", "parallel") for s in wf.steps))
    return " (not counting map or parallel branches: loom history shows theirs)" if fans else ""


def attempts_text(attempts: int) -> str:
    return f"{attempts} attempt{'s' if attempts != 1 else ''}" + (" (retried)" if attempts > 1 else "")


def compensation_note(e: Execution, wf: Workflow | None = None) -> str:
    """While compensating: why (the failure, or the cancel) and which step is being undone, by what."""
    step = wf.step(e.current_step) if wf is not None else None
    name = e.current_step_name or (step.name if step is not None else f"step {e.current_step}")
    undoing = f"undoing {name}" + (f" with {step.compensate}" if step is not None and step.compensate else "")
    if e.error is not None:
        failed = e.error.step_name or (f"step {e.failed_step}" if e.failed_step is not None else "a step")
        return f"compensating after {failed} failed ({e.error.code}: {e.error.message}): {undoing}"
    if e.cancelled_by:
        return f"compensating after a cancel by {e.cancelled_by}: {undoing}"
    return f"compensating: {undoing}"


def never_started(branches: list[BranchRecord], fan: FanOutProgress | None) -> list[str]:
    """What an ended execution's unfinished fan-out with ``branches`` (its rows) says of the branches that never
    began (they have no row): how many, from ``fan`` (``Execution.fanouts``); nothing when every branch has a
    row; the rule when the count is not known (``fan`` None)."""
    if fan is None:
        return ["a branch with no row here never started (the execution ended first)"]
    missing = fan.branches - len({b.branch for b in branches})
    if missing <= 0:
        return []
    held = f"max_concurrency {fan.max_concurrency} held them back and " \
        if fan.max_concurrency is not None and fan.max_concurrency < fan.branches else ""
    return [f"{missing} of its {fan.branches} branches never started ({held}the execution ended first): "
            "they have no row here"]
