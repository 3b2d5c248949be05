"""The simulated world around the engine: a crashing process, an SQS-like queue, and proxies that
route every store and queue call through the scheduler so it can crash, fail, or pause there.

Nothing here is threaded. A "pause" runs other operations synchronously inside the paused call
(re-entrantly), which is how a worker stopped mid-step (SIGSTOP) looks to everyone else.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from engine_core.clock import format_ts, parse_ts
from engine_core.errors import StepSupersededError, StorageError, TransitionConflictError
from engine_core.model import StepMessage
from engine_core.ports import DuePage, DueRef
from engine_core.sharding import shard_of
from engine_core.adapters._items import step_sort_key

if TYPE_CHECKING:
    from .sim import Simulation


class SimulatedCrash(BaseException):
    """The process died right here. A BaseException, so no ``except Exception`` in engine code can
    swallow it; nothing after it runs and the message being handled is not acknowledged."""

    def __init__(self, op_id: int, where: str):
        super().__init__(f"simulated crash in op {op_id} at {where}")
        self.op_id, self.where = op_id, where


class InjectedStorageError(StorageError):
    """A store call failed (throttling, timeout). With ``after`` the write had applied anyway."""


class InjectedQueueError(Exception):
    """SendMessage failed the way botocore would report it (not an EngineError)."""


# -- per-operation fault plans --------------------------------------------------------------------
@dataclass
class OpPlan:
    """What goes wrong during one operation (a delivery, a sweep, a start). Calls are numbered from 1
    over every store and queue call the operation makes, the engine's named fault points
    (``worker.after_claim``, ...) and the acknowledgement included."""

    crash_at: int | None = None
    """Crash at this call number..."""
    crash_on: str | None = None
    """...or at the ``crash_nth`` call of this method or point (``commit``, ``put_step``, ``send``,
    ``worker.after_record``, ...): with nth > 1 the crash lands inside a chain of steps."""
    crash_nth: int = 1
    crash_after: bool = True
    error_at: int | None = None
    error_after: bool = False
    pause_at: int | None = None
    pause_on: str | None = None
    """...or pause at the ``pause_nth`` call of this method or point (scripted scenarios)."""
    pause_nth: int = 1
    pause_after: bool = False
    body_at: int = 1
    """Which step body of the operation (1 = the first; more inside a chain) the body faults hit."""
    body_crash: bool = False
    body_pause: bool = False
    body_overrun: bool = False
    """The body runs past its timeout budget (the engine sees a step_timeout)."""
    low_time: bool = False
    lose_ack: bool = False
    deadline_s: float | None = None
    """The invocation's time left when the delivery starts (``remaining_ms``); None: no deadline given.
    Past it the simulated Lambda is killed at its next call."""


@dataclass
class Op:
    id: int
    kind: str
    depth: int
    plan: OpPlan
    label: str = ""
    calls: int = 0
    crashed: bool = False
    mid: int | None = None
    """The queue message a delivery handles."""
    message: StepMessage | None = None
    deadline: dt.datetime | None = None
    names: dict[str, int] = field(default_factory=dict)
    """Calls so far by name (for ``crash_nth``)."""
    call_at: dt.datetime | None = None
    """When the current store or queue call was made."""
    bodies: int = 0
    chained: int = 0
    """Commits this operation made that moved on and claimed the next step in the same write."""


# -- the queue ------------------------------------------------------------------------------------
@dataclass
class SimMessage:
    mid: int
    body: StepMessage
    visible_at: dt.datetime
    receives: int = 0
    copy_of: int | None = None
    sent_at: dt.datetime | None = None


BACKLOG_MAX_LEASES = 6
"""The longest a backlog delays a send, in leases (``FaultMix.backlog``): long enough for several re-drives."""


class SimQueue:
    """SQS standard queue semantics, on the simulation's clock and RNG.

    DelaySeconds 0-900, visibility timeout per receive, a receipt per receive (an acknowledgement with
    an outdated receipt deletes nothing), redrive to the DLQ on the receive after ``max_receives``.
    While faults are on, a send may be lost, duplicated, or delayed beyond what was asked.
    """

    def __init__(self, sim: Simulation, visibility_s: float, max_receives: int):
        self.sim = sim
        self.visibility = dt.timedelta(seconds=visibility_s)
        self.max_receives = max_receives
        self.messages: dict[int, SimMessage] = {}
        self.dlq: list[SimMessage] = []
        self.dead_letters: list[dict[str, Any]] = []
        self.lost: set[int] = set()
        self._next_id = 0

    def _add(self, body: StepMessage, visible_at: dt.datetime, copy_of: int | None = None,
             sent_at: dt.datetime | None = None) -> SimMessage:
        self._next_id += 1
        m = SimMessage(self._next_id, body, visible_at, copy_of=copy_of, sent_at=sent_at or self.sim.clock.now())
        self.messages[m.mid] = m
        return m

    def send(self, message: StepMessage, delay_s: int = 0) -> None:
        if not isinstance(delay_s, int) or not 0 <= delay_s <= 900:
            raise ValueError(f"DelaySeconds must be an integer 0-900, got {delay_s!r}")  # what SQS says
        sim = self.sim
        now = sim.clock.now()
        f = sim.fx
        if sim.faults_on and f.drop and sim.rng.random() < f.drop:
            sim.stat("queue.dropped")
            sim.log(f"    queue: LOST send {_m(message)}")
            return
        copies = 2 if sim.faults_on and f.dup and sim.rng.random() < f.dup else 1
        first = None
        for i in range(copies):
            extra = sim.rng.uniform(0, f.extra_delay) if sim.faults_on and f.extra_delay and sim.rng.random() < 0.3 else 0.0
            if sim.faults_on and f.backlog:  # behind every message already queued (no RNG draw: seeds stay), up to
                # BACKLOG_MAX_LEASES leases: the fleet drains it eventually, and the run still moves
                extra += min(f.backlog * len(self.messages), BACKLOG_MAX_LEASES * sim.settings.lease_s)
                sim.stat("queue.backlogged")
            m = self._add(message, now + dt.timedelta(seconds=delay_s + extra), copy_of=first)
            first = first or m.mid
            sim.log(f"    queue: +#{m.mid} {_m(message)} delay={delay_s}" + (f"+{extra:.0f}" if extra else "")
                    + (" (duplicate)" if i else ""))
        if copies == 2:
            sim.stat("queue.duplicated")

    def send_dead_letter(self, body: dict[str, Any]) -> None:
        self.dead_letters.append(body)

    def visible(self) -> list[SimMessage]:
        now = self.sim.clock.now()
        return [m for m in self.messages.values() if m.visible_at <= now]

    def receive(self, m: SimMessage) -> int | None:
        """Hand ``m`` to a worker; returns the receipt, or None if SQS moved it to the DLQ instead."""
        if m.receives >= self.max_receives:
            del self.messages[m.mid]
            self.dlq.append(m)
            self.sim.stat("queue.dead_lettered")
            self.sim.log(f"  queue: #{m.mid} {_m(m.body)} -> DLQ after {m.receives} receives")
            return None
        m.receives += 1
        m.visible_at = self.sim.clock.now() + self.visibility
        return m.receives

    def ack(self, m: SimMessage, receipt: int) -> None:
        live = self.messages.get(m.mid)
        if live is not None and live.receives == receipt:
            del self.messages[m.mid]

    def duplicate(self, m: SimMessage) -> None:
        """SQS handed out a second copy of a message (at-least-once delivery)."""
        self._add(m.body, self.sim.clock.now(), copy_of=m.mid, sent_at=m.sent_at)

    def lose(self, m: SimMessage) -> None:
        del self.messages[m.mid]
        self.lost.add(m.mid)

    def next_visible_at(self) -> dt.datetime | None:
        return min((m.visible_at for m in self.messages.values()), default=None)


def _m(body: StepMessage) -> str:
    return f"({body.execution_id[:8]} s{body.step} v{body.version})"


# -- proxies --------------------------------------------------------------------------------------
class StoreProxy:
    """The engine's view of the MemoryStore: every call is a crash/error/pause point; creates, commits
    and history writes are recorded for the checker (with the stored item before and after, so a
    store that breaks its own conditions is seen), and ``query_due`` may answer from an older snapshot
    of the due index (the GSI is eventually consistent)."""

    def __init__(self, inner, sim: Simulation):
        self.inner, self.sim = inner, sim

    def create(self, execution, input_blob, replace_version=None):
        def call():
            self.inner.create(execution, input_blob, replace_version)
            self.sim.observe_create(execution, input_blob)
        return self.sim.call("create", call)

    def load(self, execution_id):
        return self.sim.call("load", lambda: self.inner.load(execution_id))

    def load_state(self, execution_id, since=None):
        return self.sim.call("load_state", lambda: self.inner.load_state(execution_id, since))

    def commit(self, transition):
        return self._commit(transition, lambda: self.inner.commit(transition))

    def commit_operation(self, transition, record, legacy=False):
        """An operator's commit with its record: one write, as ``commit`` (the same crash point)."""
        return self._commit(transition, lambda: self.inner.commit_operation(transition, record, legacy))

    def _commit(self, transition, apply):
        def call():
            eid = transition.new.execution_id
            before = self.inner.metas.get(eid)
            before = None if before is None else dict(before)
            try:
                apply()
            except TransitionConflictError:
                self.sim.stat("store.commit_conflicts")
                self.sim.log(f"    store: {eid[:8]} commit s{transition.expected_step} "
                             f"v{transition.expected_version} lost the race")
                raise
            self.sim.observe_commit(transition, before, dict(self.inner.metas[eid]))
        return self.sim.call("commit", call)

    def put_step(self, execution_id, record):
        def call():
            key = step_sort_key(record.step_index, record.name)
            before = self.inner.steps.get(execution_id, {}).get(key)
            before = None if before is None else dict(before)
            try:
                self.inner.put_step(execution_id, record)
            except StepSupersededError:
                self.sim.stat("store.put_superseded")
                self.sim.log(f"    store: {execution_id[:8]} put s{record.step_index} attempt {record.attempts} "
                             "superseded")
                raise
            self.sim.observe_put(execution_id, record, before)
        return self.sim.call("put_step", call)

    def stamp_items(self, execution_id, expires_at):
        return self.sim.call("stamp_items", lambda: self.inner.stamp_items(execution_id, expires_at))

    def fail_unreadable(self, execution_id, error, now, expires_at):
        return self.sim.call("fail_unreadable", lambda: self.inner.fail_unreadable(execution_id, error, now, expires_at))

    def finalize(self, execution_id, version):
        def call():
            self.inner.finalize(execution_id, version)
            self.sim.log(f"    store: {execution_id[:8]} finalize v{version}")
        return self.sim.call("finalize", call)

    def query_due(self, shard, now, limit, cursor=None):
        def call():
            snap = self.sim.stale_snapshot()
            if snap is None:
                return self.inner.query_due(shard, now, limit, cursor)
            self.sim.stat("store.stale_index_reads")
            return query_snapshot(snap, self.inner.shards, shard, now, limit, cursor)
        return self.sim.call("query_due", call)

    def query_unfinalized(self, shard, now, limit, cursor=None):
        return self.sim.call("query_unfinalized", lambda: self.inner.query_unfinalized(shard, now, limit, cursor))

    def history(self, execution_id):
        return self.sim.call("history", lambda: self.inner.history(execution_id))

    def __getattr__(self, name):
        """A store method this proxy does not know yet is still a crash point (nothing is observed)."""
        method = getattr(self.inner, name)
        if not callable(method) or name.startswith("_"):
            return method
        return lambda *args, **kwargs: self.sim.call(name, lambda: method(*args, **kwargs))


def due_key(attrs: dict[str, Any]) -> str | None:
    """The item's due-index key (GSI1SK): ``index_at``, or ``next_wake_at`` for items without one."""
    key = attrs.get("index_at") or attrs.get("next_wake_at")
    return key if isinstance(key, str) else None


def due_snapshot(store) -> dict[str, str]:
    """The due index as it stands: execution id -> its key (the sparse GSI's content)."""
    return {eid: key for eid, a in store.metas.items() if (key := due_key(a)) is not None}


def query_snapshot(snap: dict[str, str], shards: int, shard: int, now: dt.datetime, limit: int,
                   cursor: Any | None) -> DuePage:
    """MemoryStore.query_due's contract, answered from an older copy of the index."""
    bound = format_ts(now)
    due = sorted((ts, eid) for eid, ts in snap.items()
                 if ts <= bound and shard_of(eid, shards) == shard and (cursor is None or (ts, eid) > tuple(cursor)))
    page = due[:limit]
    return DuePage(items=[DueRef(execution_id=eid, next_wake_at=parse_ts(ts)) for ts, eid in page],
                   cursor=page[-1] if len(due) > limit and page else None, read_count=len(page))


class QueueProxy:
    def __init__(self, inner: SimQueue, sim: Simulation):
        self.inner, self.sim = inner, sim

    def send(self, message, delay_s=0):
        return self.sim.call("send", lambda: self.inner.send(message, delay_s))

    def send_dead_letter(self, body):
        return self.sim.call("send_dead_letter", lambda: self.inner.send_dead_letter(body))


# -- deliberately broken stores, for the checker's self-test --------------------------------------
def broken_store_class(kind: str):
    """A MemoryStore subclass with one guarantee removed; the checker must notice within a few seeds."""
    from engine_core.errors import ExecutionNotFoundError
    from engine_core.adapters._items import execution_to_attrs, step_to_attrs
    from engine_core.adapters.memory import MemoryStore

    if kind == "commit_ignores_version":
        class Broken(MemoryStore):
            def commit(self, transition):
                self._count("commit")
                new = transition.new
                if new.execution_id not in self.metas:
                    raise ExecutionNotFoundError(new.execution_id)
                self.metas[new.execution_id] = execution_to_attrs(new)  # no condition at all
    elif kind == "put_ignores_later_attempt":
        class Broken(MemoryStore):
            def put_step(self, execution_id, record):
                self._count("put_step")
                if execution_id not in self.metas:
                    raise ExecutionNotFoundError(execution_id)
                # no condition: a taken-over attempt (a zombie) overwrites its successor's record
                self.steps.setdefault(execution_id, {})[step_sort_key(record.step_index, record.name)] = \
                    step_to_attrs(record)
    elif kind == "claim_not_counted":
        class Broken(MemoryStore):
            def commit(self, transition):
                old = dict(self.metas.get(transition.new.execution_id) or {})
                super().commit(transition)
                attrs = self.metas[transition.new.execution_id]
                if old.get("current_step") == attrs.get("current_step") and attrs.get("attempt", 0) > old.get("attempt", 0):
                    # the claim's write forgets its counters (an update expression that lost its ADDs)
                    attrs["attempt"] = old.get("attempt", 0)
                    attrs["total_attempts"] = old.get("total_attempts", 0)
    elif kind == "terminal_keeps_due_key":
        class Broken(MemoryStore):
            def commit(self, transition):
                old = self.metas.get(transition.new.execution_id, {}).get("index_at")
                super().commit(transition)
                attrs = self.metas[transition.new.execution_id]
                if "index_at" not in attrs and old is not None:
                    attrs["index_at"] = old  # forgot to REMOVE the GSI keys
    elif kind == "index_misses_items":
        class Broken(MemoryStore):
            def query_due(self, shard, now, limit, cursor=None):
                self._count("query_due")
                return DuePage(items=[], cursor=None, read_count=0)  # the sweeper sees nothing
    else:
        raise ValueError(kind)
    Broken.__name__ = f"MemoryStore[{kind}]"
    return Broken


BROKEN_KINDS = ("commit_ignores_version", "put_ignores_later_attempt", "claim_not_counted", "terminal_keeps_due_key",
                "index_misses_items")
