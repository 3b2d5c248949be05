"""The engine: start an execution, and process one step message. The Lambdas are thin shells around it.

Processing a message, in order (each write conditional, each crash between writes recoverable):

1. read the execution (consistent); drop the message if it is stale, a duplicate or the execution ended;
2. if a timer (sleep, retry backoff) is due, claim it: RUNNING with a lease on the in-flight work;
3. write the step's intent record (RUNNING, attempt n) *before* the body runs;
4. run the body with its idempotency key; encode the result (type-exact) and check its size;
5. checkpoint: one transaction advances the execution and settles the step record;
6. enqueue the next step (or schedule the retry / sleep). A lost enqueue is healed by the sweeper
   when the lease in ``next_wake_at`` expires.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import logging
import math
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from . import codec, faults, transitions
from ._runner import run_body
from .clock import Clock, SystemClock, format_ts, monotonic_ms
from .context import StepContext
from .errors import (
    CorruptStateError,
    EngineError,
    ExecutionExistsError,
    ExecutionNotFoundError,
    IdempotencyConflictError,
    InsufficientTimeError,
    NonSerializableResultError,
    ResultTooLargeError,
    StepBusyError,
    StepSettledError,
    TransitionConflictError,
    UnknownWorkflowError,
)
from .model import ErrorInfo, Execution, Status, StepMessage, StepStatus, Timer
from .ports import Metrics, NullMetrics, StateStore, StepQueue, StepUpdate, Transition
from .registry import REGISTRY, Registry, StepDef, WorkflowDef
from .retries import backoff_s
from .settings import EngineSettings, lease_seconds

log = logging.getLogger("engine_core")
_TOKEN_NAMESPACE = uuid.UUID("6c6f6f6d-0000-4000-8000-746f6b656e73")  # fixed: token -> id must never change


class InvalidInputError(EngineError):
    pass


@dataclass(frozen=True)
class StartResult:
    execution: Execution
    created: bool


@dataclass(frozen=True)
class Outcome:
    """What processing one message did. Every kind but a raised error means: acknowledge the message."""

    kind: str
    """advanced, completed, failed, retry_scheduled, slept, early, stale, duplicate, conflict, busy,
    missing, terminal, corrupt."""
    execution_id: str
    step: int | None = None
    detail: str = ""


def _fields(e: Execution, step: StepDef | None = None, attempt: int | None = None) -> dict[str, Any]:
    """The keys every engine log line carries (None where a key does not apply)."""
    return {"execution_id": e.execution_id, "workflow": e.workflow, "version": e.version,
            "step": None if step is None else step.name,
            "step_index": e.current_step if step is None else step.index, "attempt": attempt}


class Engine:
    """Drives executions one step at a time.

    Example:
        >>> engine = Engine(store=MemoryStore(), queue=FakeQueue(), clock=ManualClock())
        >>> started = engine.start("order_fulfillment", {"order_id": "o-1"})
        >>> engine.process(StepMessage(execution_id=started.execution.execution_id, step=0, version=1))
    """

    def __init__(
        self,
        store: StateStore,
        queue: StepQueue,
        registry: Registry = REGISTRY,
        clock: Clock | None = None,
        settings: EngineSettings | None = None,
        metrics: Metrics | None = None,
    ):
        self.store, self.queue, self.registry = store, queue, registry
        self.clock = clock or SystemClock()
        self.settings = settings or EngineSettings()
        self.metrics = metrics or NullMetrics()
        self.retention = dt.timedelta(days=self.settings.retention_days)

    # -- start ----------------------------------------------------------------------------------
    def start(self, workflow: str, input: dict[str, Any], token: str | None = None) -> StartResult:
        """Durably create an execution, then enqueue its first step.

        The write happens before the acknowledgement; if the enqueue is lost, the sweeper starts the
        execution when its lease runs out. A repeated token returns the first execution unchanged.
        """
        wf = self.registry.get(workflow)
        if not isinstance(input, dict):
            raise InvalidInputError(f"input must be a JSON object, got {type(input).__name__}")
        blob = codec.encode(input, "input")
        self._check_size("input", blob)
        digest = hashlib.sha256(f"{workflow}\n{blob}".encode()).hexdigest()
        execution_id = str(uuid.uuid5(_TOKEN_NAMESPACE, token)) if token else str(uuid.uuid4())
        now = self.clock.now()
        execution = Execution(
            execution_id=execution_id, workflow=workflow, status=Status.RUNNING, current_step=0, version=1,
            context_blob=blob, fingerprint=wf.fingerprint, input_digest=digest, created_at=now, updated_at=now,
            next_wake_at=now + self._lease(wf, 0), timer=Timer.LEASE, idempotency_token=token,
        )
        try:
            self.store.create(execution)
        except ExecutionExistsError as exc:
            old = exc.existing
            if old.is_expired(now):
                raise IdempotencyConflictError(token or "", old.execution_id, "and has since expired") from None
            if old.input_digest != digest:
                raise IdempotencyConflictError(token or "", old.execution_id, "with a different workflow or input") from None
            return StartResult(old, created=False)
        faults.point("control.after_create", execution_id=execution_id)
        try:
            self.queue.send(StepMessage(execution_id=execution_id, step=0, version=1))
        except Exception:
            log.warning("first enqueue failed; the sweeper starts the execution when its lease expires",
                        exc_info=True, extra=_fields(execution))
        self.metrics.add_metric("ExecutionsStarted", "Count", 1)
        log.info("execution started", extra=_fields(execution))
        return StartResult(execution, created=True)

    # -- reads ----------------------------------------------------------------------------------
    def get(self, execution_id: str) -> Execution:
        """The execution, or ExecutionNotFoundError (also for malformed ids and expired items)."""
        try:
            execution_id = str(uuid.UUID(execution_id))
        except (ValueError, AttributeError, TypeError):
            raise ExecutionNotFoundError(str(execution_id)) from None
        e = self.store.load(execution_id)
        if e is None or e.is_expired(self.clock.now()):
            raise ExecutionNotFoundError(execution_id)
        return e

    def history(self, execution_id: str):
        e = self.get(execution_id)
        return self.store.history(e.execution_id)

    # -- worker ---------------------------------------------------------------------------------
    def process(self, message: StepMessage, remaining_ms: Callable[[], int] | None = None) -> Outcome:
        """Handle one step message. Returns what happened; raises only to ask for redelivery."""
        eid = message.execution_id
        try:
            e = self.store.load(eid)
        except CorruptStateError as exc:
            return self._fail_unreadable(eid, exc)
        if e is None or e.is_expired(self.clock.now()):
            return Outcome("missing", eid, message.step)
        if e.status.is_terminal:
            if not e.finalized:
                self._finalize(e)
            return Outcome("terminal", eid, message.step)
        if (message.step, message.version) != (e.current_step, e.version):
            return Outcome("stale", eid, message.step, f"execution is at step {e.current_step} v{e.version}")

        wf, problem = self._definition(e)
        if problem is not None:
            return self._fail(e, problem, attempts_spent=0)  # no attempt ran: count none
        cap = self._cap_exceeded(e)
        if cap is not None:
            return self._fail(e, cap, attempts_spent=0)

        step = wf.steps[e.current_step]
        if not step.is_sleep:
            # Before any write, including a timer claim: a claimed-then-abandoned retry would make the
            # redelivered message stale and leave the execution waiting for its lease.
            self._check_time(wf.timeout_for(step.index), remaining_ms)

        if e.timer is not Timer.LEASE:
            assert e.next_wake_at is not None
            wait_s = (e.next_wake_at - self.clock.now()).total_seconds()
            if wait_s > self.settings.early_tolerance_s:
                if wait_s <= self.settings.max_queue_delay_s:
                    self.queue.send(message, delay_s=math.ceil(wait_s))
                return Outcome("early", eid, e.current_step, f"due in {wait_s:.1f} s")
            claimed = transitions.claimed(e, self.clock.now(), self._lease(wf, e.current_step).total_seconds())
            outcome = self._commit(Transition(e.current_step, e.version, claimed))
            if outcome is not None:
                return outcome
            e = claimed

        if step.is_sleep:
            return self._sleep(e, step)
        return self._run_step(e, wf, step)

    def _check_time(self, timeout_s: float, remaining_ms: Callable[[], int] | None) -> None:
        if remaining_ms is None:
            return
        needed = int(timeout_s * 1000) + self.settings.time_margin_ms
        left = remaining_ms()
        if left < needed:
            raise InsufficientTimeError(left, needed)

    def _run_step(self, e: Execution, wf: WorkflowDef, step: StepDef) -> Outcome:
        timeout_s = wf.timeout_for(step.index)
        faults.point("worker.before_intent", execution_id=e.execution_id, step=step.index)
        now = self.clock.now()
        stale_before = now - dt.timedelta(seconds=timeout_s + self.settings.time_margin_ms / 1000)
        try:
            record = self.store.record_intent(e.execution_id, step.index, step.name, now, stale_before)
        except StepSettledError:
            return Outcome("stale", e.execution_id, step.index, "step already settled")
        except StepBusyError as exc:
            return self._busy(e, step, exc, stale_before)
        attempt, policy = record.attempts, wf.policy_for(step.index)
        fields = _fields(e, step, attempt)
        if attempt > policy.max_attempts:
            return self._fail(e, self._error("attempts_exhausted", step, (
                f"step started {attempt} times without finishing {policy.max_attempts} attempts cleanly: "
                "earlier attempts crashed or ran past the timeout")), settle=step, attempts_spent=0)
        try:
            data = codec.decode(e.context_blob)
        except Exception as exc:
            return self._fail(e, self._error("corrupt_state", step, f"stored context is unreadable: {exc}"), settle=step)
        faults.point("worker.after_intent", execution_id=e.execution_id, step=step.index, attempt=attempt)
        log.info("step started", extra=fields)
        ctx = StepContext(execution_id=e.execution_id, workflow=e.workflow, step_index=step.index,
                          step_name=step.name, attempt=attempt, data=data)
        assert step.fn is not None
        body = run_body(step.fn, ctx, timeout_s, monotonic_ms)
        self.metrics.add_metric("StepDuration", "Milliseconds", body.duration_ms)
        if body.ok:
            return self._succeed(e, wf, step, data, body.result, fields)
        if body.retryable and attempt < policy.max_attempts:
            return self._retry(e, step, attempt, policy, body.error_code or "step_error", body.error_message or "", fields)
        error = self._error(body.error_code or "step_error", step, body.error_message or "", retryable=body.retryable)
        if body.retryable:
            error = error.model_copy(update={"message": f"{error.message} (attempt {attempt} of {policy.max_attempts})"})
        return self._fail(e, error, settle=step)

    def _busy(self, e: Execution, step: StepDef, exc: StepBusyError, stale_before: dt.datetime) -> Outcome:
        """Another attempt started recently. If it dies, nobody else would look before the next lease,
        so come back when its budget runs out: by then it has committed (and this copy is stale) or it
        is presumed dead and this copy takes over."""
        started = exc.record.started_at if exc.record is not None else None
        if started is not None:
            wait_s = (started - stale_before).total_seconds() + 1
            if 0 < wait_s <= self.settings.max_queue_delay_s:
                self.queue.send(StepMessage(execution_id=e.execution_id, step=e.current_step, version=e.version),
                                delay_s=math.ceil(wait_s))
        return Outcome("busy", e.execution_id, step.index, "another attempt is running")

    def _succeed(self, e: Execution, wf: WorkflowDef, step: StepDef, data: dict, result: Any, fields: dict) -> Outcome:
        if result is None:
            result = {}
        if type(result) is not dict:
            return self._fail(e, self._error("invalid_result", step, (
                f"step returned {type(result).__name__}; steps return a dict (merged into the context) or None")),
                settle=step)
        try:
            result_blob, decoded = codec.roundtrip(result, "result")
            self._check_size(f"result of step {step.name!r}", result_blob)
            context_blob = codec.encode({**data, **decoded}, "context")
            self._check_size("context after merging this result", context_blob)
        except (NonSerializableResultError, ResultTooLargeError) as exc:
            return self._fail(e, self._error(exc.code, step, str(exc)), settle=step)
        now = self.clock.now()
        lease_s = self._lease(wf, step.index + 1).total_seconds()
        new = transitions.advanced(e, context_blob, now, lease_s, len(wf.steps), self.retention,
                                   finalize_grace_s=self._finalize_grace_s(e))
        settle = StepUpdate(step.index, step.name, StepStatus.SUCCEEDED, now, result_blob=result_blob)
        outcome = self._commit(Transition(e.current_step, e.version, new, settle))
        if outcome is not None:
            return outcome
        faults.point("worker.after_checkpoint", execution_id=e.execution_id, step=step.index)
        self.metrics.add_metric("StepsSucceeded", "Count", 1)
        log.info("step succeeded", extra=fields)
        if new.status is Status.COMPLETED:
            self.metrics.add_metric("ExecutionsCompleted", "Count", 1)
            log.info("execution completed", extra=_fields(new))
            self._finalize(new)
            return Outcome("completed", e.execution_id, step.index)
        self.queue.send(StepMessage(execution_id=e.execution_id, step=new.current_step, version=new.version))
        faults.point("worker.after_enqueue", execution_id=e.execution_id, step=step.index)
        return Outcome("advanced", e.execution_id, step.index)

    def _retry(self, e: Execution, step: StepDef, attempt: int, policy, code: str, message: str, fields: dict) -> Outcome:
        delay = backoff_s(policy, attempt, seed=f"{e.execution_id}:{step.index}")
        now = self.clock.now()
        new = transitions.retry_scheduled(e, now, now + dt.timedelta(seconds=delay))
        error = self._error(code, step, message, retryable=True)
        settle = StepUpdate(step.index, step.name, StepStatus.FAILED, now, error=error, is_final=False)
        outcome = self._commit(Transition(e.current_step, e.version, new, settle))
        if outcome is not None:
            return outcome
        self.metrics.add_metric("StepsRetried", "Count", 1)
        log.warning("step failed; retry scheduled", extra={**fields, "error": message, "retry_in_s": round(delay, 3)})
        if delay <= self.settings.max_queue_delay_s:
            self.queue.send(StepMessage(execution_id=e.execution_id, step=new.current_step, version=new.version),
                            delay_s=math.ceil(delay))
        return Outcome("retry_scheduled", e.execution_id, step.index, f"retry in {delay:.1f} s")

    def _sleep(self, e: Execution, step: StepDef) -> Outcome:
        assert step.sleep_s is not None
        now = self.clock.now()
        wake_at = now + dt.timedelta(seconds=step.sleep_s)
        new = transitions.slept(e, now, wake_at)
        settle = StepUpdate(step.index, step.name, StepStatus.SUCCEEDED, now, started_at=now,
                            result_blob=codec.encode({"wake_at": format_ts(wake_at)}))
        outcome = self._commit(Transition(e.current_step, e.version, new, settle))
        if outcome is not None:
            return outcome
        log.info("sleeping", extra={**_fields(new, step), "wake_at": format_ts(wake_at)})
        if step.sleep_s <= self.settings.max_queue_delay_s:
            self.queue.send(StepMessage(execution_id=e.execution_id, step=new.current_step, version=new.version),
                            delay_s=math.ceil(step.sleep_s))
        return Outcome("slept", e.execution_id, step.index, f"until {format_ts(wake_at)}")

    # -- failure and housekeeping -----------------------------------------------------------------
    def _fail(self, e: Execution, error: ErrorInfo, settle: StepDef | None = None, attempts_spent: int = 1) -> Outcome:
        now = self.clock.now()
        new = transitions.failed(e, now, error, self.retention, attempts_spent,
                                 finalize_grace_s=self._finalize_grace_s(e))
        update = None
        if settle is not None:
            update = StepUpdate(settle.index, settle.name, StepStatus.FAILED, now, error=error, is_final=True)
        outcome = self._commit(Transition(e.current_step, e.version, new, update))
        if outcome is not None:
            return outcome
        self.metrics.add_metric("ExecutionsFailed", "Count", 1)
        if settle is not None:
            self.metrics.add_metric("StepsFailed", "Count", 1)
        log.error("execution failed", extra={**_fields(new), "error_code": error.code, "error": error.message})
        self._finalize(new)
        return Outcome("failed", e.execution_id, e.current_step, error.code)

    def _finalize(self, e: Execution) -> None:
        """Terminal housekeeping, repeated by any later delivery until it is marked done."""
        finalize(self.store, self.queue, e)

    def _fail_unreadable(self, execution_id: str, exc: CorruptStateError) -> Outcome:
        now = self.clock.now()
        error = ErrorInfo(code="corrupt_state", message=f"the execution item could not be decoded: {exc.detail}")
        if self.store.fail_unreadable(execution_id, error, now, now + self.retention):
            self.metrics.add_metric("ExecutionsFailed", "Count", 1)
            log.error("execution failed: unreadable state", extra={
                "execution_id": execution_id, "workflow": None, "step": None, "attempt": None, "error": exc.detail})
            self.queue.send_dead_letter({"kind": "loom.execution_failed", "execution_id": execution_id,
                                         "workflow": None, "step": None, "error": error.model_dump()})
        return Outcome("corrupt", execution_id, None, exc.detail)

    def _commit(self, transition: Transition) -> Outcome | None:
        """Apply a transition; on a lost condition say what happened instead (None means it applied)."""
        eid = transition.new.execution_id
        try:
            self.store.commit(transition)
        except TransitionConflictError as exc:
            kind = "duplicate" if exc.already_advanced else "conflict"
            log.info("transition lost the race; nothing changed", extra={
                "execution_id": eid, "workflow": transition.new.workflow, "step": None,
                "step_index": transition.expected_step, "attempt": None, "outcome": kind})
            return Outcome(kind, eid, transition.expected_step, str(exc))
        except ExecutionNotFoundError:
            return Outcome("missing", eid, transition.expected_step)
        return None

    # -- guards -----------------------------------------------------------------------------------
    def _definition(self, e: Execution) -> tuple[WorkflowDef, None] | tuple[None, ErrorInfo]:
        try:
            wf = self.registry.get(e.workflow)
        except UnknownWorkflowError as exc:
            return None, ErrorInfo(code="workflow_definition_mismatch", message=(
                f"{exc}; this worker cannot run it, and will not guess"))
        if wf.fingerprint != e.fingerprint:
            return None, ErrorInfo(code="workflow_definition_mismatch", message=(
                f"workflow {e.workflow!r} changed its steps since this execution started (fingerprint "
                f"{e.fingerprint} -> {wf.fingerprint}); running on would run the wrong step. Deploy new "
                "step lists under a new workflow name, or drain old executions first"))
        return wf, None

    def _cap_exceeded(self, e: Execution) -> ErrorInfo | None:
        if e.current_step >= self.settings.max_steps:
            return ErrorInfo(code="step_cap_exceeded", message=(
                f"execution reached step {e.current_step}, the cap is {self.settings.max_steps} (LOOM_MAX_STEPS)"))
        if e.total_attempts >= self.settings.max_total_attempts:
            return ErrorInfo(code="attempt_cap_exceeded", message=(
                f"execution used {e.total_attempts} step attempts, the cap is {self.settings.max_total_attempts} "
                "(LOOM_MAX_TOTAL_ATTEMPTS)"))
        return None

    def _lease(self, wf: WorkflowDef, index: int) -> dt.timedelta:
        timeout = wf.timeout_for(index) if index < len(wf.steps) else 0.0
        return dt.timedelta(seconds=lease_seconds(self.settings, timeout))

    def _finalize_grace_s(self, e: Execution) -> float:
        """How long the worker that ends an execution has to finish its housekeeping before the sweeper
        does it: the lease of the step it just ran, which outlasts that step's whole budget."""
        timeout = 0.0
        if e.workflow in self.registry:
            steps = self.registry.get(e.workflow).steps
            timeout = self.registry.get(e.workflow).timeout_for(min(e.current_step, len(steps) - 1))
        return lease_seconds(self.settings, timeout)

    def _check_size(self, what: str, blob: str) -> None:
        size = len(blob.encode("utf-8"))
        if size > self.settings.item_budget_bytes:
            raise ResultTooLargeError(what, size, self.settings.item_budget_bytes)

    @staticmethod
    def _error(code: str, step: StepDef, message: str, retryable: bool = False) -> ErrorInfo:
        return ErrorInfo(code=code, message=message, step_index=step.index, step_name=step.name, retryable=retryable)


def failure_notice(e: Execution) -> dict[str, Any]:
    error = e.error.model_dump() if e.error else None
    return {"kind": "loom.execution_failed", "execution_id": e.execution_id, "workflow": e.workflow,
            "step": e.current_step, "error": error}


def finalize(store: StateStore, queue: StepQueue, e: Execution) -> None:
    """Terminal housekeeping: the failure notice (FAILED only), then TTLs and the finalized mark.
    The worker that ends an execution does it at once; the sweeper does it if that worker died first."""
    if e.status is Status.FAILED:
        queue.send_dead_letter(failure_notice(e))
    assert e.expires_at is not None
    store.finalize(e.execution_id, e.version, e.expires_at)
