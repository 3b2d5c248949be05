"""The engine: start an execution, and process one step message. The Lambdas are thin shells around it.

Processing a message (each write conditional, each crash between writes recoverable):

1. one consistent query reads the execution, its input and its history (the context is rebuilt from
   them); a stale, duplicate or ended delivery stops here;
2. a due timer is checked; the current step's kind runs it (``kinds/``, reached only through the kind
   table). A task is *claimed* on the execution item first: attempt n, counted now, with a lease
   covering its budget and this invocation's deadline;
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
import uuid
from collections.abc import Callable
from typing import Any, NamedTuple

from . import callbacks, caps, codec, faults
from .backlog import BacklogGauge
from .clock import Clock, SystemClock
from .durable.prefix import Prefix, Prefixes
from .durable.run import CodeRun
from .errors import (
    CorruptStateError,
    ExecutionExistsError,
    ExecutionNotFoundError,
    IdempotencyConflictError,
    InvalidInputError,
    UnknownWorkflowError,
)
from .kinds import KINDS, KindTable
from .lifecycle import Lifecycle, UsesLifecycle, failure_notice
from .model import ErrorInfo, Execution, ExecutionState, Status, StepMessage, Timer
from .operations import Operator
from .outcome import Outcome, log_fields
from .ports import EventPublisher, Metrics, NullMetrics, StateStore, StepQueue
from .rebuild import context_of, rebuild_context, this_run, this_run_state
from .registry import REGISTRY, Registry
from .settings import UNFIT_REMEDY, ConfigurationError, EngineSettings, unfit_budget
from .step_run import StepRun
from .steps import WorkflowDef
from .versions import pins_of, resolve

log = logging.getLogger("engine_core")
_TOKEN_NAMESPACE = uuid.UUID("6c6f6f6d-0000-4000-8000-746f6b656e73")  # fixed: token -> id must never change
RESEND_FIRST_AFTER_S = 10.0
"""A start repeated with its token this long after the first, while no delivery has touched its first step,
sends the first message again: the first start may have died before sending it (a delivery claims a step
well within this, so racing repeats of one start send nothing more)."""


class StartResult(NamedTuple):
    execution: Execution
    created: bool


def check_fits(registry: Registry, settings: EngineSettings) -> None:
    """Refuse, when the worker starts, any workflow with a step (or a compensation) whose budget cannot
    fit the function's timeout: every delivery of it would be refused before an attempt could be
    counted. A code-first workflow's calls are known only as it runs: its ``step_timeout_s`` is checked
    here, a call's own ``timeout_s`` when the call is reached (``durable/run.py``)."""
    if settings.function_timeout_s is None:
        return
    problems = []
    for wf in registry.all_versions():  # every version: executions in flight run the older ones
        which = f"workflow {wf.name!r}" + (f" version {wf.version}" if wf.version != 1 else "")
        budgets = [(f"step {s.name!r}", wf.timeout_for(s.index) or settings.default_step_timeout_s)
                   for s in wf.steps if s.kind.runs_bodies()]
        budgets += [(f"the compensation of step {s.name!r}", s.compensate_timeout_s)
                    for s in wf.steps if s.compensate is not None and s.compensate_timeout_s]
        if not wf.steps and wf.step_timeout_s:
            budgets.append(("(its step_timeout_s)", wf.step_timeout_s))
        problems += [f"{which} {what} has {why}" for what, timeout in budgets
                     if (why := unfit_budget(settings, timeout)) is not None]
    if problems:
        raise ConfigurationError(
            f"the worker's timeout is {settings.function_timeout_s:g} s (LOOM_FUNCTION_TIMEOUT_S), too short for: "
            + "; ".join(problems) + f". {UNFIT_REMEDY}")


class Engine(UsesLifecycle):
    """Drives executions step by step.

    Example:
        >>> engine = Engine(store=MemoryStore(), queue=FakeQueue(), clock=ManualClock())
        >>> started = engine.start("order_fulfillment", {"order_id": "o-1"})
        >>> engine.process(StepMessage(execution_id=started.execution.execution_id, step=0, version=1))
    """

    def __init__(self, store: StateStore, queue: StepQueue, registry: Registry = REGISTRY, clock: Clock | None = None,
                 settings: EngineSettings | None = None, metrics: Metrics | None = None,
                 events: EventPublisher | None = None, kinds: KindTable = KINDS):
        self.registry, self.kinds = registry, kinds
        self.settings = settings or EngineSettings()
        self.metrics = metrics or NullMetrics()
        self.life = Lifecycle(store, queue, registry, clock or SystemClock(), self.settings, self.metrics, events)
        self.operator = Operator(self.life, kinds)
        self.prefixes = Prefixes(int(self.settings.replay_cache_mb * 1024 * 1024))
        """Code-first histories this process already read (``durable/prefix.py``): a delivery reads the rest."""
        self.backlog = BacklogGauge(store, self.life.clock, self.settings.lease_s, self.settings.backlog_marks)
        """Call ``observe(message, sent_at)`` as each record is received, before ``process``: under a backlog
        it marks how far the workers have got, so the sweeper does not re-send what is only queued."""

    # -- start ----------------------------------------------------------------------------------
    def start(self, workflow: str, input: dict[str, Any], token: str | None = None, by: str | None = None,
              version: int | None = None) -> StartResult:
        """Durably create an execution, then enqueue its first step, on ``version`` of the workflow (None:
        the newest registered); the execution is pinned to it until it ends.

        The write happens before the acknowledgement; if the enqueue is lost, the sweeper starts the
        execution when its lease runs out. A repeated token returns the first execution unchanged; a
        token whose execution expired starts a clean one (a new run: nothing the old one left is read).
        """
        wf = self.registry.get(workflow, version)
        caps.refuse_start(wf, self.settings)  # a step list the steps cap would stop partway
        if not isinstance(input, dict):
            raise InvalidInputError(f"input must be a JSON object, got {type(input).__name__}")
        input = wf.validate_input(input)
        blob = codec.encode(input, "input")
        self.life.check_size("input", blob)
        digest = hashlib.sha256(f"{workflow}\n{codec.canonical(input)}".encode()).hexdigest()
        # Executions started before the canonical digest stored the digest of the encoded text.
        legacy_digest = hashlib.sha256(f"{workflow}\n{blob}".encode()).hexdigest()
        execution_id = str(uuid.uuid5(_TOKEN_NAMESPACE, token)) if token else str(uuid.uuid4())
        now = self.clock.now()
        wake = now + dt.timedelta(seconds=self.life.lease_for(wf, 0))
        execution = Execution(
            execution_id=execution_id, workflow=workflow, status=Status.RUNNING, current_step=0, version=1,
            fingerprint=wf.fingerprint, workflow_version=wf.version, pinned_steps=pins_of(wf), input_digest=digest, created_at=now, updated_at=now, next_wake_at=wake,
            index_at=wake, timer=Timer.LEASE, stamped_until=self.life.start_horizon(wake), layout=2,
            idempotency_token=token, started_by=by, callback_secret=callbacks.new_secret(),
        )
        try:
            self.store.create(execution, blob)
        except ExecutionExistsError as exc:
            old = exc.existing
            if old.is_expired(now):
                # The token's earlier execution is past retention: a clean run replaces it. Its versions
                # go on from the old run's, and every item it writes names the new run, so nothing the
                # old run left (waiting for its TTL) is read or outranks it.
                execution = execution.model_copy(update={"version": old.version + 1})
                try:
                    self.store.create(execution, blob, replace_version=old.version)
                except ExecutionExistsError as again:
                    raise IdempotencyConflictError(token or "", old.execution_id, "and was replaced concurrently",
                                                   again.existing.status.value) from again
            elif old.input_digest not in (digest, legacy_digest):
                raise IdempotencyConflictError(token or "", old.execution_id, "with a different workflow or input",
                                               old.status.value) from None
            elif version is not None and old.workflow_version != version:
                raise IdempotencyConflictError(token or "", old.execution_id,
                                               f"on version {old.workflow_version}, not {version}", old.status.value) from None
            else:
                if old.status is Status.RUNNING and old.current_step == 0 and old.attempt == 0 and old.timer is Timer.LEASE \
                        and old.next_wake_at is not None and old.next_wake_at > now \
                        and now - old.created_at >= dt.timedelta(seconds=RESEND_FIRST_AFTER_S):
                    # Nothing claimed its first step in all this time: the start that wrote it may have died before
                    # its first message. Sent again (a second copy is stale by version) so the retry runs it now,
                    # not when its lease runs out.
                    self._send_first(old)
                return StartResult(old, created=False)
        faults.point("control.after_create", execution_id=execution_id)
        self._send_first(execution)
        self.metrics.add_metric("ExecutionsStarted", "Count", 1)
        log.info("execution started", extra=log_fields(execution))
        return StartResult(execution, created=True)

    def _send_first(self, execution: Execution) -> None:
        try:
            self.life.send_at(execution)
        except Exception:
            log.warning("first enqueue failed; the sweeper starts the execution when its lease expires (or a start "
                        "repeated with its idempotency token sends it again)", exc_info=True, extra=log_fields(execution))

    # -- reads ----------------------------------------------------------------------------------
    def get(self, execution_id: str) -> Execution:
        """The execution, or ExecutionNotFoundError (also for malformed ids and expired items)."""
        return self.operator.get(execution_id)

    def state(self, execution_id: str) -> ExecutionState:
        """The execution with this run's input and history (one query), or ExecutionNotFoundError."""
        return self.operator.state(execution_id)

    def context(self, execution_id: str) -> dict[str, Any]:
        """The execution's context as its next step would see it (input merged with the results so far)."""
        return context_of(self.state(execution_id), self.registry)

    def history(self, execution_id: str):
        return self.operator.history(execution_id)

    # -- worker ---------------------------------------------------------------------------------
    def process(self, message: StepMessage, remaining_ms: Callable[[], int] | None = None,
                yield_after_ms: float | None = None) -> Outcome:
        """Handle one step message, running a chain of steps while the invocation's time allows.

        ``remaining_ms`` is the invocation's time left; ``yield_after_ms`` the wall time this message
        may hold the invocation before handing its execution on through the queue (the worker's fair
        share of the batch). Returns what happened; raises only to ask for redelivery.
        """
        self.life.meter.begin(message.execution_id, delivered=True,
                              branch=None if message.branch is None else (message.step, message.branch))
        try:
            return self._process(message, remaining_ms, yield_after_ms)
        finally:
            self.life.meter.end()

    def _process(self, message: StepMessage, remaining_ms: Callable[[], int] | None,
                 yield_after_ms: float | None) -> Outcome:
        eid = message.execution_id
        try:
            state, kept = self._load(message)
        except CorruptStateError as exc:
            self.life.fail_unreadable(eid, exc)
            return Outcome("corrupt", eid, message.step, exc.detail)
        if state is None or state.execution.is_expired(self.clock.now()):
            return Outcome("missing", eid, message.step)
        e = state.execution
        if e.status.is_terminal:
            if not e.finalized:
                self.life.finalize(e)
            return Outcome("terminal", eid, message.step)
        wf, problem = self._definition(e)
        if message.branch is not None:  # a parallel or map branch: its own item and lifecycle
            if wf is not None and problem is None and wf.code is not None:
                return CodeRun(self.life, self.kinds, wf, state, remaining_ms, yield_after_ms,
                               kept).run_branch(message)
            kind = None if wf is None else self.kinds.of_step(wf, message.step)
            if wf is None or problem is not None or kind is None:
                return Outcome("stale", eid, message.step, f"branch {message.branch}: not a step of this definition")
            return kind.run_branch(StepRun(self.life, self.kinds, wf, state, remaining_ms, yield_after_ms), message)
        if (message.step, message.version) != (e.current_step, e.version):
            return Outcome("stale", eid, message.step, f"execution is at step {e.current_step} v{e.version}")
        if e.is_claimed:
            # Only a message sent for an unclaimed step carries the claim's version: this one was
            # re-sent by hand or the store was edited. The claim's lease decides; never run twice.
            return Outcome("stale", eid, message.step, "an attempt holds the step")
        if problem is not None:
            return self._fail_undeployed(state, problem)
        if wf.code is None:
            run = StepRun(self.life, self.kinds, wf, state, remaining_ms, yield_after_ms)
        else:
            run = CodeRun(self.life, self.kinds, wf, state, remaining_ms, yield_after_ms,
                          kept)
        if run.data is None:
            return run.fail(run.corrupt_error)
        if e.timer is not Timer.LEASE:
            assert e.next_wake_at is not None
            wait_s = (e.next_wake_at - self.clock.now()).total_seconds()
            if wait_s > self.settings.early_tolerance_s:
                self.life.send_at(e, e.next_wake_at)
                return Outcome("early", eid, e.current_step, f"due in {wait_s:.1f} s")
        if not isinstance(run, CodeRun):
            return run.loop()
        try:
            outcome = run.loop()
        except BaseException:
            self.prefixes.drop(eid)
            raise
        self.prefixes.keep(eid, run.prefix())
        return outcome

    def _load(self, message: StepMessage) -> tuple[ExecutionState | None, Prefix | None]:
        """The execution's state for this delivery (this run's items only): from its checkpoint, from the
        end of the code-first history this process kept (``durable/prefix.py``), or all of it."""
        eid = message.execution_id
        since = message.checkpoint if message.checkpoint is not None else self.prefixes.since(eid)
        state = self.store.load_state(eid, since=since)
        if state is None or since is None or message.checkpoint is not None:
            if state is None:
                self.prefixes.drop(eid)
            return (None if state is None else this_run_state(state)), None
        state = this_run_state(state)
        joined = self.prefixes.join(state)
        if joined is not None:
            return joined
        if state.execution.status.is_terminal:  # nothing reads its history (it read from ``records_from`` on)
            return state, None
        state = self.store.load_state(eid)  # the kept records may have changed: read the whole history
        return (None if state is None else this_run_state(state)), None

    # -- guards -----------------------------------------------------------------------------------
    def _definition(self, e: Execution) -> tuple[WorkflowDef, None] | tuple[WorkflowDef | None, ErrorInfo]:
        return resolve(self.registry, e)  # the pinned version, judged by what it still has to run

    def _fail_undeployed(self, state: ExecutionState, error: ErrorInfo) -> Outcome:
        """End an execution this worker cannot run (its definition is not deployed, or changed): FAILED,
        without compensating (nothing here can say what its steps were). A cancel requested while its last
        attempt ran ends it CANCELLED instead when nothing it did needs undoing; otherwise the request stays
        on the FAILED item, and a redrive (once its definition is deployed again) finishes the cancel."""
        from . import transitions

        e, now, life = state.execution, self.clock.now(), self.life
        grace_s = life.finalize_grace_s(e)
        records = state.records
        if e.cancel_requested and state.records_from is not None:  # read from a checkpoint: what came before counts
            records = this_run(e, self.store.history(e.execution_id), "finished_at")
        new = self.kinds.ending.cancel_undeployed(records, e, now, life.retention, grace_s) \
            if e.cancel_requested else None
        if new is None:
            if e.cancel_requested:
                error = error.model_copy(update={"message": (
                    f"{error.message}. A cancel was requested (by {e.cancelled_by}) while its last attempt ran, and "
                    "completed steps need undoing: a redrive finishes that cancel, undoing them, instead of "
                    "running on")})
            new = transitions.failed(e, now, error, life.retention, grace_s, keep_cancel=True)
        try:
            new = life.commit(e, new)
        except Exception as exc:  # lost the race (or the item went): nothing changed
            return Outcome("conflict", e.execution_id, e.current_step, str(exc))
        if new.status is Status.CANCELLED:
            self.metrics.add_metric("ExecutionsCancelled", "Count", 1)
            log.warning("execution cancelled", extra={**log_fields(new), "error_code": error.code,
                                                      "error": error.message})
        else:
            self.metrics.add_metric("ExecutionsFailed", "Count", 1)
            log.error("execution failed", extra={**log_fields(new), "error_code": error.code, "error": error.message})
        life.finalize(new)
        return Outcome(new.status.value.lower(), e.execution_id, e.current_step, error.code)

__all__ = ["Engine", "InvalidInputError", "Outcome", "StartResult", "StepRun", "check_fits", "context_of",
           "failure_notice", "rebuild_context"]
