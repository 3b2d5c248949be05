"""loom dlq list / redrive against SQS on moto (in-process), with the queues from .loom/local.json."""

from __future__ import annotations

import json

import pytest

from loom_cli.main import main


@pytest.fixture
def queues(tmp_path, monkeypatch):
    import boto3
    from moto import mock_aws

    for name, value in {"AWS_ACCESS_KEY_ID": "t", "AWS_SECRET_ACCESS_KEY": "t", "AWS_DEFAULT_REGION": "us-east-1"}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    monkeypatch.chdir(tmp_path)
    with mock_aws():
        sqs = boto3.client("sqs", region_name="us-east-1")
        queue = sqs.create_queue(QueueName="steps")["QueueUrl"]
        dlq = sqs.create_queue(QueueName="steps-dlq")["QueueUrl"]
        (tmp_path / ".loom").mkdir()
        (tmp_path / ".loom" / "local.json").write_text(json.dumps(
            {"url": "http://127.0.0.1:9", "queue_url": queue, "dlq_url": dlq, "region": "us-east-1", "endpoint": None}))
        yield sqs, queue, dlq


def _visible(sqs, url: str) -> int:
    return int(sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages"])
               ["Attributes"]["ApproximateNumberOfMessages"])


STEP = {"execution_id": "6f1c2b1e-0000-4000-8000-000000000001", "step": 2, "version": 7}
NOTICE = {"kind": "loom.execution_failed", "execution_id": "6f1c2b1e-0000-4000-8000-000000000002",
          "workflow": "poison_pill", "step": 1, "error": {"code": "step_error", "message": "boom"}}


def test_dlq_list_shows_step_messages_and_notices_and_leaves_them(queues, capsys):
    sqs, _, dlq = queues
    sqs.send_message(QueueUrl=dlq, MessageBody=json.dumps(STEP))
    sqs.send_message(QueueUrl=dlq, MessageBody=json.dumps(NOTICE))
    # when
    assert main(["dlq", "list", "--json"]) == 0
    # then
    rows = json.loads(capsys.readouterr().out)["messages"]
    assert sorted(r["kind"] for r in rows) == ["failure_notice", "step_message"]
    assert {r["execution_id"] for r in rows} == {STEP["execution_id"], NOTICE["execution_id"]}
    assert _visible(sqs, dlq) == 2
    assert main(["dlq", "list"]) == 0 and "step 2 at version 7" in capsys.readouterr().out


def test_dlq_redrive_returns_step_messages_to_the_step_queue_and_keeps_notices(queues, capsys):
    sqs, queue, dlq = queues
    for _ in range(3):
        sqs.send_message(QueueUrl=dlq, MessageBody=json.dumps(STEP))
    sqs.send_message(QueueUrl=dlq, MessageBody=json.dumps(NOTICE))
    # when
    assert main(["dlq", "redrive"]) == 0
    # then
    assert "returned 3 step message(s)" in capsys.readouterr().out
    assert _visible(sqs, queue) == 3 and _visible(sqs, dlq) == 1
    got = sqs.receive_message(QueueUrl=queue, MaxNumberOfMessages=10)["Messages"]
    assert all(json.loads(m["Body"]) == STEP for m in got)


def test_dlq_on_an_empty_queue_says_so(queues, capsys):
    assert main(["dlq", "list"]) == 0
    assert "empty" in capsys.readouterr().out


def test_dlq_without_queues_is_a_usage_error_naming_the_fix(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["dlq", "list"]) == 2
    assert "--env-dir" in capsys.readouterr().err


def test_workflows_table_summarises_each_input_schema():
    from loom_cli.render import input_summary

    schema = {"properties": {"order_id": {"type": "string"}, "email": {"anyOf": [{"type": "string"}, {"type": "null"}]}},
              "required": ["order_id"]}
    assert input_summary(schema) == "order_id*: string, email: string|null"
    assert input_summary(None) == "any JSON object"
