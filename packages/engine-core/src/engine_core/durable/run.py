"""One delivery of a code-first execution (``CodeRun``): the step run of ``step_run.py``, driven by the
function instead of a step list.

The function runs from the top. Each durable call it makes is a position (``replay.Replay``): a recorded
one returns its value; the first one without a record runs here through its step kind, exactly as a
step-list step (claim, lease, body under its budget, record written once, retries, sleeps and waits
that suspend the execution), and the function goes on in the same invocation.

One difference in the writes: a step-list delivery knows the next step when it settles one, so the
write that moves on also claims the next. Here the next position is known only when the function calls
it, so the settled step's record is written at once (its result is durable before the function sees
it) and the write that moves on waits for the next call (``at``) or the return (``_return``), which it
then claims or completes in the same write. A step costs the same two writes as in a step list; a crash
in between leaves the recorded result, which the next delivery's replay returns without running the
step again, and that delivery moves on.
"""

from __future__ import annotations

import logging
import time
from typing import Any, cast

from .. import callbacks, codec, faults, transitions
from ..errors import InsufficientTimeError, NonSerializableResultError, ResultTooLargeError
from ..model import ErrorInfo, Execution, ExecutionState, StepMessage, StepRecord, StepStatus
from ..outcome import Outcome, log_fields
from ..settings import lease_seconds
from ..step_run import StepRun
from ..steps import StepDef
from ..versions import moved_by_redrive
from . import _current
from .fit import UNDO_REMEDY, never_fits, undo_never_fits, unfit_call
from .overrun import CodeOutOfTime, CodeOverran, held, released, went_on
from .plan import RETURN_KIND, CodeSteps, code_plan, describe
from .prefix import Kept, Prefix, prefix_of
from .replay import EngineRaised, NondeterministicReplay, RefusedCall, Replay, Stop, Suspend, value_of
from .replay import where as _where

log = logging.getLogger("engine_core")
_NOTHING = object()
_AS_IT_WAS = "once the function is as it was, a redrive goes on undoing them"


class CodeRun(StepRun):
    """One delivery's work on a code-first execution (see the module docstring)."""

    # Own attributes in slots: the instance dict keeps StepRun's alone, within the 30 names CPython keeps inline and
    # specialized (tests/unit/test_run_layout.py). StepRun's methods are called by name: no super() object per step.
    __slots__ = ("code", "kept", "values", "pending", "settled", "_described", "reached_s", "settled_value", "plan",
                 "_known", "_here", "_touched_kept")

    def __init__(self, life: Any, kinds: Any, wf: Any, state: ExecutionState, remaining_ms: Any,
                 yield_after_ms: Any, kept: Prefix | None = None):
        self.code = wf
        self.kept = kept
        """What this process kept of the history, which ``state.records`` begin with (``prefix.py``)."""
        self.values: dict[int, Kept] = {} if kept is None else kept.values
        """Values decoded from records, by position (``replay.Replay._value``), kept with the prefix."""
        self.pending = False
        """The current position settled in this delivery; the write that moves on waits for the next call."""
        self.settled: StepRecord | None = None
        self._described: tuple[StepDef, Any] | None = None
        self.reached_s: float | None = None  # the own code of the replay to a fan-out a branch's delivery makes
        self.settled_value: Any = _NOTHING
        """A step's value as the codec hands it on (no second decode of the record just written)."""
        super().__init__(life, kinds, code_plan(wf, state.execution, list(state.records)), state, remaining_ms,
                         yield_after_ms)
        self.plan = cast(CodeSteps, self.wf.steps)
        """This execution's positions (``wf.steps``, which no one replaces during a delivery)."""
        self._known = self.execution
        """The execution item as this delivery read it or last wrote it."""
        self._here: StepDef | None = None
        """The position ``at`` was last asked to run (what ``step`` is while the execution is there)."""
        self._touched_kept = False
        """A record of a kept position was written in this delivery (a compensation's record counts)."""
        if kept is not None and not (len(self.records) >= kept.upto and self.records[0] is kept.records[0]
                                     and self.records[kept.upto - 1] is kept.records[-1]):
            self.kept = None  # the history was read again: nothing is known of where the kept records are

    @property
    def step(self) -> StepDef:
        """The current position: the one ``at`` runs, else the one the function called here, else what is
        known of it."""
        i, d = self.execution.current_step, self._here
        if d is not None and d.index == i:
            return d
        return self.plan.called(i) or self.plan[i]

    @property
    def timeout_s(self) -> float:
        return self._budget(self.step)

    def _budget(self, d: StepDef) -> float:  # position ``d``'s budget, from ``d`` itself (no lookup)
        return self.life.budget(self.wf, d)

    def prefix(self) -> Prefix | None:
        """What to keep of the history for this execution's next delivery in this process (``prefix.py``):
        nothing unless the execution is as this delivery last read or wrote it (a lost write leaves the
        records of positions it passed unknown here)."""
        if self.execution is not self._known or self.corrupt_error is not None or self._records_from is not None:
            return None
        return prefix_of(self.execution, self.records, self.values, None if self._touched_kept else self.kept)

    def declared_model(self, event: str) -> type | None:  # what the decorator's ``events=`` declares, if any
        return (self.code.code.events or {}).get(event)

    def kept_prefix(self) -> Prefix | None:
        """The kept prefix the records still begin with, unchanged (None: read them all, or wrote one of them)."""
        return None if self._touched_kept else self.kept

    def _count_tail(self) -> None:
        """The context is the input alone, never checkpointed: the history's results do not add to it."""
        self.checkpoint_bytes = self.context_bound = len(self.input_blob.encode("utf-8"))
        self.tail_records, self.tail_bytes = 0, 0

    def _context(self, state: ExecutionState, upto: int) -> dict[str, Any]:
        data = codec.decode(state.input_blob)
        if not isinstance(data, dict):
            raise ValueError("the stored input is not an object")
        return data

    def _argument(self) -> Any:
        model = self.code.input_model
        # The stored input is the validated model's fields by name (``validated.storable``): read them by name,
        # whatever aliases the model declares for the start's own input.
        return model.model_validate(self.data, by_name=True) if self.code.code.model_argument and model is not None \
            else self.data

    def _held(self, replay: Replay) -> Any:
        return held(replay, self.remaining_ms, self.life.clock, self.settings.time_margin_ms,
                    self.settings.function_timeout_s)

    # -- driving the function --------------------------------------------------------------------------
    def loop(self) -> Outcome:
        if self.execution.compensating:
            outcome = self._compensate()
            while outcome.kind == "chained":  # the replay to the failed position named every earlier undo
                outcome = self.kinds.compensating.run(self)
            return self._finished(outcome)
        replay = Replay(self)
        outcome: Outcome | None = None
        bound = _current.RUN.set(replay)
        try:
            with self._held(replay):
                value = self.code.code.fn(self._argument())
        except Suspend as end:
            outcome = end.outcome
        except CodeOutOfTime as exc:
            outcome = went_on(self, exc)
        except CodeOverran as exc:
            log.warning("workflow function overran its delivery", exc_info=True, extra=log_fields(self.execution))
            outcome = self._code_failed("workflow_error", f"{exc}{_where(exc)}")
        except EngineRaised as raised:
            raise raised.error from None
        except NondeterministicReplay as exc:
            outcome = self._code_failed("nondeterministic_replay", str(exc))
        except SystemExit as exc:  # sys.exit() in the function: its failure, not the worker's end (as in a step)
            log.warning("workflow function called sys.exit()", exc_info=True, extra=log_fields(self.execution))
            outcome = self._code_failed("workflow_error", f"SystemExit: {exc.code}; the workflow function called "
                                        f"sys.exit(){_where(exc)}: Loom fails the execution and the worker goes on. "
                                        "Raise an exception instead")
        except Exception as exc:
            if replay.broken is not None:  # the function swallowed the mismatch and failed otherwise
                outcome = self._code_failed("nondeterministic_replay", str(replay.broken))
            elif isinstance(exc, RefusedCall):  # a call no delivery could run: its own code, as in a step list
                outcome = self._code_failed(exc.code, f"{exc.problem}{_where(exc)}. {exc.advice}")
            else:
                log.warning("workflow function raised outside a step", exc_info=True, extra=log_fields(self.execution))
                outcome = self._code_failed("workflow_error", f"{type(exc).__qualname__}: {exc}{_where(exc)}")
        finally:
            _current.RUN.reset(bound)
        if outcome is None:
            if replay.closed is not None:  # it caught its own delivery's end and returned
                outcome = replay.closed
            elif replay.broken is not None:  # it swallowed the mismatch and returned
                outcome = self._code_failed("nondeterministic_replay", str(replay.broken))
            else:
                try:
                    replay.returned()
                except NondeterministicReplay as exc:
                    outcome = self._code_failed("nondeterministic_replay", str(exc))
                else:
                    outcome = self._return(value, replay.position)
        return self._finished(outcome)

    def reach(self, position: int) -> StepDef | None:
        """Replay the function up to ``position`` (nothing runs: every earlier call must be recorded) and
        return what it calls there; None when it does not get there the same way. Held to the delivery's
        deadline: ``CodeOverran`` (or ``CodeOutOfTime``, begun late) when the function's own code runs at it."""
        replay = Replay(self, stop_at=position)
        self._here = None  # the replay puts the positions it reaches: ``step`` looks them up
        bound = _current.RUN.set(replay)
        try:
            with self._held(replay):
                self.code.code.fn(self._argument())
        except Stop:
            self.reached_s = replay.own_code_s()
        except BaseException as exc:  # noqa: BLE001 - a replay that does not reach it, for any reason
            if not isinstance(exc, (Exception, SystemExit, NondeterministicReplay, Suspend, EngineRaised)):
                raise
            log.warning("replay did not reach the position", extra={**log_fields(self.execution),
                                                                    "error": f"{type(exc).__name__}: {exc}"})
        finally:
            _current.RUN.reset(bound)
        return self.plan.called(position)

    def at(self, d: StepDef) -> Any:
        """Run the first position without a record (``d``) here, and return its value."""
        self._here = d
        e = self.execution
        if d.index == e.current_step + 1 and self._settled_here(e):
            outcome = self.move_on(d)
            if outcome is not None:
                raise Suspend(outcome)
            e = self.execution
        if d.index != e.current_step:
            raise Suspend(self.fail(ErrorInfo(code="corrupt_state", message=(
                f"the function reached position {d.index} {d.name!r} with every earlier call recorded, but the "
                f"execution is at position {e.current_step}: its history is missing records"))))
        cap = self._cap_exceeded(e)
        if cap is not None:  # a safety cap: nothing undone, a redrive (once it is raised) goes on from here
            raise Suspend(self.fail(cap, compensate=False))
        if not e.cancel_requested and (d.timeout_s is not None or self.wf.step_timeout_s):
            if (unfit := unfit_call(self, d)) is not None:  # a derived default budget always fits the timeout
                raise Suspend(self.fail(unfit))
        kind = self.kinds.kinds[d.kind.kind]
        self.settled, self.settled_value = None, _NOTHING
        outcome = kind.finish_cancel(self) if e.cancel_requested else kind.run(self)
        if outcome.kind == "cancel_requested":
            outcome = self.finish_cancel(undo_current=self.undo_current())
        if outcome.kind != "chained":
            raise Suspend(outcome)
        if self.settled_value is not _NOTHING:
            return self.settled_value
        return None if self.settled is None else value_of(self.settled)

    def branch_room(self, timeout_s: float) -> ErrorInfo | None:  # each branch's delivery replays to the fan-out
        return never_fits(self, timeout_s, branches=True)

    def check_time(self, timeout_s: float) -> None:
        """As a step list's, unless no delivery has the time (``fit.never_fits``): then the execution fails here."""
        try:
            StepRun.check_time(self, timeout_s)
        except InsufficientTimeError:
            if (unfit := never_fits(self, timeout_s)) is None:
                raise
            raise Suspend(self.fail(unfit)) from None

    def put(self, record: StepRecord) -> Outcome | None:
        kept = self.kept
        if kept is not None and self._positions is None and not self._touched_kept and record.step_index >= kept.upto:
            # The kept records are positions 0..upto-1, in order, at the front of the list: only the rest
            # is looked up (a record of a kept position rebuilds the whole lookup).
            self._positions = {(r.step_index, r.kind == "compensation"): i
                               for i, r in enumerate(self.records[kept.upto:], kept.upto) if isinstance(r, StepRecord)}
        elif kept is not None and record.step_index < kept.upto and not self._touched_kept:
            self._touched_kept, self._positions = True, None
        return StepRun.put(self, record)

    def _settled_here(self, e: Execution) -> bool:
        if self.pending:
            return True
        after = self.kept.upto if self.kept is not None and not self._touched_kept else 0  # kept: positions below
        r = next((r for r in self.records[after:] if isinstance(r, StepRecord) and r.step_index == e.current_step
                  and r.kind not in ("compensation", "sleep", RETURN_KIND)), None)
        return r is not None and r.status is StepStatus.SUCCEEDED

    # -- moving on ------------------------------------------------------------------------------------
    def _advance(self, checkpoint: int | None = None) -> Outcome:
        """The current position settled: the write that moves on waits for the function's next call."""
        self.pending = True
        return Outcome("chained", self.execution.execution_id, self.execution.current_step)

    def move_on(self, d: StepDef | None) -> Outcome | None:
        """Move past the settled current position to ``d`` (the function's next call), claiming it in the same write
        when it runs here; without ``d``, only move on (the function failed after it). None: go on here."""
        e = self.execution
        now, nxt = self.clock.now(), e.current_step + 1
        budget = self._budget(d) if d is not None else self.life.timeout_s(self.wf, nxt) if nxt < len(self.plan) else 0.0
        chain = d is not None and self._may_chain_to(d, budget)
        expiry = deadline = None
        if chain and d is not None and d.kind.needs_invocation_time():
            deadline = self.deadline()
            expiry = transitions.claim_expiry(now, budget, self.life.margin_s, deadline)
        new = transitions.advanced(e, now, nxt + 1, self.retention, lease_s=lease_seconds(self.settings, budget),
                                   slack_s=self.settings.slack_s, claim_expiry_at=expiry, deadline=deadline,
                                   code_step=None if d is None else self._describe(d))
        if d is None:  # the function never called the next position: nothing describes it (a redrive's replay
            new = new.model_copy(update={"code_step": None})  # must not compare its call there with the last one)
        outcome = self.commit(new, described=d is not None)
        self.pending = False
        if outcome is not None:
            if outcome.kind == "cancel_requested":  # the step settled after a cancel: it is undone too
                return self.finish_cancel(undo_current=True)
            return outcome
        faults.point("worker.after_checkpoint", execution_id=e.execution_id, step=e.current_step)
        if d is None or chain:
            return None
        self.send()
        faults.point("worker.after_enqueue", execution_id=e.execution_id, step=e.current_step)
        return Outcome("advanced", e.execution_id, e.current_step)

    def _may_chain_to(self, d: StepDef, budget: float) -> bool:
        settings = self.settings
        if self.steps_run >= settings.max_chain_steps or d.index >= settings.max_steps \
                or self.execution.total_attempts + 1 >= settings.max_total_attempts:
            return False
        if self.yield_after_ms is not None and self._elapsed_ms() >= self.yield_after_ms:
            return False
        if not d.kind.needs_invocation_time() or self.remaining_ms is None:
            return True
        return self.remaining_ms() >= budget * 1000 + settings.time_margin_ms

    def _elapsed_ms(self) -> float:
        return time.monotonic() * 1000 - self.started_ms

    def _describe(self, d: StepDef) -> str:
        if self._described is None or self._described[0] is not d:
            self._described = (d, describe(d))
        return self._described[1]

    def commit(self, new: Execution, described: bool = False) -> Outcome | None:
        """Every write names the position the execution is at, as the function called it (``described``:
        ``new`` already does)."""
        if not described and not new.status.is_terminal and not new.compensating:
            d = self.plan.called(new.current_step)
            if d is not None:
                described = self._describe(d)
                if new.code_step != described:
                    new = new.model_copy(update={"code_step": described})
        outcome = StepRun.commit(self, new)
        if outcome is None:
            self._known = self.execution
        return outcome

    # -- what a step records --------------------------------------------------------------------------
    def succeed(self, result: Any) -> Outcome:
        e, step = self.execution, self.step
        try:
            blob, value = codec.roundtrip(result, "result")
            self.check_size(f"result of step {step.name!r}", blob)
        except (NonSerializableResultError, ResultTooLargeError) as exc:
            return self.fail(self.error(exc.code, str(exc)))
        self.settled_value = value
        now = self.clock.now()
        record = StepRecord(step_index=step.index, name=step.name, status=StepStatus.SUCCEEDED, attempts=e.attempt,
                            version=e.version, started_at=e.attempt_started_at, finished_at=now, result_blob=blob,
                            expires_at=self.item_expiry(now), run=e.run, undo=step.compensate is not None)
        # What later replays in this process hand out copies of: a private copy taken before the function gets
        # ``value`` (and may change it), so no replay decodes this record. Used only while this very record
        # is the position's (``Replay._value``).
        copy = codec.copier(value)
        self.values[step.index] = (record, value if copy is None else copy(value), copy, step.name)
        return self.settle(record, self.data or {}, self.context_bound)

    def merge(self, result: dict[str, Any], what: str) -> tuple[str, dict[str, Any], int]:
        blob, _ = codec.roundtrip(result, "result")
        self.check_size(what, blob)
        return blob, self.data or {}, self.context_bound

    def settle(self, record: StepRecord, merged: dict[str, Any], bound: int) -> Outcome:
        self.settled = record
        return StepRun.settle(self, record, merged, bound)

    def _with_checkpoint(self, record: StepRecord, merged: dict[str, Any]) -> StepRecord:
        return record  # a replay needs every recorded value: the context is the input, never checkpointed

    def callback_token(self, event: str) -> str:
        e, d = self.execution, self.plan.called(self.execution.current_step)
        if d is None or getattr(d, "callback_event", None) != event:
            raise ValueError(f"a callback token for {event!r} is issued only to wait_for_callback({event!r})'s "
                             "submit function")
        if not e.callback_secret:
            raise RuntimeError(f"execution {e.execution_id} started before callback tokens existed")
        return callbacks.issue(e.callback_secret, e.execution_id, e.current_step + 1)

    # -- ending -----------------------------------------------------------------------------------------
    def _return(self, value: Any, positions: int) -> Outcome:
        """The function returned ``value`` after ``positions`` calls: its record (unless None), then
        COMPLETED in the write that also moves past the last step."""
        e = self.execution
        if value is not None:
            try:
                blob, _ = codec.roundtrip(value, "return value")
                self.check_size("the function's return value", blob)
            except (NonSerializableResultError, ResultTooLargeError) as exc:
                return self._code_failed(exc.code, str(exc))
            now = self.clock.now()
            outcome = self.put(StepRecord(step_index=positions, name="return", status=StepStatus.SUCCEEDED,
                                          attempts=0, version=e.version, started_at=now, finished_at=now,
                                          result_blob=blob, expires_at=self.item_expiry(now), kind=RETURN_KIND,
                                          run=e.run))
            if outcome is not None:
                return outcome
        now = self.clock.now()
        done_now = (not self.life.events.enabled and e.stamped_until is not None
                    and e.stamped_until >= now + self.retention)
        new = transitions.returned(e, now, positions, self.retention, finalized=done_now,
                                   finalize_grace_s=self.finalize_grace_s())
        outcome = self.commit(new)
        self.pending = False
        if outcome is not None:
            if outcome.kind == "cancel_requested":
                return self.finish_cancel(undo_current=positions > 0)
            return outcome
        new = self.execution
        self.metric("ExecutionsCompleted", "Count", 1)
        log.info("execution completed", extra=log_fields(new))
        if not new.finalized:
            self.life.finalize(new)
        return Outcome("completed", e.execution_id, positions)

    def _code_failed(self, code: str, message: str) -> Outcome:
        """The function itself failed (outside any step): moved past a step it settled, then failed, with
        its completed steps compensated (not for a replay that went another way: what ran is unknown)."""
        if self.pending:
            outcome = self.move_on(None)
            if outcome is not None:
                return outcome
        e = self.execution
        if e.is_claimed:  # pragma: no cover - a claim always settles or fails through its kind first
            return Outcome("conflict", e.execution_id, e.current_step, "a step still holds the execution")
        if code == "nondeterministic_replay" and (moved := moved_by_redrive(self.life.store, e)) is not None:
            message += (f". A redrive moved it onto version {e.workflow_version} (--to-version) from version {moved}, "
                        f"which calls otherwise than its history: redrive it --to-version {moved}")
        return self.fail(ErrorInfo(code=code, message=message))

    # -- compensating -----------------------------------------------------------------------------------
    def _compensate(self) -> Outcome:
        """Undo the completed steps: replay the function to its failed position to learn each step's
        compensation (with the arguments it was called with), then run the current one."""
        e = self.execution
        failed_at = e.failed_step if e.failed_step is not None else e.current_step
        replay = Replay(self, stop_at=failed_at)
        self._here = None
        bound = _current.RUN.set(replay)
        problem: str | None = None
        code, remedy = "nondeterministic_replay", _AS_IT_WAS
        try:
            with self._held(replay):
                self.code.code.fn(self._argument())
        except Stop:
            pass
        except CodeOutOfTime as exc:
            raise released(exc, self) from None
        except CodeOverran as exc:  # the replay would hang every delivery that undoes this execution
            problem = (f"the replay to position {failed_at}, which says what to undo, was still in the function's own "
                       f"code between durable calls at its delivery's deadline{_where(exc)}")
            code = "workflow_error"
            remedy = "move that code into a step() and deploy it; then a redrive goes on undoing them"
        except NondeterministicReplay as exc:
            problem = str(exc)
        except (Suspend, EngineRaised) as exc:  # pragma: no cover - a replay to a recorded position runs nothing
            problem = f"the replay to position {failed_at} did not get there: {exc}"
        except (Exception, SystemExit):
            pass  # the function failed after its last call (workflow_error): every call was replayed
        finally:
            _current.RUN.reset(bound)
        d = self.plan.called(e.current_step)
        if problem is None and (d is None or d.compensate is None):
            problem = (f"the replay did not reach position {e.current_step} with its compensation: the function no "
                       "longer calls it the same way")
        if problem is None and (late := undo_never_fits(self, replay)) is not None:
            problem, code, remedy = late, "step_timeout_too_long", UNDO_REMEDY
        if problem is not None:
            return self._undo_blocked(problem, code, remedy)
        return self.kinds.compensating.run(self)

    def _undo_blocked(self, problem: str, code: str = "nondeterministic_replay", remedy: str = _AS_IT_WAS) -> Outcome:
        """The replay that says what to undo went another way (a deploy changed the function), or was stuck in
        the function's own code at the deadline (``code`` and ``remedy`` say so): no undo ran and none failed,
        so the execution ends FAILED, still compensating, its cancel still requested (as a step list whose
        definition changed while it compensated): once mended, a redrive goes on undoing. COMPENSATION_FAILED
        would have no way back."""
        e = self.execution
        error = ErrorInfo(code=code, step_index=e.current_step, message=(
            f"{problem}. It was undoing its completed steps{' for a cancel' if e.cancelled_by else ''}, and nothing "
            f"was undone at this step: {remedy}"))
        new = transitions.failed(e, self.clock.now(), error, self.retention, self.finalize_grace_s(), keep_cancel=True)
        return self.end(new, "failed", error.code, metric="ExecutionsFailed")

    # -- branches ---------------------------------------------------------------------------------------
    def run_branch(self, message: StepMessage) -> Outcome:
        e = self.execution
        if e.compensating or e.current_step != message.step or e.status.is_terminal:
            return Outcome("stale", e.execution_id, message.step,
                           f"branch {message.branch}: the execution is at step {e.current_step} ({e.status.value})")
        try:
            d = self.reach(message.step)
        except CodeOutOfTime as exc:
            raise released(exc, self) from None
        except CodeOverran as exc:  # nothing written: the step's own delivery, held as well, fails it there
            log.warning("workflow function overran a branch's delivery", exc_info=True, extra=log_fields(e))
            return Outcome("stale", e.execution_id, message.step, f"branch {message.branch}: not run, the replay to "
                           f"its fan-out ran past its delivery: {exc}{_where(exc)}; the step's own delivery fails it")
        if d is None or d.kind.kind != "fanout":
            return Outcome("stale", e.execution_id, message.step, f"branch {message.branch}: no parallel or map there now")
        return self.kinds.kinds["fanout"].run_branch(self, message)
