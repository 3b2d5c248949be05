"""One delivery's run of a code-first function: which durable call is at which position, what the
history recorded there, and whether the function still calls what it called before.

``Replay.call`` numbers each durable call (0, 1, 2, ...), checks it against the record at that position
(name and kind: anything else is ``nondeterministic_replay``), returns a recorded value, and hands the
first position without one to the run (``run.at``), which runs it through its step kind. The run's
control flow reaches the user's function only as exceptions it cannot catch by accident
(``BaseException``): ``Suspend`` (the delivery ends here: a sleep, a wait, a retry, a hand-off, a
failure), ``Stop`` (a replay that only had to reach a position), ``NondeterministicReplay``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from threading import get_ident
from time import monotonic
from typing import Any, Protocol

from .. import codec
from ..model import Execution, StepRecord, StepStatus
from ..outcome import Outcome
from ..steps import StepDef
from .plan import RETURN_KIND, CodeStepDef, CodeSteps
from .prefix import Kept, Prefix, Ready, Task, index_records

_ENGINE = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


def where(exc: BaseException) -> str:
    """The line of the workflow's code the exception came from: its innermost frame outside engine-core
    (a durable call that refused its arguments points at the call, not at the refusal)."""
    tb, found, innermost = exc.__traceback__, None, None
    while tb is not None:
        innermost = tb
        if not tb.tb_frame.f_code.co_filename.startswith(_ENGINE):
            found = tb
        tb = tb.tb_next
    found = found or innermost
    return f" (at {found.tb_frame.f_code.co_filename}:{found.tb_lineno})" if found is not None else ""


NOT_REPLAYED = object()
"""``Replay.replayed``: the call is not one the history completed as it is; build it and ``call`` it."""


class Suspend(BaseException):
    """The delivery ends with ``outcome``; the function is unwound."""

    def __init__(self, outcome: Outcome):
        super().__init__(outcome.kind)
        self.outcome = outcome


class Stop(BaseException):
    """A replay that only had to reach a position reached it."""


class NondeterministicReplay(BaseException):
    """The function called something other than what the history recorded at a position."""


class RefusedCall(ValueError):
    """A durable call whose arguments no delivery could run (a map over more than 1,000 items, a step timeout
    over Lambda's ceiling): the execution fails with ``code`` (as a step list's step with them would), not
    ``workflow_error``. A ValueError, as the function may catch it."""

    def __init__(self, code: str, problem: str, advice: str):
        super().__init__(f"{problem}. {advice}")
        self.code, self.problem, self.advice = code, problem, advice


class EngineRaised(BaseException):
    """An engine error inside a durable call (for example: too little time left to start a step, which
    asks for redelivery). Carried through the function unchanged, then raised again."""

    def __init__(self, error: BaseException):
        super().__init__(str(error))
        self.error = error


class CodeRunOps(Protocol):
    execution: Execution
    records: list[Any]
    values: dict[int, Kept]

    def kept_prefix(self) -> Prefix | None: ...

    def now(self) -> Any: ...

    @property
    def plan(self) -> CodeSteps: ...

    def at(self, d: StepDef) -> Any: ...

    def declared_model(self, event: str) -> type | None: ...


def value_of(r: StepRecord) -> Any:
    """What a durable call returns for its record: a step's result, a wait's event data, a parallel or map
    step's list of results; a sleep returns None."""
    if r.result_blob is None or r.kind == "sleep":
        return None
    value = codec.decode(r.result_blob)
    if r.kind in ("event", "fanout"):
        return value[r.name] if isinstance(value, dict) else None
    return value


def _what(kind: str, name: str) -> str:
    return {"task": "step", "sleep": "sleep", "event": "wait_for_event", "fanout": "parallel/map",
            RETURN_KIND: "return"}.get(kind, kind) + f"({name!r})"


class Replay:
    """The positions of one run of the function (see the module docstring)."""

    def __init__(self, run: CodeRunOps, stop_at: int | None = None):
        self.run, self.stop_at = run, stop_at
        self.thread = get_ident()
        """The function's thread: a durable call from any other is refused (``api._refuse_thread``)."""
        self.position = 0
        self.closed: Outcome | None = None
        self.in_engine = False
        """True while a durable call runs through the engine (``run.at``): no ``CodeOverran`` then."""
        self.body: Any = None
        """The step context while one of this run's step bodies runs (``_current.call_in_body``): a durable call
        made then is a plain call."""
        self.began = monotonic()
        """When this run of the function began (``time.monotonic``): its first stretch of own code starts here."""
        self.engine_left_at: float | None = None
        """When the last durable call this run made through the engine returned (``time.monotonic``): the
        function's own code since then is one stretch (``overrun.CodeDeadline``)."""
        self.broken: NondeterministicReplay | None = None
        self.values = run.values
        self.recorded: dict[int, StepRecord] = {}
        """The record of each position after the kept prefix (``record_at`` looks the prefix's up in place)."""
        self.kept: tuple[StepRecord, ...] = ()
        """The kept prefix's records: the record of position ``i`` is ``kept[i]``."""
        self.ready: dict[int, Ready] = {}
        """The positions ``replayed`` hands out (``prefix.index_records``). Empty in a replay to a position,
        and emptied once the run breaks or ends (``broken``, ``closed``): every later call goes through ``call``.
        Nothing changes the table once built: a delivery with nothing after its kept prefix shares the prefix's."""
        self.tasks: dict[int, Task] = {}
        """The kept prefix's ``tasks`` (``step()`` replays those with one lookup), emptied with ``ready``."""
        kept, records = run.kept_prefix(), run.records
        if kept is not None:  # records begin with the kept ones, positions 0..upto-1 in order, as they were
            self.kept = kept.records
            records = records[kept.upto:]
            if stop_at is None:
                self.ready = dict(kept.ready) if records else kept.ready
                self.tasks = kept.tasks
        if records:
            index_records(records, self.recorded, self.ready if stop_at is None else None)

    def record_at(self, p: int) -> StepRecord | None:
        """The history's record of position ``p`` (its latest; compensations aside), if any."""
        r = self.recorded.get(p)
        if r is None and p < len(self.kept):
            return self.kept[p]
        return r

    def execution_id(self) -> str:
        return self.run.execution.execution_id

    def now(self) -> Any:
        """The engine's clock (a test's manual clock, else the system's)."""
        return self.run.now()

    def replayed(self, name: str, kind: str) -> Any:
        """The common replay, before the call is built: the next position completed as the call ``name``
        of ``kind``, and its value; else ``NOT_REPLAYED`` (nothing happened: ``call`` decides)."""
        p = self.position
        r = self.ready.get(p)
        if r is None or r.name != name or r.kind != kind:
            return NOT_REPLAYED
        self.position = p + 1
        return self._value(p, r)

    def own_code_s(self) -> float:
        """How long the function's own code has run since the last durable call the engine ran, or since this run
        of the function began: one stretch (``overrun.CodeDeadline``, ``fit.never_fits``)."""
        return monotonic() - (self.engine_left_at or self.began)

    def declared_model(self, event: str) -> type | None:
        """The model the workflow's ``events=`` declares for ``event`` (None: none, or undeclared)."""
        return self.run.declared_model(event)

    def call(self, name: str, spec: Any, retry: Any = None, timeout_s: float | None = None,
             compensate: Callable[..., Any] | None = None, callback_event: str | None = None) -> Any:
        """The durable call ``name`` of ``spec`` (``TaskSpec``, ``SleepSpec``, ``WaitSpec``, ``FanOutSpec``)
        at the next position: its recorded value, or what running it here returns."""
        if self.broken is not None:
            raise self.broken
        if self.closed is not None:  # the function caught the delivery's end and went on: end it again
            raise Suspend(self.closed)
        p, kind = self.position, spec.kind
        self.position += 1
        r = self.record_at(p)
        if r is not None and self.stop_at is None and r.status is StepStatus.SUCCEEDED and r.name == name \
                and r.kind == kind and r.kind != "sleep":  # the common replay: a completed call, as recorded
            return self._value(p, r)
        e = self.run.execution
        if r is not None and (r.name != name or r.kind != kind):
            self._mismatch(p, _what(kind, name), _what(r.kind, r.name), "the history recorded")
        if r is None and p == e.current_step and e.code_step is not None and not e.compensating:
            before = e.code_position
            if before is not None and (before.name, before.kind) != (name, kind):
                self._mismatch(p, _what(kind, name), _what(before.kind, before.name),
                               "an earlier delivery called")
        if self.stop_at is not None:  # a replay to a position keeps every call (their compensations, a branch's body)
            self.run.plan.put(CodeStepDef(p, name, spec, retry, timeout_s, compensate, callback_event))
            if p >= self.stop_at:
                raise Stop()
        # A sleep's record is written when it begins: it is done once the execution moved past it (a replay
        # to a position, ``stop_at``, only ever goes through positions that completed).
        if r is not None and r.status is StepStatus.SUCCEEDED and (r.kind != "sleep" or p < e.current_step
                                                                   or self.stop_at is not None):
            return self._value(p, r)
        if self.stop_at is not None:
            self._mismatch(p, _what(kind, name), "nothing completed", "the history has")
        called = CodeStepDef(p, name, spec, retry, timeout_s, compensate, callback_event)
        self.run.plan.put(called)
        self.in_engine = True
        try:
            return self.run.at(called)
        except Suspend as end:
            self.closed = end.outcome
            self.ready = self.tasks = {}
            raise
        except (Stop, NondeterministicReplay, EngineRaised):
            raise
        except Exception as exc:
            raise EngineRaised(exc) from exc
        finally:
            self.in_engine = False
            self.engine_left_at = monotonic()

    def _value(self, p: int, r: StepRecord) -> Any:
        """The recorded value at ``p``: decoded once per record (kept by position, with the record it came
        from), and a fresh copy handed to the function on every replay (``api.step`` inlines it)."""
        kept = self.values.get(p)
        if kept is None or kept[0] is not r:
            kept = self._keep(p, r)
        copy = kept[2]
        return kept[1] if copy is None else copy(kept[1])

    def _keep(self, p: int, r: StepRecord) -> Kept:
        value = value_of(r)
        kept = self.values[p] = (r, value, codec.copier(value), r.name)
        return kept

    def returned(self) -> None:
        """The function returned after ``position`` calls: the history must not hold a call after them."""
        p, e = self.position, self.run.execution
        later = sorted([i for i, r in self.recorded.items() if i >= p and r.kind != RETURN_KIND]
                       + [i for i in range(p, len(self.kept)) if self.kept[i].kind != RETURN_KIND])
        if later:
            r = self.record_at(later[0])
            assert r is not None
            self._mismatch(p, "return", _what(r.kind, r.name), "the history recorded")
        before = e.code_position
        if e.current_step == p and before is not None and self.record_at(p) is None and not e.compensating:
            self._mismatch(p, "return", _what(before.kind, before.name), "an earlier delivery called")

    def _mismatch(self, p: int, now: str, then: str, source: str) -> None:
        self.ready = self.tasks = {}
        self.broken = NondeterministicReplay(
            f"position {p}: this run of the function did {now} where {source} {then}. The code between durable "
            "calls must decide the same way on every replay (read time and randomness through now() and "
            "new_id(), everything else from the input and earlier results). If a deploy changed the function, "
            "deploy it as it was and redrive this execution (loom redrive), and ship the change as a new "
            "version beside it (@durable(name, version=N)): each execution replays the version it started on")
        raise self.broken
