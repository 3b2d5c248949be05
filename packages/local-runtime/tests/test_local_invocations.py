"""What an invocation held and how it ended, and which step bodies ran: the records a chaos report reads."""

from __future__ import annotations

import json
from pathlib import Path

from loom_local.esm import MappingConfig, QueuePoller
from loom_local.faults import FaultControl
from loom_local.invocations import InvocationLog, read_jsonl


class _Sqs:
    def __init__(self):
        self.deleted = []

    def delete_message_batch(self, QueueUrl, Entries):
        self.deleted += [e["ReceiptHandle"] for e in Entries]
        return {"Successful": [{"Id": e["Id"]} for e in Entries]}


def _message(i: int, execution_id: str, receive_count: int) -> dict:
    body = {"execution_id": execution_id, "id": execution_id, "step": i, "version": 4 + i}
    return {"MessageId": f"m{i}", "ReceiptHandle": f"rh{i}", "Body": json.dumps(body),
            "Attributes": {"ApproximateReceiveCount": str(receive_count)}}


def test_invocation_log_when_a_batch_is_killed_records_what_it_held_and_that_it_crashed(make_function, tmp_path):
    # given: a worker whose first record's claim point is armed to SIGKILL it
    faults = FaultControl(tmp_path / "faults")
    fn = make_function("tiny_handlers.worker", timeout_s=30, fault_dir=faults.dir)
    fn.invocations = InvocationLog(tmp_path / "logs" / "invocations.jsonl")
    poller = QueuePoller(MappingConfig("u", "q", "arn:aws:sqs:us-east-1:123456789012:q", "us-east-1",
                                       report_batch_item_failures=True), fn, lambda: None)
    arm = faults.arm("worker.after_claim", match={"execution_id": "e-a"})
    sqs = _Sqs()

    # when
    result = poller.poll_once(sqs, [_message(0, "e-a", 2), _message(1, "e-b", 1)])

    # then: the kill, the two messages it held (with their receive counts) and its end, under one request id
    (fired,) = faults.wait_fired(arm, timeout_s=5)
    assert result.status == "crashed" and sqs.deleted == []
    records = read_jsonl(tmp_path / "logs" / "invocations.jsonl")
    assert [r["kind"] for r in records] == ["held", "start", "end"]
    assert {r["request_id"] for r in records} == {result.request_id}
    held, start, end = records
    assert [(m["message_id"], m["receive_count"], m["execution_id"], m["step"], m["version"])
            for m in held["messages"]] == [("m0", 2, "e-a", 0, 4), ("m1", 1, "e-b", 1, 5)]
    assert start["pid"] == end["pid"] == fired.pid and start["role"] == "test"
    assert start["at"] < fired.fired_at < start["deadline_at"] <= start["at"] + 30.5
    assert (end["status"], end["error"]) == ("crashed", "Runtime.ExitError")
    log = Path(fn.logs.path(fn.spec.name)).read_text()
    assert "m0 execution e-a step 0 v4, receive count 2; m1 execution e-b step 1 v5, receive count 1" in log


def test_invocation_log_when_an_invocation_succeeds_records_its_start_and_ok_end(make_function, tmp_path):
    # given
    fn = make_function("tiny_handlers.probe")
    fn.invocations = InvocationLog(tmp_path / "invocations.jsonl")

    # when
    result = fn.invoke({})

    # then
    start, end = read_jsonl(tmp_path / "invocations.jsonl")
    assert (start["kind"], start["request_id"], start["cold"]) == ("start", result.request_id, True)
    assert (end["kind"], end["status"], end["error"], end["pid"]) == ("end", "ok", None, result.pid)


def test_step_trace_when_a_body_starts_records_what_identifies_it(make_function, tmp_path, read_out):
    # given: a worker whose processes trace step bodies, without any crash point armed
    fn = make_function("tiny_handlers.worker")
    fn.trace = tmp_path / "logs" / "steps.jsonl"
    body = {"action": "step", "id": "e-7", "step": 2, "name": "charge_payment"}

    # when
    result = fn.invoke({"Records": [{"messageId": "m", "receiptHandle": "rh", "body": json.dumps(body),
                                     "attributes": {"ApproximateReceiveCount": "1"},
                                     "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:q"}]})

    # then: one line for the one body, before it ran, naming the execution, step, attempt and process
    assert result.ok, result.describe()
    (line,) = read_jsonl(fn.trace)
    assert {k: line[k] for k in ("execution_id", "step", "step_name", "attempt", "pid")} == {
        "execution_id": "e-7", "step": 2, "step_name": "charge_payment", "attempt": 1, "pid": result.pid}
    ran = [r for r in read_out() if r["kind"] == "body"]
    assert len(ran) == 1


def test_read_jsonl_when_a_line_was_cut_by_a_kill_keeps_the_whole_ones(tmp_path):
    # given
    path = tmp_path / "x.jsonl"
    path.write_text('{"a": 1}\n{"a": 2}\n{"a": ')

    # when / then
    assert read_jsonl(path) == [{"a": 1}, {"a": 2}]
    assert read_jsonl(tmp_path / "missing.jsonl") == []
