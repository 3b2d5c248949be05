"""The simulated world around the engine: a crashing process, an SQS-like queue, and proxies that
route every store and queue call through the scheduler so it can crash, fail, or pause there.

Nothing here is threaded. A "pause" runs other operations synchronously inside the paused call
(re-entrantly), which is how a worker stopped mid-step (SIGSTOP) looks to everyone else.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from engine_core.clock import format_ts, parse_ts
from engine_core.errors import StorageError, TransitionConflictError, StepBusyError, StepSettledError
from engine_core.model import StepMessage
from engine_core.ports import DuePage, DueRef
from engine_core.sharding import shard_of

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
    over every store and queue call the operation makes, the acknowledgement included."""

    crash_at: int | None = None
    """Crash at this call number..."""
    crash_on: str | None = None
    """...or at the first call of this method (``commit``, ``finalize``, ``send``, ...)."""
    crash_after: bool = True
    error_at: int | None = None
    error_after: bool = False
    pause_at: int | None = None
    pause_after: bool = False
    body_crash: bool = False
    body_pause: bool = False
    low_time: bool = False
    lose_ack: bool = False


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


# -- the queue ------------------------------------------------------------------------------------
@dataclass
class SimMessage:
    mid: int
    body: StepMessage
    visible_at: dt.datetime
    receives: int = 0
    copy_of: int | None = None


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

    def _add(self, body: StepMessage, visible_at: dt.datetime, copy_of: int | None = None) -> SimMessage:
        self._next_id += 1
        m = SimMessage(self._next_id, body, visible_at, copy_of=copy_of)
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
        self._add(m.body, self.sim.clock.now(), copy_of=m.mid)

    def lose(self, m: SimMessage) -> None:
        del self.messages[m.mid]
        self.lost.add(m.mid)

    def next_visible_at(self) -> dt.datetime | None:
        return min((m.visible_at for m in self.messages.values()), default=None)


def _m(body: StepMessage) -> str:
    return f"({body.execution_id[:8]} s{body.step} v{body.version})"


# -- proxies --------------------------------------------------------------------------------------
class StoreProxy:
    """The engine's view of the MemoryStore: every call is a crash/error/pause point, commits and
    intents are recorded for the checker, and ``query_due`` may answer from an older snapshot of the
    due index (the GSI is eventually consistent)."""

    def __init__(self, inner, sim: Simulation):
        self.inner, self.sim = inner, sim

    def create(self, execution):
        def call():
            self.inner.create(execution)
            self.sim.observe_create(execution)
        return self.sim.call("create", call)

    def load(self, execution_id):
        return self.sim.call("load", lambda: self.inner.load(execution_id))

    def record_intent(self, execution_id, step_index, name, started_at, stale_before):
        def call():
            try:
                record = self.inner.record_intent(execution_id, step_index, name, started_at, stale_before)
            except (StepBusyError, StepSettledError) as exc:
                self.sim.log(f"    store: {execution_id[:8]} intent s{step_index} refused: {type(exc).__name__}")
                raise
            self.sim.observe_intent(execution_id, step_index, record.attempts, started_at)
            return record
        return self.sim.call("record_intent", call)

    def commit(self, transition):
        def call():
            before = self.inner.metas.get(transition.new.execution_id)
            before = None if before is None else dict(before)
            try:
                self.inner.commit(transition)
            except TransitionConflictError:
                self.sim.stat("store.commit_conflicts")
                self.sim.log(f"    store: {transition.new.execution_id[:8]} commit s{transition.expected_step} "
                             f"v{transition.expected_version} lost the race")
                raise
            self.sim.observe_commit(transition, before)
        return self.sim.call("commit", call)

    def fail_unreadable(self, execution_id, error, now, expires_at):
        return self.sim.call("fail_unreadable", lambda: self.inner.fail_unreadable(execution_id, error, now, expires_at))

    def finalize(self, execution_id, version, expires_at):
        return self.sim.call("finalize", lambda: self.inner.finalize(execution_id, version, expires_at))

    def query_due(self, shard, now, limit, cursor=None):
        def call():
            snap = self.sim.stale_snapshot()
            if snap is None:
                return self.inner.query_due(shard, now, limit, cursor)
            self.sim.stat("store.stale_index_reads")
            return query_snapshot(snap, self.inner.shards, shard, now, limit, cursor)
        return self.sim.call("query_due", call)

    def history(self, execution_id):
        return self.sim.call("history", lambda: self.inner.history(execution_id))

    def __getattr__(self, name):
        """A store method this proxy does not know yet is still a crash point (nothing is observed)."""
        method = getattr(self.inner, name)
        if not callable(method) or name.startswith("_"):
            return method
        return lambda *args, **kwargs: self.sim.call(name, lambda: method(*args, **kwargs))


def due_snapshot(store) -> dict[str, str]:
    """The due index as it stands: execution id -> next_wake_at (the sparse GSI's content)."""
    return {eid: a["next_wake_at"] for eid, a in store.metas.items() if isinstance(a.get("next_wake_at"), str)}


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
    from engine_core.storage._items import execution_to_attrs
    from engine_core.storage.memory import MemoryStore

    if kind == "commit_ignores_version":
        class Broken(MemoryStore):
            def commit(self, transition):
                self._count("commit")
                new = transition.new
                if new.execution_id not in self.metas:
                    raise ExecutionNotFoundError(new.execution_id)
                self.metas[new.execution_id] = execution_to_attrs(new)  # no condition at all
                if transition.step is not None:
                    self._settle_step(new.execution_id, transition.step)
    elif kind == "intent_ignores_busy":
        class Broken(MemoryStore):
            def record_intent(self, execution_id, step_index, name, started_at, stale_before):
                # a RUNNING attempt never blocks another one (settled steps are still refused)
                return super().record_intent(execution_id, step_index, name, started_at,
                                             started_at + dt.timedelta(days=365))
    elif kind == "terminal_keeps_due_key":
        class Broken(MemoryStore):
            def commit(self, transition):
                old = self.metas.get(transition.new.execution_id, {}).get("next_wake_at")
                super().commit(transition)
                attrs = self.metas[transition.new.execution_id]
                if "next_wake_at" not in attrs and old is not None:
                    attrs["next_wake_at"] = old  # forgot to REMOVE the GSI keys
    elif kind == "index_misses_items":
        class Broken(MemoryStore):
            def query_due(self, shard, now, limit, cursor=None):
                self._count("query_due")
                return DuePage(items=[], cursor=None, read_count=0)  # the sweeper sees nothing
    else:
        raise ValueError(kind)
    Broken.__name__ = f"MemoryStore[{kind}]"
    return Broken


BROKEN_KINDS = ("commit_ignores_version", "intent_ignores_busy", "terminal_keeps_due_key", "index_misses_items")
