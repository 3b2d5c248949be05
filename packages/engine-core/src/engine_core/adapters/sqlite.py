"""SQLite adapter: the design's single table in one local file, with DynamoDB's conditions.

``LOOM_STORE=sqlite`` with ``LOOM_SQLITE_PATH`` (the file, created if missing); ``LOOM_SQLITE_SYNCHRONOUS``
(``FULL``, the default, or ``NORMAL``) and ``LOOM_SQLITE_BUSY_TIMEOUT_MS`` are described in ``sqlite_db``.

=========  ===================  =====================  ===========================================
item       pk                   sk                     index columns
=========  ===================  =====================  ===========================================
execution  ``EXEC#<id>``        ``#META``              gsi1 ``DUE#<shard>`` / ``<index_at>`` while
                                                       live, ``FIN#<shard>`` / ``<finalize_by>``
                                                       after; gsi2 ``<created_at>#<id>``
input      ``EXEC#<id>``        ``#INPUT``             -
join       ``EXEC#<id>``        ``JOIN#<nnn>``         -
step       ``EXEC#<id>``        ``STEP#<nnn>#<name>``  -
event      ``EXEC#<id>#E``      ``EVT#<name>#<id>``    -
operation  ``EXEC#<id>#O``      ``OP#<version>#<op>``  -
branch     ``EXEC#<id>#S<nnn>`` ``B#<bbbbb>``          -
=========  ===================  =====================  ===========================================

Each item's attributes are those of ``_items.py`` (the mapping every store shares), stored as JSON;
``expires_at`` is also a column (the TTL; ``reap_expired`` deletes what it passed, as DynamoDB's TTL
does). Every conditional write reads the stored item and writes under the file's write lock
(``BEGIN IMMEDIATE``), so a condition holds across threads and processes: a version-checked commit, a
history record written once per (run, version), an event once per id and run, a branch's completion
and its count in one transaction. Operations and events sit in partitions of their own, so a
delivery's one query (``load_state``) never reads them.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Mapping
from typing import Any

from ..clock import format_ts
from ..errors import CorruptStateError, ExecutionExistsError, ExecutionNotFoundError, StepSupersededError, TransitionConflictError
from ..model import (
    CorruptRecord,
    ErrorInfo,
    EventRecord,
    Execution,
    ExecutionState,
    ListEntry,
    OperationRecord,
    StepRecord,
)
from ..ports import DuePage, HistoryPage, ListPage, Transition
from ..settings import ConfigurationError, EngineSettings
from ..sharding import shard_of
from . import sqlite_branches as _fanout
from . import sqlite_housekeeping as _housekeeping
from . import sqlite_index as _index
from ._items import (
    EVENT_PREFIX,
    INPUT_ATTR,
    JOIN_PREFIX,
    OP_PREFIX,
    START_ATTRS,
    STEP_PREFIX,
    TTL_ATTR,
    _epoch,
    event_from_attrs,
    event_sort_key,
    event_to_attrs,
    execution_from_attrs,
    execution_to_attrs,
    list_key,
    older_run,
    operation_from_attrs,
    operation_sort_key,
    operation_to_attrs,
    record_sort_key,
    start_attrs,
    step_from_attrs,
    step_sort_key,
    step_to_attrs,
    valid_list_key,
    with_start_attrs,
)
from ._backlog_items import BACKLOG_PK, BACKLOG_SK, mark_from_attrs, mark_moves_forward, mark_to_attrs
from ._schedule_items import SCHEDULE_PREFIX, SCHEDULE_SK, schedule_from_attrs, schedule_replaceable, schedule_to_attrs
from .sqlite_db import (
    BUSY_TIMEOUT_ENV,
    DEFAULT_BUSY_TIMEOUT_MS,
    PATH_ENV,
    SYNCHRONOUS_ENV,
    Database,
    attrs_of,
    decoded,
    read_all,
    read_page,
    dumps,
    exec_pk as _pk,
    get_raw,
    put_item,
    readable,
)

log = logging.getLogger("engine_core")

META_SK = "#META"
INPUT_SK = "#INPUT"
EVENTS_PARTITION = "#E"
OPS_PARTITION = "#O"
_DECODED_MAX = 20_000
"""History rows kept decoded (``SqliteStore._step``), about 20 MB at most."""

_COMMIT = ("UPDATE items SET attrs = ?, expires_at = ?, gsi1pk = ?, gsi1sk = ?, gsi2sk = ? WHERE pk = ? AND sk = '#META' "
           "AND CASE WHEN json_valid(attrs) THEN json_extract(attrs, '$.version') = ? "
           "AND json_extract(attrs, '$.current_step') = ? ELSE 0 END")
"""A commit: the execution item at exactly (step, version) becomes the new one (an unreadable item never matches)."""

_REPLACEABLE = """CASE
    WHEN NOT json_valid(items.attrs) THEN 1
    WHEN json_type(items.attrs, '$.written_version') IS NOT 'integer' THEN 1
    WHEN :run IS NOT NULL AND CASE WHEN json_type(items.attrs, '$.run') = 'text'
                                   THEN json_extract(items.attrs, '$.run') < :run
                                   ELSE json_type(items.attrs, '$.finished_at') = 'text'
                                        AND json_extract(items.attrs, '$.finished_at') < :run END THEN 1
    ELSE (json_type(items.attrs, '$.run') IS NOT 'text' OR json_extract(items.attrs, '$.run') = :run)
         AND json_extract(items.attrs, '$.written_version') < :version
END"""
"""``_items.step_replaceable`` on the stored record: one from before written versions, one an older run left, or
one this run wrote at an earlier version is replaced (a CASE: SQLite does not promise to evaluate OR in order)."""
_PUT_STEP = ("INSERT INTO items (pk, sk, attrs, expires_at) VALUES (:pk, :sk, :attrs, :ttl) ON CONFLICT (pk, sk) "
             "DO UPDATE SET attrs = excluded.attrs, expires_at = excluded.expires_at WHERE " + _REPLACEABLE)


def store_from_env(env: Mapping[str, str], settings: EngineSettings, client_config: Any = None) -> SqliteStore:
    """``LOOM_STORE=sqlite``: the file ``LOOM_SQLITE_PATH`` (created with its directory if missing)."""
    path = env.get(PATH_ENV, "")
    if not path:
        raise ConfigurationError(f"LOOM_STORE=sqlite needs {PATH_ENV}, the database file (created if missing), "
                                 f"e.g. {PATH_ENV}=.loom/loom.db")
    busy = env.get(BUSY_TIMEOUT_ENV) or str(DEFAULT_BUSY_TIMEOUT_MS)
    if not busy.isdigit():
        raise ConfigurationError(f"{BUSY_TIMEOUT_ENV}={busy!r} must be a whole number of milliseconds")
    return SqliteStore(path, shards=settings.shards, synchronous=env.get(SYNCHRONOUS_ENV) or "FULL",
                       busy_timeout_ms=int(busy))


class SqliteStore:
    """State store in one SQLite file, safe for several threads and several processes on that file.

    Example:
        >>> store = SqliteStore(".loom/loom.db", shards=4)
    """

    def __init__(self, path: str, shards: int = 1, synchronous: str = "FULL",
                 busy_timeout_ms: int = DEFAULT_BUSY_TIMEOUT_MS, db: Database | None = None):
        self.db = db or Database(path, synchronous, busy_timeout_ms, shards)
        self.path, self.shards = self.db.path, self.db.shards
        self._decoded: dict[str, StepRecord] = {}

    def close(self) -> None:
        self.db.close()

    # -- the execution item -----------------------------------------------------------------------------
    def _meta_row(self, e: Execution) -> tuple[str, int | None, str | None, str | None, str]:
        """The execution item's columns: its attributes, TTL, due or housekeeping index key, list index key."""
        shard = shard_of(e.execution_id, self.shards)
        if e.due_at is not None:
            gsi1: tuple[str | None, str | None] = (f"DUE#{shard}", format_ts(e.due_at))
        elif e.finalize_by is not None:  # ended, housekeeping owed: the sweeper's second partition
            gsi1 = (f"FIN#{shard}", format_ts(e.finalize_by))
        else:
            gsi1 = (None, None)
        attrs = execution_to_attrs(e)
        return dumps(attrs), attrs.get(TTL_ATTR), gsi1[0], gsi1[1], list_key(e.created_at, e.execution_id)

    def _put_meta(self, conn: Any, e: Execution) -> None:
        conn.execute("INSERT OR REPLACE INTO items (attrs, expires_at, gsi1pk, gsi1sk, gsi2sk, pk, sk) "
                     "VALUES (?, ?, ?, ?, ?, ?, ?)", (*self._meta_row(e), _pk(e.execution_id), META_SK))

    @staticmethod
    def _decode_meta(execution_id: str, raw: Any) -> Execution:
        try:
            attrs = attrs_of(raw)
        except ValueError as exc:
            raise CorruptStateError(execution_id, str(exc), str(raw)) from None
        return execution_from_attrs(execution_id, attrs)

    def create(self, execution: Execution, input_blob: str, replace_version: int | None = None) -> None:
        eid = execution.execution_id
        with self.db.write() as conn:
            raw = get_raw(conn, _pk(eid), META_SK)
            if raw is not None:
                # Only an expired execution at that version is replaced (a run that reached the same
                # version number since is not expired, so a late replacement cannot overwrite it).
                old = readable(raw) or {}
                ttl = old.get(TTL_ATTR)
                expired_at_version = (replace_version is not None and old.get("version") == replace_version
                                      and isinstance(ttl, int) and ttl <= _epoch(execution.created_at))
                if not expired_at_version:
                    raise ExecutionExistsError(self._decode_meta(eid, raw))
            self._put_meta(conn, execution)
            put_item(conn, _pk(eid), INPUT_SK, {INPUT_ATTR: input_blob, **start_attrs(execution)})

    def load(self, execution_id: str) -> Execution | None:
        with self.db.read() as conn:
            raw = get_raw(conn, _pk(execution_id), META_SK)
        return None if raw is None else self._decode_meta(execution_id, raw)

    def load_state(self, execution_id: str, since: int | None = None) -> ExecutionState | None:
        with self.db.read() as conn:  # one statement: one snapshot of the execution's partition
            if since is None:
                rows = conn.execute("SELECT sk, attrs FROM items WHERE pk = ? ORDER BY sk",
                                    (_pk(execution_id),)).fetchall()
            else:  # the history only from the checkpoint at ``since`` on (what sorts before STEP# is not history)
                rows = conn.execute("SELECT sk, attrs FROM items WHERE pk = ? AND (sk < ? OR sk >= ?) ORDER BY sk",
                                    (_pk(execution_id), STEP_PREFIX, step_sort_key(since, ""))).fetchall()
        meta, input_blob, started = None, "", {}
        records, operations, events, joins = [], [], [], {}
        for sk, raw in rows:
            if sk == META_SK:
                meta = self._decode_meta(execution_id, raw)
            elif sk == INPUT_SK:
                stored = readable(raw) or {}  # unreadable: no input, so the context cannot be rebuilt (corrupt_state)
                blob = stored.get(INPUT_ATTR, "")
                input_blob = blob if isinstance(blob, str) else ""
                started = {k: v for k, v in stored.items() if k in START_ATTRS}
            elif sk.startswith(STEP_PREFIX):
                records.append(self._step(sk, raw))
            elif sk.startswith(OP_PREFIX):
                operations.append(decoded(sk, raw, operation_from_attrs))
            elif sk.startswith(EVENT_PREFIX):
                events.append(decoded(sk, raw, event_from_attrs))
            elif sk.startswith(JOIN_PREFIX) and (join := _fanout.decode_join(raw)) is not None:
                joins[join.step_index] = join
        if meta is None:
            return None
        return ExecutionState(with_start_attrs(meta, started), input_blob, records,
                              operations if since is None else [], events, joins=joins, records_from=since)

    def commit(self, transition: Transition) -> None:
        self._commit(transition, None, False)

    def commit_operation(self, transition: Transition, record: OperationRecord, legacy: bool = False) -> None:
        self._commit(transition, record, legacy)

    def _commit(self, transition: Transition, operation: OperationRecord | None, legacy: bool) -> None:
        new = transition.new
        eid = new.execution_id
        # The advance is valid only from the exact (step, version) the caller read: a duplicate, stale or
        # zombie delivery finds a newer version and changes nothing. The condition is evaluated on the
        # stored item in the same statement; only a loser reads it, to say who won. An operator's record
        # is written in the same transaction, only when the advance applied.
        with self.db.write() as conn:
            if conn.execute(_COMMIT, (*self._meta_row(new), _pk(eid), transition.expected_version,
                                      transition.expected_step)).rowcount == 1:
                if operation is not None:
                    put_item(conn, self._ops_pk(eid, legacy), operation_sort_key(operation),
                             operation_to_attrs(operation))
                return
            raw = get_raw(conn, _pk(eid), META_SK)
        if raw is None:
            raise ExecutionNotFoundError(eid)
        raise TransitionConflictError(eid, transition.expected_step, transition.expected_version, self._decode_meta(eid, raw))

    def put_step(self, execution_id: str, record: StepRecord) -> None:
        """Write a step's record unless a later attempt of this run (or a newer run) wrote one. Like a
        DynamoDB PutItem it does not look at the execution item; one upsert whose condition is
        ``_items.step_replaceable`` on the stored item (an unreadable one is replaced: every read reported it).

        Written without waiting for the disk: the engine follows every record with the execution's commit,
        whose sync makes the record durable too (the log is written in order). A crash between the two
        (process or machine) is the engine's crash after the record either way: the claim's lease re-drives
        the step, and its attempt writes the record again."""
        sk = record_sort_key(record)
        attrs = step_to_attrs(record)
        with self.db.statement(durable=False) as conn:
            written = conn.execute(_PUT_STEP, {"pk": _pk(execution_id), "sk": sk, "attrs": dumps(attrs),
                                               "ttl": attrs.get(TTL_ATTR), "run": record.run,
                                               "version": record.version}).rowcount
            if written == 1:
                return
            stored = readable(get_raw(conn, _pk(execution_id), sk)) or {}
        raise StepSupersededError(execution_id, record.step_index, record.version, int(stored.get("written_version", 0)))

    # -- housekeeping (``sqlite_housekeeping.py``) ---------------------------------------------------------
    def fail_unreadable(self, execution_id: str, error: ErrorInfo, now: dt.datetime, expires_at: dt.datetime) -> bool:
        return _housekeeping.fail_unreadable(self.db, execution_id, error, now, expires_at)

    def stamp_items(self, execution_id: str, expires_at: dt.datetime) -> int:
        """Raise the TTL of every item of the execution but ``#META`` (its input, history, joins, events,
        operations and branches) to ``expires_at``; never lowers one. Returns how many it raised."""
        return _housekeeping.stamp_items(self.db, execution_id, expires_at)

    def finalize(self, execution_id: str, version: int) -> None:
        _housekeeping.finalize(self.db, execution_id, version)

    def reap_expired(self, now: dt.datetime, limit: int = 1000) -> int:
        """Delete up to ``limit`` items whose TTL has passed, as DynamoDB's TTL does in the background (the
        local runtime's sweeper calls it; reads already treat an expired execution as gone)."""
        return _housekeeping.reap_expired(self.db, now, limit)

    # -- the due, housekeeping and list indexes (``sqlite_index.py``) ----------------------------------------
    def query_due(self, shard: int, now: dt.datetime, limit: int, cursor: Any | None = None) -> DuePage:
        return _index.query(self.db, "DUE", shard, now, limit, cursor)

    def query_unfinalized(self, shard: int, now: dt.datetime, limit: int, cursor: Any | None = None) -> DuePage:
        """Ended executions in ``shard`` whose housekeeping is overdue (their ``finalize_by`` passed)."""
        return _index.query(self.db, "FIN", shard, now, limit, cursor)

    def due_ids(self) -> set[str]:
        """Executions the due index holds (only live ones carry a key): what a liveness check reads."""
        return _index.due_ids(self.db)

    def query_list(self, limit: int, cursor: Any | None = None, created_after: dt.datetime | None = None,
                   created_before: dt.datetime | None = None) -> ListPage:
        """Executions newest first, optionally within a creation window, resuming strictly below ``cursor``."""
        return _index.query_list(self.db, limit, cursor, created_after, created_before)

    def load_statuses(self, execution_ids: list[str]) -> dict[str, str]:
        """The status each execution item holds now (unreadable and missing ones are left out)."""
        return _index.load_statuses(self.db, execution_ids)

    def load_versions(self, execution_ids: list[str]) -> dict[str, tuple[str, int]]:
        """The workflow and pinned version each execution item holds (unreadable and missing ones left out)."""
        return _index.load_versions(self.db, execution_ids)

    @staticmethod
    def valid_list_cursor(cursor: Any) -> bool:
        """A list index key the store made (``list_cursor``): creation time and id."""
        return valid_list_key(cursor)

    def list_cursor(self, entry: ListEntry) -> Any:
        """A ``query_list`` cursor that resumes right after ``entry``."""
        return list_key(entry.created_at, entry.execution_id)

    # -- history, operations, events ----------------------------------------------------------------------
    def _all(self, pk: str, prefix: str, decode, limit: int | None = None) -> list[Any]:
        return read_all(self.db, pk, prefix, decode, limit)

    def _page(self, pk: str, prefix: str, limit: int, after: str | None, decode) -> HistoryPage:
        return read_page(self.db, pk, prefix, limit, after, decode)

    def _step(self, sk: str, raw: Any) -> StepRecord | CorruptRecord:
        """A history row, decoded once per stored text: a delivery re-reads the records before its step, and
        decoding them (JSON, then the model) would otherwise grow with the history. The key is the exact
        stored text, so a changed or damaged row is decoded afresh."""
        if type(raw) is not str:
            return decoded(sk, raw, step_from_attrs)
        found = self._decoded.get(raw)
        if found is None:
            found = decoded(sk, raw, step_from_attrs)
            if isinstance(found, StepRecord):
                if len(self._decoded) >= _DECODED_MAX:
                    self._decoded.clear()
                self._decoded[raw] = found
        return found

    def history(self, execution_id: str) -> list[StepRecord | CorruptRecord]:
        return self._all(_pk(execution_id), STEP_PREFIX, step_from_attrs)

    def history_page(self, execution_id: str, limit: int, after: str | None = None) -> HistoryPage:
        return self._page(_pk(execution_id), STEP_PREFIX, limit, after, step_from_attrs)

    @staticmethod
    def _ops_pk(execution_id: str, legacy: bool) -> str:
        return _pk(execution_id) + ("" if legacy else OPS_PARTITION)

    @staticmethod
    def _events_pk(execution_id: str, legacy: bool) -> str:
        return _pk(execution_id) + ("" if legacy else EVENTS_PARTITION)

    def put_operation(self, execution_id: str, record: OperationRecord, legacy: bool = False) -> None:
        with self.db.write() as conn:
            put_item(conn, self._ops_pk(execution_id, legacy), operation_sort_key(record), operation_to_attrs(record))

    def operations(self, execution_id: str, legacy: bool = False) -> list[OperationRecord | CorruptRecord]:
        return self._all(self._ops_pk(execution_id, legacy), OP_PREFIX, operation_from_attrs)

    def operations_page(self, execution_id: str, limit: int, after: str | None = None,
                        legacy: bool = False) -> HistoryPage:
        return self._page(self._ops_pk(execution_id, legacy), OP_PREFIX, limit, after, operation_from_attrs)

    def put_event(self, execution_id: str, record: EventRecord, legacy: bool = False) -> bool:
        """Keep an event until a wait consumes it; False (nothing written) when its id was sent to this run
        before. An event an earlier run under the same id left is replaced."""
        pk, sk = self._events_pk(execution_id, legacy), event_sort_key(record.name, record.event_id)
        with self.db.write() as conn:
            raw = get_raw(conn, pk, sk)
            if raw is not None:
                stored = readable(raw)
                if stored is not None and not older_run(stored, record.run, "sent_at"):
                    return False  # sent before to this run: applied once
            put_item(conn, pk, sk, event_to_attrs(record))
        return True

    def list_events(self, execution_id: str, name: str | None = None, legacy: bool = False,
                    limit: int | None = None) -> list[EventRecord | CorruptRecord]:
        prefix = EVENT_PREFIX if name is None else event_sort_key(name, "")
        return self._all(self._events_pk(execution_id, legacy), prefix, event_from_attrs, limit)

    def events_page(self, execution_id: str, limit: int, after: str | None = None, legacy: bool = False) -> HistoryPage:
        return self._page(self._events_pk(execution_id, legacy), EVENT_PREFIX, limit, after, event_from_attrs)

    # -- schedules: SCHED#<name> / #SCHEDULE, one item per schedule ------------------------------------------
    def get_schedule(self, name: str) -> Any | None:
        with self.db.read() as conn:
            raw = get_raw(conn, SCHEDULE_PREFIX + name, SCHEDULE_SK)
        return None if raw is None else schedule_from_attrs(attrs_of(raw))

    def put_schedule(self, record: Any) -> bool:
        """The record moves forward in (scheduled_at, revision) order only; read and write in one transaction."""
        pk = SCHEDULE_PREFIX + record.name
        with self.db.write() as conn:
            raw = get_raw(conn, pk, SCHEDULE_SK)
            stored = None if raw is None else readable(raw)
            if stored is not None and not schedule_replaceable(stored, record):
                return False
            put_item(conn, pk, SCHEDULE_SK, schedule_to_attrs(record))
        return True

    # -- the queue's backlog mark: QUEUE#backlog / #MARK -------------------------------------------------------
    def get_backlog_mark(self) -> Any | None:
        with self.db.read() as conn:
            raw = get_raw(conn, BACKLOG_PK, BACKLOG_SK)
        return None if raw is None else mark_from_attrs(attrs_of(raw))

    def put_backlog_mark(self, mark: Any) -> bool:
        """The mark moves to a later visible time only; read and write in one transaction."""
        with self.db.write() as conn:
            raw = get_raw(conn, BACKLOG_PK, BACKLOG_SK)
            if not mark_moves_forward(None if raw is None else readable(raw), mark):
                return False
            put_item(conn, BACKLOG_PK, BACKLOG_SK, mark_to_attrs(mark))
        return True

    # -- parallel and map steps (``sqlite_branches.py``) -----------------------------------------------------
    def put_join(self, execution_id: str, join: Any) -> bool:
        return _fanout.put_join(self, execution_id, join)

    def get_join(self, execution_id: str, step_index: int) -> Any | None:
        return _fanout.get_join(self, execution_id, step_index)

    def create_branch(self, execution_id: str, branch: Any) -> None:
        _fanout.create_branch(self, execution_id, branch)

    def get_branch(self, execution_id: str, step_index: int, branch: int) -> Any | None:
        return _fanout.get_branch(self, execution_id, step_index, branch)

    def update_branch(self, execution_id: str, branch: Any, expected_version: int) -> None:
        _fanout.update_branch(self, execution_id, branch, expected_version)

    def complete_branch(self, execution_id: str, branch: Any, expected_version: int) -> None:
        _fanout.complete_branch(self, execution_id, branch, expected_version)

    def branches(self, execution_id: str, step_index: int) -> list[Any]:
        return _fanout.branches(self, execution_id, step_index)

    def branches_page(self, execution_id: str, step_index: int, limit: int, after: int | None = None) -> HistoryPage:
        return _fanout.branches_page(self, execution_id, step_index, limit, after)


__all__ = ["SqliteStore", "store_from_env"]
