"""The table kept across `make down` / `make up`, and `make reset`.

- at the table level (moto in-process): every page saved, every attribute type back as it was,
  BatchWriteItem in 25s with UnprocessedItems retried, unreadable files refused with the reason;
- at the stack level (the runtime's own emulator, tiny zips, no Terraform): restored before anything
  runs, saved on stop, an unreadable save set aside, a stack that failed to start saves nothing;
- the command line: `reset` deletes the save, `down` leaves it.
"""

from __future__ import annotations

import datetime as dt
import json
import sys
from pathlib import Path

import boto3
import pytest
from loom_test_support.moto_session import fake_credentials
from moto import mock_aws

from loom_local import cli
from loom_local import state as table_state
from loom_local.deployment import DeploymentError
from loom_local.stack import LocalStack, StackOptions

HERE = Path(__file__).parent
TABLE = "loom-local-test"


def _create_table(client, name: str = TABLE) -> None:
    client.create_table(
        TableName=name,
        AttributeDefinitions=[{"AttributeName": n, "AttributeType": "S"} for n in ("PK", "SK", "GSI1PK", "GSI1SK")],
        KeySchema=[{"AttributeName": "PK", "KeyType": "HASH"}, {"AttributeName": "SK", "KeyType": "RANGE"}],
        GlobalSecondaryIndexes=[{"IndexName": "GSI1", "Projection": {"ProjectionType": "KEYS_ONLY"},
                                 "KeySchema": [{"AttributeName": "GSI1PK", "KeyType": "HASH"},
                                               {"AttributeName": "GSI1SK", "KeyType": "RANGE"}]}],
        BillingMode="PAY_PER_REQUEST")


def _sorted(items):
    return sorted(items, key=lambda i: (i["PK"]["S"], i["SK"]["S"]))


@pytest.fixture
def aws(monkeypatch):
    fake_credentials(monkeypatch)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    with mock_aws():
        yield boto3.client("dynamodb", region_name="us-east-1")


ODD_ITEM = {
    "PK": {"S": "EXEC#odd"}, "SK": {"S": "#META"}, "GSI1PK": {"S": "DUE#1"}, "GSI1SK": {"S": "2026-01-01T00:00:00"},
    "blob": {"B": b"\x00\xffbinary"}, "blobs": {"BS": [b"a", b"\x01"]}, "n": {"N": "12.50"}, "ns": {"NS": ["1", "2"]},
    "ss": {"SS": ["x", "y"]}, "flag": {"BOOL": False}, "none": {"NULL": True},
    "nested": {"M": {"l": {"L": [{"S": "s"}, {"B": b"\x02"}, {"M": {"deep": {"N": "1"}}}]}}},
}


def test_save_then_restore_into_a_fresh_table_gives_back_every_item(aws, tmp_path):
    _create_table(aws)
    # More than 1 MB: the Scan comes in several pages, all of them saved.
    big = [{"PK": {"S": f"EXEC#{i:04d}"}, "SK": {"S": "#META"}, "pad": {"S": "x" * 9000}} for i in range(260)]
    for item in [*big, ODD_ITEM]:
        aws.put_item(TableName=TABLE, Item=item)
    assert len(list(aws.get_paginator("scan").paginate(TableName=TABLE))) > 1
    before = _sorted(table_state.scan(aws, TABLE))
    path = tmp_path / "state" / "table.json"

    snap = table_state.save(aws, TABLE, path, now=lambda: dt.datetime(2026, 3, 1, 12, tzinfo=dt.timezone.utc))

    assert len(snap.items) == 261 and snap.saved_at == "2026-03-01T12:00:00+00:00"
    body = json.loads(path.read_text())
    assert (body["format"], body["table"], body["count"]) == ("loom-local-table/1", TABLE, 261)
    odd = next(i for i in body["items"] if i["PK"]["S"] == "EXEC#odd")
    assert odd["blob"] == {"B": "AP9iaW5hcnk="}  # DynamoDB's JSON: binary as base64
    assert [p.name for p in path.parent.iterdir()] == ["table.json"]  # no temporary file left

    aws.delete_table(TableName=TABLE)  # `make down`: the emulator goes, `make up` applies a fresh table
    _create_table(aws)
    loaded = table_state.load(path)
    assert table_state.restore(aws, TABLE, loaded.items) == 261
    assert _sorted(table_state.scan(aws, TABLE)) == before
    # The due index is rebuilt from the items themselves.
    due = aws.query(TableName=TABLE, IndexName="GSI1", KeyConditionExpression="GSI1PK = :p",
                    ExpressionAttributeValues={":p": {"S": "DUE#1"}})["Items"]
    assert [i["PK"]["S"] for i in due] == ["EXEC#odd"]


def test_clear_empties_a_half_restored_table(aws):
    _create_table(aws)
    table_state.restore(aws, TABLE, [{"PK": {"S": f"p{i}"}, "SK": {"S": "s"}} for i in range(30)])
    assert table_state.clear(aws, TABLE) == 30
    assert table_state.scan(aws, TABLE) == []


class FlakyBatches:
    """A client whose first answer to every batch leaves its last two requests unprocessed."""

    def __init__(self):
        self.calls: list[int] = []
        self.written: list[dict] = []
        self.fresh = True

    def batch_write_item(self, RequestItems):
        (table, requests), = RequestItems.items()
        self.calls.append(len(requests))
        if self.fresh and len(requests) > 2:
            self.fresh = False
            self.written += requests[:-2]
            return {"UnprocessedItems": {table: requests[-2:]}}
        self.fresh = True
        self.written += requests
        return {"UnprocessedItems": {}}


def test_batch_writes_go_25_at_a_time_and_unprocessed_items_are_retried():
    client, slept = FlakyBatches(), []
    items = [{"PK": {"S": str(i)}} for i in range(60)]
    assert table_state.restore(client, "t", items, sleep=slept.append) == 60
    assert client.calls == [25, 2, 25, 2, 10, 2]
    assert [r["PutRequest"]["Item"] for r in client.written] == items
    assert len(slept) == 3


def test_items_that_stay_unprocessed_are_an_error():
    class Stuck:
        def batch_write_item(self, RequestItems):
            return {"UnprocessedItems": RequestItems}

    with pytest.raises(RuntimeError, match="stayed unprocessed"):
        table_state.restore(Stuck(), "t", [{"PK": {"S": "a"}}], sleep=lambda s: None, max_rounds=3)


@pytest.mark.parametrize("text, reason", [
    ("{not json", "not readable JSON"),
    ('{"format": "something-else", "items": []}', "format is 'something-else'"),
    ('{"format": "loom-local-table/1", "count": 3, "items": [{"PK": {"S": "a"}}]}', "says 3 items but holds 1"),
    ('{"format": "loom-local-table/1", "items": [{"PK": {"S": "a"}}, {"PK": {"Q": "b"}}]}', "item 1 is malformed"),
    ('{"format": "loom-local-table/1", "items": [{"PK": {"B": "not base64!"}}]}', "item 0 is malformed"),
])
def test_an_unreadable_file_is_refused_with_the_reason(tmp_path, text, reason):
    path = tmp_path / "table.json"
    path.write_text(text)
    with pytest.raises(table_state.StateFileError, match=reason):
        table_state.load(path)


def test_set_aside_never_overwrites(tmp_path):
    path = tmp_path / "table.json"
    names = set()
    for n in range(3):
        path.write_text(str(n))
        names.add(table_state.set_aside(path).name)
    assert len(names) == 3 and not path.exists()
    assert all(n.startswith("table.unreadable-") and n.endswith(".json") for n in names)


# -- the stack (the runtime's own emulator, a hand-made deployment with a table) ---------------------------
@pytest.fixture
def tiny(tmp_path):
    sys.path.insert(0, str(HERE))
    try:
        from conftest import build_tiny_zip
        from test_local_stack import provision_tiny
    finally:
        sys.path.remove(str(HERE))
    zip_dir = tmp_path / "dist"
    for role in ("worker", "sweeper", "control-plane"):
        build_tiny_zip(zip_dir / f"{role}.zip", role)
    return zip_dir, provision_tiny


def _stack(tmp_path, tiny, messages: list[str], *, tamper: bool = False, state_file: Path | None = None) -> LocalStack:
    zip_dir, provision_tiny = tiny
    base = provision_tiny(zip_dir, tmp_path / "out.jsonl", tamper=tamper)

    def provision(stack: LocalStack) -> None:
        base(stack)
        _create_table(stack.client("dynamodb"))
        lam = stack.client("lambda")
        env = lam.get_function_configuration(FunctionName="tiny-worker")["Environment"]["Variables"]
        lam.update_function_configuration(FunctionName="tiny-worker",
                                          Environment={"Variables": {**env, "LOOM_TABLE_NAME": TABLE}})

    return LocalStack(StackOptions(
        repo=HERE.parents[2], run_dir=tmp_path / "run", zip_dir=zip_dir, provision=provision, sweep_every_s=30,
        state_file=state_file or tmp_path / "run" / "state" / "table.json", progress=messages.append))


def test_the_stack_keeps_its_table_across_a_stop_and_a_start(tmp_path, tiny):
    saved = tmp_path / "run" / "state" / "table.json"
    first: list[str] = []
    with _stack(tmp_path, tiny, first) as stack:
        assert any(m.startswith("no saved table in ") for m in first)
        db = stack.client("dynamodb")
        for i in range(40):
            db.put_item(TableName=TABLE, Item={"PK": {"S": f"EXEC#{i}"}, "SK": {"S": "#META"}, "n": {"N": str(i)}})
        db.put_item(TableName=TABLE, Item=ODD_ITEM)
        before = _sorted(table_state.scan(db, TABLE))
    assert json.loads(saved.read_text())["count"] == 41
    assert any(m.startswith(f"saved 41 items of table {TABLE} to ") for m in first)

    second: list[str] = []
    with _stack(tmp_path, tiny, second) as stack:
        restored = next(i for i, m in enumerate(second) if m.startswith("restored 41 items from "))
        assert "(saved 20" in second[restored]
        # Before the functions, the pollers, the schedule and the URL start.
        assert restored < next(i for i, m in enumerate(second) if m.startswith("control plane Function URL"))
        assert _sorted(table_state.scan(stack.client("dynamodb"), TABLE)) == before


def test_an_unreadable_save_is_set_aside_and_the_stack_starts_clean(tmp_path, tiny):
    saved = tmp_path / "run" / "state" / "table.json"
    saved.parent.mkdir(parents=True)
    saved.write_text('{"format": "loom-local-table/1", "items": [')  # cut short
    messages: list[str] = []
    with _stack(tmp_path, tiny, messages) as stack:
        warning = next(m for m in messages if "unreadable" in m)
        assert "not readable JSON" in warning and "started with an empty table" in warning
        assert "`make down`, move it back to" in warning
        assert table_state.scan(stack.client("dynamodb"), TABLE) == []
        stack.client("dynamodb").put_item(TableName=TABLE, Item={"PK": {"S": "new"}, "SK": {"S": "#META"}})
    aside = sorted(saved.parent.glob("table.unreadable-*.json"))
    assert len(aside) == 1 and aside[0].read_text().endswith("[")  # kept as it was
    assert json.loads(saved.read_text())["count"] == 1  # the new run's table was saved as usual


def test_a_save_that_does_not_fit_the_table_is_set_aside_and_the_table_emptied(tmp_path, tiny):
    saved = tmp_path / "run" / "state" / "table.json"
    items = [{"PK": {"S": f"p{i}"}, "SK": {"S": "s"}} for i in range(30)] + [{"PK": {"S": "no-sort-key"}}]
    saved.parent.mkdir(parents=True)
    saved.write_text(json.dumps({"format": "loom-local-table/1", "table": TABLE, "saved_at": "x", "items": items}))
    messages: list[str] = []
    with _stack(tmp_path, tiny, messages) as stack:
        warning = next(m for m in messages if m.startswith("WARNING: could not restore"))
        assert "started with an empty table" in warning
        assert table_state.scan(stack.client("dynamodb"), TABLE) == []
    assert len(list(saved.parent.glob("table.unreadable-*.json"))) == 1


def test_a_stack_that_fails_to_start_leaves_the_save_alone(tmp_path, tiny):
    saved = tmp_path / "run" / "state" / "table.json"
    saved.parent.mkdir(parents=True)
    text = json.dumps({"format": "loom-local-table/1", "table": TABLE, "saved_at": "x", "count": 1,
                       "items": [{"PK": {"S": "keep-me"}, "SK": {"S": "#META"}}]})
    saved.write_text(text)
    stack = _stack(tmp_path, tiny, [], tamper=True)
    with pytest.raises(DeploymentError):
        stack.start()
    assert saved.read_text() == text


def test_without_a_state_file_nothing_is_restored_or_saved(tmp_path, tiny):
    """What the demo and the end-to-end tests run: a fresh table, and the `make up` save left alone."""
    saved = tmp_path / "run" / "state" / "table.json"
    saved.parent.mkdir(parents=True)
    saved.write_text("untouched")
    stack = _stack(tmp_path, tiny, [])
    stack.opts.state_file = None
    with stack:
        assert table_state.scan(stack.client("dynamodb"), TABLE) == []
        stack.client("dynamodb").put_item(TableName=TABLE, Item={"PK": {"S": "x"}, "SK": {"S": "#META"}})
    assert saved.read_text() == "untouched"


def test_the_demo_runs_without_the_saved_table(tmp_path, monkeypatch):
    from loom_local import demo

    seen = {}

    class Stop(Exception):
        pass

    def fake_start(self):
        seen["state_file"] = self.opts.state_file
        raise Stop

    monkeypatch.setattr(LocalStack, "start", fake_start)
    monkeypatch.setattr(demo, "install_signal_handlers", lambda stack: None)
    with pytest.raises(Stop):
        cli.main(["demo", "--repo", str(tmp_path), "--env-dir", str(tmp_path)])
    assert seen == {"state_file": None}


# -- the command line ------------------------------------------------------------------------------------------
def test_reset_deletes_the_save_and_down_keeps_it(tmp_path, capsys):
    state_dir = tmp_path / ".loom" / "state"
    state_dir.mkdir(parents=True)
    (state_dir / "table.json").write_text("{}")
    (state_dir / "table.unreadable-20260101T000000.json").write_text("{")

    assert cli.main(["down", "--repo", str(tmp_path)]) == 0
    assert "nothing to stop" in capsys.readouterr().out
    assert (state_dir / "table.json").exists()

    assert cli.main(["reset", "--repo", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "nothing to stop" in out
    assert "deleted the saved table (table.json, table.unreadable-20260101T000000.json" in out
    assert "the next `make up` starts with an empty table" in out
    assert not state_dir.exists()

    assert cli.main(["reset", "--repo", str(tmp_path)]) == 0
    assert "no saved table" in capsys.readouterr().out


@pytest.mark.parametrize("saves", [True, False])
def test_down_says_whether_the_table_was_kept(tmp_path, capsys, saves):
    """`down` stops the runtime (SIGTERM); here a stand-in runtime that saves, or does not, on SIGTERM."""
    import subprocess

    run_dir = tmp_path / ".loom"
    saved = run_dir / "state" / "table.json"
    script = (
        "import json, pathlib, signal, sys, time\n"
        "def stop(*a):\n"
        f"    if {saves}:\n"
        f"        p = pathlib.Path({str(saved)!r}); p.parent.mkdir(parents=True, exist_ok=True)\n"
        "        p.write_text(json.dumps({'format': 'loom-local-table/1', 'count': 3, 'items': []}))\n"
        "    sys.exit(0)\n"
        "signal.signal(signal.SIGTERM, stop)\n"
        "print('ready', flush=True)\n"
        "while True: time.sleep(0.05)\n")
    runtime = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert runtime.stdout.readline() == "ready\n"
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / "local.json").write_text(json.dumps({"url": "http://127.0.0.1:1", "pids": {"runtime": runtime.pid}}))
        assert cli.main(["down", "--repo", str(tmp_path)]) == 0
    finally:
        runtime.kill()
        runtime.wait()
    out = capsys.readouterr().out
    assert "stopped the local stack" in out
    if saves:
        assert "kept its table: 3 items in " in out and "`make reset` starts clean" in out
    else:
        assert "WARNING: the table was not saved this time" in out and "nothing is kept" in out
