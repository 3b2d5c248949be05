"""The sweeper: wake due timers and re-drive executions whose in-flight message was lost.

It never acts on index data alone. The due index (GSI1) is eventually consistent, so every
candidate is re-read with a consistent read and claimed with a conditional write before anything
is enqueued. Two overlapping sweeps, or a sweep racing a worker, claim each execution once.
"""

from __future__ import annotations

import datetime as dt
import logging
import math
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from . import faults
from .backlog import BacklogMark, behind_backlog
from .clock import Clock
from .errors import CorruptStateError, StorageError
from .lifecycle import Lifecycle, UsesLifecycle
from .model import Timer
from .transitions import message_was_queued
from .ports import EventPublisher, Metrics, NullMetrics, StateStore, StepQueue
from .registry import REGISTRY, Registry
from .settings import EngineSettings
from .steps import FanOutSpec

log = logging.getLogger("engine_core.sweeper")

REASONS = {Timer.SLEEP: "timer_due", Timer.RETRY: "retry_due", Timer.LEASE: "stalled_lease",
           Timer.EVENT: "event_wait_due"}
_METRIC = {"timer_due": "RedrivenTimerDue", "retry_due": "RedrivenRetryDue", "stalled_lease": "RedrivenStalledLease",
           "event_wait_due": "RedrivenEventWaitDue"}


@dataclass
class SweepReport:
    redriven: Counter = field(default_factory=Counter)
    """Executions claimed and re-enqueued, by reason."""
    skipped: Counter = field(default_factory=Counter)
    """Candidates left alone, by reason (not_due, terminal, gone, lost_race, behind_backlog: a queued message
    the workers have not reached yet, ``backlog.py``)."""
    finalized: int = 0
    """Ended executions whose housekeeping the worker never finished (it died after the terminal commit)."""
    index_items_read: int = 0
    shards_scanned: int = 0
    truncated: bool = False
    """The work bound was hit; the rest waits for the next tick."""
    errors: int = 0
    """Storage errors met (each skipped one execution or one shard; the next tick retries)."""

    @property
    def total_redriven(self) -> int:
        return sum(self.redriven.values())

    def as_dict(self) -> dict:
        return {"redriven": dict(self.redriven), "skipped": dict(self.skipped), "index_items_read": self.index_items_read,
                "shards_scanned": self.shards_scanned, "truncated": self.truncated,
                "finalized": self.finalized, "errors": self.errors}


class Sweeper(UsesLifecycle):
    def __init__(self, store: StateStore, queue: StepQueue, clock: Clock, settings: EngineSettings | None = None,
                 registry: Registry = REGISTRY, metrics: Metrics | None = None, page_size: int = 100,
                 events: EventPublisher | None = None):
        self.settings = settings or EngineSettings()
        self.registry, self.metrics, self.page_size = registry, metrics or NullMetrics(), page_size
        self.life = Lifecycle(store, queue, registry, clock, self.settings, self.metrics, events)
        self._mark: BacklogMark | None | bool = False

    def sweep(self, remaining_ms: Callable[[], int] | None = None, reserve_ms: int = 5000) -> SweepReport:
        """One tick over every shard, claiming at most ``settings.sweep_max_items`` executions.
        A storage error on one execution or one shard is logged and counted; the tick goes on."""
        report = SweepReport()
        self._mark: BacklogMark | None | bool = False  # read at the first queued candidate of this tick
        shards = self.settings.shards
        per_shard = max(1, math.ceil(self.settings.sweep_max_items / shards))
        # Start at a different shard each tick so a backlog in one never starves the others.
        first = int(self.clock.now().timestamp() // 60) % shards
        for offset in range(shards):
            shard = (first + offset) % shards
            if remaining_ms is not None and remaining_ms() < reserve_ms:
                report.truncated = True
                break
            budget = min(per_shard, self.settings.sweep_max_items - report.total_redriven)
            if budget <= 0:
                report.truncated = True
                break
            for part in (self._sweep_shard, self._finalize_shard):
                try:
                    part(shard, budget, report, remaining_ms, reserve_ms)
                except StorageError as exc:
                    report.errors += 1
                    log.warning("sweeping a shard failed; the next tick retries it", extra={
                        "shard": shard, "error": str(exc), "execution_id": None, "workflow": None, "step": None,
                        "attempt": None})
            report.shards_scanned += 1
        for reason, count in report.redriven.items():
            self.metrics.add_metric(_METRIC[reason], "Count", count)
        if report.errors:
            self.metrics.add_metric("SweepErrors", "Count", report.errors)
        log.info("sweep finished", extra=report.as_dict())
        return report

    def _sweep_shard(self, shard: int, budget: int, report: SweepReport, remaining_ms, reserve_ms: int) -> None:
        cursor, claimed = None, 0
        # A claimed attempt's index key may lie up to ``slack_s`` past its lease (it spares index writes
        # along a chain): look that far ahead, so a dead attempt is re-driven at its lease, not slack later.
        horizon = self.clock.now() + dt.timedelta(seconds=self.settings.slack_s)
        while claimed < budget:
            page = self.store.query_due(shard, horizon, min(self.page_size, budget - claimed), cursor)
            report.index_items_read += page.read_count
            for ref in page.items:
                if self._one(ref.execution_id, report, self._redrive):
                    claimed += 1
            cursor = page.cursor
            if cursor is None:
                return
            if remaining_ms is not None and remaining_ms() < reserve_ms:
                break
        report.truncated = True

    def _one(self, execution_id: str, report: SweepReport, action) -> bool:
        """One execution; a storage error skips it (counted, logged) instead of ending the tick."""
        try:
            return action(execution_id, report)
        except CorruptStateError as exc:
            self.life.fail_unreadable(execution_id, exc)
            report.skipped["corrupt"] += 1
        except StorageError as exc:
            report.errors += 1
            log.warning("sweeping an execution failed; the next tick retries it", extra={
                "execution_id": execution_id, "error": str(exc), "workflow": None, "step": None, "attempt": None})
        return False

    def _redrive(self, execution_id: str, report: SweepReport) -> bool:
        e = self.store.load(execution_id)
        now = self.clock.now()
        if e is None:
            report.skipped["gone"] += 1
            return False
        if e.status.is_terminal:
            report.skipped["terminal"] += 1
            return False
        due = e.next_wake_at if e.timer in (None, Timer.LEASE) else e.due_at
        if due is None or due > now:
            report.skipped["not_due"] += 1  # the index was stale (someone moved it on), or it is due shortly
            return False
        if self._awaits_its_message(e) and self._stamps_outlast_a_hold(e, now) and behind_backlog(
                e, self._backlog_mark(), now, self.settings.lease_s, self.settings.function_timeout_s):
            report.skipped["behind_backlog"] += 1  # its message may still be queued: looked at again next tick
            return False
        reason = REASONS[e.timer or Timer.LEASE]
        new = self.life.redrive(e)
        if new is None:
            report.skipped["lost_race"] += 1
            return False
        faults.point("sweeper.after_claim", execution_id=execution_id)
        self.life.send_at(new)
        report.redriven[reason] += 1
        log.info("re-drove execution", extra={"execution_id": execution_id, "workflow": e.workflow,
                                               "step": self._step_name(e.workflow, e.current_step),
                                               "step_index": e.current_step, "attempt": e.attempt or None,
                                               "reason": reason})
        return True

    def _awaits_its_message(self, e) -> bool:
        """A message was sent for the execution's current (step, version) and no worker claimed it. Not a
        fanned-out parallel or map step's lease (``attempt`` >= 1, not re-sent): that is its reconcile
        period, and no message waits for it."""
        if not message_was_queued(e):
            return False
        return not (e.attempt >= 1 and e.resends == 0 and self._fans_out(e))

    def _stamps_outlast_a_hold(self, e, now) -> bool:
        """Leaving a queued message alone writes nothing, so nothing re-stamps the execution's items: only
        while their earliest TTL (``stamped_until``) is more than the re-stamp slack (a lease and more) away,
        so a later tick still re-drives, and re-stamps, before anything of a live execution expires."""
        return e.stamped_until is None or e.stamped_until - now > self.life.restamp_slack

    def _fans_out(self, e) -> bool:
        code = e.code_position
        if code is not None:
            return code.kind == "fanout"
        wf = self.registry.get(e.workflow) if e.workflow in self.registry else None
        return wf is not None and e.current_step < len(wf.steps) and isinstance(wf.steps[e.current_step].kind, FanOutSpec)

    def _backlog_mark(self) -> BacklogMark | None:
        """The workers' backlog mark, read once per tick (None: none, unreadable, or marks are off). What it read
        is what it returns: a tick that overlaps this one on the same sweeper resets the cache when it begins."""
        mark = self._mark
        if mark is False:
            mark = None
            if self.settings.backlog_marks:
                try:
                    mark = self.store.get_backlog_mark()
                except (CorruptStateError, StorageError) as exc:
                    log.warning("the queue's backlog mark could not be read; leases decide this tick", extra={
                        "error": str(exc), "execution_id": None, "workflow": None, "step": None, "attempt": None})
            self._mark = mark
        return mark

    def _step_name(self, workflow: str, index: int) -> str | None:
        if workflow in self.registry and index < len(self.registry.get(workflow).steps):
            return self.registry.get(workflow).steps[index].name
        return None

    def _finalize_shard(self, shard: int, budget: int, report: SweepReport, remaining_ms=None, reserve_ms: int = 0) -> None:
        page = self.store.query_unfinalized(shard, self.clock.now(), budget)
        report.index_items_read += page.read_count
        for ref in page.items:
            if self._one(ref.execution_id, report, self._finalize):
                report.finalized += 1

    def _finalize(self, execution_id: str, report: SweepReport) -> bool:
        e = self.store.load(execution_id)
        if e is None or not e.status.is_terminal or e.finalized:
            return False  # the index lagged; someone finished it
        self.life.finalize(e)
        log.info("finished housekeeping of an ended execution", extra={
            "execution_id": e.execution_id, "workflow": e.workflow, "step": None,
            "step_index": e.current_step, "attempt": None, "status": e.status.value})
        return True
