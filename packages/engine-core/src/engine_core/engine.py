"""The engine: start an execution, and process one step message. The Lambdas are thin shells around it.

Processing a message (each write conditional, each crash between writes recoverable):

1. one consistent query reads the execution, its input and its history (the context is rebuilt from
   them); a stale, duplicate or ended delivery stops here;
2. a due timer is checked; the step's kind runs it (``kinds/``). A task is *claimed* on the execution
   item first: attempt n, counted now, with a lease covering its budget and this invocation's deadline;
3. the body runs; its record (result or error) is written once to the history, with its TTL;
4. one conditional write on the execution item moves on, and when the next step can run here it also
   claims that step, so a chain of steps costs one history write and one execution write per step,
   with no queue message and no read;
5. otherwise the next message is sent (a yield, a retry delay up to 900 s, a sleep). A lost message is
   healed by the sweeper when the lease in the due index runs out.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from . import callbacks, codec, faults, transitions
from .clock import Clock, SystemClock
from .rebuild import context_of, rebuild_context
from .errors import (
    CorruptStateError,
    ExecutionExistsError,
    ExecutionNotFoundError,
    IdempotencyConflictError,
    InvalidInputError,
    ResultTooLargeError,
    TransitionConflictError,
    UnknownWorkflowError,
)
from .lifecycle import Lifecycle, UsesLifecycle, failure_notice
from .model import ErrorInfo, Execution, ExecutionState, Status, StepMessage, StepRecord, Timer
from .operations import Operator
from .outcome import Outcome, log_fields
from .ports import EventPublisher, Metrics, NullMetrics, StateStore, StepQueue, Transition
from .registry import REGISTRY, Registry, WorkflowDef
from .settings import ConfigurationError, EngineSettings
from .step_run import StepRun

log = logging.getLogger("engine_core")
_TOKEN_NAMESPACE = uuid.UUID("6c6f6f6d-0000-4000-8000-746f6b656e73")  # fixed: token -> id must never change


@dataclass(frozen=True)
class StartResult:
    execution: Execution
    created: bool


def check_fits(registry: Registry, settings: EngineSettings) -> None:
    """Refuse, when the worker starts, any workflow with a step whose budget cannot fit the function's
    timeout: every delivery of it would be refused before an attempt could be counted."""
    if settings.function_timeout_s is None:
        return
    margin = settings.time_margin_ms / 1000
    problems = []
    for wf in registry.all():
        for s in wf.steps:
            timeout = wf.timeout_for(s.index) or settings.default_step_timeout_s
            runs_bodies = s.kind.needs_invocation_time() or s.kind.kind == "fanout"  # its branches run the step's budget
            if runs_bodies and timeout is not None and timeout + margin > settings.function_timeout_s:
                problems.append(f"workflow {wf.name!r} step {s.name!r} has a {timeout:g} s budget; with the "
                                f"{margin:g} s margin it needs {timeout + margin:g} s")
    if problems:
        raise ConfigurationError(
            f"the worker's timeout is {settings.function_timeout_s:g} s (LOOM_FUNCTION_TIMEOUT_S), too short for: "
            + "; ".join(problems) + ". Raise the worker's timeout (Terraform: worker_timeout_s) or lower the "
            "step's timeout_s; steps without one get the worker timeout minus the margin")


class Engine(UsesLifecycle):
    """Drives executions step by step.

    Example:
        >>> engine = Engine(store=MemoryStore(), queue=FakeQueue(), clock=ManualClock())
        >>> started = engine.start("order_fulfillment", {"order_id": "o-1"})
        >>> engine.process(StepMessage(execution_id=started.execution.execution_id, step=0, version=1))
    """

    def __init__(self, store: StateStore, queue: StepQueue, registry: Registry = REGISTRY, clock: Clock | None = None,
                 settings: EngineSettings | None = None, metrics: Metrics | None = None,
                 events: EventPublisher | None = None):
        self.registry = registry
        self.settings = settings or EngineSettings()
        self.metrics = metrics or NullMetrics()
        self.life = Lifecycle(store, queue, registry, clock or SystemClock(), self.settings, self.metrics, events)
        self.operator = Operator(self)

    # -- start ----------------------------------------------------------------------------------
    def start(self, workflow: str, input: dict[str, Any], token: str | None = None, by: str | None = None) -> StartResult:
        """Durably create an execution, then enqueue its first step.

        The write happens before the acknowledgement; if the enqueue is lost, the sweeper starts the
        execution when its lease runs out. A repeated token returns the first execution unchanged; a
        token whose execution expired starts a clean one.
        """
        wf = self.registry.get(workflow)
        if not isinstance(input, dict):
            raise InvalidInputError(f"input must be a JSON object, got {type(input).__name__}")
        input = wf.validate_input(input)
        blob = codec.encode(input, "input")
        self._check_size("input", blob)
        digest = hashlib.sha256(f"{workflow}\n{codec.canonical(input)}".encode()).hexdigest()
        # Executions started before the canonical digest stored the digest of the encoded text.
        legacy_digest = hashlib.sha256(f"{workflow}\n{blob}".encode()).hexdigest()
        execution_id = str(uuid.uuid5(_TOKEN_NAMESPACE, token)) if token else str(uuid.uuid4())
        now = self.clock.now()
        wake = now + dt.timedelta(seconds=self.life.lease_s(workflow, 0))
        execution = Execution(
            execution_id=execution_id, workflow=workflow, status=Status.RUNNING, current_step=0, version=1,
            fingerprint=wf.fingerprint, input_digest=digest, created_at=now, updated_at=now, next_wake_at=wake,
            index_at=wake, timer=Timer.LEASE,
            idempotency_token=token, started_by=by, callback_secret=callbacks.new_secret(),
        )
        try:
            self.store.create(execution, blob)
        except ExecutionExistsError as exc:
            old = exc.existing
            if old.is_expired(now):
                # The token's earlier execution is past retention: a clean run replaces it. Its versions
                # go on from the old run's, so every history write of the new run outranks the old items
                # that wait for their TTL (and reads skip those, being older than the new run).
                execution = execution.model_copy(update={"version": old.version + 1})
                try:
                    self.store.create(execution, blob, replace_version=old.version)
                except ExecutionExistsError as again:
                    raise IdempotencyConflictError(token or "", old.execution_id,
                                                   "and was replaced concurrently") from again
            elif old.input_digest not in (digest, legacy_digest):
                raise IdempotencyConflictError(token or "", old.execution_id, "with a different workflow or input") from None
            else:
                return StartResult(old, created=False)
        faults.point("control.after_create", execution_id=execution_id)
        try:
            self.life.send_at(execution)
        except Exception:
            log.warning("first enqueue failed; the sweeper starts the execution when its lease expires",
                        exc_info=True, extra=log_fields(execution))
        self.metrics.add_metric("ExecutionsStarted", "Count", 1)
        log.info("execution started", extra=log_fields(execution))
        return StartResult(execution, created=True)

    # -- reads ----------------------------------------------------------------------------------
    def get(self, execution_id: str) -> Execution:
        """The execution, or ExecutionNotFoundError (also for malformed ids and expired items)."""
        e = self.store.load(_uuid(execution_id))
        if e is None or e.is_expired(self.clock.now()):
            raise ExecutionNotFoundError(execution_id)
        return e

    def state(self, execution_id: str) -> ExecutionState:
        """The execution with its input and history (one query), or ExecutionNotFoundError."""
        state = self.store.load_state(_uuid(execution_id))
        if state is None or state.execution.is_expired(self.clock.now()):
            raise ExecutionNotFoundError(execution_id)
        return _this_run(state)

    def context(self, execution_id: str) -> dict[str, Any]:
        """The execution's context as its next step would see it (input merged with the results so far)."""
        return context_of(self.state(execution_id), self.registry)

    def history(self, execution_id: str):
        e = self.get(execution_id)
        return _records_of_run(self.store.history(e.execution_id), e)

    # -- worker ---------------------------------------------------------------------------------
    def process(self, message: StepMessage, remaining_ms: Callable[[], int] | None = None,
                yield_after_ms: float | None = None) -> Outcome:
        """Handle one step message, running a chain of steps while the invocation's time allows.

        ``remaining_ms`` is the invocation's time left; ``yield_after_ms`` the wall time this message
        may hold the invocation before handing its execution on through the queue (the worker's fair
        share of the batch). Returns what happened; raises only to ask for redelivery.
        """
        eid = message.execution_id
        try:
            state = self.store.load_state(eid)
        except CorruptStateError as exc:
            self.life.fail_unreadable(eid, exc)
            return Outcome("corrupt", eid, message.step, exc.detail)
        if state is None or state.execution.is_expired(self.clock.now()):
            return Outcome("missing", eid, message.step)
        state = _this_run(state)
        e = state.execution
        if e.status.is_terminal:
            if not e.finalized:
                self.life.finalize(e, state.records)
            return Outcome("terminal", eid, message.step)
        if message.branch is not None:  # a parallel or map branch: its own item and lifecycle (kinds/fanout.py)
            from .kinds.fanout import process_branch
            return process_branch(self, state, message, remaining_ms, yield_after_ms)
        if (message.step, message.version) != (e.current_step, e.version):
            return Outcome("stale", eid, message.step, f"execution is at step {e.current_step} v{e.version}")
        if e.is_claimed:
            # Only a message sent for an unclaimed step carries the claim's version: this one was
            # re-sent by hand or the store was edited. The claim's lease decides; never run twice.
            return Outcome("stale", eid, message.step, "an attempt holds the step")

        wf, problem = self._definition(e)
        if problem is not None:
            return self._fail(e, problem)
        run = StepRun(self, wf, e, state.records, state.input_blob, remaining_ms, yield_after_ms, events=state.events)
        if run.data is None:
            return run.fail(run.corrupt_error)

        if e.timer is not Timer.LEASE:
            assert e.next_wake_at is not None
            wait_s = (e.next_wake_at - self.clock.now()).total_seconds()
            if wait_s > self.settings.early_tolerance_s:
                self.life.send_at(e, e.next_wake_at)
                return Outcome("early", eid, e.current_step, f"due in {wait_s:.1f} s")
        return run.loop()

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

    def cap_exceeded(self, e: Execution) -> ErrorInfo | None:
        if e.current_step >= self.settings.max_steps:
            return ErrorInfo(code="step_cap_exceeded", message=(
                f"execution reached step {e.current_step}, the cap is {self.settings.max_steps} (LOOM_MAX_STEPS)"))
        if e.total_attempts >= self.settings.max_total_attempts:
            return ErrorInfo(code="attempt_cap_exceeded", message=(
                f"execution used {e.total_attempts} step attempts, the cap is {self.settings.max_total_attempts} "
                "(LOOM_MAX_TOTAL_ATTEMPTS)"))
        return None

    def _fail(self, e: Execution, error: ErrorInfo, records: list | None = None) -> Outcome:
        now = self.clock.now()
        new = transitions.failed(e, now, error, self.life.retention, self.life.finalize_grace_s(e))
        outcome = self.commit(new, e)
        if outcome is not None:
            return outcome
        self.metrics.add_metric("ExecutionsFailed", "Count", 1)
        log.error("execution failed", extra={**log_fields(new), "error_code": error.code, "error": error.message})
        self.life.finalize(new, records)
        return Outcome("failed", e.execution_id, e.current_step, error.code)

    def commit(self, new: Execution, old: Execution) -> Outcome | None:
        """Apply a transition; on a lost condition say what happened instead (None means it applied)."""
        eid = new.execution_id
        try:
            self.store.commit(Transition(old.current_step, old.version, new))
        except TransitionConflictError as exc:
            kind = "duplicate" if exc.already_advanced else "conflict"
            log.info("transition lost the race; nothing changed", extra={
                "execution_id": eid, "workflow": new.workflow, "step": None,
                "step_index": old.current_step, "attempt": None, "outcome": kind})
            return Outcome(kind, eid, old.current_step, str(exc))
        except ExecutionNotFoundError:
            return Outcome("missing", eid, old.current_step)
        return None

    def _check_size(self, what: str, blob: str) -> None:
        size = len(blob.encode("utf-8"))
        if size > self.settings.item_budget_bytes:
            raise ResultTooLargeError(what, size, self.settings.item_budget_bytes)


def _records_of_run(records: list[Any], e: Execution) -> list[Any]:
    """History items of this run only: a token re-used after its execution expired replaces the
    execution, and the earlier run's items (deleted after the replacement) must never mix in."""
    def current(r: StepRecord) -> bool:
        times = [t for t in (r.started_at, r.finished_at) if t is not None]
        return not times or max(times) >= e.created_at

    return [r for r in records if not isinstance(r, StepRecord) or current(r)]


def _this_run(state: ExecutionState) -> ExecutionState:
    e = state.execution
    events = [ev for ev in state.events if not hasattr(ev, "sent_at") or ev.sent_at >= e.created_at]
    return dataclasses.replace(state, records=_records_of_run(state.records, e), events=events)


def _uuid(execution_id: Any) -> str:
    try:
        return str(uuid.UUID(execution_id))
    except (ValueError, AttributeError, TypeError):
        raise ExecutionNotFoundError(str(execution_id)) from None


__all__ = ["Engine", "InvalidInputError", "Outcome", "StartResult", "StepRun", "check_fits", "context_of",
           "failure_notice", "rebuild_context"]
