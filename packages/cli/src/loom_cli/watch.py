"""``loom watch``: follow an execution to its end, a line per change; a two-hour sleep is one line, a
compensation one line per step it undoes, and each failed attempt's error is shown once."""

from __future__ import annotations

import datetime as dt
import json
import os
import sys
import threading
from typing import Any

from .readings import branches_not_counted, compensation_note, step_label, where
from .render import history_report
from .sdk import LoomClient, LoomError
from .sdk.errors import WAIT_TIMEOUT
from .sdk.models import Execution, History, Workflow
from .sdk.stream import Change


def seconds_until(iso: str | None, now: dt.datetime | None = None) -> str:
    if not iso:
        return "?"
    when = dt.datetime.strptime(iso, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=dt.timezone.utc)
    seconds = max(0, int((when - (now or dt.datetime.now(dt.timezone.utc))).total_seconds()))
    if seconds >= 3600:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m{seconds % 60:02d}s"
    return f"{seconds // 60}m{seconds % 60:02d}s"


def _undo_failure(e: Execution, history: History | None) -> str:
    """While compensating: the undo step's latest failed attempt, if it has one."""
    for r in (history.compensations() if history else []):
        if r.step_index == e.current_step and r.status == "FAILED" and r.error is not None:
            return f"; undo attempt {r.attempts} failed: {r.error.code}: {r.error.message}"
    return ""


def progress(e: Execution, wf: Workflow | None = None, change: Change | None = None) -> tuple[str, str]:
    """One line of progress, as ``(what, countdown)``: ``what`` is printed when it changes, with the time
    left on a sleep, backoff or wait (``countdown``) as it was then."""
    status = e.status
    label = f"{status:<9} step {where(e, wf, change.history if change else None)}"
    if e.cannot_run is not None:  # its version is not deployed here: what it waits for never comes
        return (f"{label}  cannot go on: its version {e.workflow_version} is not deployed here; its next delivery "
                f"fails it ({e.cannot_run.code}): `loom status {e.execution_id}` says how to move it"), ""
    if status == "WAITING":
        w = e.waiting_for
        left = f", {seconds_until(w.timeout_at)} left (until {w.timeout_at})" if w is not None and w.timeout_at else ""
        event = w.event if w else None
        if w is not None and w.arrived:  # no countdown: its delivery is due now
            return f"{label}  " + (f"event {event} came; resuming" if event else "an event came; resuming"), ""
        return f"{label}  " + (f"waiting for event {event}" if event else "waiting (its definition is not deployed "
                                                                          "here: `loom workflows`)"), left
    if status == "COMPENSATION_FAILED":
        err, comp = e.error, e.compensation_error
        why = f"{err.code}: {err.message}" if err else \
            f"cancelled by {e.cancelled_by or '-'}" + (f": {e.cancel_reason}" if e.cancel_reason else "")
        undo = f"{comp.code}: {comp.message}" if comp else "an undo did not finish"
        return f"{status} step {step_label(e)}  {why}; compensation failed: {undo}", ""
    if e.compensating and not e.ended:
        return f"{label}  {compensation_note(e, wf)}{_undo_failure(e, change.history if change else None)}", ""
    if status == "SLEEPING":
        return f"{label}  sleeping", f", {seconds_until(e.next_wake_at)} left (until {e.next_wake_at})"
    if e.timer == "retry" and status == "RUNNING":
        failed = next((f for f in reversed(change.failed_attempts if change else ())
                       if f.step_index == e.current_step), None)
        error = f"  attempt {failed.attempt} failed: {failed.error.code}: {failed.error.message};" if failed else ""
        return f"{label}{error}", f"  retry in {seconds_until(e.next_wake_at)}"
    if status in ("FAILED", "CANCELLED"):
        err = e.error
        why = f"{err.code}: {err.message}" if status == "FAILED" and err else \
            f"by {e.cancelled_by or '-'}" + (f": {e.cancel_reason}" if e.cancel_reason else "")
        stopped = ""
        if e.compensating:  # its undo stopped half way (the error says why): a redrive goes on undoing
            after = e.compensating_for
            stopped = ("; its undo stopped here, a redrive goes on undoing" +
                       (f" (it was undoing after {after.code}: {after.message})" if after else ""))
        return f"{label}  {why}{stopped}" + ("  (compensated)" if e.compensated else ""), ""
    if status == "COMPLETED":
        return f"{label}  attempts: {e.total_attempts}{branches_not_counted(e, wf)}", ""
    attempts = f"  attempts so far: {e.total_attempts}" if e.total_attempts else ""
    fanout = f"  branches done: {e.fanout.succeeded}/{e.fanout.branches}" if e.fanout else ""
    return f"{label}{attempts}{fanout}", ""


def progress_line(e: Execution | dict[str, Any], wf: Workflow | None = None, change: Change | None = None) -> str:
    what, countdown = progress(e if isinstance(e, Execution) else Execution.model_validate(e), wf, change)
    return what + countdown


def _needs_history(e: Execution) -> bool:
    return (e.timer == "retry" and e.status == "RUNNING") or e.compensating or e.fanout is not None


FAILED_POLLS = 5
"""Polls in a row that may fail on the way or on the API's side (a 5xx, a timeout) before ``watch`` gives up: a
control plane busy for a moment does not end a long watch. A refusal (4xx) ends it at once."""


def watch(client: LoomClient, execution_id: str, *, interval_s: float = 1.0, timeout_s: float | None = None,
          as_json: bool = False) -> int:
    """Print a line per change until the execution ends; 0 if it COMPLETED, 1 otherwise."""
    last_printed, status = None, "?"
    branch_failures: set[tuple[int, int, int]] = set()
    workflows: dict[str, Workflow | None] = {}

    def definition(e: Execution) -> Workflow | None:
        if e.workflow not in workflows:  # read once, and only when a line needs the step list
            try:
                workflows[e.workflow] = client.workflow(e.workflow)
            except LoomError:
                workflows[e.workflow] = None
        return workflows[e.workflow]

    stop = threading.Event()
    timer = threading.Timer(timeout_s, stop.set) if timeout_s is not None else None
    if timer is not None:
        timer.daemon = True
        timer.start()
    failed_polls = 0
    try:
        for change in client.stream(execution_id, interval_s=interval_s, with_history=_needs_history, stop=stop):
            if change.problem is not None:
                problem = change.problem
                failed_polls += 1
                if problem.is_refusal or failed_polls >= FAILED_POLLS:  # the API said no, or it stays down
                    raise problem
                http = f" (HTTP {problem.status})" if problem.status else ""
                print(f"loom watch: a poll failed, {problem.code}{http}: {problem.message}; trying again "
                      f"({failed_polls} of {FAILED_POLLS})", file=sys.stderr, flush=True)
                continue
            failed_polls = 0
            e = change.execution
            assert e is not None
            status = e.status
            try:
                if as_json:
                    print(json.dumps(e.document(), sort_keys=True), flush=True)
                else:
                    wf = definition(e) if e.status in ("SLEEPING", "COMPLETED") or e.compensating else None
                    what, countdown = progress(e, wf, change)
                    if what != last_printed:
                        print(what + countdown, flush=True)
                        last_printed = what
                    for f in change.failed_attempts:  # a branch's failed attempt: once, as it is seen
                        if f.branch is not None and (f.step_index, f.branch, f.attempt) not in branch_failures:
                            branch_failures.add((f.step_index, f.branch, f.attempt))
                            print(f"          step {f.step_index} branch {f.branch}: attempt {f.attempt} failed: "
                                  f"{f.error.code}: {f.error.message}", flush=True)
                if e.ended and not as_json:
                    print(history_report(client.history(execution_id), ended=True, fanouts=e.fanouts), flush=True)
            except BrokenPipeError:
                if not e.ended:
                    raise  # the reader left before the end: nothing to say of it
                quiet_stdout()  # `loom watch ID | head`: the exit status still says how it ended
            if e.ended:
                return 0 if e.status == "COMPLETED" else 1
    finally:
        if timer is not None:
            timer.cancel()
    raise LoomError(WAIT_TIMEOUT, f"execution {execution_id} still {status} after {timeout_s or 0:g} s",
                    execution_status=status)


def quiet_stdout() -> None:
    """The reader of stdout left: what is still buffered or printed goes nowhere (no error at exit)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
