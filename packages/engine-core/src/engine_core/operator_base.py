"""What every operator action is built on (``operations.Operator``'s, and ``event_sends``'): the view a step's
kind answers an action from (``protocol.ActionView``), and the one conditional write an action ends in, with
the action's operation record in the same write (``StateStore.commit_operation``: both or neither).
Housekeeping after that write (the message, the ending's notice) never turns the answer into an error."""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable
from typing import Any, NamedTuple

from .errors import TransitionConflictError
from .kinds import KindTable
from .lifecycle import Lifecycle
from .model import Branch, CorruptRecord, Execution, OperationRecord
from .reads import Reader
from .steps import StepDef

log = logging.getLogger("engine_core")
RETRIES = 5
"""How often an action reads the execution again when another change (a worker's commit) came first."""


class Op(NamedTuple):
    """An operator's action, as its record keeps it (who, why, what it replaced)."""
    op: str
    by: str
    reason: str | None
    detail: dict[str, Any]


class EventSent(NamedTuple):
    execution_id: str
    event: str
    event_id: str
    outcome: str
    """``delivered`` (the execution was waiting for it and resumes now), ``buffered`` (kept until a wait
    of that name consumes it) or ``duplicate`` (that event id was sent before; nothing changed)."""

    def as_dict(self) -> dict[str, str]:
        return {"execution_id": self.execution_id, "event": self.event, "event_id": self.event_id,
                "outcome": self.outcome}


class View:
    """``protocol.ActionView`` of one execution as an operator's action found it."""

    def __init__(self, operator: ActionBase, e: Execution):
        self.operator, self.execution = operator, e
        self.wf = operator.definition(e)
        self._history: list[Any] | None = None

    @property
    def step(self) -> StepDef | None:
        if self.wf is None or not 0 <= self.execution.current_step < len(self.wf.steps):
            return None
        return self.wf.steps[self.execution.current_step]

    def now(self) -> dt.datetime:
        return self.operator.life.clock.now()

    def history(self) -> list[Any]:
        if self._history is None:
            self._history = self.operator.history_of(self.execution)
        return self._history

    def branches(self, step_index: int) -> list[Branch | CorruptRecord]:
        return self.operator.life.store.branches(self.execution.execution_id, step_index)


class ActionBase(Reader):
    """The operator's reads (``reads.Reader``) and the write each of its actions ends in."""

    def __init__(self, life: Lifecycle, kinds: KindTable):
        super().__init__(life)
        self.kinds = kinds

    def _commit(self, old: Execution, new: Execution, op: Op | None = None) -> Execution | None:
        """``old`` -> ``new``, with the operator's record of ``op`` in the same write (both or neither); None
        when another change came first."""
        record = None if op is None else lambda e: OperationRecord(  # noqa: E731 -- made from what is written
            op=op.op, by=op.by, at=e.updated_at, version=e.version, reason=op.reason, detail=op.detail, run=e.run,
            expires_at=self.life.item_expiry(e, e.updated_at))
        try:
            return self.life.commit(old, new, carry=False, operation=record)
        except TransitionConflictError:
            return None

    def _send(self, e: Execution) -> None:
        """The message that resumes ``e`` after an action's commit; a lost one is re-driven from the due index,
        so it never fails the action."""
        self._quietly("send", lambda: self.life.send_at(e), e)

    def _quietly(self, what: str, action: Callable[[], Any], e: Execution) -> None:
        try:
            action()
        except Exception as exc:
            log.warning(f"{what} after a committed operator action failed; the action stands", extra={
                "execution_id": e.execution_id, "workflow": e.workflow, "step": None, "step_index": e.current_step,
                "attempt": None, "error": f"{type(exc).__name__}: {exc}"})

