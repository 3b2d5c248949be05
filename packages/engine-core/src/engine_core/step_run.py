"""One delivery's work on one execution (``StepRun``): the current step, the context, and the moves a
step kind ends in (claim, settle and advance, retry, sleep, fail). ``loop`` runs steps back to back
while the chain rules allow. The Engine (``engine.py``) reads and checks the execution, then hands it here."""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from . import callbacks, codec, faults, transitions
from ._runner import BodyOutcome, truncate
from .rebuild import rebuild_context
from .errors import (
    ExecutionNotFoundError,
    InsufficientTimeError,
    NonSerializableResultError,
    ResultTooLargeError,
    StepSupersededError,
)
from .kinds import compensation
from .model import ErrorInfo, Execution, RetryPolicy, Status, StepRecord, StepStatus
from .outcome import Outcome, log_fields
from .registry import StepDef, WorkflowDef
from .retries import backoff_s

if TYPE_CHECKING:
    from .engine import Engine

log = logging.getLogger("engine_core")


class StepRun:
    """One delivery's work on one execution: the current step, the context, and the moves a step kind
    ends in. ``loop`` runs steps back to back while the chain rules allow."""

    def __init__(self, engine: Engine, wf: WorkflowDef, execution: Execution, records: list[Any], input_blob: str,
                 remaining_ms: Callable[[], int] | None, yield_after_ms: float | None, events: list[Any] | None = None):
        self.engine, self.wf, self.execution, self.records = engine, wf, execution, list(records)
        self.events = list(events or [])
        """Events sent to the execution (EventRecord), for ``wait_for_event`` steps."""
        self.life, self.settings, self.clock = engine.life, engine.settings, engine.life.clock
        self.remaining_ms, self.yield_after_ms = remaining_ms, yield_after_ms
        self.started_ms = time.monotonic() * 1000
        self.steps_run = 0
        self.corrupt_error: ErrorInfo | None = None
        self.context_bound = len(input_blob.encode("utf-8")) + sum(
            len(r.result_blob.encode("utf-8")) for r in self.records if isinstance(r, StepRecord) and r.result_blob)
        try:
            upto = execution.failed_step if execution.compensating and execution.failed_step is not None \
                else execution.current_step
            self.data: dict[str, Any] | None = rebuild_context(input_blob, records, wf, upto)
        except Exception as exc:
            self.data = None
            self.corrupt_error = ErrorInfo(code="corrupt_state", message=f"stored context is unreadable: {exc}")

    # -- what kinds read -----------------------------------------------------------------------------
    @property
    def step(self) -> StepDef:
        return self.wf.steps[self.execution.current_step]

    @property
    def timeout_s(self) -> float:
        return self.life.timeout_s(self.wf, self.execution.current_step)

    def now(self) -> dt.datetime:
        return self.clock.now()

    def history_expiry(self, now: dt.datetime) -> dt.datetime:
        return self.life.history_expiry(now)

    def metric(self, name: str, unit: str, value: float) -> None:
        self.engine.metrics.add_metric(name, unit, value)

    def log(self, text: str, level: int = logging.INFO, **extra: Any) -> None:
        log.log(level, text, extra={**log_fields(self.execution, self.step, self.execution.attempt or None), **extra})

    # -- the loop ------------------------------------------------------------------------------------
    def loop(self) -> Outcome:
        while True:
            e = self.execution
            cap = None if e.compensating else self.engine.cap_exceeded(e)
            if cap is not None:
                return self.fail(cap)
            step = self.step
            if e.compensating:
                outcome = compensation.run(self)
            else:
                if step.kind.needs_invocation_time() and not e.is_claimed:
                    # Before any write: a claimed-then-abandoned attempt would hold the step for its lease.
                    self._check_time(self.timeout_s)
                outcome = step.kind.run(self)
            if outcome.kind != "chained":
                return Outcome(outcome.kind, outcome.execution_id, outcome.step, outcome.detail, self.steps_run)

    def _check_time(self, timeout_s: float) -> None:
        if self.remaining_ms is None:
            return
        needed = int(timeout_s * 1000) + self.settings.time_margin_ms
        left = self.remaining_ms()
        if left < needed:
            raise InsufficientTimeError(left, needed)

    def _deadline(self) -> dt.datetime | None:
        if self.remaining_ms is None:
            return None
        return self.clock.now() + dt.timedelta(milliseconds=self.remaining_ms())

    def _may_chain(self, next_index: int) -> bool:
        """Run the next step in this invocation? Only within the chain limit, the fair share of the
        batch, and with its whole budget (plus margin) left."""
        if next_index >= len(self.wf.steps) or self.steps_run >= self.settings.max_chain_steps:
            return False
        if next_index >= self.settings.max_steps or self.execution.total_attempts + 1 >= self.settings.max_total_attempts:
            return False  # the next delivery ends it at the cap, with no attempt claimed
        if self.yield_after_ms is not None and time.monotonic() * 1000 - self.started_ms >= self.yield_after_ms:
            return False
        nxt = self.wf.steps[next_index]
        if not nxt.kind.needs_invocation_time() or self.remaining_ms is None:
            return True
        needed = self.life.timeout_s(self.wf, next_index) * 1000 + self.settings.time_margin_ms
        return self.remaining_ms() >= needed

    # -- moves ---------------------------------------------------------------------------------------
    def claim(self, policy: RetryPolicy | None = None, timeout_s: float | None = None) -> Execution | Outcome:
        """Start attempt n of the current task (or compensation: its own ``policy`` and ``timeout_s``):
        counted and leased on the execution item, before the body runs. Fails the execution instead
        when every allowed attempt has already started."""
        e, step = self.execution, self.step
        policy = policy or self.wf.policy_for(step.index)
        if e.attempt >= policy.max_attempts:
            return self.fail(self._error("attempts_exhausted", (
                f"step started {e.attempt} times without finishing {policy.max_attempts} attempts cleanly: "
                "earlier attempts crashed or ran past the timeout")))
        now, deadline = self.clock.now(), self._deadline()
        expiry = transitions.claim_expiry(now, timeout_s or self.timeout_s, self.life.margin_s, deadline)
        new = transitions.claimed(e, now, expiry, deadline, self.settings.slack_s)
        outcome = self.engine.commit(new, e)
        if outcome is not None:
            return outcome
        self.execution = new
        return new

    def succeed(self, result: Any) -> Outcome:
        e, step = self.execution, self.step
        if result is None:
            result = {}
        if type(result) is not dict:
            return self.fail(self._error("invalid_result", (
                f"step returned {type(result).__name__}; steps return a dict (merged into the context) or None")))
        try:
            # The encoded context is at most the input plus every result so far; it is encoded again
            # only when that bound could exceed the budget.
            result_blob, merged, bound = self.merge(result, f"result of step {step.name!r}")
        except (NonSerializableResultError, ResultTooLargeError) as exc:
            return self.fail(self._error(exc.code, str(exc)))
        now = self.clock.now()
        record = StepRecord(step_index=step.index, name=step.name, status=StepStatus.SUCCEEDED, attempts=e.attempt,
                            version=e.version, started_at=e.attempt_started_at, finished_at=now, result_blob=result_blob,
                            expires_at=self.life.history_expiry(now))
        return self.settle(record, merged, bound)

    def settle(self, record: StepRecord, merged: dict[str, Any], bound: int) -> Outcome:
        """The current step succeeded with ``record`` (its result already encoded and size-checked):
        write it once, then move the execution on (``merged`` is the context after it, ``bound`` an
        upper bound of its encoded size). Tasks, event waits and fan-ins all end here."""
        e, step = self.execution, self.step
        outcome = self._put(record)
        if outcome is not None:
            return outcome
        faults.point("worker.after_record", execution_id=e.execution_id, step=step.index)
        self.data, self.context_bound = merged, bound
        self.steps_run += 1
        self.metric("StepsSucceeded", "Count", 1)
        self.log("step succeeded")
        return self._advance(record)

    def merge(self, result: dict[str, Any], what: str) -> tuple[str, dict[str, Any], int]:
        """Encode a step's result and merge it into the context: (result blob, merged context, bound).
        Raises NonSerializableResultError or ResultTooLargeError."""
        result_blob, decoded = codec.roundtrip(result, "result")
        self.engine._check_size(what, result_blob)
        merged = {**(self.data or {}), **decoded}
        bound = self.context_bound + len(result_blob.encode("utf-8"))
        if bound > self.settings.item_budget_bytes:
            context_blob = codec.encode(merged, "context")
            self.engine._check_size("context after merging this result", context_blob)
            bound = len(context_blob.encode("utf-8"))
        return result_blob, merged, bound

    def _advance(self, record: StepRecord) -> Outcome:
        e, step = self.execution, self.step
        now, nxt = self.clock.now(), e.current_step + 1
        chain = self._may_chain(nxt)
        claim_next = chain and self.wf.steps[nxt].kind.needs_invocation_time()
        expiry = deadline = None
        if claim_next:
            deadline = self._deadline()
            expiry = transitions.claim_expiry(now, self.life.timeout_s(self.wf, nxt), self.life.margin_s, deadline)
        ending = nxt >= len(self.wf.steps)
        # the record just written counts too: it was stamped when its body ended, maybe well before now
        # Nothing left to do at the end (no event to publish, history outlives it): finalized at once.
        done_now = (ending and not self.life.events.enabled
                    and self.life.history_outlives([*self.records, record], now + self.life.retention))
        new = transitions.advanced(e, now, len(self.wf.steps), self.life.retention,
                                   lease_s=self.life.lease_s(e.workflow, nxt), slack_s=self.settings.slack_s,
                                   claim_expiry_at=expiry, deadline=deadline, finalized=done_now,
                                   finalize_grace_s=self.life.finalize_grace_s(e))
        outcome = self.engine.commit(new, e)
        if outcome is not None:
            return outcome
        faults.point("worker.after_checkpoint", execution_id=e.execution_id, step=step.index)
        self.execution = new
        self.records.append(record)
        if new.status is Status.COMPLETED:
            self.metric("ExecutionsCompleted", "Count", 1)
            log.info("execution completed", extra=log_fields(new))
            if not new.finalized:
                self.life.finalize(new, self.records)
            return Outcome("completed", e.execution_id, step.index)
        if chain:
            return Outcome("chained", e.execution_id, step.index)
        self.life.send_at(new)
        faults.point("worker.after_enqueue", execution_id=e.execution_id, step=step.index)
        return Outcome("advanced", e.execution_id, step.index)

    def attempt_failed(self, body: BodyOutcome, policy: RetryPolicy | None = None, kind: str = "task",
                       prefix: str = "") -> Outcome:
        """A failed attempt: retried under ``policy`` (the step's, unless a compensation passes its own)
        with a FAILED record of ``kind``, or, when it was the last allowed one, the step fails."""
        e, step = self.execution, self.step
        policy = policy or self.wf.policy_for(step.index)
        attempt = e.attempt
        message = prefix + (body.error_message or "")
        if not body.retryable or attempt >= policy.max_attempts:
            if body.retryable:
                message = f"{message} (attempt {attempt} of {policy.max_attempts})"
            error = self._error(body.error_code or "step_error", message, retryable=body.retryable, kind=body.error_type)
            return self.fail(error)
        now = self.clock.now()
        error = self._error(body.error_code or "step_error", message, retryable=True, kind=body.error_type)
        record = StepRecord(step_index=step.index, name=step.name, status=StepStatus.FAILED, attempts=attempt,
                            version=e.version, started_at=e.attempt_started_at, finished_at=now, error=error,
                            expires_at=self.life.history_expiry(now), kind=kind)
        outcome = self._put(record)
        if outcome is not None:
            return outcome
        delay = backoff_s(policy, attempt, seed=f"{e.execution_id}:{step.index}" + ("" if kind == "task" else f":{kind}"))
        retry_at = now + dt.timedelta(seconds=delay)
        new = transitions.retry_scheduled(e, now, retry_at)
        outcome = self._keep_history(retry_at) or self.engine.commit(new, e)
        if outcome is not None:
            return outcome
        self.execution = new
        self.metric("StepsRetried", "Count", 1)
        log.warning("step failed; retry scheduled", extra={**log_fields(e, step, attempt), "error": message[:500],
                                                           "retry_in_s": round(delay, 3)})
        self.life.send_at(new, retry_at)
        faults.point("worker.after_enqueue", execution_id=e.execution_id, step=step.index)
        return Outcome("retry_scheduled", e.execution_id, step.index, f"retry in {delay:.1f} s")

    def sleep_until(self, wake_at: dt.datetime, record: StepRecord) -> Outcome:
        e, step = self.execution, self.step
        outcome = self._put(record) or self._keep_history(wake_at)
        if outcome is not None:
            return outcome
        new = transitions.slept(e, self.clock.now(), wake_at, len(self.wf.steps))
        outcome = self.engine.commit(new, e)
        if outcome is not None:
            return outcome
        self.execution = new
        self.records.append(record)
        log.info("sleeping", extra={**log_fields(new, step), "wake_at": wake_at.isoformat()})
        self.life.send_at(new, wake_at)
        faults.point("worker.after_enqueue", execution_id=e.execution_id, step=step.index)
        return Outcome("slept", e.execution_id, step.index, f"until {wake_at.isoformat()}")

    def fail(self, error: ErrorInfo) -> Outcome:
        """End the execution FAILED; the current step's record says why (when the step had started)."""
        e = self.execution
        if e.is_claimed or error.step_index is not None:
            now = self.clock.now()
            record = StepRecord(step_index=self.step.index if e.current_step < len(self.wf.steps) else e.current_step,
                                name=self.step.name if e.current_step < len(self.wf.steps) else "?",
                                status=StepStatus.FAILED, attempts=e.attempt, version=e.version,
                                started_at=e.attempt_started_at,
                                finished_at=now, error=error, is_final=True, expires_at=self.life.history_expiry(now))
            kind = "compensation" if e.compensating else self.step.kind.kind if e.current_step < len(self.wf.steps) \
                else "task"
            if kind in ("compensation", "event", "fanout"):
                record = record.model_copy(update={"kind": kind})
            outcome = self._put(record)
            if outcome is not None:
                return outcome
            self.records.append(record)
            self.metric("StepsFailed", "Count", 1)
        if e.compensating:
            return compensation.give_up(self, error)
        if error.code not in compensation.NOT_COMPENSATED:
            first = compensation.first_to_undo(self.wf, self.records, e.current_step)
            if first is not None:
                return compensation.begin(self, error, first)
        return self.engine._fail(e, error, self.records)

    def callback_token(self, event: str) -> str:
        """The token of the first ``wait_for_event(event)`` step after the current one."""
        e = self.execution
        for s in self.wf.steps[e.current_step:]:
            if s.kind.kind == "event" and getattr(s.kind, "event", None) == event:
                if not e.callback_secret:
                    raise RuntimeError(f"execution {e.execution_id} started before callback tokens existed")
                return callbacks.issue(e.callback_secret, e.execution_id, s.index)
        raise ValueError(f"workflow {self.wf.name!r} has no wait_for_event({event!r}) step after step "
                         f"{e.current_step} {self.step.name!r}")

    # -- helpers --------------------------------------------------------------------------------------
    def _put(self, record: StepRecord) -> Outcome | None:
        try:
            self.engine.store.put_step(self.execution.execution_id, record)
        except StepSupersededError as exc:
            return Outcome("superseded", self.execution.execution_id, record.step_index, str(exc))
        except ExecutionNotFoundError:
            return Outcome("missing", self.execution.execution_id, record.step_index)
        return None

    def _keep_history(self, until: dt.datetime) -> None:
        """Before a long wait: history items that would expire before the execution could end get a
        later TTL (only executions that outlive ``history_grace_s`` ever need it)."""
        horizon = until + self.life.retention
        if not self.life.history_outlives(self.records, until + dt.timedelta(seconds=self.life.margin_s)):
            self.engine.store.stamp_history(self.execution.execution_id, horizon)
            self.records = [r.model_copy(update={"expires_at": horizon}) if isinstance(r, StepRecord) else r
                            for r in self.records]
        return None

    def _error(self, code: str, message: str, retryable: bool = False, kind: str | None = None) -> ErrorInfo:
        step = self.step
        return ErrorInfo(code=code, message=truncate(message), type=kind, step_index=step.index, step_name=step.name,
                         retryable=retryable)

    def complete_step(self, record: StepRecord, decoded: dict[str, Any]) -> Outcome:
        """Settle the current step with a SUCCEEDED ``record`` made elsewhere (a parallel or map step's
        fan-in, whose result ``decoded`` is already encoded and size-checked), then advance as ``succeed`` does."""
        outcome = self._put(record)
        if outcome is not None:
            return outcome
        self.data = {**(self.data or {}), **decoded}
        self.context_bound += len((record.result_blob or "").encode("utf-8"))
        self.steps_run += 1
        self.metric("StepsSucceeded", "Count", 1)
        self.log("step succeeded")
        return self._advance(record)
