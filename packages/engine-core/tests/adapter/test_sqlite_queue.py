"""The step queue on the SQLite file: SQS's semantics (delay, visibility timeout, receive count, redrive to
the dead letters, ack and release by receipt), across threads and processes."""

from __future__ import annotations

import datetime as dt
import subprocess
import sys
import threading
from collections import Counter

import pytest

from engine_core import ManualClock, StepMessage
from engine_core.adapters.sqlite_db import Database
from engine_core.adapters.sqlite_queue import SqliteQueue

T0 = dt.datetime(2026, 3, 1, 12, 0, tzinfo=dt.timezone.utc)


def message(n: int = 1) -> StepMessage:
    return StepMessage(execution_id=f"00000000-0000-4000-8000-{n:012d}", step=0, version=1)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(T0)


@pytest.fixture
def queue(tmp_path, clock) -> SqliteQueue:
    db = Database(tmp_path / "loom.db")
    yield SqliteQueue(db, clock, max_receives=3)
    db.close()


def test_queue_send_with_a_delay_is_invisible_until_its_time_then_received_once(queue, clock):
    # given
    queue.send(message(), delay_s=30)
    # when / then
    assert queue.receive(10) == [] and queue.next_visible_in() == 30
    clock.advance(seconds=30)
    [got] = queue.receive(10, visibility_timeout_s=60)
    assert StepMessage.model_validate_json(got.body) == message() and got.receive_count == 1
    assert queue.receive(10) == []  # hidden for its visibility timeout


def test_queue_send_refuses_a_delay_sqs_could_not_take(queue):
    with pytest.raises(ValueError, match="0-900"):
        queue.send(message(), delay_s=901)


def test_queue_message_not_acked_comes_back_after_its_visibility_timeout_with_its_count(queue, clock):
    queue.send(message())
    [first] = queue.receive(1, visibility_timeout_s=60)
    clock.advance(seconds=59)
    assert queue.receive(1) == []
    clock.advance(seconds=1)
    [again] = queue.receive(1, visibility_timeout_s=60)
    # then: the first receipt is stale, the second acknowledges it
    assert again.receive_count == 2 and again.receipt != first.receipt
    assert not queue.ack(first.receipt)
    assert queue.ack(again.receipt) and queue.next_visible_in() is None


def test_queue_release_makes_a_message_visible_now_and_a_stale_receipt_changes_nothing(queue, clock):
    queue.send(message())
    [got] = queue.receive(1, visibility_timeout_s=600)
    assert queue.release(got.receipt)
    [again] = queue.receive(1, visibility_timeout_s=600)
    assert not queue.release(got.receipt) and queue.receive(1) == []
    assert again.message_id == got.message_id


def test_queue_message_received_max_times_moves_to_the_dead_letters_on_the_next_receive(queue, clock, caplog):
    queue.send(message(7))
    for _ in range(3):
        assert queue.receive(1, visibility_timeout_s=1)
        clock.advance(seconds=1)
    # when: the fourth receive
    with caplog.at_level("WARNING", logger="engine_core"):
        assert queue.receive(1) == []
    # then: gone from the queue, kept as a dead letter naming it
    [dead] = queue.dead_letters()
    assert dead["body"]["kind"] == "redrive" and dead["body"]["body"]["execution_id"] == message(7).execution_id
    assert queue.depth() == {"visible": 0, "in_flight": 0, "delayed": 0, "dead_letters": 1}
    # and the runtime's log says so once, naming the message and the commands that show and return it
    [said] = [r.getMessage() for r in caplog.records if "dead letters" in r.getMessage()]
    assert "received 3 times" in said and message(7).execution_id in said and "loom dlq redrive" in said, said


def test_queue_failure_notices_are_kept_as_dead_letters(queue):
    queue.send_dead_letter({"kind": "loom.execution_failed", "execution_id": "x"})
    assert [d["body"]["execution_id"] for d in queue.dead_letters()] == ["x"]


def test_queue_redrive_returns_the_step_messages_given_up_on_oldest_first_and_leaves_the_notices(queue, clock):
    # given: a failure notice, then three messages given up on (received max_receives times), then a row no
    # queue would take
    for n in (1, 2):
        queue.send(message(n))
    queue.send_dead_letter({"kind": "loom.execution_failed", "execution_id": "x"})
    queue.send(message(3))
    for _ in range(3):
        assert queue.receive(10, visibility_timeout_s=1)
        clock.advance(seconds=1)
    assert queue.receive(10) == []
    queue.send_dead_letter({"kind": "redrive", "receive_count": 3, "body": "not a message"})
    queue.send_dead_letter({"kind": "redrive", "receive_count": 3, "body": {"unreadable": "{\"execution_id\""}})
    assert queue.depth()["dead_letters"] == 6
    # when: two, then the rest
    first = queue.redrive_dead_letters(limit=2)
    # then: the oldest two are back, visible now, their count starting again; the rest stay dead letters
    assert first == {"returned": 2, "left": 4}
    got = queue.receive(10, visibility_timeout_s=60)
    assert sorted(StepMessage.model_validate_json(m.body).execution_id for m in got) == \
        sorted(message(n).execution_id for n in (1, 2))
    assert {m.receive_count for m in got} == {1}
    assert queue.redrive_dead_letters(limit=100) == {"returned": 1, "left": 3}
    [third] = queue.receive(10)
    assert StepMessage.model_validate_json(third.body) == message(3)
    # and the notice and the rows no worker could take are where they were; a redrive with nothing to return
    # moves nothing
    assert sorted(str(d["body"].get("execution_id", d["body"].get("body"))) for d in queue.dead_letters()) == \
        ["not a message", "x", "{'unreadable': '{\"execution_id\"'}"]
    assert queue.redrive_dead_letters() == {"returned": 0, "left": 3}
    with pytest.raises(ValueError, match="at least 1"):
        queue.redrive_dead_letters(limit=0)


def test_queue_receivers_on_threads_never_get_one_message_at_once(tmp_path):
    # given: 200 messages and four threads receiving with their own connections
    db = Database(tmp_path / "loom.db")
    queue = SqliteQueue(db)
    for n in range(200):
        queue.send(message(n))
    got: Counter = Counter()
    lock = threading.Lock()

    def drain() -> None:
        while True:
            batch = queue.receive(3, visibility_timeout_s=600)
            if not batch:
                return
            with lock:
                got.update(m.message_id for m in batch)

    threads = [threading.Thread(target=drain) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # then: each message handed out exactly once
    assert len(got) == 200 and set(got.values()) == {1}
    db.close()


RECEIVER = """
import sys
from engine_core.adapters.sqlite_db import Database
from engine_core.adapters.sqlite_queue import SqliteQueue
queue = SqliteQueue(Database(sys.argv[1]))
ids = []
while True:
    batch = queue.receive(2, visibility_timeout_s=600)
    if not batch:
        break
    ids += [m.message_id for m in batch]
print(" ".join(map(str, ids)))
"""


def test_queue_receivers_in_processes_never_get_one_message_at_once(tmp_path):
    # given: 300 messages, three processes receiving from the same file at the same time
    path = tmp_path / "loom.db"
    queue = SqliteQueue(Database(path))
    for n in range(300):
        queue.send(message(n))
    # when
    procs = [subprocess.Popen([sys.executable, "-c", RECEIVER, str(path)], stdout=subprocess.PIPE, text=True)
             for _ in range(3)]
    outputs = [p.communicate(timeout=120)[0] for p in procs]
    # then
    assert [p.returncode for p in procs] == [0, 0, 0]
    ids = [int(x) for out in outputs for x in out.split()]
    assert len(ids) == 300 and len(set(ids)) == 300
