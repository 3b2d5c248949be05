"""What a worker process already read of a code-first execution's history (``Prefixes``), so its next
delivery reads only the records after it.

A code-first delivery replays the function from the top, so it needs every record of the run. Records
of positions the execution has moved past never change: a record is written only by the attempt that
holds the current position, and a history write is refused over one written at a later version. Only
compensation (which writes records of earlier positions, and goes back through them) and a new run
under the same id (a token re-used after expiry) break that, and both show on the execution item.

So at the end of a delivery the records of the positions below the current one are kept here, with the
execution item they were consistent with (``Prefix``). The next delivery of that execution in this
process reads the history from that position on (the store's bounded read, as after a step list's
checkpoint) and joins the kept records in front, when the item it reads still says nothing could have
changed them (``Prefix.fits``); anything else drops the entry, and the delivery reads the whole history
as before. A delivery in another process has no entry (or an older one, which still fits: the records
it keeps are older positions still). Decoded values are kept beside the records and handed to the
function as fresh copies (each with the cheapest copy that fits it, ``codec.copier``), never shared
between replays.
"""

from __future__ import annotations

import dataclasses
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable
from typing import Any

from ..frozen import with_fields
from ..model import Execution, ExecutionState, StepRecord, StepStatus

Kept = tuple[StepRecord, Any, Callable[[Any], Any] | None, str]
"""A decoded value kept for replays: the record it came from, the value, how to copy it (None: it cannot
change, so it is handed out as it is) and the record's name (read from the tuple: an attribute of a
pydantic model costs three times an item of a tuple, and a replay compares it once per position)."""

Ready = StepRecord
"""A position a replay hands out as recorded: its record (its name and kind are on it). The record itself,
not a tuple built around it: a kept prefix holds one per completed position for as long as the execution
runs in this process, and every object it holds is one more for the garbage collector to scan."""

Task = Kept
"""A completed ``step()`` position whose value is decoded: its ``Kept`` entry itself (the record, the value,
how to copy it and the name ``api.step`` checks). What ``api.step`` hands out on a replay with a single
lookup."""

_OVERHEAD_BYTES = 200
"""What one kept record costs beyond its encoded result, roughly (the model and its strings)."""


def index_records(records: Iterable[Any], recorded: dict[int, StepRecord], ready: dict[int, Ready] | None) -> None:
    """Add ``records`` (in history order: a later record of a position wins) to ``recorded`` (position ->
    record, compensations left out) and to ``ready`` (the positions that completed, a sleep excepted: its
    record is written when it begins; None: none is handed out)."""
    succeeded = StepStatus.SUCCEEDED
    for r in records:  # a delivery replays every record it read: one pass, no call per record
        if type(r) is StepRecord and (kind := r.kind) != "compensation":
            recorded[r.step_index] = r
            if ready is not None and r.status is succeeded and kind != "sleep":
                ready[r.step_index] = r


@dataclasses.dataclass(eq=False)
class Prefix:
    """The records of an execution's positions below ``upto``, as of the execution item at ``version``."""

    run: str
    version: int
    upto: int
    redrives: int
    workflow_version: int
    records: tuple[StepRecord, ...]
    size: int
    values: dict[int, Kept] = dataclasses.field(default_factory=dict)
    """Position -> (the record, the value decoded from it, its copier): a copy of the value is what a replay returns,
    when the record at that position is that very record (the next delivery adds to it)."""
    ready: dict[int, Ready] = dataclasses.field(default_factory=dict)
    """The positions below ``upto`` a replay hands out as recorded (``index_records``): a delivery uses
    them (a copy, when it read records after the prefix) instead of looking at every kept record again."""
    tasks: dict[int, Task] = dataclasses.field(default_factory=dict)
    """Of ``ready``, the ``step()`` positions whose value was decoded when the prefix was kept (the record in
    ``values`` is the position's record): ``step()`` replays them from this table alone. Never changed once
    built (deliveries share it)."""

    def fits(self, e: Execution) -> bool:
        """Whether the records kept are still this run's records of its positions below ``upto``: the same
        run, no write of the item lost or undone since (versions only grow), never redriven or moved to
        another version since, at or past ``upto``, and nothing compensating or about to."""
        return (e.run == self.run and e.version >= self.version and e.current_step >= self.upto
                and e.redrives == self.redrives and e.workflow_version == self.workflow_version and e.layout == 2
                and not e.compensating and not e.cancel_requested and e.failed_step is None
                and e.compensated is None and not e.status.is_terminal)


def prefix_of(e: Execution, records: list[Any], values: dict[int, Kept],
              base: Prefix | None = None) -> Prefix | None:
    """The prefix to keep after a delivery that left ``e`` (as it wrote or read it) with ``records`` (this
    run's whole history as the delivery knows it) and ``values`` (those it decoded, by position); None when
    nothing may be kept. ``base``: the prefix the delivery's ``records`` begin with (only the records
    after it are looked at: the caller vouches that it wrote none of the positions ``base`` keeps)."""
    upto = e.current_step
    if upto <= 0 or e.layout != 2 or e.compensating or e.cancel_requested or e.failed_step is not None \
            or e.compensated is not None or e.status.is_terminal:
        return None
    start, kept, size, ready, tasks = 0, (), 0, {}, {}
    if base is not None and base.run == e.run and base.upto <= upto and len(records) >= base.upto \
            and records[base.upto - 1] is base.records[-1] and records[0] is base.records[0]:
        start, kept, size, ready, tasks = base.upto, base.records, base.size, dict(base.ready), dict(base.tasks)
    # Every position below the current one has exactly one record, in position order (as the store returns
    # them); anything else is not a history this module vouches for. One pass: checked, sized and indexed
    # (``index_records``' rules: a completed position is handed out, a sleep excepted).
    added: list[StepRecord] = []
    expected, succeeded, no_value = start, StepStatus.SUCCEEDED, (None, None, None)
    for r in records[start:]:
        if type(r) is not StepRecord or (kind := r.kind) == "compensation":
            return None  # unreadable, or a compensation ran: read it all next time
        i = r.step_index
        if i >= upto:
            continue
        if i != expected:
            return None
        expected = i + 1
        added.append(r)
        blob, context = r.result_blob, r.context_blob
        size += _OVERHEAD_BYTES + len(r.name) + (2 * len(blob) if blob else 0) + (len(context) if context else 0)
        if r.status is succeeded and kind != "sleep":
            ready[i] = r
            if kind == "task" and (value := values.get(i, no_value))[0] is r:
                tasks[i] = value
    if expected != upto:
        return None
    return Prefix(run=e.run, version=e.version, upto=upto, redrives=e.redrives, workflow_version=e.workflow_version,
                  records=(*kept, *added), size=size, values=values, ready=ready, tasks=tasks)


class Prefixes:
    """A worker process's kept prefixes, least recently used dropped first beyond ``max_bytes``."""

    def __init__(self, max_bytes: int):
        self.max_bytes = max_bytes
        self._entries: OrderedDict[str, Prefix] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, execution_id: str) -> Prefix | None:
        with self._lock:
            entry = self._entries.get(execution_id)
            if entry is not None:
                self._entries.move_to_end(execution_id)
            return entry

    def since(self, execution_id: str) -> int | None:
        """Where the next delivery's read of the history may start (None: read it all)."""
        entry = self.get(execution_id)
        return None if entry is None else entry.upto

    def join(self, state: ExecutionState) -> tuple[ExecutionState, Prefix] | None:
        """``state`` (read from the kept prefix's position on, this run's items only) with the kept records
        in front: the whole history, as a read of it all returns it. None (and the entry dropped) when
        the entry does not fit the execution as read now."""
        eid = state.execution.execution_id
        entry = self.get(eid)
        if entry is None or state.records_from != entry.upto or not entry.fits(state.execution):
            self.drop(eid)
            return None
        whole = with_fields(state, records=[*entry.records, *state.records], records_from=None)
        return whole, entry

    def keep(self, execution_id: str, entry: Prefix | None) -> None:
        """Keep ``entry`` for the execution's next delivery (None: keep nothing)."""
        if entry is None or entry.size > self.max_bytes:
            self.drop(execution_id)
            return
        with self._lock:
            old = self._entries.pop(execution_id, None)
            if old is not None:
                self._bytes -= old.size
            self._entries[execution_id] = entry
            self._bytes += entry.size
            while self._bytes > self.max_bytes and self._entries:
                _, dropped = self._entries.popitem(last=False)
                self._bytes -= dropped.size

    def drop(self, execution_id: str) -> None:
        with self._lock:
            old = self._entries.pop(execution_id, None)
            if old is not None:
                self._bytes -= old.size

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._bytes = 0
