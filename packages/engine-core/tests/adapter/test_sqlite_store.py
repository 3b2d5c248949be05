"""What only the SQLite store has: its configuration, its durability mode, its TTL reaper, a writer that holds
the lock too long, and a damaged file (the bytes of a row, a page), reported and never hidden."""

from __future__ import annotations

import datetime as dt
import sqlite3

import pytest

from engine_core import CorruptStateError, EngineSettings, ManualClock, Registry, Status, StorageError
from engine_core.adapters import build_store
from engine_core.adapters.sqlite import SqliteStore
from engine_core.model import CorruptRecord, StepRecord
from engine_core.registry import build_workflow
from engine_core.settings import ConfigurationError
from engine_core import step
from engine_core.testing import LocalRunner

T0 = dt.datetime(2026, 3, 1, 12, 0, tzinfo=dt.timezone.utc)


def pragma(store: SqliteStore, name: str):
    with store.db.read() as conn:
        return conn.execute(f"PRAGMA {name}").fetchone()[0]


# -- configuration ----------------------------------------------------------------------------------------------

def test_sqlite_store_without_a_path_is_refused_naming_the_variable():
    with pytest.raises(ConfigurationError, match="LOOM_SQLITE_PATH"):
        build_store({"LOOM_STORE": "sqlite"}, EngineSettings())
    with pytest.raises(ConfigurationError, match="must name a file"):
        SqliteStore(":memory:")


def test_sqlite_store_is_wal_and_synchronous_full_unless_normal_is_chosen(tmp_path):
    full = build_store({"LOOM_STORE": "sqlite", "LOOM_SQLITE_PATH": str(tmp_path / "a.db")}, EngineSettings())
    normal = build_store({"LOOM_STORE": "sqlite", "LOOM_SQLITE_PATH": str(tmp_path / "b.db"),
                          "LOOM_SQLITE_SYNCHRONOUS": "normal"}, EngineSettings())
    assert (pragma(full, "journal_mode"), pragma(full, "synchronous")) == ("wal", 2)  # 2 is FULL
    assert pragma(normal, "synchronous") == 1  # NORMAL
    with pytest.raises(ConfigurationError, match="LOOM_SQLITE_SYNCHRONOUS='OFF'.*FULL.*NORMAL"):
        build_store({"LOOM_STORE": "sqlite", "LOOM_SQLITE_PATH": str(tmp_path / "c.db"),
                     "LOOM_SQLITE_SYNCHRONOUS": "OFF"}, EngineSettings())


def test_sqlite_store_keeps_its_shard_count_and_refuses_another(tmp_path):
    SqliteStore(str(tmp_path / "loom.db"), shards=4).close()
    with pytest.raises(ConfigurationError, match="created with 4 due-index shards and LOOM_SHARDS is 2"):
        SqliteStore(str(tmp_path / "loom.db"), shards=2)
    assert SqliteStore(str(tmp_path / "loom.db"), shards=4).shards == 4


def _digest(path) -> tuple[bytes, list[str]]:
    """The file's bytes and what lies beside it (a -wal or -shm file is a change too)."""
    return path.read_bytes(), sorted(p.name for p in path.parent.iterdir())


def test_sqlite_store_refuses_another_applications_database_and_leaves_it_as_it_was(tmp_path):
    # given: an application's database (rollback journal, one table of its own)
    path = tmp_path / "app.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT)")
    conn.execute("INSERT INTO customers (name) VALUES ('ada')")
    conn.commit()
    conn.close()
    before = _digest(path)
    # when / then: refused, naming its tables and what to do; not one byte of it changed
    with pytest.raises(ConfigurationError, match=r"app.db is an SQLite database of something else \(tables customers\), "
                                                 r"not a Loom store: point LOOM_SQLITE_PATH \(loom dev --db\) at a new file"):
        SqliteStore(str(path))
    assert _digest(path) == before


def test_sqlite_store_refuses_a_newer_looms_file_before_writing_to_it(tmp_path):
    # given: a Loom store, then marked as written by a later schema, its log checkpointed into the file
    path = tmp_path / "loom.db"
    SqliteStore(str(path)).close()
    conn = sqlite3.connect(path)
    conn.execute("UPDATE loom_meta SET value = '99' WHERE key = 'schema'")
    conn.commit()
    conn.execute("PRAGMA journal_mode=DELETE")  # as a newer Loom might keep it: no log beside it
    conn.close()
    before = _digest(path)
    # when / then: refused, and left exactly as it was (still in its own journal mode)
    with pytest.raises(ConfigurationError, match=r"written by a newer Loom \(schema 99; this one knows 1\): upgrade "
                                                 "loom-engine-core; the file is left as it is"):
        SqliteStore(str(path))
    assert _digest(path) == before


def test_sqlite_store_refuses_a_file_that_is_not_sqlite_naming_it(tmp_path):
    path = tmp_path / "notes.db"
    path.write_text("these are my notes\n" * 100)
    before = _digest(path)
    with pytest.raises(ConfigurationError, match=r"notes.db is not an SQLite database .*point LOOM_SQLITE_PATH"):
        SqliteStore(str(path))
    assert _digest(path) == before


def test_sqlite_store_on_a_read_only_file_says_what_to_make_writable(tmp_path, monkeypatch):
    # given: a store whose open fails as a read-only file's does (tests may run as root, which writes anyway)
    store = SqliteStore(str(tmp_path / "loom.db"))
    error = store.db._storage_error("write", sqlite3.OperationalError("attempt to write a readonly database"))
    assert "make the file and its directory writable by this user, or set LOOM_SQLITE_PATH" in str(error)
    assert "loom.db-wal and loom.db-shm" in str(error)
    error = store.db._storage_error("open", sqlite3.OperationalError("unable to open database file"))
    assert "make its directory writable by this user, or set LOOM_SQLITE_PATH" in str(error)


def test_sqlite_backup_taken_while_the_store_is_open_holds_the_commits_still_in_the_log(tmp_path):
    # given: a live store whose latest record is still in loom.db-wal (not checkpointed into the file)
    store = SqliteStore(str(tmp_path / "loom.db"))
    eid = "00000000-0000-4000-8000-000000000001"
    store.put_step(eid, StepRecord(step_index=0, name="a", status="SUCCEEDED", attempts=1, result_blob="{}", version=2))
    assert (tmp_path / "loom.db-wal").stat().st_size > 0
    # when: SQLite's backup (what `sqlite3 loom.db ".backup copy.db"` runs), as docs/lite.md says
    source, copy = sqlite3.connect(tmp_path / "loom.db"), sqlite3.connect(tmp_path / "copy.db")
    source.backup(copy)
    source.close()
    copy.close()
    # then: the copy is a Loom store with the record
    assert [r.name for r in SqliteStore(str(tmp_path / "copy.db")).history(eid)] == ["a"]


# -- locks and TTLs ---------------------------------------------------------------------------------------------

def test_sqlite_store_waits_for_another_writer_then_says_who_held_the_lock_and_what_to_raise(tmp_path):
    # given: another process's connection holds the write lock (a transaction left open)
    store = SqliteStore(str(tmp_path / "loom.db"), busy_timeout_ms=200)
    other = sqlite3.connect(tmp_path / "loom.db", isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    try:
        # when / then
        with pytest.raises(StorageError, match="held the write lock for more than 200 ms.*LOOM_SQLITE_BUSY_TIMEOUT_MS"):
            store.put_step("00000000-0000-4000-8000-000000000001", StepRecord(
                step_index=0, name="a", status="SUCCEEDED", attempts=1, result_blob="{}", version=2))
    finally:
        other.execute("ROLLBACK")
        other.close()
    assert store.history("00000000-0000-4000-8000-000000000001") == []


def test_sqlite_store_reap_expired_deletes_only_items_whose_ttl_passed(tmp_path):
    store = SqliteStore(str(tmp_path / "loom.db"))
    eid = "00000000-0000-4000-8000-000000000001"
    for index, days in ((0, 1), (1, 40)):
        store.put_step(eid, StepRecord(step_index=index, name=f"s{index}", status="SUCCEEDED", attempts=1,
                                       result_blob="{}", version=2 + index, expires_at=T0 + dt.timedelta(days=days)))
    assert store.reap_expired(T0 + dt.timedelta(days=2)) == 1
    assert [r.name for r in store.history(eid)] == ["s1"]


# -- a damaged file -------------------------------------------------------------------------------------------------

def _three_step_registry(marks: dict[str, str]) -> Registry:
    registry = Registry()

    def make(name: str):
        def body(ctx):
            return {name: marks.get(f"{ctx.get('n')}:{name}", f"ok-{name}")}

        body.__name__ = name
        return body

    registry.register(build_workflow("three", [step(make("a")), step(make("b")), step(make("c"))]))
    return registry


def _damage(path, marker: bytes, replacement: bytes) -> int:
    """Overwrite every copy of ``marker`` in the file, in place (same length: the pages stay well formed)."""
    assert len(marker) == len(replacement)
    data = path.read_bytes()
    count = data.count(marker)
    path.write_bytes(data.replace(marker, replacement))
    return count


def test_sqlite_damaged_rows_fail_their_executions_corrupt_state_and_everything_else_survives(tmp_path):
    # given: three executions that ran steps a and b; a marked result makes one row findable in the file
    path = tmp_path / "loom.db"
    clock = ManualClock(T0)
    runner = LocalRunner(_three_step_registry({"1:a": "MARK-ROW-ONE-A"}), clock=clock, store=SqliteStore(str(path)),
                         settings=EngineSettings(max_chain_steps=1))
    one, two, three = (runner.start("three", {"n": n}) for n in (1, 2, 3))
    while any(len(runner.store.history(eid)) < 2 for eid in (one, two, three)):
        runner.step_once()  # a batch: the next step of each execution (one step per delivery)
    before = {eid: runner.store.history(eid) for eid in (one, two, three)}
    assert all(len(records) == 2 for records in before.values())
    runner.store.close()  # checkpointed into the main file, where the damage lands
    # when: the bytes of execution one's record of step a stop being UTF-8, and execution two's item stops
    # being JSON (its first byte)
    assert _damage(path, b"MARK-ROW-ONE-A", b"\xff" * 14) >= 1
    item_two = f'{{"execution_id":"{two}"'.encode()
    assert _damage(path, item_two, b"X" + item_two[1:]) >= 1
    store = SqliteStore(str(path))
    runner.engine.store = runner.sweeper.store = runner.store = store
    # then: the damaged record is reported by its key, its neighbour is intact
    damaged = store.history(one)
    assert isinstance(damaged[0], CorruptRecord) and damaged[0].sort_key == "STEP#000#a"
    assert "not UTF-8" in damaged[0].detail and damaged[1] == before[one][1]
    with pytest.raises(CorruptStateError, match="not JSON"):
        store.load(two)
    # when: the engine delivers each execution's next step
    for _ in range(20):
        if not runner.queue.messages:
            break
        runner.step_once()
    # then: each damaged execution FAILED corrupt_state (one notice each, no restart from step 0, no loop); the
    # untouched one completed; every readable record is as it was
    assert sorted((d["execution_id"], d["error"]["code"]) for d in runner.queue.dead_letters) == sorted(
        [(one, "corrupt_state"), (two, "corrupt_state")])
    e1 = store.load(one)
    assert e1.status is Status.FAILED and e1.error.code == "corrupt_state" and e1.current_step == 2
    assert store.load_statuses([two]) == {two: "FAILED"}
    assert store.load(three).status is Status.COMPLETED and len(store.history(three)) == 3
    assert store.history(three)[:2] == before[three] and store.history(two) == before[two]
    assert not store.query_due(0, T0 + dt.timedelta(days=1), 10).items


def test_sqlite_damaged_page_is_a_storage_error_naming_the_file_and_the_check_to_run(tmp_path):
    # given: a store, closed, whose schema page is then overwritten
    path = tmp_path / "loom.db"
    SqliteStore(str(path)).close()
    data = bytearray(path.read_bytes())
    data[100:4096] = b"\x5a" * (4096 - 100)
    path.write_bytes(bytes(data))
    # when / then
    with pytest.raises(StorageError) as info:
        SqliteStore(str(path))
    assert str(path) in str(info.value) and "damaged" in str(info.value) and "integrity_check" in str(info.value)
