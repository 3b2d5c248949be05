"""What an operator does to executions: cancel, redrive, wake (sending an event and completing a callback
are ``event_sends``'; the reads, listing and history pages among them, ``reads.Reader``'s).

Each action is one conditional write on the execution item (so it races safely with workers and the
sweeper), with the operation record naming who did it in the same write (``operator_base``), and refuses
with :class:`ExecutionStateConflictError` (an HTTP 409) when it does not apply, writing nothing. What an
action means for the current step is its kind's answer (``protocol.StepKind``): a cancel of a step an
attempt holds is a request that takes effect when that attempt has ended, a wake applies only where
the kind waits, an event wakes only the wait for it. Housekeeping after a committed action (the message,
the ending's notice) never turns the answer into an error: the sweeper finishes what a failed message or
notice left.
"""
from __future__ import annotations

import datetime as dt
import functools
from collections.abc import Callable

from . import caps, transitions
from .clock import format_ts
from .errors import ExecutionStateConflictError
from .event_sends import EventSends
from .protocol import CancelPlan
from .model import Branch, BranchStatus, Execution, Status, StepRecord, StepStatus
from .operator_base import RETRIES, Op, View
from .rebuild import this_run
from .versions import MISSING_VERSION, is_code_first, pinned_step, read_pins, redrive_onto, resolve, step_change


def _undeployed_cancel(view: View, now: dt.datetime) -> CancelPlan:
    """What a cancel means where no deployed definition says what the current step is: a request while an
    attempt's claim holds it, or holds a branch of it (a fan-out's; that attempt, running the definition it
    started on, finishes the cancel, or the delivery after its lease does), else now, undoing the current
    step too if an attempt of it may have run (what can be undone without the definition is the
    compensation kind's to say)."""
    e = view.execution
    if e.is_claimed and e.next_wake_at is not None and e.next_wake_at > now:
        return CancelPlan(now=False, until=e.next_wake_at)
    if not e.is_claimed and e.attempt > 0 and e.status is Status.RUNNING:  # it may have fanned out
        held = [b.next_wake_at for b in this_run(e, view.branches(e.current_step), "updated_at")
                if isinstance(b, Branch) and b.status is BranchStatus.RUNNING and b.next_wake_at is not None
                and b.next_wake_at > now]
        if held:
            return CancelPlan(now=False, until=max(held))
    return CancelPlan(now=True, undo_current=e.is_claimed or e.lost_attempts > 0)


class Operator(EventSends):
    """The operator's actions over one lifecycle (the engine's): these, the event sends (``event_sends``) and
    the reads (``reads.Reader``); see the module docstring."""

    # -- actions ------------------------------------------------------------------------------------
    def cancel(self, execution_id: str, by: str, reason: str | None = None) -> Execution:
        """End a live execution CANCELLED (undoing what it completed, when its steps say how). While an
        attempt holds the current step, the cancel is a request that takes effect when that attempt
        ends. Cancelling a cancelled (or cancel-requested, or compensating) one returns it; any other
        ended execution is a conflict naming its status."""
        for _ in range(RETRIES):
            e = self.get(execution_id)
            if e.status is Status.CANCELLED:
                return e
            if e.status.is_terminal:
                raise ExecutionStateConflictError(
                    "execution_ended", f"execution {e.execution_id} already ended {e.status.value}; only a live "
                    "execution can be cancelled", e.status.value)
            if e.compensating or e.cancel_requested:
                return e  # already undoing its steps, or waiting for the running attempt to end
            view = View(self, e)
            kind = self.kinds.current(view.wf, e)
            now = self.life.clock.now()
            plan = kind.on_cancel(view) if kind is not None else _undeployed_cancel(view, now)
            if plan is not None and not plan.now:
                new = transitions.cancel_requested(e, now, by, reason, plan.until)
                applied = self._commit(e, new, Op("cancel", by, reason, {
                    "requested": True, "takes_effect": "when the running attempt has ended"}))
                if applied is not None:
                    return applied
                continue
            undo = plan is not None and plan.undo_current
            lease_s = lambda i: self.life.lease_s(e.workflow, i, e.workflow_version)  # noqa: E731
            new = self.kinds.ending.cancelled(view, e, by, reason, undo, lease_s, self.life.retention,
                                              self.life.finalize_grace_s(e))
            detail = {"compensate_from": new.current_step} if new.compensating else {}
            applied = self._commit(e, new, Op("cancel", by, reason, detail))
            if applied is None:
                continue
            if applied.compensating:
                self._send(applied)
            if applied.status.is_terminal:
                self.life.metrics.add_metric("ExecutionsCancelled", "Count", 1)
                self._quietly("finalize", lambda: self.life.finalize(applied), applied)
            return applied
        raise ExecutionStateConflictError("concurrent_change", f"execution {execution_id} kept changing; try again")

    def redrive(self, execution_id: str, by: str, to_version: int | None = None) -> Execution:
        """Resume a FAILED execution from its failed step with fresh attempts, under the same id (on
        ``to_version`` when given: its steps before the failed one must be the same there)."""
        e = self.get(execution_id)
        if e.status is not Status.FAILED:
            hint = ""
            if not e.status.is_terminal:
                _, problem = resolve(self.life.registry, e, read_pins(self.life.store, e.execution_id))
                if problem is not None:  # it cannot go on here: its next delivery fails it, then it can move
                    why = ("is not deployed" if problem.code == MISSING_VERSION else "changed under it")
                    hint = (f". It cannot go on here ({problem.code}: version {e.workflow_version} of workflow "
                            f"{e.workflow!r} as it started {why}); its next delivery fails it (`loom wake "
                            f"{e.execution_id}` brings that on now if it sleeps or waits), then redrive it with "
                            "--to-version N onto a deployed version")
            raise ExecutionStateConflictError(
                "not_failed", f"execution {e.execution_id} is {e.status.value}; only a FAILED execution can be "
                f"redriven{hint}", e.status.value)
        if e.compensated is not None:
            raise ExecutionStateConflictError(
                "compensated", f"execution {e.execution_id} undid its completed steps after the failure "
                "(compensation ran); resuming it would act on undone work. Start a new execution", e.status.value)
        if e.error is not None and e.error.code == "corrupt_state":
            raise ExecutionStateConflictError(
                "corrupt_state", f"execution {e.execution_id} failed because its stored state is unreadable; "
                "a redrive would run on state Loom cannot trust. Start a new execution", e.status.value)
        pins = functools.cache(read_pins(self.life.store, e.execution_id))  # read once, if at all
        onto = redrive_onto(self.life.registry, e, to_version, pins)
        target = onto.get("workflow_version")
        caps.refuse_redrive(e, self.life.settings,
                            None if target is None else self.life.registry.get(e.workflow, target))
        if onto and not is_code_first(e):
            self._refuse_mixed_branches(e, onto["workflow_version"], pins)
        # the step whose attempts failed it, if one did (not a sleep it stood in when its version went missing)
        failed = next((r for r in self.history_of(e) if isinstance(r, StepRecord) and r.step_index == e.current_step
                       and r.kind != "compensation" and r.status is StepStatus.FAILED), None)
        version = onto.get("workflow_version", e.workflow_version)
        new = transitions.redriven_after_failure(e, self.life.clock.now(), self.life.lease_s(e.workflow, e.current_step,
                                                                                             version)).model_copy(update=onto)
        detail = {"step_index": e.current_step, "error": None if e.error is None else e.error.model_dump(),
                  **({"from_version": e.workflow_version, "to_version": version} if onto else {})}
        if failed is not None:
            detail.update(step_name=failed.name, attempts=failed.attempts)
        applied = self._commit(e, new, Op("redrive", by, None, detail))
        if applied is None:
            now_e = self.get(execution_id)
            if now_e.status is not Status.FAILED:  # a redrive sent at the same time, or another change, won
                raise ExecutionStateConflictError(
                    "not_failed", f"execution {e.execution_id} is {now_e.status.value} now: another change came first "
                    f"(a redrive sent at the same time?); only a FAILED execution can be redriven", now_e.status.value)
            raise ExecutionStateConflictError("concurrent_change", f"execution {e.execution_id} changed meanwhile; "
                                              "read it again", e.status.value)
        self.life.metrics.add_metric("ExecutionsRedriven", "Count", 1)
        self._send(applied)
        return applied

    def _refuse_mixed_branches(self, e: Execution, version: int, pins: Callable[[], str | None]) -> None:
        """A redrive onto ``version`` keeps the failed step's branches that succeeded (they do not run again);
        when that version changed the fan-out itself, they would be handed on as its results: refused."""
        target = self.life.registry.get(e.workflow, version)
        step = target.steps[e.current_step]
        pin = pinned_step(self.life.registry, e, e.current_step, pins)
        if pin is None or "fanout" not in (pin.kind, step.kind.kind):
            return
        change = step_change(pin, step, target.step_prints[e.current_step])
        if change is None:
            return
        after: int | None = None
        while True:
            page = self.life.store.branches_page(e.execution_id, e.current_step, 100, after)
            branches = [b for b in page.records if isinstance(b, Branch)]
            kept = [b for b in branches if b.status is BranchStatus.SUCCEEDED and this_run(e, [b], "updated_at")]
            if kept:
                own = (f"without --to-version (version {e.workflow_version} is deployed)"
                       if e.workflow_version in self.life.registry.versions(e.workflow)
                       else f"on version {e.workflow_version} (deploy it again)")
                raise ExecutionStateConflictError("steps_differ", (
                    f"execution {e.execution_id} failed at step {e.current_step} {pin.name!r}, which version {version} "
                    f"{change}, and branch {kept[0].branch} of it already succeeded on version {e.workflow_version}: a "
                    f"redrive keeps such branches, so their results would pass for version {version}'s. Redrive it "
                    f"{own}, or start a new execution"), e.status.value)
            if page.after is None or not branches:
                return
            after = branches[-1].branch

    def wake(self, execution_id: str, by: str) -> Execution:
        """End the current sleep, retry backoff or event wait now (the operator's "skip the wait"; an
        event wait then times out: it takes its default, or fails and compensates)."""
        for _ in range(RETRIES):
            e = self.get(execution_id)
            if e.status.is_terminal:
                raise ExecutionStateConflictError("execution_ended", f"execution {e.execution_id} already ended "
                                                  f"{e.status.value}: {_after_the_end(e)}", e.status.value)
            view = View(self, e)
            kind = self.kinds.current(view.wf, e)
            wakeable = kind.on_wake(view) if kind is not None else e.timer is not None and e.timer.value != "lease"
            if not wakeable or e.cancel_requested:
                why = "" if kind is None or e.compensating or not kind.wake_refused else f": {kind.wake_refused}"
                raise ExecutionStateConflictError(
                    "not_waiting", f"execution {e.execution_id} is not sleeping, waiting to retry or waiting for an "
                    f"event (it is {_doing(e)}); there is nothing to skip{why}", e.status.value)
            now = self.life.clock.now()
            if e.next_wake_at is not None and e.next_wake_at <= now:
                raise ExecutionStateConflictError(
                    "not_waiting", f"execution {e.execution_id} is already due (since {e.next_wake_at.isoformat()}: an "
                    f"event it waits for came, an earlier wake, or its time came) and its delivery is on its way; "
                    "there is nothing to skip",
                    e.status.value)
            assert e.timer is not None and e.next_wake_at is not None
            applied = self._commit(e, transitions.woken(e, now), Op("wake", by, None, {
                "was": e.timer.value, "due": format_ts(e.next_wake_at)}))
            if applied is not None:
                self._send(applied)
                return applied
        raise ExecutionStateConflictError("concurrent_change", f"execution {execution_id} kept changing; try again")



def _after_the_end(e: Execution) -> str:
    """What an operator can do instead of waking an ended execution."""
    if e.status is not Status.FAILED:
        return "there is no wait left to skip"
    if e.compensated:
        return "its completed steps were undone (compensated), so it cannot be redriven; start a new execution"
    return "loom redrive resumes it at its failed step"


def _doing(e: Execution) -> str:
    if e.compensating:
        return f"undoing step {e.current_step}"
    if e.is_claimed:
        return f"running step {e.current_step}"
    return f"at step {e.current_step}, {e.status.value}"
