"""The cost ledger's counter: what one worker delivery spends on one execution, until a commit carries it.

A ``Meter`` lives on the lifecycle, one per engine, and counts one delivery at a time, as a Lambda
process runs them (a store shared by threads delivering at once would mix their counts). ``begin``
opens it for the execution a delivery works on (counting the message that delivered it); the store
reports every request it makes (``request``, with the units DynamoDB returned when it returns them);
each commit on that execution's item adds what was counted since the previous one to the item's
``ledger`` (``carry``), so the ledger costs no write of its own. The carrying write cannot report its
own units before it is sent: it is counted in advance as one request and (on a store that reports
units) one write unit, and what it really consumed beyond that rides on the delivery's next commit. An
ending that leaves housekeeping owed also counts, in advance, the finalize write that follows it. What
a delivery does after its last commit (the next step's message, a re-stamp, a status event) and a
delivery that never commits (stale, duplicate, crashed) are not counted: nothing carries them.
A parallel or map branch's delivery writes its own branch item, not the execution's: those writes carry
its counts on the branch's ledger (``carry_branch``), and the fan-in's commit adds every branch's ledger
to the execution's (``include_branches``). DESIGN.md "Cost ledger" lists it all.

Example:
    >>> meter = Meter()
    >>> meter.begin("e-1", delivered=True)
    >>> meter.request(read_units=0.5)
"""

from __future__ import annotations

import time
from collections.abc import Iterable

from .model import Branch, Execution, Ledger

CARRY_WRITE_UNITS = 1.0
"""The carrying write's units, counted before it is sent: the execution item stays under 1 KB."""


class Meter:
    """Counts one open delivery's requests, units, message and time (see the module docstring)."""

    __slots__ = ("enabled", "reports_requests", "reports_units", "execution_id", "branch", "requests", "read_units",
                 "write_units", "messages", "_mark_ns", "_carried", "_branches")

    def __init__(self, enabled: bool = True, reports_requests: bool = False, reports_units: bool = False):
        self.enabled = enabled
        self.reports_requests = reports_requests
        """The store reports its requests (the DynamoDB and memory stores; SQLite does not: 0 requests)."""
        self.reports_units = reports_units
        """The store reports units per request (DynamoDB with ``ReturnConsumedCapacity``)."""
        self.execution_id: str | None = None
        self.branch: tuple[int, int] | None = None
        """The (step, branch) a branch delivery runs: its own branch item's writes carry its counts."""
        self._reset()

    def _reset(self) -> None:
        self.requests, self.read_units, self.write_units, self.messages = 0, 0.0, 0.0, 0
        self._mark_ns = time.monotonic_ns()
        self._carried: tuple[int, float, float, int, int] | None = None
        self._branches: Ledger | None = None

    def begin(self, execution_id: str, delivered: bool, branch: tuple[int, int] | None = None) -> None:
        """Open the meter for a delivery of ``execution_id`` (``delivered``: a queue message brought it;
        ``branch``: the (step, branch) of a parallel or map branch's delivery)."""
        self.execution_id = execution_id if self.enabled else None
        self.branch = branch
        self._reset()
        self.messages = 1 if delivered else 0

    def end(self) -> None:
        """Close it: what the delivery spent after its last commit is not counted."""
        self.execution_id = None
        self.branch = None

    def request(self, read_units: float = 0.0, write_units: float = 0.0) -> None:
        """One store request, with the units the store reported for it (none: 0)."""
        if self.execution_id is not None:
            self.requests += 1
            self.read_units += read_units
            self.write_units += write_units

    def carry(self, new: Execution, finalizes: bool = False) -> Execution:
        """``new`` with what was counted since the last carry added to its ledger, this write included
        (and, when ``finalizes``, the finalize write that follows an ending), and the branches' ledgers a
        fan-in handed over (``include_branches``). Call ``carried`` once the write applied; if it did
        not, the counts stay for the delivery's next commit."""
        if new.execution_id != self.execution_id:
            return new  # the sweeper, an operator, or the ledger is off: not a delivery's commit
        writes = (2 if finalizes else 1) if self.reports_requests else 0
        base = new.ledger or Ledger()
        if self._branches is not None:
            base = base.plus_ledger(self._branches)
        return new.model_copy(update={"ledger": self._take(base, writes, CARRY_WRITE_UNITS * writes)})

    def carry_branch(self, branch: Branch, write_units: float) -> Branch:
        """``branch`` with this branch delivery's counts added to its own ledger (this write included, at
        ``write_units`` in advance), when the delivery runs that branch; else unchanged. Then ``carried``."""
        if self.execution_id is None or self.branch != (branch.step_index, branch.branch):
            self._carried = None
            return branch
        writes = 1 if self.reports_requests else 0
        base = branch.ledger or Ledger()
        return branch.model_copy(update={"ledger": self._take(base, writes, write_units * writes)})

    def include_branches(self, ledgers: Iterable[Ledger | None]) -> None:
        """A fan-in: its commit also carries every branch's ledger (once: a retried fan-in replaces it)."""
        total = Ledger()
        for b in ledgers:
            if b is not None:
                total = total.plus_ledger(b)
        self._branches = total

    def _take(self, base: Ledger, writes: int, ahead_units: float) -> Ledger:
        now_ns = time.monotonic_ns()
        elapsed_ms = (now_ns - self._mark_ns) // 1_000_000
        requests, write_units = self.requests + writes, self.write_units + (ahead_units if self.reports_units else 0.0)
        self._carried = (requests, self.read_units, write_units, self.messages, self._mark_ns + elapsed_ms * 1_000_000)
        return base.plus(requests, self.read_units, write_units, self.messages, elapsed_ms)

    def carried(self) -> None:
        """The carrying write applied: start counting afresh, less what was counted in advance (the store
        reports the write itself after this; its units beyond the advance ride on the next commit)."""
        if self._carried is None:
            return
        requests, read_units, write_units, messages, mark_ns = self._carried
        self.requests -= requests
        self.read_units -= read_units
        self.write_units -= write_units
        self.messages -= messages
        self._mark_ns = mark_ns  # whole milliseconds were carried; the remainder stays
        self._carried = None
        self._branches = None
