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

import datetime as dt
import hashlib
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import dataclasses

from . import callbacks, codec, faults, transitions
from ._runner import BodyOutcome, truncate
from .clock import Clock, SystemClock
from .errors import (
    CorruptStateError,
    EngineError,
    ExecutionExistsError,
    ExecutionNotFoundError,
    IdempotencyConflictError,
    InsufficientTimeError,
    InvalidInputError,
    NonSerializableResultError,
    ResultTooLargeError,
    StepSupersededError,
    TransitionConflictError,
    UnknownWorkflowError,
)
from .kinds import compensation
from .lifecycle import Lifecycle, UsesLifecycle, failure_notice
from .operations import Operator
from .model import ErrorInfo, Execution, ExecutionState, RetryPolicy, Status, StepMessage, StepRecord, StepStatus, Timer
from .ports import EventPublisher, Metrics, NullMetrics, StateStore, StepQueue, Transition
from .registry import REGISTRY, Registry, StepDef, WorkflowDef
from .retries import backoff_s
from .settings import ConfigurationError, EngineSettings

log = logging.getLogger("engine_core")
_TOKEN_NAMESPACE = uuid.UUID("6c6f6f6d-0000-4000-8000-746f6b656e73")  # fixed: token -> id must never change


@dataclass(frozen=True)
class StartResult:
    execution: Execution
    created: bool


@dataclass(frozen=True)
class Outcome:
    """What processing one message did. Every kind but a raised error means: acknowledge the message."""

    kind: str
    """advanced, completed, failed, retry_scheduled, slept, early, stale, duplicate, conflict, superseded,
    missing, terminal, corrupt, exhausted (a chain step); for parallel and map steps also fanned_out,
    reconciled and branch_succeeded; ``chained`` is internal."""
    execution_id: str
    step: int | None = None
    detail: str = ""
    steps_run: int = 0
    """Steps whose bodies ran to a commit in this delivery (more than one when chained)."""


def _fields(e: Execution, step: StepDef | None = None, attempt: int | None = None) -> dict[str, Any]:
    """The keys every engine log line carries (None where a key does not apply)."""
    return {"execution_id": e.execution_id, "workflow": e.workflow, "version": e.version,
            "step": None if step is None else step.name,
            "step_index": e.current_step if step is None else step.index, "attempt": attempt}


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
                        exc_info=True, extra=_fields(execution))
        self.metrics.add_metric("ExecutionsStarted", "Count", 1)
        log.info("execution started", extra=_fields(execution))
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
        log.error("execution failed", extra={**_fields(new), "error_code": error.code, "error": error.message})
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


def context_of(state: ExecutionState, registry: Registry | None) -> dict[str, Any]:
    """The context as the execution's next step (or, while compensating and after, its failed step)
    saw it. Under a definition that is not deployed here (or changed), every settled task result in
    order: what a status read can still show. Raises when a record it needs is unreadable."""
    e = state.execution
    upto = e.failed_step if e.failed_step is not None else e.current_step
    if registry is not None and e.workflow in registry and registry.get(e.workflow).fingerprint == e.fingerprint:
        return rebuild_context(state.input_blob, state.records, registry.get(e.workflow), upto)
    data = codec.decode(state.input_blob)
    for r in state.records:
        if isinstance(r, StepRecord) and r.step_index < upto and r.status is StepStatus.SUCCEEDED \
                and r.result_blob is not None and r.kind != "compensation":
            data.update(codec.decode(r.result_blob))
    return data


def rebuild_context(input_blob: str, records: list[Any], wf: WorkflowDef, upto: int) -> dict[str, Any]:
    """The context a step sees: the start input merged with every earlier task's result, in order.
    Raises ValueError when an item it needs is unreadable or missing."""
    data = codec.decode(input_blob)
    if not isinstance(data, dict):
        raise ValueError("the stored input is not an object")
    by_index: dict[int, StepRecord] = {}
    for r in records:
        if isinstance(r, StepRecord):
            if r.kind != "compensation":
                by_index[r.step_index] = r
        elif int(r.sort_key.split("#")[1]) < upto and not r.sort_key.endswith("#compensation"):
            raise ValueError(f"history item {r.sort_key} is unreadable: {r.detail}")
    for s in wf.steps[:upto]:
        if s.kind.kind == "sleep":
            continue
        r = by_index.get(s.index)
        if r is None or r.status is not StepStatus.SUCCEEDED or r.result_blob is None:
            raise ValueError(f"the result of step {s.index} {s.name!r} is missing from the history")
        result = codec.decode(r.result_blob)
        if not isinstance(result, dict):
            raise ValueError(f"the stored result of step {s.name!r} is not an object")
        data.update(result)
    return data


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
        log.log(level, text, extra={**_fields(self.execution, self.step, self.execution.attempt or None), **extra})

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
            log.info("execution completed", extra=_fields(new))
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
        log.warning("step failed; retry scheduled", extra={**_fields(e, step, attempt), "error": message[:500],
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
        log.info("sleeping", extra={**_fields(new, step), "wake_at": wake_at.isoformat()})
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


__all__ = ["Engine", "InvalidInputError", "Outcome", "StartResult", "StepRun", "check_fits", "context_of",
           "failure_notice", "rebuild_context"]
