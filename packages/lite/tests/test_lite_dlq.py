"""``loom dlq`` against a ``loom dev`` file: the step messages its queue gave up on listed and returned to its
step queue, and the execution they belong to going on from there."""

from __future__ import annotations

import json

from engine_core import Registry
from engine_core.adapters.sqlite_queue import SqliteQueue
from engine_core.durable import durable, step
from loom_cli.main import main as loom
from loom_cli.sdk import LoomClient
from loom_lite import LiteConfig, LiteRuntime
from loom_lite.config import lite_settings

REGISTRY = Registry()


@durable("hello", registry=REGISTRY)
def hello(input):
    return step("greet", lambda: f"hello {input['name']}")


def test_loom_dlq_lists_a_loom_dev_files_dead_letters_and_redrives_them_to_its_worker(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("LOOM_STATE_FILE", str(tmp_path / "state" / "local.json"))
    monkeypatch.delenv("LOOM_URL", raising=False)
    db = tmp_path / "loom.db"
    config = LiteConfig(db=db, sweep_every_s=60, poll_s=0.02, settings=lite_settings({"LOOM_FUNCTION_TIMEOUT_S": "5"}))
    runtime = LiteRuntime(config, REGISTRY).start(sweeper=False)  # the API; no worker, no sweeper yet
    try:
        # given: an execution whose first step message the queue gave up on (a reader of the file that takes
        # it and never acknowledges it, as often as the queue allows)
        eid = LoomClient().start("hello", {"name": "ada"}).execution_id
        reader = SqliteQueue(runtime.store.db, max_receives=1)
        assert reader.receive(1, visibility_timeout_s=0)
        assert reader.receive(1) == []  # the next receive moves it to the dead letters
        capsys.readouterr()
        # when: listed (twice: a listing changes nothing), as JSON too
        assert loom(["dlq", "list"]) == 0 and loom(["dlq", "list"]) == 0
        out = capsys.readouterr().out
        assert loom(["dlq", "list", "--json"]) == 0
        listed = json.loads(capsys.readouterr().out)
        # then: the step message, naming its execution and step, where it is kept
        assert out.count(eid) == 2 and out.count("step_message") == 2 and "step 0 at version" in out, out
        assert listed["db"] == str(db.resolve()) and [m["execution_id"] for m in listed["messages"]] == [eid], listed
        # when: redriven
        assert loom(["dlq", "redrive"]) == 0
        said = capsys.readouterr().out
        # then: returned to the file's step queue, and the worker started now runs the execution to its end (the
        # sweeper is off: only the returned message can)
        assert said.startswith(f"returned 1 step message(s) to the step queue of {db.resolve()}; 0 other"), said
        runtime.start(api=False, sweeper=False, worker_thread=True)
        done = LoomClient().wait(eid, timeout_s=20)
        assert done.status == "COMPLETED" and done.result == "hello ada", done
        assert loom(["dlq", "list"]) == 0
        assert "the dead-letter queue is empty (the dead_letters table of" in capsys.readouterr().out
    finally:
        runtime.stop()


def test_loom_dlq_reads_a_loom_dev_file_no_runtime_serves_with_db(tmp_path, monkeypatch, capsys):
    from engine_core import StepMessage
    from engine_core.adapters.sqlite_db import Database

    # given: a file no runtime serves (none recorded), with a step message its queue gave up on and a notice
    monkeypatch.setenv("LOOM_STATE_FILE", str(tmp_path / "state" / "local.json"))
    monkeypatch.delenv("LOOM_URL", raising=False)
    monkeypatch.chdir(tmp_path)
    db = Database(tmp_path / "kept.db")
    queue = SqliteQueue(db, max_receives=1)
    stuck = StepMessage(execution_id="00000000-0000-4000-8000-000000000001", step=2, version=7)
    queue.send(stuck)
    assert queue.receive(1, visibility_timeout_s=0) and queue.receive(1) == []
    queue.send_dead_letter({"kind": "loom.execution_failed", "execution_id": "00000000-0000-4000-8000-000000000002",
                            "workflow": "w", "error": {"code": "step_error", "message": "no"}})
    # when / then: without --db, nothing says where they are; with it, listed
    assert loom(["dlq", "list"]) == 2 and "--db" in capsys.readouterr().err
    assert loom(["dlq", "list", "--db", "kept.db"]) == 0
    out = capsys.readouterr().out
    assert "step_message" in out and "step 2 at version 7" in out and "failure_notice" in out, out
    # and redriven: the step message back on the file's queue, the notice left
    assert loom(["dlq", "redrive", "--db", "kept.db", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"returned": 1, "left": 1}
    [back] = queue.receive(1)
    assert StepMessage.model_validate_json(back.body) == stuck
    # and --db beside --env-dir is refused, naming both
    assert loom(["--env-dir", str(tmp_path), "dlq", "list", "--db", "kept.db"]) == 2
    assert "--db" in capsys.readouterr().err
    db.close()


def test_loom_dev_says_at_start_that_its_file_keeps_dead_letters(tmp_path, monkeypatch, capsys):
    from engine_core import StepMessage
    from engine_core.adapters.sqlite_db import Database
    from loom_lite.cli import main as loom_dev

    monkeypatch.setenv("LOOM_STATE_FILE", str(tmp_path / "state" / "local.json"))
    monkeypatch.delenv("LOOM_URL", raising=False)
    monkeypatch.setattr(LiteRuntime, "run_worker", lambda self: None)  # start, say what it says, stop
    flows = tmp_path / "flows.py"
    flows.write_text("from engine_core import Registry\nfrom engine_core.durable import durable, step\n"
                     "registry = Registry()\n@durable('noop', registry=registry)\ndef noop(input):\n"
                     "    return step('only', dict)\n")
    args = [str(flows), "--no-entry-points", "--db", str(tmp_path / "loom.db"), "--port", "0", "--quiet"]
    # given: a file without dead letters, then the same file with a step message its queue gave up on
    assert loom_dev(args) == 0
    clean = capsys.readouterr().err
    db = Database(tmp_path / "loom.db")
    queue = SqliteQueue(db, max_receives=1)
    queue.send(StepMessage(execution_id="00000000-0000-4000-8000-000000000001", step=0, version=1))
    assert queue.receive(1, visibility_timeout_s=0) and queue.receive(1) == []
    db.close()
    # when
    assert loom_dev(args) == 0
    err = capsys.readouterr().err
    # then: said once there are some, with the commands that show and return them; nothing said before
    assert "dead letter" not in clean, clean
    assert "loom dev: 1 dead letter(s) kept in this file" in err and "loom dlq list" in err, err
