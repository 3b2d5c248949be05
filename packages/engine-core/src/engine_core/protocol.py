"""The step-kind protocol: what a kind may read and do (``StepOps``, ``FanOutItems``, ``ActionView``), and
what it answers (``StepKind``).

A kind (``engine_core/kinds/``) imports this module, the model, the definitions (``steps.py``) and the
pure helpers (transitions, codec, the body runner), never the engine, the step run, the operator, the
registry or another kind. The engine reaches kinds only through the table in ``kinds/__init__.py``:

- every delivery of an execution's current step goes to its kind's ``run`` (the compensation kind's
  while the execution is compensating), a branch message to ``run_branch``;
- every operator action and outside input asks the current step's kind what it means there:
  ``on_cancel`` (now, or a request that takes effect when the running work has ended), ``on_wake``
  (may the current wait end now?), ``waits_for`` (does an event of this name wake it?);
- while a requested cancel is pending, every delivery goes to ``finish_cancel`` instead of ``run``.

DESIGN.md's kind x situation table states each answer and names its test.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable, Iterable
from typing import Any, NamedTuple, Protocol

from ._runner import BodyOutcome
from .model import Branch, CorruptRecord, ErrorInfo, Execution, Join, RetryPolicy, StepMessage, StepRecord
from .outcome import Outcome
from .settings import EngineSettings
from .steps import StepDef, WorkflowDef


class FanOutItems(Protocol):
    """The items of a parallel or map step, for the fan-out kind only (``JOIN#``, and the branches in
    their own partition), and the branch messages."""

    def get_join(self, step_index: int) -> Join | None: ...

    def put_join(self, join: Join) -> bool: ...

    def create_branch(self, branch: Branch) -> None: ...

    def get_branch(self, step_index: int, branch: int) -> Branch | CorruptRecord | None: ...

    def update_branch(self, branch: Branch, expected_version: int) -> Branch:
        """Write ``branch`` if the stored one is still at ``expected_version``; the branch as written (a
        branch delivery's own item carries its cost ledger), or BranchConflictError."""
        ...

    def complete_branch(self, branch: Branch, expected_version: int) -> Branch:
        """Record the branch SUCCEEDED and count it on its generation's join, at once; as ``update_branch``."""
        ...

    def include_costs(self, branches: Iterable[Branch]) -> None:
        """A fan-in: the next commit of the execution adds these branches' cost ledgers to its own."""
        ...

    def branches(self, step_index: int) -> list[Branch | CorruptRecord]: ...

    def send_branch(self, branch: Branch, wake_at: dt.datetime | None = None) -> None: ...

    def message_still_queued(self, visible_at: dt.datetime) -> bool:
        """A branch message that became visible at ``visible_at`` may still wait behind a queue backlog (the
        workers' backlog mark, read once per delivery): sending another would only add a stale copy."""
        ...

    def load_execution(self) -> Execution | None:
        """The execution item now (one consistent read)."""
        ...


class StepOps(Protocol):
    """One delivery's hold on one execution, as a kind sees it: what it may read, and the engine's moves
    it ends in. Every move that writes is conditional; a lost condition comes back as an Outcome."""

    execution: Execution
    """As this delivery last read or wrote it."""
    wf: WorkflowDef
    data: dict[str, Any] | None
    """The context the current step sees (input merged with the earlier steps' results)."""
    records: list[Any]
    """This run's history as the delivery read it (StepRecord or CorruptRecord, in key order): the whole of
    it, or the tail from a checkpoint on. ``history()`` is always the whole."""
    settings: EngineSettings
    retention: dt.timedelta
    """How long an ended execution is kept (``settings.retention_days``)."""
    items: FanOutItems
    joins: dict[int, Join]
    """The join item of each parallel or map step that has fanned out, as the delivery read them."""
    context_bound: int

    @property
    def step(self) -> StepDef: ...

    @property
    def timeout_s(self) -> float: ...

    def now(self) -> dt.datetime: ...

    def lease_s(self, index: int) -> float: ...

    def history(self) -> list[Any]:
        """This run's whole history (read once more if the delivery read only the tail)."""
        ...

    def operations(self) -> list[Any]:
        """This run's operator actions (OperationRecord or CorruptRecord, in order): read only when asked (a
        delivery's one query never reads them)."""
        ...

    def stamp_horizon(self, due: dt.datetime) -> dt.datetime:
        """What a commit due at ``due`` would re-stamp the execution's items to (``Lifecycle.start_horizon``)."""
        ...

    def item_expiry(self, now: dt.datetime) -> dt.datetime:
        """The TTL an item written now carries (never before the execution's ``stamped_until``)."""
        ...

    def error(self, code: str, message: str, retryable: bool = False, kind: str | None = None) -> ErrorInfo: ...

    def log(self, text: str, level: int = logging.INFO, **extra: Any) -> None: ...

    def metric(self, name: str, unit: str, value: float) -> None: ...

    def check_time(self, timeout_s: float) -> None:
        """Raise InsufficientTimeError, before any write, when the invocation cannot fit ``timeout_s``."""
        ...

    def branch_room(self, timeout_s: float) -> ErrorInfo | None:
        """Why no branch of the current fan-out, with ``timeout_s`` each, can ever run (a code-first function's
        code before the fan-out, which each branch's delivery replays first, leaves no delivery the time), or None."""
        ...

    def deadline(self) -> dt.datetime | None: ...

    def callback_token(self, event: str) -> str: ...

    def run_body(self, fn: Callable[..., Any], ctx: Any, timeout_s: float) -> BodyOutcome: ...

    # -- moves -------------------------------------------------------------------------------------
    def claim(self, policy: RetryPolicy | None = None, timeout_s: float | None = None) -> Execution | Outcome: ...

    def succeed(self, result: Any) -> Outcome: ...

    def merge(self, result: dict[str, Any], what: str) -> tuple[str, dict[str, Any], int]:
        """Encode a step's result and merge it into the context: (result blob, merged context, an upper
        bound of its encoded size). Raises NonSerializableResultError or ResultTooLargeError."""
        ...

    def check_size(self, what: str, blob: str) -> None:
        """Raise ResultTooLargeError when ``blob`` is over the item budget."""
        ...

    def settle(self, record: StepRecord, merged: dict[str, Any], bound: int) -> Outcome: ...

    def advance(self) -> Outcome:
        """Move past the current step, whose record was written earlier (a sleep that is due)."""
        ...

    def attempt_failed(self, body: BodyOutcome, policy: RetryPolicy | None = None, kind: str = "task",
                       prefix: str = "") -> Outcome: ...

    def chain_undo(self, index: int) -> bool:
        """A compensation succeeded: whether the next one (step ``index``'s) runs in this invocation."""
        ...

    def fail(self, error: ErrorInfo, started_at: dt.datetime | None = None, *, event_id: str | None = None) -> Outcome:
        """The current step failed for good (``started_at``: when it began, if no attempt holds it;
        ``event_id``: a wait's event that failed it, passed over by the wait after a redrive)."""
        ...

    def commit(self, new: Execution) -> Outcome | None:
        """Apply a transition of the execution item (None: it applied; ``execution`` is ``new`` now)."""
        ...

    def put(self, record: StepRecord) -> Outcome | None: ...

    def send(self, wake_at: dt.datetime | None = None) -> None:
        """The message of the execution's current (step, version), delayed until ``wake_at`` when SQS can."""
        ...

    def end(self, new: Execution, outcome: str, detail: str = "", metric: str | None = None) -> Outcome:
        """Commit the terminal ``new``; then the metric, and the housekeeping (finalize)."""
        ...

    def finalize_grace_s(self) -> float:
        """How long the ending worker has for its housekeeping before the sweeper does it."""
        ...

    def list_events(self, name: str) -> list[Any]:
        """This run's events of ``name`` (strongly consistent, bounded: the first 1,000 by event id)."""
        ...

    def reload(self) -> bool:
        """Read the execution, its input, history and events again; False when the current step is no
        longer the one this delivery holds (it ended, moved on, or started compensating)."""
        ...

    def resume(self) -> Outcome:
        """Go on from the execution as it is now (the chain): the next step's kind runs."""
        ...

    def finish_cancel(self, undo_current: bool) -> Outcome:
        """The work a requested cancel waited for has ended: compensate (the current step too when
        ``undo_current``) or end CANCELLED."""
        ...


class ActionView(Protocol):
    """What a kind reads to answer an operator's action or an outside input (no writes)."""

    execution: Execution
    wf: WorkflowDef | None
    """None when this deployment does not run the execution's definition (unknown, or changed)."""

    @property
    def step(self) -> StepDef | None: ...

    def now(self) -> dt.datetime: ...

    def history(self) -> list[Any]:
        """This run's history records (read on first use)."""
        ...

    def branches(self, step_index: int) -> list[Branch | CorruptRecord]: ...


class CancelPlan(NamedTuple):
    """What a cancel means for the current step."""

    now: bool
    """True: the execution ends (or starts compensating) with this cancel. False: a request, recorded on
    the execution, that takes effect when the running work has ended."""
    undo_current: bool = False
    """The current step is undone too: it succeeded, or an attempt of it may have taken effect."""
    until: dt.datetime | None = None
    """For a request: when the running work's lease ends at the latest (the sweeper re-drives then)."""


class KindBase:
    """Defaults for a kind that has no branches, cannot be woken, waits for no event and is cancelled at once."""

    name = "?"
    wake_refused = ""
    """Why a wake at this kind has nothing to skip, when the usual refusal does not say it (appended to it)."""

    def run(self, op: StepOps) -> Outcome:  # pragma: no cover - every kind implements it
        raise NotImplementedError

    def run_branch(self, op: StepOps, message: StepMessage) -> Outcome:
        return Outcome("stale", op.execution.execution_id, message.step,
                       f"branch {message.branch}: step {message.step} is not a parallel or map step")

    def on_cancel(self, view: ActionView) -> CancelPlan:
        return CancelPlan(now=True)

    def finish_cancel(self, op: StepOps) -> Outcome:
        return op.finish_cancel(undo_current=False)

    def on_wake(self, view: ActionView) -> bool:
        return False

    def waits_for(self, view: ActionView) -> str | None:
        return None


class StepKind(Protocol):
    name: str
    wake_refused: str

    def run(self, op: StepOps) -> Outcome: ...

    def run_branch(self, op: StepOps, message: StepMessage) -> Outcome: ...

    def on_cancel(self, view: ActionView) -> CancelPlan: ...

    def finish_cancel(self, op: StepOps) -> Outcome: ...

    def on_wake(self, view: ActionView) -> bool: ...

    def waits_for(self, view: ActionView) -> str | None: ...


class Ending(Protocol):
    """How an execution ends after a final failure or a cancel (the compensation kind's other role)."""

    def on_failure(self, op: StepOps, error: ErrorInfo) -> Outcome | None:
        """Start compensating after ``error`` (None: nothing to undo; the step run fails the execution)."""
        ...

    def cancelled(self, view: ActionView, e: Execution, by: str | None, reason: str | None, undo_current: bool,
                  lease_s: Callable[[int], float], retention: dt.timedelta, grace_s: float) -> Execution:
        """The transition a cancel makes now: compensating, or CANCELLED. Raises ExecutionStateConflictError
        (``definition_changed``) when completed steps have compensations this deployment cannot run."""
        ...

    def cancel_undeployed(self, records: list[Any], e: Execution, now: dt.datetime, retention: dt.timedelta,
                          grace_s: float) -> Execution | None:
        """A requested cancel of ``e`` (``records``: this run's history), whose definition is not deployed,
        finished now: CANCELLED when nothing it did needs undoing; None when it must wait for its definition."""
        ...


__all__ = ["ActionView", "CancelPlan", "Ending", "ErrorInfo", "FanOutItems", "KindBase", "StepKind", "StepOps"]
