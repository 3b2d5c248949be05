"""The SQLite store's file: its schema, its connections, its transactions and its errors, in one place.

``sqlite.SqliteStore`` (the state) and ``sqlite_queue.SqliteQueue`` (the step queue) share one file and
one ``Database``. Standard library ``sqlite3`` only.

- **WAL mode.** Readers never wait for the writer; writers take the write lock with ``BEGIN IMMEDIATE``
  (waiting up to the busy timeout, ``LOOM_SQLITE_BUSY_TIMEOUT_MS``, default 10 s, for another process
  to finish), so every conditional write reads and writes under one lock: the conditions hold across
  processes, not just threads.
- **Durability.** ``synchronous=FULL`` (the default): a transaction is on disk (the log fsynced) before
  its commit returns, so a checkpoint survives a crash of the process, the OS or the machine.
  ``LOOM_SQLITE_SYNCHRONOUS=NORMAL`` is the opt-in weaker mode: commits return before the log is
  synced (it is synced at checkpoints), so a crash of the *process* still loses nothing, but a power
  loss or OS crash can roll back the transactions of the last moments (those since the last
  checkpoint of the log, at most about 1,000 pages of writes).
- **A write that rides the next one.** ``write(durable=False)`` commits without waiting for the disk;
  the next durable commit of any connection syncs the log, and with it every frame written before.
  The store uses it only for a step's history record, which the engine always follows with the
  execution's commit (see ``sqlite.SqliteStore.put_step``): one fsync per step, not two.
- **Damage is reported.** A row whose bytes are not UTF-8 JSON decodes as ``Undecodable`` and the
  store reports it as the other stores do (``CorruptStateError``, ``CorruptRecord``); a damaged page
  (``database disk image is malformed``) is a ``StorageError`` naming the file and the check to run.
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ..errors import StorageError
from ..model import CorruptRecord
from ..ports import PAGE_BYTES, HistoryPage
from ..settings import ConfigurationError
from ._items import TTL_ATTR

log = logging.getLogger("engine_core")

PATH_ENV = "LOOM_SQLITE_PATH"
SYNCHRONOUS_ENV = "LOOM_SQLITE_SYNCHRONOUS"
BUSY_TIMEOUT_ENV = "LOOM_SQLITE_BUSY_TIMEOUT_MS"
SYNCHRONOUS_MODES = ("FULL", "NORMAL")
DEFAULT_BUSY_TIMEOUT_MS = 10_000
SCHEMA_VERSION = 1

SCHEMA = """
CREATE TABLE IF NOT EXISTS loom_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
-- The design's single table: pk/sk exactly as on DynamoDB (EXEC#<id>, #META, STEP#<nnn>#<name>, ...).
CREATE TABLE IF NOT EXISTS items (
    pk TEXT NOT NULL,
    sk TEXT NOT NULL,
    attrs TEXT NOT NULL,     -- the flat attributes of adapters/_items.py, as JSON
    expires_at INTEGER,      -- the TTL (epoch seconds), as in attrs, or NULL
    gsi1pk TEXT,             -- DUE#<shard> while live, FIN#<shard> while housekeeping is owed
    gsi1sk TEXT,             -- index_at / finalize_by
    gsi2sk TEXT,             -- the list index: <created_at>#<id> (execution items)
    PRIMARY KEY (pk, sk)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS items_due ON items (gsi1pk, gsi1sk, pk) WHERE gsi1pk IS NOT NULL;
CREATE INDEX IF NOT EXISTS items_list ON items (gsi2sk) WHERE gsi2sk IS NOT NULL;
CREATE INDEX IF NOT EXISTS items_ttl ON items (expires_at) WHERE expires_at IS NOT NULL;
CREATE TABLE IF NOT EXISTS queue (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    body TEXT NOT NULL,
    visible_at REAL NOT NULL,      -- epoch seconds
    sent_at REAL NOT NULL,
    receive_count INTEGER NOT NULL DEFAULT 0,
    receipt TEXT
);
CREATE INDEX IF NOT EXISTS queue_visible ON queue (visible_at, id);
CREATE TABLE IF NOT EXISTS dead_letters (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    body TEXT NOT NULL,
    at REAL NOT NULL
);
"""


class Undecodable(str):
    """A TEXT value whose bytes are not UTF-8 (a damaged page or a bad write): kept as the bytes it was,
    shown escaped, and never mistaken for a value."""

    raw: bytes

    def __new__(cls, raw: bytes) -> Undecodable:
        value = super().__new__(cls, raw.decode("utf-8", "backslashreplace"))
        value.raw = raw
        return value


def _text(raw: bytes) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return Undecodable(raw)


def attrs_of(text: Any) -> dict[str, Any]:
    """A row's attributes; ValueError (saying why) when the row cannot be read."""
    if isinstance(text, Undecodable):
        raise ValueError(f"the stored bytes are not UTF-8: {text[:80]!r}")
    if not isinstance(text, str):
        raise ValueError(f"the stored attributes are a {type(text).__name__}, not JSON text")
    try:
        attrs = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"the stored attributes are not JSON ({exc}): {text[:80]!r}") from None
    if not isinstance(attrs, dict):
        raise ValueError(f"the stored attributes are a JSON {type(attrs).__name__}, not an object")
    return attrs


def dumps(attrs: Mapping[str, Any]) -> str:
    return json.dumps(attrs, separators=(",", ":"), ensure_ascii=False)


def readable(raw: Any) -> dict[str, Any] | None:
    """The attributes of a stored row, or None when it cannot be read."""
    try:
        return attrs_of(raw)
    except ValueError:
        return None


def decoded(sort_key: str, raw: Any, decode: Callable[[str, dict[str, Any]], Any]) -> Any:
    """A record, or a CorruptRecord naming its key when its row cannot be read (the decoders of
    ``_items.py`` report a row of wrong attributes the same way)."""
    try:
        attrs = attrs_of(raw)
    except ValueError as exc:
        return CorruptRecord(sort_key=sort_key, detail=str(exc))
    return decode(sort_key, attrs)


# -- items in and out (pk and sk exactly as on DynamoDB) -----------------------------------------------------
def exec_pk(execution_id: str) -> str:
    return f"EXEC#{execution_id}"


def after_prefix(prefix: str) -> str:
    """The smallest key above every key that starts with ``prefix``."""
    return prefix[:-1] + chr(ord(prefix[-1]) + 1)


def get_raw(conn: sqlite3.Connection, pk: str, sk: str) -> Any:
    row = conn.execute("SELECT attrs FROM items WHERE pk = ? AND sk = ?", (pk, sk)).fetchone()
    return None if row is None else row[0]


def put_item(conn: sqlite3.Connection, pk: str, sk: str, attrs: dict[str, Any],
             gsi1: tuple[str | None, str | None] = (None, None), gsi2: str | None = None) -> None:
    conn.execute("INSERT OR REPLACE INTO items (pk, sk, attrs, expires_at, gsi1pk, gsi1sk, gsi2sk) "
                 "VALUES (?, ?, ?, ?, ?, ?, ?)", (pk, sk, dumps(attrs), attrs.get(TTL_ATTR), gsi1[0], gsi1[1], gsi2))


class Database:
    """One SQLite file, shared by the store and the queue, safe for threads and for processes.

    Each call takes a connection from a small pool for its duration; a forked child opens its own.

    Example:
        >>> db = Database("/var/lib/loom/loom.db", shards=4)
        >>> with db.write() as conn:
        ...     conn.execute("INSERT INTO dead_letters (body, at) VALUES (?, ?)", ("{}", 0.0))
    """

    def __init__(self, path: str | os.PathLike[str], synchronous: str = "FULL",
                 busy_timeout_ms: int = DEFAULT_BUSY_TIMEOUT_MS, shards: int | None = None):
        self.path = Path(path)
        if str(path) in ("", ":memory:") or str(path).startswith("file:"):
            raise ConfigurationError(f"{PATH_ENV} must name a file (the store is shared between processes), "
                                     f"got {str(path)!r}")
        mode = synchronous.upper()
        if mode not in SYNCHRONOUS_MODES:
            raise ConfigurationError(
                f"{SYNCHRONOUS_ENV}={synchronous!r} is not a mode; use FULL (the default: every commit is on disk "
                "before it returns) or NORMAL (faster: a power loss or OS crash may roll back the last "
                "commits; a process crash loses nothing)")
        self.synchronous, self.busy_timeout_ms = mode, int(busy_timeout_ms)
        self._free: dict[bool, list[sqlite3.Connection]] = {True: [], False: []}
        """Pooled connections: durable ones in the configured mode, relaxed ones in ``synchronous=NORMAL``."""
        self._lock = threading.Lock()
        self._pid = os.getpid()
        self._trace: Any = None
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ConfigurationError(f"cannot create the directory of {self.path} ({exc.strerror}); set "
                                     f"{PATH_ENV} to a file in a writable directory") from None
        self._refuse_a_file_not_ours()
        self.shards = self._setup(shards)

    # -- connections ------------------------------------------------------------------------------------
    def _open(self, durable: bool = True) -> sqlite3.Connection:
        with self.translated("open"):
            conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False,
                                   timeout=self.busy_timeout_ms / 1000)
            conn.text_factory = _text
            mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                conn.close()
                raise ConfigurationError(f"{self.path} cannot use write-ahead logging (journal_mode is {mode!r}); "
                                         "put it on a local file system")
            conn.execute(f"PRAGMA synchronous={self.synchronous if durable else 'NORMAL'}")
            conn.execute(f"PRAGMA busy_timeout={self.busy_timeout_ms}")
            conn.execute("PRAGMA journal_size_limit=67108864")
            if self._trace is not None:
                conn.set_trace_callback(self._trace)
            return conn

    def _take(self, durable: bool = True) -> sqlite3.Connection:
        with self._lock:
            if os.getpid() != self._pid:  # a forked child: the parent's connections are not its to use
                self._free, self._pid = {True: [], False: []}, os.getpid()
            if self._free[durable]:
                return self._free[durable].pop()
        return self._open(durable)

    def _give(self, conn: sqlite3.Connection, durable: bool = True) -> None:
        with self._lock:
            if os.getpid() == self._pid and len(self._free[durable]) < 8:
                self._free[durable].append(conn)
                return
        conn.close()

    def set_trace(self, callback: Any) -> None:
        """Call ``callback(sql)`` for every statement SQLite runs on this store's connections (None: stop).
        What a test counts to say how many queries and writes an operation made."""
        with self._lock:
            self._trace = callback
            for conn in self._free[True] + self._free[False]:
                conn.set_trace_callback(callback)

    def close(self) -> None:
        with self._lock:
            free, self._free = self._free[True] + self._free[False], {True: [], False: []}
        for conn in free:
            conn.close()

    @contextmanager
    def read(self) -> Iterator[sqlite3.Connection]:
        """A connection for reads: each statement sees one consistent snapshot of the file."""
        conn = self._take()
        try:
            with self.translated("read"):
                yield conn
        finally:
            if conn.in_transaction:
                conn.rollback()
            self._give(conn)

    @contextmanager
    def snapshot(self) -> Iterator[sqlite3.Connection]:
        """A connection in a read transaction: every statement inside sees the same snapshot."""
        with self.read() as conn:
            conn.execute("BEGIN")
            try:
                yield conn
            finally:
                conn.execute("COMMIT")

    @contextmanager
    def write(self, durable: bool = True) -> Iterator[sqlite3.Connection]:
        """A write transaction under the file's write lock (``BEGIN IMMEDIATE``): the conditions read inside
        it still hold when it commits. Rolled back if the block raises. ``durable=False`` commits without
        waiting for the disk (the next durable commit syncs it)."""
        with self.statement(durable) as conn:
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")

    @contextmanager
    def statement(self, durable: bool = True) -> Iterator[sqlite3.Connection]:
        """A connection for single statements, each its own transaction (a conditional upsert or update is
        atomic alone); ``durable=False``: one whose commits do not wait for the disk."""
        conn = self._take(durable)
        try:
            with self.translated("write"):
                yield conn
        finally:
            try:
                if conn.in_transaction:
                    conn.rollback()
            except sqlite3.Error:
                conn.close()
            else:
                self._give(conn, durable)

    # -- errors ---------------------------------------------------------------------------------------------
    @contextmanager
    def translated(self, what: str) -> Iterator[None]:
        """Every ``sqlite3`` error becomes an engine error that says what happened and what to do."""
        try:
            yield
        except sqlite3.Error as exc:
            raise self._storage_error(what, exc) from exc

    def _storage_error(self, what: str, exc: sqlite3.Error) -> StorageError:
        text = str(exc)
        lowered = text.lower()
        if "locked" in lowered or "busy" in lowered:
            return StorageError(
                f"SQLite {what} on {self.path}: another connection held the write lock for more than "
                f"{self.busy_timeout_ms} ms ({text}); a long transaction in another process (a backup, a "
                f"sqlite3 shell in a transaction) blocks Loom: end it, or raise {BUSY_TIMEOUT_ENV}")
        if isinstance(exc, sqlite3.DatabaseError) and ("malformed" in lowered or "not a database" in lowered
                                                       or "corrupt" in lowered):
            return StorageError(
                f"SQLite {what} on {self.path}: the file is damaged ({text}). Stop every process using it, "
                f"check it (`sqlite3 {self.path} 'PRAGMA integrity_check'`), and restore it from a backup or "
                f"salvage it with `sqlite3 {self.path} .recover`")
        if "disk" in lowered and ("full" in lowered or "i/o" in lowered):
            return StorageError(f"SQLite {what} on {self.path} failed writing to disk ({text}); free space or "
                                "fix the disk, then retry (nothing of the failed transaction was applied)")
        if "readonly" in lowered or "read-only" in lowered:
            return StorageError(
                f"SQLite {what} on {self.path} failed: {text}. Loom writes to the file and, beside it, to "
                f"{self.path.name}-wal and {self.path.name}-shm: make the file and its directory writable by this "
                f"user, or set {PATH_ENV} (loom dev --db) to a file in a writable directory")
        if "unable to open" in lowered:
            return StorageError(
                f"SQLite {what} on {self.path} failed: {text}. Loom creates the file (and {self.path.name}-wal and "
                f"{self.path.name}-shm beside it) if it is missing: make its directory writable by this user, or "
                f"set {PATH_ENV} (loom dev --db) to a file in a writable directory")
        return StorageError(f"SQLite {what} on {self.path} failed: {type(exc).__name__}: {text}")

    # -- the schema -----------------------------------------------------------------------------------------
    def _refuse_a_file_not_ours(self) -> None:
        """A file that is there already and is not a Loom store this Loom knows (another application's
        database, a newer Loom's, not SQLite at all) is refused before anything is written to it: opening it
        for use would add the tables and switch it to write-ahead logging. Read through a read-only
        connection; a file that one cannot open is left to the open that follows, which says why."""
        try:
            if not self.path.is_file() or self.path.stat().st_size == 0:
                return
            conn = sqlite3.connect(f"{self.path.resolve().as_uri()}?mode=ro", uri=True,
                                   timeout=self.busy_timeout_ms / 1000)
        except (OSError, sqlite3.Error):
            return
        try:
            tables = sorted(r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'"))
            stored = conn.execute("SELECT value FROM loom_meta WHERE key = 'schema'").fetchone() \
                if "loom_meta" in tables else None
        except sqlite3.DatabaseError as exc:
            if "not a database" not in str(exc):
                return  # busy, or a damaged page: the open that follows reports it
            raise ConfigurationError(f"{self.path} is not an SQLite database ({exc}): point {PATH_ENV} (loom dev "
                                     "--db) at a new file or at a Loom store") from None
        finally:
            conn.close()
        ours = {"items", "queue", "dead_letters", "loom_meta", "sqlite_sequence"}
        if tables and "loom_meta" not in tables:
            others = [t for t in tables if t not in ours] or tables
            raise ConfigurationError(
                f"{self.path} is an SQLite database of something else (tables {', '.join(others[:5])}"
                f"{', ...' if len(others) > 5 else ''}), not a Loom store: point {PATH_ENV} (loom dev --db) at a new "
                "file; Loom leaves this one as it is")
        if stored is not None and str(stored[0]).isdigit() and int(stored[0]) > SCHEMA_VERSION:
            raise ConfigurationError(f"{self.path} was written by a newer Loom (schema {stored[0]}; this one knows "
                                     f"{SCHEMA_VERSION}): upgrade loom-engine-core; the file is left as it is")

    def _setup(self, shards: int | None) -> int:
        """Create the tables once, and check the file's schema version and shard count."""
        with self.write() as conn:
            # one statement at a time: executescript() would commit the transaction first
            for statement in (s.strip() for s in SCHEMA.split(";")):  # no ";" in the comments
                if statement:
                    conn.execute(statement)
            conn.execute("INSERT OR IGNORE INTO loom_meta (key, value) VALUES ('schema', ?)", (str(SCHEMA_VERSION),))
            if shards is not None:
                conn.execute("INSERT OR IGNORE INTO loom_meta (key, value) VALUES ('shards', ?)", (str(shards),))
            stored = dict(conn.execute("SELECT key, value FROM loom_meta").fetchall())
            try:  # the conditional writes evaluate their conditions on the stored JSON (built in since 3.38)
                conn.execute("SELECT json_extract('{\"a\":1}', '$.a')").fetchone()
            except sqlite3.OperationalError:
                raise ConfigurationError(f"this Python's SQLite ({sqlite3.sqlite_version}) has no JSON functions; "
                                         "the SQLite store needs SQLite 3.38 or later (or one built with JSON1)") from None
        version = int(stored.get("schema", SCHEMA_VERSION))
        if version > SCHEMA_VERSION:
            raise ConfigurationError(f"{self.path} was written by a newer Loom (schema {version}; this one knows "
                                     f"{SCHEMA_VERSION}): upgrade loom-engine-core")
        if "shards" not in stored:
            return shards or 1
        if shards is not None and int(stored["shards"]) != shards:
            raise ConfigurationError(
                f"{self.path} was created with {stored['shards']} due-index shards and LOOM_SHARDS is {shards}; the "
                "shard count is fixed for a store's life (changing it strands due executions): set LOOM_SHARDS="
                f"{stored['shards']}")
        return int(stored["shards"])


def read_all(db: Database, pk: str, prefix: str, decode: Callable[[str, dict[str, Any]], Any],
             limit: int | None = None) -> list[Any]:
    """The items of ``pk`` whose sort key starts with ``prefix``, in key order (at most ``limit``), decoded."""
    with db.read() as conn:
        rows = conn.execute("SELECT sk, attrs FROM items WHERE pk = ? AND sk >= ? AND sk < ? ORDER BY sk LIMIT ?",
                            (pk, prefix, after_prefix(prefix), -1 if limit is None else limit)).fetchall()
    return [decoded(sk, raw, decode) for sk, raw in rows]


def read_page(db: Database, pk: str, prefix: str, limit: int, after: str | None,
              decode: Callable[[str, dict[str, Any]], Any]) -> HistoryPage:
    """Items of ``pk`` under ``prefix`` after ``after``, in key order: up to ``limit``, and as a DynamoDB Query
    page up to 1 MB of them (it stops after the item that crosses the megabyte)."""
    keys, records, size, more = [], [], 0, False
    with db.read() as conn:
        rows = conn.execute("SELECT sk, attrs FROM items WHERE pk = ? AND sk >= ? AND sk > ? AND sk < ? ORDER BY sk",
                            (pk, prefix, "" if after is None else after, after_prefix(prefix)))
        for sk, raw in rows:
            if len(keys) == limit or size >= PAGE_BYTES:
                more = True
                break
            keys.append(sk)
            records.append(decoded(sk, raw, decode))
            size += len(sk) + len(raw.encode("utf-8", "surrogateescape"))
    return HistoryPage(records, keys[-1] if more and keys else None, keys=keys)


__all__ = ["BUSY_TIMEOUT_ENV", "Database", "PATH_ENV", "SYNCHRONOUS_ENV", "Undecodable", "after_prefix", "attrs_of",
           "decoded", "dumps", "exec_pk", "get_raw", "put_item", "read_all", "read_page", "readable"]
