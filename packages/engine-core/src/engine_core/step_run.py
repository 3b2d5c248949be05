"""One delivery's work on one execution (``StepRun``): the engine's side of the step-kind protocol.

It holds the execution as this delivery last read or wrote it, the context, what a kind reads of it
(``step_reads.StepReads``) and the moves a kind ends in (claim, settle and advance, retry, fail, finish a
requested cancel). ``loop`` hands the current step to its kind (through the kind table, never by name)
and goes on while the chain rules allow. A kind sees it only as ``protocol.StepOps``; the operator's
ending rules see it as ``protocol.ActionView``.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections.abc import Callable
from typing import Any

from . import caps, codec, faults, transitions
from ._runner import BodyOutcome, run_body
from .clock import monotonic_ms
from .errors import (
    ExecutionNotFoundError,
    NonSerializableResultError,
    ResultTooLargeError,
    StepSupersededError,
    TransitionConflictError,
)
from .failure_advice import advised
from .fanout_items import FanOutItems
from .kinds import KindTable
from .lifecycle import Lifecycle
from .model import ErrorInfo, Execution, ExecutionState, Join, RetryPolicy, Status, StepRecord, StepStatus
from .outcome import Outcome, log_fields
from .rebuild import rebuild_context, this_run_state
from .retries import backoff_s
from .step_reads import StepReads
from .steps import WorkflowDef

log = logging.getLogger("engine_core")
_STEP_CLOCK: list[Callable[[], float]] = [monotonic_ms]
"""The clock step bodies are timed with (the simulation replaces it with its own)."""
CHECKPOINT_BYTES = 256 * 1024
HANDOFF_CHECKPOINT_BYTES = 4 * 1024


class StepRun(StepReads):
    """One delivery's work on one execution (see the module docstring)."""

    def __init__(self, life: Lifecycle, kinds: KindTable, wf: WorkflowDef, state: ExecutionState,
                 remaining_ms: Callable[[], int] | None, yield_after_ms: float | None):
        self.life, self.kinds, self.wf = life, kinds, wf
        self.settings, self.clock, self.retention = life.settings, life.clock, life.retention
        self.remaining_ms, self.yield_after_ms = remaining_ms, yield_after_ms
        self.started_ms = time.monotonic() * 1000
        self.steps_run = 0
        self.overran = False
        """This delivery's last attempt ran past its budget (``undo_current``)."""
        self.corrupt_error: ErrorInfo | None = None
        self._load(state)
        self.items = FanOutItems(self)

    def _load(self, state: ExecutionState) -> None:
        e = state.execution
        self.execution, self.records, self.events = e, list(state.records), list(state.events)
        self.joins: dict[int, Join] = dict(state.joins)
        self.input_blob = state.input_blob
        self._whole: list[Any] | None = None if state.records_from is not None else self.records
        self._records_from = state.records_from
        self._positions: dict[tuple[int, bool], int] | None = None
        self.decoded: dict[int, tuple[str, Any]] = {}
        """Results this delivery encoded since the last checkpoint, by step: each text with its value."""
        self._whole_positions: dict[tuple[int, bool], int] | None = None
        upto = e.failed_step if e.compensating and e.failed_step is not None else e.current_step
        try:
            self.data: dict[str, Any] | None = self._context(state, upto)
        except Exception as exc:
            if state.records_from is not None:  # the checkpoint it read from is not usable: read it all
                whole = self.life.store.load_state(e.execution_id)
                if whole is not None:
                    self._load(this_run_state(whole))
                    return
            self.data = None
            self.corrupt_error = ErrorInfo(code="corrupt_state", message=f"stored context is unreadable: {exc}")
        self._count_tail()

    def _context(self, state: ExecutionState, upto: int) -> dict[str, Any]:
        """The context the step at ``upto`` sees (raises ValueError when a record it needs is unreadable)."""
        return rebuild_context(state.input_blob, self.records, self.wf, upto, state.records_from)

    def _count_tail(self) -> None:
        """Where the next checkpoint is due: the results since the last one (count and bytes), and the size
        of the context it keeps (the input before any)."""
        kept = self.execution.checkpoint
        base = next((r for r in self.records if isinstance(r, StepRecord) and r.step_index == kept
                     and r.kind != "compensation" and r.context_blob is not None), None)
        self.checkpoint_bytes = len((base.context_blob if base else self.input_blob).encode("utf-8"))
        tail = [r for r in self.records if isinstance(r, StepRecord) and r.kind != "compensation" and r.result_blob
                and (kept is None or r.step_index > kept)]
        self.tail_records, self.tail_bytes = len(tail), sum(len(r.result_blob.encode("utf-8")) for r in tail)
        self.context_bound = self.checkpoint_bytes + self.tail_bytes

    def run_body(self, fn: Callable[..., Any], ctx: Any, timeout_s: float) -> BodyOutcome:
        return run_body(fn, ctx, timeout_s, _STEP_CLOCK[0])

    # -- the loop --------------------------------------------------------------------------------------
    def loop(self) -> Outcome:
        while True:
            e = self.execution
            cap = None if e.compensating else self._cap_exceeded(e)
            if cap is not None:
                return self._finished(self.fail(cap, compensate=False))
            kind = self.kinds.current(self.wf, e)
            if kind is None:  # the engine checked the definition; a reload cannot change it
                return Outcome("stale", e.execution_id, e.current_step, "no kind for this step")
            if e.cancel_requested and not e.compensating:
                outcome = kind.finish_cancel(self)
            else:
                outcome = kind.run(self)
            if outcome.kind == "cancel_requested":
                outcome = self.finish_cancel(undo_current=self.undo_current())
            if outcome.kind != "chained":
                return self._finished(outcome)

    def resume(self) -> Outcome:
        return self.loop()

    def undo_current(self) -> bool:
        """Whether a cancel that waited for the current step's attempt undoes that step too: its effect is
        unknown (an attempt whose worker died, or this delivery's attempt ran past its budget)."""
        return self.execution.lost_attempts > 0 or self.overran

    def _finished(self, outcome: Outcome) -> Outcome:
        return outcome._replace(steps_run=self.steps_run)

    def _cap_exceeded(self, e: Execution) -> ErrorInfo | None:
        return caps.exceeded(e, self.settings)

    def _may_chain(self, next_index: int, settling: int = 0) -> bool:
        """Run the next step in this invocation? Only within the chain limit, the fair share of the
        batch, and with its whole budget (plus margin) left. ``settling``: steps about to count (the one
        whose record is being written asks before it is counted)."""
        if next_index >= len(self.wf.steps) or not self._within_chain(settling):
            return False
        if next_index >= self.settings.max_steps or self.execution.total_attempts + 1 >= self.settings.max_total_attempts:
            return False  # the next delivery ends it at the cap, with no attempt claimed
        nxt = self.wf.steps[next_index]
        if not nxt.kind.needs_invocation_time() or self.remaining_ms is None:
            return True
        return self._time_for(self.life.timeout_s(self.wf, next_index))

    def chain_undo(self, index: int) -> bool:
        """A compensation succeeded and step ``index``'s is next: run it in this invocation? As a step's:
        within the chain limit and the batch's fair share, with the undo's whole budget left. Counts the
        compensation that succeeded."""
        self.steps_run += 1
        if not self._within_chain(0):
            return False
        if self.remaining_ms is None:
            return True
        return self._time_for(self.wf.steps[index].compensate_timeout_s or self.life.timeout_s(self.wf, index))

    def _within_chain(self, settling: int) -> bool:
        """Under the chain limit (counting ``settling`` steps about to count) and the batch's fair share."""
        if self.steps_run + settling >= self.settings.max_chain_steps:
            return False
        return self.yield_after_ms is None or time.monotonic() * 1000 - self.started_ms < self.yield_after_ms

    def _time_for(self, timeout_s: float) -> bool:
        """The invocation has ``timeout_s`` (plus the margin) left."""
        assert self.remaining_ms is not None
        return self.remaining_ms() >= timeout_s * 1000 + self.settings.time_margin_ms

    # -- writes ----------------------------------------------------------------------------------------
    def commit(self, new: Execution) -> Outcome | None:
        """Apply a transition; on a lost condition say what happened instead (None means it applied).

        ``cancel_requested``: an operator asked to cancel while this delivery held the step (its claim,
        or a fan-out this delivery is settling); ``execution`` is then the stored item, and the caller
        finishes the cancel now that its own work has ended."""
        old = self.execution
        eid = old.execution_id
        try:
            self.execution = self.life.commit(old, new)
        except TransitionConflictError as exc:
            current = exc.current
            if current is not None and current.cancel_requested and not current.compensating \
                    and not current.status.is_terminal and _holds(old, current):
                self.execution = current
                return Outcome("cancel_requested", eid, old.current_step, "a cancel waited for this attempt")
            kind = "duplicate" if exc.already_advanced else "conflict"
            log.info("transition lost the race; nothing changed", extra={
                "execution_id": eid, "workflow": old.workflow, "step": None, "step_index": old.current_step,
                "attempt": None, "outcome": kind})
            return Outcome(kind, eid, old.current_step, str(exc))
        except ExecutionNotFoundError:
            return Outcome("missing", eid, old.current_step)
        return None

    def put(self, record: StepRecord) -> Outcome | None:
        try:
            self.life.store.put_step(self.execution.execution_id, record)
        except StepSupersededError as exc:
            return Outcome("superseded", self.execution.execution_id, record.step_index, str(exc))
        except ExecutionNotFoundError:
            return Outcome("missing", self.execution.execution_id, record.step_index)
        self._positions = _replace(self.records, self._positions, record)
        if self._whole is not None and self._whole is not self.records:
            self._whole_positions = _replace(self._whole, self._whole_positions, record)
        return None

    def send(self, wake_at: dt.datetime | None = None) -> None:
        self.life.send_at(self.execution, wake_at)

    # -- moves -----------------------------------------------------------------------------------------
    def claim(self, policy: RetryPolicy | None = None, timeout_s: float | None = None) -> Execution | Outcome:
        """Start attempt n of the current task (or compensation: its own ``policy`` and ``timeout_s``):
        counted and leased on the execution item, before the body runs. Fails the execution instead
        when every allowed attempt has already started."""
        e, step = self.execution, self.step
        self.overran = False
        policy = policy or self.wf.policy_for(step.index)
        if e.attempt >= policy.max_attempts:
            return self.fail(self.error("attempts_exhausted", (
                f"step started {e.attempt} times without finishing {policy.max_attempts} attempts cleanly: "
                "earlier attempts crashed or ran past the timeout")))
        now, deadline = self.clock.now(), self.deadline()
        expiry = transitions.claim_expiry(now, timeout_s or self.timeout_s, self.life.margin_s, deadline)
        outcome = self.commit(transitions.claimed(e, now, expiry, deadline, self.settings.slack_s))
        return self.execution if outcome is None else outcome

    def succeed(self, result: Any) -> Outcome:
        e, step = self.execution, self.step
        if result is None:
            result = {}
        if type(result) is not dict:
            return self.fail(self.error("invalid_result", (
                f"step returned {type(result).__name__}; steps return a dict (merged into the context) or None")))
        try:
            result_blob, merged, bound = self.merge(result, f"result of step {step.name!r}")
        except (NonSerializableResultError, ResultTooLargeError) as exc:
            return self.fail(self.error(exc.code, str(exc)))
        now = self.clock.now()
        record = StepRecord(step_index=step.index, name=step.name, status=StepStatus.SUCCEEDED, attempts=e.attempt,
                            version=e.version, started_at=e.attempt_started_at, finished_at=now, result_blob=result_blob,
                            expires_at=self.item_expiry(now), run=e.run, undo=step.compensate is not None)
        return self.settle(record, merged, bound)

    def merge(self, result: dict[str, Any], what: str) -> tuple[str, dict[str, Any], int]:
        # The encoded context is at most the input plus every result so far; it is encoded again only
        # when that bound could exceed the budget.
        result_blob, decoded = codec.roundtrip(result, "result")
        self.check_size(what, result_blob)
        # A private copy for the next checkpoint's rebuild, taken before any body can change the values
        # the context hands on: the rebuild then merges it instead of decoding the text again.
        self.decoded[self.execution.current_step] = (result_blob, codec.copy_value(decoded))
        merged = {**(self.data or {}), **decoded}
        bound = self.context_bound + len(result_blob.encode("utf-8"))
        if bound > self.settings.item_budget_bytes:
            context_blob = codec.encode(merged, "context")
            self.check_size("context after merging this result", context_blob)
            bound = len(context_blob.encode("utf-8"))
        return result_blob, merged, bound

    def settle(self, record: StepRecord, merged: dict[str, Any], bound: int) -> Outcome:
        """The current step succeeded with ``record`` (its result already encoded and size-checked):
        write it once, then move the execution on. Tasks, event waits and fan-ins all end here."""
        e, step = self.execution, self.step
        record = self._with_checkpoint(record, merged)
        outcome = self.put(record)
        if outcome is not None:
            return outcome
        faults.point("worker.after_record", execution_id=e.execution_id, step=step.index)
        self.data, self.context_bound = merged, bound
        self.steps_run += 1
        self.metric("StepsSucceeded", "Count", 1)
        self.log("step succeeded")
        outcome = self._advance(checkpoint=record.step_index if record.context_blob is not None else None)
        if outcome.kind == "cancel_requested":  # the step succeeded after a cancel: it is undone too
            return self.finish_cancel(undo_current=True)
        return outcome

    def _with_checkpoint(self, record: StepRecord, merged: dict[str, Any]) -> StepRecord:
        """The record, holding the whole context after it when a checkpoint is due: ``checkpoint_records`` results since
        the last one, or results outweighing eight times the context it kept (or 256 KB); or, when this
        delivery hands the execution on (the next one reads the results since the last checkpoint),
        results outweighing that context (or 4 KB), except at the execution's last step. A delivery then reads only the history from the last
        checkpoint: its read stays flat however long the history grows, and a checkpoint's write (the
        context once more) is paid once per that many bytes of results."""
        size = len((record.result_blob or "").encode("utf-8"))
        tail = self.tail_bytes + size
        # The next delivery reads this tail, unless the execution ends with this step (nothing reads it then).
        ends = record.step_index + 1 >= len(self.wf.steps)
        hands_off = not ends and not self._may_chain(record.step_index + 1, settling=1)
        due = (self.tail_records + 1 >= self.settings.checkpoint_records or tail >= max(8 * self.checkpoint_bytes, CHECKPOINT_BYTES)
               or (hands_off and tail >= max(self.checkpoint_bytes, HANDOFF_CHECKPOINT_BYTES)))
        if due:
            # Rebuilt from what is stored (the last checkpoint and the results after it), never from the
            # context in memory, which a step's body may have changed in place.
            kept_context = rebuild_context(self.input_blob, [*self.records, record], self.wf, record.step_index + 1,
                                           self._records_from, self.decoded)
            blob = codec.encode(kept_context, "context")
            kept = len(blob.encode("utf-8"))
            if size + kept <= self.settings.item_budget_bytes:  # else the next step tries again
                self.tail_records, self.tail_bytes, self.checkpoint_bytes = 0, 0, kept
                self.decoded.clear()  # the rebuilds after this checkpoint start from it
                return record.model_copy(update={"context_blob": blob})
        self.tail_records, self.tail_bytes = self.tail_records + 1, self.tail_bytes + size
        return record

    def advance(self) -> Outcome:
        return self._advance()

    def _advance(self, checkpoint: int | None = None) -> Outcome:
        e, step = self.execution, self.step
        now, nxt = self.clock.now(), e.current_step + 1
        chain = self._may_chain(nxt)
        claim_next = chain and self.wf.steps[nxt].kind.needs_invocation_time()
        expiry = deadline = None
        if claim_next:
            deadline = self.deadline()
            expiry = transitions.claim_expiry(now, self.life.timeout_s(self.wf, nxt), self.life.margin_s, deadline)
        ending = nxt >= len(self.wf.steps)
        # Nothing left to do at the end (no event to publish, every item outlives it): finalized at once.
        done_now = (ending and not self.life.events.enabled and e.stamped_until is not None
                    and e.stamped_until >= now + self.retention)
        new = transitions.advanced(e, now, len(self.wf.steps), self.retention,
                                   lease_s=self.lease_s(nxt), slack_s=self.settings.slack_s,
                                   claim_expiry_at=expiry, deadline=deadline, finalized=done_now,
                                   finalize_grace_s=self.finalize_grace_s(), checkpoint=checkpoint)
        outcome = self.commit(new)
        if outcome is not None:
            return outcome
        faults.point("worker.after_checkpoint", execution_id=e.execution_id, step=step.index)
        new = self.execution
        if new.status is Status.COMPLETED:
            self.metric("ExecutionsCompleted", "Count", 1)
            log.info("execution completed", extra=log_fields(new))
            if not new.finalized:
                self.life.finalize(new)
            return Outcome("completed", e.execution_id, step.index)
        if chain:
            return Outcome("chained", e.execution_id, step.index)
        self.send()
        faults.point("worker.after_enqueue", execution_id=e.execution_id, step=step.index)
        return Outcome("advanced", e.execution_id, step.index)

    def attempt_failed(self, body: BodyOutcome, policy: RetryPolicy | None = None, kind: str = "task",
                       prefix: str = "") -> Outcome:
        """A failed attempt: retried under ``policy`` (the step's, unless a compensation passes its own)
        with a FAILED record of ``kind``, or, when it was the last allowed one, the step fails."""
        e, step = self.execution, self.step
        # An attempt that ran past its budget (cut off, or its result thrown away) may have taken effect: a
        # cancel that waited for it undoes it too, as one whose worker died (``undo_current``).
        self.overran = body.error_code == "step_timeout"
        policy = policy or self.wf.policy_for(step.index)
        attempt = e.attempt
        message = prefix + (body.error_message or "")
        if not body.retryable or attempt >= policy.max_attempts:
            if body.retryable:
                message = f"{message} (attempt {attempt} of {policy.max_attempts})"
            return self.fail(self.error(body.error_code or "step_error", message, retryable=body.retryable,
                                        kind=body.error_type))
        now = self.clock.now()
        error = self.error(body.error_code or "step_error", message, retryable=True, kind=body.error_type)
        record = StepRecord(step_index=step.index, name=step.name, status=StepStatus.FAILED, attempts=attempt,
                            version=e.version, started_at=e.attempt_started_at, finished_at=now, error=error,
                            expires_at=self.item_expiry(now), kind=kind, run=e.run)
        outcome = self.put(record)
        if outcome is not None:
            return outcome
        delay = backoff_s(policy, attempt, seed=f"{e.execution_id}:{step.index}" + ("" if kind == "task" else f":{kind}"))
        retry_at = now + dt.timedelta(seconds=delay)
        outcome = self.commit(transitions.retry_scheduled(e, now, retry_at))
        if outcome is not None:
            return outcome
        self.metric("StepsRetried", "Count", 1)
        log.warning("step failed; retry scheduled", extra={**log_fields(e, step, attempt), "error": message[:500],
                                                           "retry_in_s": round(delay, 3)})
        self.send(retry_at)
        faults.point("worker.after_enqueue", execution_id=e.execution_id, step=step.index)
        return Outcome("retry_scheduled", e.execution_id, step.index, f"retry in {delay:.1f} s")

    def fail(self, error: ErrorInfo, started_at: dt.datetime | None = None, compensate: bool = True, *,
             event_id: str | None = None) -> Outcome:
        """The current step failed for good: its record says why (and when it began: the attempt's claim, or
        ``started_at`` for a step no attempt holds, such as a fan-out), then the execution compensates what
        it completed, or ends FAILED (COMPENSATION_FAILED while compensating). ``compensate`` False: FAILED with
        nothing undone (a safety cap: raised, a redrive goes on where it stopped)."""
        e = self.execution
        if e.is_claimed or error.step_index is not None:
            now = self.clock.now()
            known = e.current_step < len(self.wf.steps)
            kind = "compensation" if e.compensating else self.step.kind.kind if known else "task"
            record = StepRecord(step_index=e.current_step, name=self.step.name if known else "?",
                                status=StepStatus.FAILED, attempts=e.attempt, version=e.version,
                                started_at=e.attempt_started_at or started_at, finished_at=now, error=error,
                                is_final=True, expires_at=self.item_expiry(now), run=e.run, event_id=event_id,
                                kind=kind if kind in ("compensation", "event", "fanout") else "task")
            outcome = self.put(record)
            if outcome is not None:
                return outcome
            self.metric("StepsFailed", "Count", 1)
        outcome = self.kinds.ending.on_failure(self, error) if compensate else None
        if outcome is not None:
            return outcome
        if not e.compensating:
            error = advised(error, e.execution_id)
        new = transitions.failed(e, self.clock.now(), error, self.retention, self.finalize_grace_s())
        outcome = self.end(new, "failed", error.code, metric="ExecutionsFailed")
        if outcome.kind == "failed":
            log.error("execution failed", extra={**log_fields(self.execution), "error_code": error.code,
                                                 "error": error.message})
        return outcome

    def end(self, new: Execution, outcome: str, detail: str = "", metric: str | None = None) -> Outcome:
        lost = self.commit(new)
        if lost is not None:
            return lost
        if metric:
            self.metric(metric, "Count", 1)
        self.life.finalize(self.execution)
        return Outcome(outcome, new.execution_id, new.current_step, detail)

    def finish_cancel(self, undo_current: bool) -> Outcome:
        e = self.execution
        if not e.cancel_requested or e.compensating or e.status.is_terminal:
            return Outcome("stale", e.execution_id, e.current_step, "no cancel is pending")
        new = self.kinds.ending.cancelled(self, e, e.cancelled_by, e.cancel_reason, undo_current, self.lease_s,
                                          self.retention, self.finalize_grace_s())
        if new.status.is_terminal:
            return self.end(new, "cancelled", "cancelled", metric="ExecutionsCancelled")
        outcome = self.commit(new)
        if outcome is not None:
            return outcome
        self.metric("ExecutionsCompensating", "Count", 1)
        self.send()
        return Outcome("compensating", e.execution_id, e.current_step, f"undoing step {new.current_step}")

    # -- reads again -----------------------------------------------------------------------------------
    def reload(self) -> bool:
        e = self.execution
        state = self.life.store.load_state(e.execution_id)
        if state is None:
            return False
        state = this_run_state(state)
        now_e = state.execution
        if now_e.status.is_terminal or now_e.compensating != e.compensating or now_e.current_step != e.current_step:
            return False
        self._load(state)
        return self.data is not None


def _positions_of(records: list[Any]) -> dict[tuple[int, bool], int]:
    return {(r.step_index, r.kind == "compensation"): i for i, r in enumerate(records) if isinstance(r, StepRecord)}


def _replace(records: list[Any], positions: dict[tuple[int, bool], int] | None,
             record: StepRecord) -> dict[tuple[int, bool], int]:
    """Put ``record`` in this delivery's list in place of the one with its key, or at the end; returns the
    positions by key (built on first use), so a chain of a thousand steps stays linear."""
    if positions is None:
        positions = _positions_of(records)
    key = (record.step_index, record.kind == "compensation")
    if key in positions:
        records[positions[key]] = record
    else:
        positions[key] = len(records)
        records.append(record)
    return positions


def _holds(old: Execution, current: Execution) -> bool:
    """``current`` is still at the step ``old`` was at, under the same attempt: the work this delivery
    did (a claim's attempt, or a fan-out it was settling) is still the step's latest."""
    return (current.current_step == old.current_step and current.attempt == old.attempt
            and current.attempt_started_at == old.attempt_started_at)

