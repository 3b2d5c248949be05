"""What a code-first execution's positions are, as far as anyone knows them without running its function.

A code-first workflow (``engine_core.durable``) has no step list: its positions are the durable calls its
function makes, in order. ``CodeSteps`` stands in for the step list of one execution: the positions the
history recorded (name, kind, whether it has a compensation), the current one as the execution item
describes it (``Execution.code_step``), and, in a worker that is running the function, every position
the run called (with the functions to run). Everything that reads ``WorkflowDef.steps`` (the step kinds,
the operator's actions, the lifecycle) reads it unchanged.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from ..frozen import with_fields
from ..code_step import UNNAMED_MODEL, CodeStep, encode_code_step
from ..model import Execution, StepRecord
from ..steps import FanOutSpec, SleepSpec, StepDef, TaskSpec, WaitSpec, WorkflowDef, model_path, wait_model

RETURN_KIND = "return"
"""The record kind of a code-first function's return value (one position after its last call)."""


def _elsewhere(*_: Any, **__: Any) -> Any:
    raise RuntimeError("this position's function is known only to a worker running the workflow's code")


def describe(d: StepDef) -> str:
    """The execution item's description of position ``d`` (``Execution.code_step``)."""
    kind = d.kind
    event = getattr(kind, "event", None) or getattr(d, "callback_event", None)
    model = (model_path(kind.model) or UNNAMED_MODEL) if kind.kind == "event" and kind.model is not None else None
    return encode_code_step(d.name, kind.kind, event, d.compensate is not None, d.timeout_s, model)


@dataclasses.dataclass(frozen=True, init=False)
class CodeStepDef(StepDef):
    """A code-first position: a ``StepDef`` that may also name the event of the wait right after it
    (a ``wait_for_callback``'s submitting task, whose body hands out that wait's token)."""

    callback_event: str | None = None

    def __init__(self, index: int, name: str, kind: Any, retry: Any = None, timeout_s: float | None = None,
                 compensate: Callable[..., Any] | None = None, callback_event: str | None = None):
        # Every step the function runs builds one: the fields are set as a frozen dataclass's ``__init__``
        # sets them, without its per-field ``object.__setattr__`` calls.
        self.__dict__.update(index=index, name=name, kind=kind, retry=retry, timeout_s=timeout_s, compensate=compensate,
                             compensate_retry=None, compensate_timeout_s=None, callback_event=callback_event)


def _spec(kind: str, event: str | None, model: str | None = None) -> Any:
    if kind == "sleep":
        return SleepSpec(0.0)
    if kind == "event":
        return WaitSpec(event=event or "?", timeout_s=0.0, model=wait_model(model))
    if kind == "fanout":
        return FanOutSpec(fns=(_elsewhere,), values=())
    return TaskSpec(fn=_elsewhere)


def from_description(index: int, c: CodeStep) -> StepDef:
    callback = c.event if c.kind == "task" else None
    return CodeStepDef(index=index, name=c.name, kind=_spec(c.kind, c.event, c.model), timeout_s=c.timeout_s,
                       compensate=_elsewhere if c.undo else None, callback_event=callback)


def from_record(r: StepRecord) -> StepDef:
    return CodeStepDef(index=r.step_index, name=r.name, kind=_spec(r.kind, r.name if r.kind == "event" else None),
                       compensate=_elsewhere if r.undo else None)


class CodeSteps(Sequence):
    """One code-first execution's positions (see the module docstring). Positions before the current
    one come from the history, read on first use (``records``); a position a worker's run of the
    function called (``put``) replaces what was known of it."""

    def __init__(self, e: Execution, records: Callable[[], list[Any]] | list[Any]):
        self._e, self._records = e, records
        self._called: dict[int, StepDef] = {}
        self._recorded: dict[int, StepDef] | None = None
        self._described: dict[int, StepDef] | None = None
        self._top = -1
        self._length = -1

    def put(self, d: StepDef) -> None:
        self._called[d.index] = d
        if d.index > self._top:
            self._top, self._length = d.index, -1

    def called(self, index: int) -> StepDef | None:
        return self._called.get(index)

    def _history(self) -> dict[int, StepDef]:
        if self._recorded is None:
            records = self._records() if callable(self._records) else self._records
            self._recorded = {r.step_index: from_record(r) for r in records
                              if isinstance(r, StepRecord) and r.kind not in ("compensation", RETURN_KIND)}
        return self._recorded

    def _current(self) -> dict[int, StepDef]:
        if self._described is not None:
            return self._described
        e, c = self._e, self._e.code_position
        out: dict[int, StepDef] = {}
        if c is not None:
            out[e.current_step] = from_description(e.current_step, c)
            if c.kind == "task" and c.event is not None:  # the wait a wait_for_callback's token is for
                out[e.current_step + 1] = CodeStepDef(index=e.current_step + 1, name=c.event,
                                                      kind=WaitSpec(event=c.event, timeout_s=0.0))
        self._described = out
        return out

    def __len__(self) -> int:
        if self._length < 0:
            top = max(self._top, max(self._current(), default=-1))
            self._length = max(self._e.current_step, top + 1)
        return self._length

    def _at(self, index: int) -> StepDef:
        if index in self._called:
            return self._called[index]
        current = self._current()
        if index in current:
            return current[index]
        known = self._history().get(index)
        if known is not None:
            return known
        return CodeStepDef(index=index, name="?", kind=TaskSpec(fn=_elsewhere))

    def __getitem__(self, index: Any) -> Any:
        called = self._called.get(index) if type(index) is int else None
        if called is not None:
            return called
        if isinstance(index, slice):
            return [self._at(i) for i in range(*index.indices(len(self)))]
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError(index)
        return self._at(index)

    def __iter__(self) -> Iterator[StepDef]:
        return (self._at(i) for i in range(len(self)))


def code_plan(wf: WorkflowDef, e: Execution, records: Callable[[], list[Any]] | list[Any]) -> WorkflowDef:
    """``wf`` (a code-first definition) with ``e``'s positions as its steps."""
    return with_fields(wf, steps=CodeSteps(e, records))  # type: ignore[arg-type]
