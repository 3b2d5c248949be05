"""A parallel or map step's items and messages for its kind (``protocol.FanOutItems``), over the store and the
queue of one execution's step run."""

from __future__ import annotations

import datetime as dt
import math
import weakref
from collections.abc import Iterable
from typing import Any

from .backlog import still_queued
from .errors import CorruptStateError, StorageError
from .lifecycle import message_checkpoint
from .model import Branch, CorruptRecord, Execution, Join, StepMessage


PUT_WRITE_UNITS = 1.0
"""A branch's conditional put, counted before it is sent (the cost ledger): a branch item under 1 KB."""
COMPLETE_WRITE_UNITS = 4.0
"""A completion's transaction, counted before it is sent: two items (the branch, the join), two units each."""


class FanOutItems:
    """``protocol.FanOutItems`` over the store and the queue, for one execution."""

    def __init__(self, run: Any):
        # The run owns this object and outlives its uses: a strong reference back would make every delivery
        # a reference cycle, its records and values left to the garbage collector instead of freed at its end.
        self.run = weakref.proxy(run)
        self.store, self.eid = run.life.store, run.execution.execution_id
        self._mark: Any = False  # the backlog mark, read at most once

    def message_still_queued(self, visible_at: dt.datetime) -> bool:
        settings = self.run.life.settings
        if not settings.backlog_marks:
            return False
        if self._mark is False:
            try:
                self._mark = self.store.get_backlog_mark()
            except (StorageError, CorruptStateError):
                self._mark = None  # the lease decides
        return still_queued(visible_at, self._mark, self.run.life.clock.now(), settings.lease_s,
                            settings.function_timeout_s)

    def get_join(self, step_index: int) -> Join | None:
        return self.store.get_join(self.eid, step_index)

    def put_join(self, join: Join) -> bool:
        return self.store.put_join(self.eid, join)

    def create_branch(self, branch: Branch) -> None:
        self.store.create_branch(self.eid, branch)

    def get_branch(self, step_index: int, branch: int) -> Branch | CorruptRecord | None:
        return self.store.get_branch(self.eid, step_index, branch)

    def update_branch(self, branch: Branch, expected_version: int) -> Branch:
        return self._carrying(self.store.update_branch, branch, expected_version, PUT_WRITE_UNITS)

    def complete_branch(self, branch: Branch, expected_version: int) -> Branch:
        return self._carrying(self.store.complete_branch, branch, expected_version, COMPLETE_WRITE_UNITS)

    def _carrying(self, write: Any, branch: Branch, expected_version: int, units: float) -> Branch:
        """``write`` the branch with its delivery's cost ledger carried on it (``Meter.carry_branch``)."""
        meter = self.run.life.meter
        branch = meter.carry_branch(branch, units)
        write(self.eid, branch, expected_version)
        meter.carried()
        return branch

    def include_costs(self, branches: Iterable[Branch]) -> None:
        self.run.life.meter.include_branches(b.ledger for b in branches)

    def branches(self, step_index: int) -> list[Branch | CorruptRecord]:
        return self.store.branches(self.eid, step_index)

    def send_branch(self, branch: Branch, wake_at: dt.datetime | None = None) -> None:
        """The message for ``branch`` (delayed until ``wake_at`` when SQS can; a longer wait is the reconcile's)."""
        life = self.run.life
        delay = 0.0 if wake_at is None else (wake_at - life.clock.now()).total_seconds()
        if delay > life.settings.max_queue_delay_s:
            return
        e = self.run.execution
        delay_s = max(0, math.ceil(delay))
        life.queue.send(StepMessage(execution_id=self.eid, step=branch.step_index, version=e.version,
                                    branch=branch.branch, branch_version=branch.version,
                                    checkpoint=message_checkpoint(e), delay_s=delay_s or None), delay_s=delay_s)

    def load_execution(self) -> Execution | None:
        return self.store.load(self.eid)
