"""Pure functions from one execution state to the next. Each bumps ``version`` by exactly one.

The store applies them conditionally on the previous (current_step, version), which is what turns
at-least-once delivery into at-most-once advancement. Every live state carries a timer in
``next_wake_at`` and a due-index key in ``index_at`` (see :func:`index_key`), so whatever is lost,
the sweeper finds the execution again.
"""

from __future__ import annotations

import datetime as dt

from .model import ErrorInfo, Execution, Status, Timer

_NO_CLAIM = {"attempt_started_at": None, "attempt_deadline": None}


def _next(e: Execution, now: dt.datetime, **changes) -> Execution:
    return e.model_copy(update={"version": e.version + 1, "updated_at": now, "resends": 0, **changes})


def index_key(previous: dt.datetime | None, wake: dt.datetime, timer: Timer, slack_s: float) -> dt.datetime:
    """The due-index key for a new timer. Sleeps, retries and a message's lease are indexed at their
    exact time (``slack_s`` = 0). A claimed attempt's lease keeps the previous key while that still
    lies within ``slack_s`` after the new lease, and is otherwise pushed ``slack_s`` past it: a chain
    of short steps rewrites the key (an index write) about once per slack period, and the sweeper
    never sees a lease before it runs out (a dead chain is re-driven up to ``slack_s`` late)."""
    if timer is not Timer.LEASE:
        return wake
    if previous is not None and wake <= previous <= wake + dt.timedelta(seconds=slack_s):
        return previous
    return wake + dt.timedelta(seconds=slack_s)


def _timer(e: Execution, timer: Timer, wake: dt.datetime, slack_s: float) -> dict:
    return {"timer": timer, "next_wake_at": wake, "index_at": index_key(e.due_at, wake, timer, slack_s)}


def claim_expiry(now: dt.datetime, timeout_s: float, margin_s: float, deadline: dt.datetime | None) -> dt.datetime:
    """Until when an attempt claimed ``now`` holds its step: its whole budget, and never before the
    claiming invocation's own deadline (after which that invocation cannot write anything)."""
    expiry = now + dt.timedelta(seconds=timeout_s + margin_s)
    if deadline is not None:
        expiry = max(expiry, deadline + dt.timedelta(seconds=margin_s))
    return expiry


def claimed(e: Execution, now: dt.datetime, expiry: dt.datetime, deadline: dt.datetime | None,
            slack_s: float) -> Execution:
    """An attempt of the current step starts: counted now, before its body runs, holding the step
    (RUNNING, lease) until ``expiry``."""
    return _next(e, now, status=Status.RUNNING, attempt=e.attempt + 1, attempt_started_at=now,
                 attempt_deadline=deadline, total_attempts=e.total_attempts + 1,
                 **_timer(e, Timer.LEASE, expiry, slack_s))


def message_was_queued(e: Execution) -> bool:
    """A step message should be on its way: one was sent for the current (step, version) and no worker
    claimed it (a message lease, or a timer whose delayed message rides SQS: its key lies past it)."""
    if e.is_claimed or e.next_wake_at is None:
        return False
    return e.timer is Timer.LEASE or (e.index_at is not None and e.index_at > e.next_wake_at)


def redriven(e: Execution, now: dt.datetime, lease_s: float, slack_s: float, max_doublings: int = 6) -> Execution:
    """A due timer, or a lease that ran out, is handed to a fresh step message (the sweeper's move): no
    attempt holds the step. A claimed attempt whose lease ran out ended without reporting (its worker
    died): it is counted in ``lost_attempts``. A message sent earlier and never claimed (lost, or behind
    a backlog) counts in ``resends``, and the new message's lease doubles with each: under a backlog the
    copies of one execution's message grow with the logarithm of the backlog's age."""
    lost = e.lost_attempts + (1 if e.is_claimed else 0)
    resends = e.resends + 1 if message_was_queued(e) else 0
    lease = lease_s * 2 ** min(max(resends - 1, 0), max_doublings)
    return _next(e, now, status=Status.RUNNING, **_NO_CLAIM, lost_attempts=lost,
                 **_timer(e, Timer.LEASE, now + dt.timedelta(seconds=lease), 0.0), resends=resends)


def advanced(e: Execution, now: dt.datetime, step_count: int, retention: dt.timedelta, *, lease_s: float,
             slack_s: float, claim_expiry_at: dt.datetime | None = None, deadline: dt.datetime | None = None,
             finalized: bool = False, finalize_grace_s: float = 0.0, checkpoint: int | None = None,
             code_step: str | None = None) -> Execution:
    """The current step succeeded: move to the next one, or COMPLETED after the last.

    With ``claim_expiry_at`` the same write claims the next step for this invocation (attempt 1),
    so a chain needs no second write; without it the next step waits for its message (``lease_s``).
    ``code_step``: a code-first execution's next position, as the function called it.
    """
    step = e.current_step + 1
    described = {} if code_step is None else {"code_step": code_step}
    if checkpoint is not None:  # the record just written holds the whole context: deliveries read from it
        e = e.model_copy(update={"checkpoint": checkpoint})
    if step >= step_count:
        return _ended(e, now, Status.COMPLETED, None, retention, finalized, finalize_grace_s, current_step=step)
    if claim_expiry_at is not None:
        return _next(e, now, status=Status.RUNNING, current_step=step, attempt=1, attempt_started_at=now,
                     attempt_deadline=deadline, total_attempts=e.total_attempts + 1, lost_attempts=0,
                     **_timer(e, Timer.LEASE, claim_expiry_at, slack_s), **described)
    return _next(e, now, status=Status.RUNNING, current_step=step, attempt=0, lost_attempts=0, **_NO_CLAIM,
                 **_timer(e, Timer.LEASE, now + dt.timedelta(seconds=lease_s), 0.0), **described)


def returned(e: Execution, now: dt.datetime, positions: int, retention: dt.timedelta, finalized: bool = False,
             finalize_grace_s: float = 0.0) -> Execution:
    """A code-first function returned after ``positions`` durable calls: COMPLETED (the step it was at
    settled earlier in this delivery, or it called none)."""
    return _ended(e, now, Status.COMPLETED, None, retention, finalized, finalize_grace_s, current_step=positions,
                  code_step=None)


def slept(e: Execution, now: dt.datetime, wake_at: dt.datetime) -> Execution:
    """The current step is a sleep: wait at it, with nothing running, until ``wake_at`` (then the
    sleep's delivery moves past it). ``attempt`` 1 marks that the sleep began; a sweeper's re-drive or an
    operator's wake keeps it."""
    return _next(e, now, status=Status.SLEEPING, attempt=1, lost_attempts=0, **_NO_CLAIM,
                 **_timer(e, Timer.SLEEP, wake_at, 0.0))


def retry_scheduled(e: Execution, now: dt.datetime, retry_at: dt.datetime) -> Execution:
    """The attempt failed and another may start at ``retry_at``; the attempt count stays."""
    return _next(e, now, status=Status.RUNNING, **_NO_CLAIM, **_timer(e, Timer.RETRY, retry_at, 0.0))


def failed(e: Execution, now: dt.datetime, error: ErrorInfo, retention: dt.timedelta,
           finalize_grace_s: float = 0.0, *, keep_cancel: bool = False) -> Execution:
    """FAILED. ``keep_cancel``: a requested cancel stays requested, for a redrive to finish (the failure
    left the request undone: its definition is not deployed). Failing while compensating keeps the failure
    the undo answers in ``compensating_for``, for the redrive that goes on undoing."""
    return _ended(e, now, Status.FAILED, error, retention, False, finalize_grace_s,
                  cancel_requested=keep_cancel and e.cancel_requested,
                  compensating_for=e.error if e.compensating else None)


def _ended(e: Execution, now: dt.datetime, status: Status, error: ErrorInfo | None, retention: dt.timedelta,
           finalized: bool, finalize_grace_s: float, **changes) -> Execution:
    """Terminal: out of the due index. Housekeeping still owed (``finalize_by``) unless ``finalized``."""
    changes.setdefault("cancel_requested", False)
    return _next(e, now, status=status, error=error, next_wake_at=None, timer=None, index_at=None, **_NO_CLAIM,
                 expires_at=now + retention, finalized=finalized,
                 finalize_by=None if finalized else now + dt.timedelta(seconds=finalize_grace_s), **changes)


def cancelled(e: Execution, now: dt.datetime, by: str, reason: str | None, retention: dt.timedelta,
              finalize_grace_s: float = 0.0) -> Execution:
    """An operator ends a live execution: out of the due index at once; an attempt still running
    finishes, but its commit finds a newer version and nothing after it runs."""
    return _ended(e, now, Status.CANCELLED, None, retention, False, finalize_grace_s, cancelled_by=by,
                  cancel_reason=reason)


def cancel_requested(e: Execution, now: dt.datetime, by: str, reason: str | None,
                     until: dt.datetime | None = None) -> Execution:
    """An operator cancels while work holds the current step (an attempt's claim, a fan-out's running
    branches): the request is recorded and takes effect when that work has ended. A claim keeps its
    lease; an unclaimed step (a fan-out) is looked at again at ``until``, when the work's leases end."""
    timer = {} if e.is_claimed or until is None else _timer(e, Timer.LEASE, max(until, now), 0.0)
    return _next(e, now, cancel_requested=True, cancelled_by=by, cancel_reason=reason, **timer)


def redriven_after_failure(e: Execution, now: dt.datetime, lease_s: float) -> Execution:
    """A FAILED execution resumes at its failed step with fresh attempts, under the same id. A cancel it
    still has requested is finished instead (its lost attempts kept: they say what may have run); an undo
    it stopped in goes on, answering the failure it was undoing."""
    lost = e.lost_attempts if e.cancel_requested else 0
    return _next(e, now, status=Status.RUNNING, error=e.compensating_for, compensating_for=None, attempt=0, **_NO_CLAIM,
                 expires_at=None, lost_attempts=lost,
                 finalized=False, finalize_by=None, redrives=e.redrives + 1,
                 **_timer(e, Timer.LEASE, now + dt.timedelta(seconds=lease_s), 0.0))


def restamped(e: Execution, stamped_until: dt.datetime) -> Execution:
    """``new`` after the execution's other items were re-stamped to expire no earlier than ``stamped_until``
    (part of the transition it rides on: no version of its own)."""
    return e.model_copy(update={"stamped_until": stamped_until})


def woken(e: Execution, now: dt.datetime, *, by_event: bool = False) -> Execution:
    """The current sleep, retry backoff or event wait ends now: an operator's "skip the wait" (an event
    wait times out), or an event arriving for the wait (``by_event``: its step consumes it if it fits the
    wait's model, and waits on otherwise). The message that resumes it is sent with it (the commit sets
    the due key past its lease)."""
    assert e.timer in (Timer.SLEEP, Timer.RETRY, Timer.EVENT)
    operator = not by_event and e.timer is Timer.EVENT
    return _next(e, now, next_wake_at=now, index_at=now, resends=e.resends, wait_woken=e.wait_woken or operator)


def waiting(e: Execution, now: dt.datetime, timeout_at: dt.datetime) -> Execution:
    """The current step waits for an event: WAITING, nothing running, until it arrives or ``timeout_at``.
    Each wait period is one attempt of the step (a timeout is retried by waiting again)."""
    return _next(e, now, status=Status.WAITING, attempt=e.attempt + 1, **_NO_CLAIM, waiting_since=now,
                 wait_woken=False, **_timer(e, Timer.EVENT, timeout_at, 0.0))


def waits_on(e: Execution, timeout_at: dt.datetime, now: dt.datetime) -> Execution:
    """An event woke the wait (or the sweeper handed its wake on) and none fits its model: the same wait
    period goes on, WAITING, to ``timeout_at``."""
    return _next(e, now, status=Status.WAITING, **_NO_CLAIM, wait_woken=False,
                 **_timer(e, Timer.EVENT, timeout_at, 0.0))


def compensation_started(e: Execution, now: dt.datetime, error: ErrorInfo | None, step: int, lease_s: float, *,
                         cancelled_by: str | None = None, cancel_reason: str | None = None,
                         undo_failed_step: bool = False) -> Execution:
    """The execution failed for good (``error``) or was cancelled: it stays live and undoes its completed
    steps in reverse order, starting with the compensation of ``step``. ``failed_step`` keeps where it
    stopped, so the compensations see the context that step saw; ``undo_failed_step`` undoes that step
    too (a cancel caught it mid-attempt)."""
    return _next(e, now, status=Status.RUNNING, compensating=True, failed_step=e.current_step, current_step=step,
                 error=error, attempt=0, **_NO_CLAIM, cancelled_by=cancelled_by or e.cancelled_by,
                 cancel_reason=cancel_reason if cancelled_by else e.cancel_reason, cancel_requested=False,
                 undo_failed_step=undo_failed_step, lost_attempts=0,
                 **_timer(e, Timer.LEASE, now + dt.timedelta(seconds=lease_s), 0.0))


def compensation_next(e: Execution, now: dt.datetime, step: int, lease_s: float) -> Execution:
    """A compensation finished; the one of the next earlier completed ``step`` runs."""
    return _next(e, now, status=Status.RUNNING, current_step=step, attempt=0, lost_attempts=0, **_NO_CLAIM,
                 **_timer(e, Timer.LEASE, now + dt.timedelta(seconds=lease_s), 0.0))


def compensation_ended(e: Execution, now: dt.datetime, retention: dt.timedelta, finalize_grace_s: float,
                       error: ErrorInfo | None = None) -> Execution:
    """Every compensation finished (FAILED or CANCELLED, ``compensated``), or ``error`` says which one
    could not undo its step (COMPENSATION_FAILED). Either way the execution ends at its failed step."""
    if error is not None:
        status = Status.COMPENSATION_FAILED
    else:
        status = Status.CANCELLED if e.cancelled_by is not None else Status.FAILED
    return _ended(e, now, status, e.error, retention, False, finalize_grace_s, compensating=False,
                  compensated=error is None, compensation_error=error,
                  current_step=e.failed_step if e.failed_step is not None else e.current_step)


def fanned_out(e: Execution, now: dt.datetime, lease_s: float) -> Execution:
    """The current step is a parallel or map step whose branches run on their own items: no attempt
    holds the step, ``attempt`` 1 marks that this generation has fanned out, and the lease is the
    reconcile period (when it runs out the sweeper re-drives the step, which re-drives lost branches)."""
    return _next(e, now, status=Status.RUNNING, attempt=max(1, e.attempt), **_NO_CLAIM,
                 **_timer(e, Timer.LEASE, now + dt.timedelta(seconds=lease_s), 0.0))
