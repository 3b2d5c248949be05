"""Processes on one file serve the same workflows (``loom_lite/peers.py``): a runtime whose workflows differ
from a live process's is refused at start, naming the difference; a process gone does not count."""

from __future__ import annotations

import json
import socket
import sqlite3
import subprocess
import sys
import time

import pytest

from engine_core import Registry, workflow
from engine_core.settings import ConfigurationError
from loom_lite import LiteConfig, LiteRuntime
from loom_lite.peers import catalogue


def registry_of(*names: str) -> Registry:
    registry = Registry()
    for name in names:
        def body(ctx):
            return {"ok": True}
        body.__name__ = f"{name}_step"
        workflow(name, registry=registry)(type(name, (), {"steps": [body]}))
    return registry


def record_other(db, pid: int, serves: list[str], seen: float | None = None, host: str | None = None,
                 started: str | None = None) -> None:
    """Another process's record, as its runtime writes it."""
    from loom_cli.sdk.locate import process_on_this_host

    host = host or socket.gethostname()
    found = process_on_this_host(pid) if host == socket.gethostname() else None
    conn = sqlite3.connect(db)
    conn.execute("INSERT OR REPLACE INTO loom_meta (key, value) VALUES (?, ?)", (
        f"lite.process.{host}.{pid}",
        json.dumps({"host": host, "pid": pid, "seen": time.time() if seen is None else seen, "renew_s": 10.0,
                    "started": started if started is not None else (found[1] if found else ""), "serves": serves})))
    conn.commit()
    conn.close()


@pytest.fixture
def other():
    """A live process standing for another loom dev."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    yield proc
    proc.kill()
    proc.wait()


def test_a_runtime_beside_a_live_process_serving_other_workflows_is_refused_naming_both_sides(tmp_path, other):
    # given: a live process on the file serving orders and reports
    db = tmp_path / "loom.db"
    LiteRuntime(LiteConfig(db=db), registry_of("orders", "reports")).stop()
    record_other(db, other.pid, catalogue(registry_of("orders", "reports")))
    # when / then: this one serves orders and newflow
    with pytest.raises(ConfigurationError) as refused:
        LiteRuntime(LiteConfig(db=db), registry_of("orders", "newflow"))
    message = str(refused.value)
    assert f"another loom dev (pid {other.pid} on {socket.gethostname()}) serves this file with other workflows" in message
    assert "only there: reports v1; only here: newflow v1" in message and "stop that process" in message


def test_a_runtime_serving_the_same_workflows_joins_and_its_stop_removes_its_record(tmp_path, other):
    db = tmp_path / "loom.db"
    LiteRuntime(LiteConfig(db=db), registry_of("orders")).stop()
    record_other(db, other.pid, catalogue(registry_of("orders")))
    runtime = LiteRuntime(LiteConfig(db=db), registry_of("orders"))
    keys = lambda: {k for (k,) in sqlite3.connect(db).execute("SELECT key FROM loom_meta WHERE key LIKE 'lite.process.%'")}  # noqa: E731
    assert len(keys()) == 2
    runtime.stop()
    assert keys() == {f"lite.process.{socket.gethostname()}.{other.pid}"}


def test_a_process_gone_or_silent_does_not_count(tmp_path):
    # given: a killed process's record, a reused pid's, and another host's not renewed for an hour
    db = tmp_path / "loom.db"
    LiteRuntime(LiteConfig(db=db), registry_of("orders")).stop()
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    record_other(db, gone.pid, catalogue(registry_of("reports")))
    record_other(db, 1, catalogue(registry_of("reports")), started="1")  # pid 1 runs, but started otherwise
    record_other(db, 4242, catalogue(registry_of("reports")), seen=time.time() - 3600, host="elsewhere")
    # when / then: a runtime with other workflows starts, and the records of the dead are removed
    LiteRuntime(LiteConfig(db=db), registry_of("orders", "newflow")).stop()
    left = sqlite3.connect(db).execute("SELECT key FROM loom_meta WHERE key LIKE 'lite.process.%'").fetchall()
    assert left == []


def test_a_killed_process_not_yet_reaped_does_not_count_and_a_live_one_counts_however_long_its_sweep(tmp_path):
    # given: a process killed but not yet waited for (a zombie), and a live one whose record is an hour old
    # (its sweeper renews it only every --sweep-every)
    db = tmp_path / "loom.db"
    LiteRuntime(LiteConfig(db=db), registry_of("orders")).stop()
    zombie = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    record_other(db, zombie.pid, catalogue(registry_of("reports")))
    zombie.kill()
    time.sleep(0.2)
    try:
        LiteRuntime(LiteConfig(db=db), registry_of("orders", "newflow")).stop()  # then: the zombie does not count
    finally:
        zombie.wait()
    slow = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        record_other(db, slow.pid, catalogue(registry_of("reports")), seen=time.time() - 3600)
        with pytest.raises(ConfigurationError, match=f"pid {slow.pid}"):  # then: the live one counts
            LiteRuntime(LiteConfig(db=db), registry_of("orders", "newflow"))
    finally:
        slow.kill()
        slow.wait()
