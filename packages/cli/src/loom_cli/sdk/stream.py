"""Following one execution: the changes the console's live view pushes to the browser, as an iterator.

The API has no push channel, so this polls: ``GET /executions/{id}`` every ``interval_s``, and the
whole history when the execution document changed (the engine rewrites the execution with every record
it writes), and every ``branch_interval_s`` while a parallel or map step runs (its branches retry on
their own items, which leave the execution as it was). A step's (or a branch's) record keeps only its
latest error, and one that succeeds after retries keeps none, so each failed attempt seen along the way
is kept in ``Change.failed_attempts``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

from .errors import INVALID_ARGUMENT, LoomError
from .models import BranchRecord, ErrorInfo, Execution, History, StepRecord


class _Reader(Protocol):
    def get(self, execution_id: str) -> Execution: ...

    def history(self, execution_id: str) -> History: ...


@dataclass(frozen=True)
class FailedAttempt:
    step_index: int
    attempt: int
    error: ErrorInfo
    branch: int | None = None
    """The branch of a parallel or map step whose attempt failed; None for the step's own attempt."""


@dataclass(frozen=True)
class Change:
    """One change: the execution now, its history (None when not asked for), and every failed attempt seen
    so far; or ``problem``, a poll that failed (the stream goes on)."""

    execution: Execution | None
    history: History | None = None
    failed_attempts: tuple[FailedAttempt, ...] = ()
    problem: LoomError | None = None


def failed_attempts(history: History, seen: dict[tuple[int, int, int], ErrorInfo]) -> None:
    """Add the failed attempts ``history`` shows (steps' and branches' records, not undo steps) to ``seen``,
    keyed ``(step_index, branch or -1, attempt)``."""
    for r in history.steps:
        if isinstance(r, StepRecord) and r.kind != "compensation" and r.status == "FAILED" and r.error is not None:
            seen.setdefault((r.step_index, -1, r.attempts), r.error)
        elif isinstance(r, BranchRecord) and r.status in ("RETRY", "FAILED") and r.error is not None and r.attempts:
            seen.setdefault((r.step_index, r.branch, r.attempts), r.error)


def stream(client: _Reader, execution_id: str, *, interval_s: float = 1.0, ended_interval_s: float | None = None,
           with_history: bool | Callable[[Execution], bool] = True, stop: threading.Event | None = None,
           wake: threading.Event | None = None, on_poll: Callable[[], None] | None = None,
           branch_interval_s: float = 2.0) -> Iterator[Change]:
    """Yield a :class:`Change` whenever the execution changed (the first one at once).

    Args:
        interval_s: seconds between polls while it is live.
        ended_interval_s: after it ended, poll this often (an operator's redrive brings it back); None
            (the default): stop after yielding the ended execution.
        with_history: read the history with each change (False: ``Change.history`` is None; a function
            of the execution: only for the changes it says so).
        stop: set it to end the stream (between polls).
        wake: set it to poll now rather than at the end of the interval (after an action, say).
        on_poll: called after every poll, changed or not (an exception it raises ends the stream: the
            console's heartbeat finds a closed browser tab this way).
        branch_interval_s: while a parallel or map step runs and the execution did not change, read its
            history (branch pages of up to 100) again this often, for the branches' failed attempts (a branch
            keeps only its latest error: one that fails and retries faster than this may show only its last).

    Example:
        >>> for change in client.stream(execution_id):
        ...     print(change.execution.status, change.execution.current_step)
    """
    for name, value in (("interval_s", interval_s), ("ended_interval_s", ended_interval_s),
                        ("branch_interval_s", branch_interval_s)):
        check_interval(name, value)  # at the call, before the first poll
    return _follow(client, execution_id, interval_s, ended_interval_s, with_history, stop, wake, on_poll,
                   branch_interval_s)


def _follow(client: _Reader, execution_id: str, interval_s: float, ended_interval_s: float | None,
            with_history: bool | Callable[[Execution], bool], stop: threading.Event | None,
            wake: threading.Event | None, on_poll: Callable[[], None] | None,
            branch_interval_s: float) -> Iterator[Change]:
    seen: dict[tuple[int, int, int], ErrorInfo] = {}
    last: dict[str, Any] | None = None
    read_at = -float("inf")
    while stop is None or not stop.is_set():
        ended = False
        try:
            e = client.get(execution_id)
            doc = e.document()
            read = with_history(e) if callable(with_history) else with_history
            # A fan-out's branches change without the execution: their history is read again every
            # branch_interval_s, not on every poll (a map's history is many pages).
            branches_due = e.fanout is not None and not e.ended and time.monotonic() - read_at >= branch_interval_s
            if doc != last or (read and branches_due):
                history = client.history(execution_id) if read else None
                read_at = time.monotonic()
                before = len(seen)
                if history is not None:
                    failed_attempts(history, seen)
                if doc != last or len(seen) > before:
                    last = doc
                    attempts = tuple(FailedAttempt(i, a, err, None if b < 0 else b)
                                     for (i, b, a), err in sorted(seen.items()))
                    yield Change(e, history, attempts)
            ended = e.ended
        except LoomError as exc:
            yield Change(None, None, (), problem=exc)
        if on_poll is not None:
            on_poll()
        if ended and ended_interval_s is None:
            return
        _pause(ended_interval_s if ended and ended_interval_s is not None else interval_s, stop, wake)


def is_interval(value: object) -> bool:
    """A number of seconds above 0 and finite: 0 or less would poll without pause."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and 0 < value < float("inf")


def check_interval(name: str, value: float | None) -> None:
    """Refuse a poll interval that ``is_interval`` refuses (None: not given)."""
    if value is not None and not is_interval(value):
        raise LoomError(INVALID_ARGUMENT, f"{name} must be a number of seconds above 0 (0.5, 2), got {value!r}")


def _pause(seconds: float, stop: threading.Event | None, wake: threading.Event | None) -> None:
    if wake is not None:
        wake.wait(seconds)
        wake.clear()
    elif stop is not None:
        stop.wait(seconds)
    else:
        time.sleep(seconds)
