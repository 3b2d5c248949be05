"""Telling a queued step message from a lost one: the workers' backlog mark.

A step message sent and not yet claimed is *queued*: the execution carries a lease, and when it runs out
the sweeper cannot see whether the message was lost or waits behind a backlog. Re-sending it then
lengthens the backlog (the copy arriving second is stale). The workers can see what the sweeper cannot:
each record's ``SentTimestamp`` says how long it waited in the queue. So:

- **The worker** (``BacklogGauge.observe``, called per record before it is processed) notes when a record
  became visible (its send time plus the message's ``delay_s``). A record that waited at least half a
  lease means a backlog: the worker records a ``BacklogMark`` (that visible time, and now), at most once
  per quarter lease per process, with one conditional write that only moves the mark forward. Without a
  backlog it writes nothing: the step path is unchanged.
- **The sweeper** (``behind_backlog``), for a due execution whose message is queued, reads the mark once
  per tick. While the mark is fresh (recorded within the last two margins) and the workers are receiving
  messages that became visible less than a margin after the execution's own (``message_visible_at``; the
  margin is a lease, and at least the worker's timeout: a received record may wait that long in its batch),
  its message is presumed still queued: the sweeper sends nothing and looks again next tick. Once the
  workers receive messages visible more than the margin after it, and it is still unclaimed, it was lost:
  it is re-driven (with the doubling of ``transitions.redriven``). A mark gone stale (no backlog seen for
  two margins, or no worker receiving at all) changes nothing: the lease and its doubling decide, as
  before.

The margin covers SQS's best-effort ordering and a record waiting in its batch behind the others;
a wrong guess costs one stale copy, never a lost step: liveness rests on the mark advancing or going stale.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
from typing import NamedTuple

from .clock import Clock
from .errors import StorageError
from .model import Execution, StepMessage, Timer

log = logging.getLogger("engine_core.backlog")

WAIT_LEASES = 0.5
"""A record that waited this many leases (or more) in the queue shows a backlog: the worker marks it."""
MARK_EVERY_LEASES = 0.25
"""One process writes the mark at most this often (in leases)."""
FRESH_MARGINS = 2.0
"""A mark older than this many margins is ignored: no backlog was seen lately, the lease decides."""
MARGIN_LEASES = 1.0
"""How far (in leases; at least the worker's timeout) the workers must have gone past a message's visible time
before it counts as lost."""


class BacklogMark(NamedTuple):
    """The newest point the workers have reached in a backlogged queue: a message that became visible at
    ``visible_at`` was received at ``observed_at``, at least half a lease later."""

    visible_at: dt.datetime
    observed_at: dt.datetime

    @property
    def wait_s(self) -> float:
        return (self.observed_at - self.visible_at).total_seconds()


class BacklogGauge:
    """The worker's side: one per process. ``observe`` never raises: a failed mark write is logged and the
    record is processed as usual (the sweeper then falls back on the lease)."""

    def __init__(self, store, clock: Clock, lease_s: float, enabled: bool = True):
        self.store, self.clock, self.lease_s, self.enabled = store, clock, lease_s, enabled
        self._next_write: dt.datetime | None = None
        self._lock = threading.Lock()
        self.marks_written = 0

    def observe(self, message: StepMessage, sent_at: dt.datetime | None) -> BacklogMark | None:
        """Note that ``message``, sent at ``sent_at``, is being received now; returns the mark written, if any."""
        if not self.enabled or sent_at is None:
            return None
        now = self.clock.now()
        visible_at = sent_at + dt.timedelta(seconds=message.delay_s or 0)
        if (now - visible_at).total_seconds() < WAIT_LEASES * self.lease_s:
            return None
        with self._lock:
            if self._next_write is not None and now < self._next_write:
                return None
            self._next_write = now + dt.timedelta(seconds=MARK_EVERY_LEASES * self.lease_s)
        mark = BacklogMark(visible_at=visible_at, observed_at=now)
        try:
            if not self.store.put_backlog_mark(mark):
                return None  # another worker has already gone further
        except StorageError as exc:
            log.warning("could not record the queue's backlog mark; the sweeper falls back on leases",
                        extra={"error": str(exc), "wait_s": round(mark.wait_s, 1)})
            return None
        self.marks_written += 1
        log.info("queue backlog seen", extra={"wait_s": round(mark.wait_s, 1)})
        return mark


def sent_at_from_ms(value: str | int | None) -> dt.datetime | None:
    """SQS's ``SentTimestamp`` attribute (epoch milliseconds, a string in Lambda's event) as a time."""
    if value in (None, ""):
        return None
    try:
        return dt.datetime.fromtimestamp(int(value) / 1000, tz=dt.timezone.utc)
    except (TypeError, ValueError, OverflowError):
        return None


def message_visible_at(e: Execution) -> dt.datetime | None:
    """When the message the execution waits for became (or becomes) visible in the queue: its send time
    for a lease (the commit that sent it), its timer for a delayed message (a sleep, retry, event timeout
    or wake riding ``DelaySeconds``)."""
    if e.timer is Timer.LEASE or e.timer is None:
        return e.updated_at
    return e.next_wake_at


def margin_s(lease_s: float, function_timeout_s: float | None) -> float:
    """How far past a message's visible time the workers must have gone before it counts as lost: a lease,
    and at least the worker's timeout, the longest a received record can wait in its batch unclaimed."""
    return max(MARGIN_LEASES * lease_s, function_timeout_s or 0.0)


def behind_backlog(e: Execution, mark: BacklogMark | None, now: dt.datetime, lease_s: float,
                   function_timeout_s: float | None = None) -> bool:
    """True while the execution's queued message may still be waiting behind the backlog ``mark`` shows."""
    return still_queued(message_visible_at(e), mark, now, lease_s, function_timeout_s)


def still_queued(visible_at: dt.datetime | None, mark: BacklogMark | None, now: dt.datetime, lease_s: float,
                 function_timeout_s: float | None = None) -> bool:
    """True while a message that became visible at ``visible_at`` may still be waiting behind the backlog
    ``mark`` shows: the mark is fresh and the workers have not gone ``margin_s`` past that time. Also what a
    parallel or map step's reconcile asks of a branch whose message it would otherwise send again."""
    margin = margin_s(lease_s, function_timeout_s)
    if visible_at is None or mark is None or (now - mark.observed_at).total_seconds() > FRESH_MARGINS * margin:
        return False
    return visible_at > mark.visible_at - dt.timedelta(seconds=margin)


__all__ = ["BacklogGauge", "BacklogMark", "behind_backlog", "margin_s", "message_visible_at", "sent_at_from_ms", "still_queued"]
