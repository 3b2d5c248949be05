"""Several processes on one SQLite file, killed for real: two ``python -m loom_lite`` workers share one
database while bodies end their own process with ``os._exit`` and the test SIGKILLs workers in the middle of
bodies. What is checked comes from what happened (the bodies' journal, the kills, the file as read while
it ran), never from what the engine reports:

- one step's body never runs in two places at once: the next body of a step starts only after the
  previous one ended (returned, exited, or its process was killed);
- nothing committed is lost: every record and execution state seen while it ran is still there, or was
  moved on, after every worker was SIGKILLed at the end;
- every execution completes, each step recorded once, the context exact.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

import pytest

from engine_core import REGISTRY, Engine, EngineSettings, Status, StepRecord
from engine_core.adapters.sqlite import SqliteStore
from engine_core.adapters.sqlite_queue import SqliteQueue

FLOWS = Path(__file__).parent / "flows" / "crashy_flows.py"
EXECUTIONS = 10
WORKERS = 2
KILLS = 5


def _registry():
    if "crashy" not in REGISTRY:
        from loom_lite.cli import load_workflows

        load_workflows([str(FLOWS)], entry_points=False)
    return REGISTRY


def _worker(db: Path, journal: Path, log: Path) -> subprocess.Popen:
    env = {**os.environ, "LITE_TEST_JOURNAL": str(journal), "LITE_TEST_EXIT_RATE": "0.03",
           "LITE_TEST_EXIT_STEP": "3",
           "LOOM_FUNCTION_TIMEOUT_S": "2", "LOOM_INDEX_SLACK_S": "0"}
    return subprocess.Popen([sys.executable, "-m", "loom_lite", "--db", str(db), "--no-record", "--quiet",
                             "--no-entry-points", "--sweep-every", "0.2", str(FLOWS)],
                            env=env, stdout=subprocess.DEVNULL, stderr=open(log, "ab"), start_new_session=True)


def _journal(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def _in_body(journal: list[dict], pid: int) -> bool:
    """The process has a body started and not yet ended."""
    open_bodies = 0
    for e in journal:
        if e["pid"] == pid:
            open_bodies += 1 if e["k"] == "start" else -1
    return open_bodies > 0


def _snapshot(store: SqliteStore, ids: list[str]) -> dict[str, dict]:
    """What the file holds now: each execution's (status, version) and its SUCCEEDED records' contents."""
    out = {}
    for eid in ids:
        e = store.load(eid)
        records = {r.name: (r.result_blob, r.attempts, r.version) for r in store.history(eid)
                   if isinstance(r, StepRecord) and r.status.value == "SUCCEEDED"}
        out[eid] = {"status": e.status.value, "version": e.version, "step": e.current_step, "records": records}
    return out


def test_two_workers_killed_for_real_never_run_a_body_twice_at_once_and_lose_nothing_committed(tmp_path):
    # given: a file with ten executions waiting, and two worker processes on it
    db, journal = tmp_path / "loom.db", tmp_path / "journal.jsonl"
    registry = _registry()
    store = SqliteStore(str(db))
    queue = SqliteQueue(store.db)
    engine = Engine(store, queue, registry, settings=EngineSettings(lease_s=60, function_timeout_s=2))
    ids = [engine.start("crashy", {"n": n}).execution.execution_id for n in range(EXECUTIONS)]
    workers = [_worker(db, journal, tmp_path / "workers.log") for _ in range(WORKERS)]
    kills: dict[int, float] = {}
    exits: list[int] = []
    seen: list[dict] = []
    deadline = time.monotonic() + 120
    rng = random.Random(7)
    try:
        # when: workers are SIGKILLed inside bodies (and bodies exit their process); the dead are replaced
        while time.monotonic() < deadline:
            seen.append(_snapshot(store, ids))
            if all(s["status"] == "COMPLETED" for s in seen[-1].values()):
                break
            entries = _journal(journal)
            busy = [w for w in workers if w.poll() is None and _in_body(entries, w.pid)]
            if len(kills) < KILLS and busy and rng.random() < 0.5:
                victim = rng.choice(busy)
                os.kill(victim.pid, signal.SIGKILL)
                victim.wait()
                kills[victim.pid] = time.time()
            for i, w in enumerate(workers):
                if w.poll() is not None:
                    if w.returncode == 17:
                        exits.append(w.pid)
                    workers[i] = _worker(db, journal, tmp_path / "workers.log")
            time.sleep(0.15)
    finally:
        for w in workers:  # the end is a SIGKILL too: nothing is shut down cleanly
            if w.poll() is None:
                os.kill(w.pid, signal.SIGKILL)
                w.wait()
                kills.setdefault(w.pid, time.time())
        store.close()

    # then: every execution completed, each step recorded once, the context exact
    after = SqliteStore(str(db))
    final = _snapshot(after, ids)
    assert {s["status"] for s in final.values()} == {"COMPLETED"}, (final, (tmp_path / "workers.log").read_text()[-3000:])
    for eid in ids:
        records = [r for r in after.history(eid) if isinstance(r, StepRecord)]
        assert [r.name for r in records] == [f"s{i}" for i in range(6)]
        assert [json.loads(r.result_blob) for r in records] == [{f"s{i}": i + 1} for i in range(6)]
    # and nothing committed was lost: every execution state seen is still there or moved on, and every record
    # of a step the execution had moved past is still there as it was (the record of the step an attempt
    # holds is written again, at a later version, when its worker died before moving on: by design)
    for snap in seen:
        for eid, s in snap.items():
            assert final[eid]["version"] >= s["version"]
            for name, (blob, attempts, version) in s["records"].items():
                now = final[eid]["records"][name]
                if int(name[1:]) < s["step"] or s["status"] == "COMPLETED":
                    assert now == (blob, attempts, version), (eid, name)
                else:
                    assert now[2] >= version, (eid, name)
    # and one step's body never ran in two places at once
    entries = _journal(journal)
    bodies: dict[tuple[str, int], list[dict]] = defaultdict(list)
    for e in entries:
        if e["k"] == "start":
            bodies[(e["e"], e["s"])].append({"pid": e["pid"], "start": e["t"], "attempt": e["a"], "end": None})
        else:
            run = next(b for b in reversed(bodies[(e["e"], e["s"])]) if b["pid"] == e["pid"] and b["end"] is None)
            run["end"] = e["t"]
    killed_inside = 0
    for key, runs in bodies.items():
        for run in runs:
            if run["end"] is None:  # its process was SIGKILLed inside it: it ended then, at the latest
                assert run["pid"] in kills, (key, run)
                run["end"] = kills[run["pid"]]
                killed_inside += 1
        runs.sort(key=lambda r: r["start"])
        for earlier, later in zip(runs, runs[1:]):
            assert later["start"] >= earlier["end"], f"step {key} ran in {earlier['pid']} and {later['pid']} at once"
    # and the faults were real: SIGKILLs inside bodies, bodies that exited their process (at least the four
    # forced ones), and retried steps
    exited = sum(e["k"] == "exit" for e in entries)
    assert killed_inside >= 3 and exited >= 4 and exits, (killed_inside, exited, exits, kills)
    assert sum(len(runs) for runs in bodies.values()) > EXECUTIONS * 6


def test_a_body_running_past_its_delivery_deadline_ends_its_process_before_another_may_run_the_step(tmp_path):
    flows = Path(__file__).parent / "flows" / "stubborn_flows.py"
    db, journal = tmp_path / "loom.db", tmp_path / "journal.jsonl"
    env = {**os.environ, "LITE_TEST_JOURNAL": str(journal), "LOOM_FUNCTION_TIMEOUT_S": "3", "LOOM_INDEX_SLACK_S": "0"}
    args = [sys.executable, "-m", "loom_lite", "--db", str(db), "--no-record", "--quiet", "--no-entry-points",
            "--sweep-every", "0.2", str(flows)]
    from engine_core import Registry
    from loom_lite.cli import load_workflows

    # given: a process whose step body will not stop at its timeout (it swallows it)
    store = SqliteStore(str(db))
    engine = Engine(store, SqliteQueue(store.db), load_workflows([str(flows)], entry_points=False, registry=Registry()),
                    settings=EngineSettings(function_timeout_s=3))
    eid = engine.start("stubborn", {}).execution.execution_id
    first = subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    try:
        # when: its delivery's deadline passes (3 s)
        _, err = first.communicate(timeout=30)
        died = time.time()
    finally:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)
    # then: the process ended itself at the deadline, saying where the body was, the body never ended
    assert first.returncode != 0 and b"Timeout" in err and b"stubborn_flows.py" in err, err[-2000:]
    assert [(j["what"], j["attempt"]) for j in _journal(journal)] == [("start", 1)]
    # and a second process runs the step again once the claim's lease is over: never while the first body ran
    second = subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and engine.get(eid).status is not Status.COMPLETED:
            time.sleep(0.1)
    finally:
        os.killpg(second.pid, signal.SIGKILL)
        second.wait()
    entries = _journal(journal)
    assert engine.get(eid).status is Status.COMPLETED
    assert [(j["what"], j["attempt"]) for j in entries] == [("start", 1), ("start", 2), ("end", 2)]
    assert entries[1]["at"] > died


def test_code_between_durable_calls_past_the_deadline_fails_its_execution_and_the_process_goes_on(tmp_path):
    flows = Path(__file__).parent / "flows" / "slow_between_flows.py"
    db = tmp_path / "loom.db"
    env = {**os.environ, "LOOM_FUNCTION_TIMEOUT_S": "3", "LOOM_TIME_MARGIN_MS": "1000", "LOOM_INDEX_SLACK_S": "0"}
    args = [sys.executable, "-m", "loom_lite", "--db", str(db), "--no-record", "--quiet", "--no-entry-points",
            "--sweep-every", "0.2", str(flows)]
    from engine_core import Registry
    from loom_lite.cli import load_workflows

    # given: an execution whose function sleeps 60 s between two steps, in a 3 s delivery
    store = SqliteStore(str(db))
    engine = Engine(store, SqliteQueue(store.db), load_workflows([str(flows)], entry_points=False, registry=Registry()),
                    settings=EngineSettings(function_timeout_s=3, time_margin_ms=1000))
    slow = engine.start("slow_between", {}).execution.execution_id
    worker = subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    try:
        # when: its delivery reaches the slow line
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not engine.get(slow).status.is_terminal:
            time.sleep(0.1)
        quick = engine.start("quick", {}).execution.execution_id
        while time.monotonic() < deadline and engine.get(quick).status is not Status.COMPLETED:
            time.sleep(0.1)
        alive = worker.poll() is None
    finally:
        os.killpg(worker.pid, signal.SIGKILL)
        _, err = worker.communicate()
    # then: that execution failed with the line and what to do; the process did not end (no watchdog
    # Timeout), and it ran the next execution
    e = engine.get(slow)
    assert e.status is Status.FAILED and e.error.code == "workflow_error", (e.status, e.error, err[-2000:])
    assert "slow_between_flows.py" in e.error.message and "Move the slow work into a step()" in e.error.message
    assert alive and b"Timeout (" not in err, err[-2000:]
    assert engine.get(quick).status is Status.COMPLETED
