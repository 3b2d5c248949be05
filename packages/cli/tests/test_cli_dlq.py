"""loom dlq list / redrive against SQS on moto, with the queues from the local stack's state file."""

from __future__ import annotations

import json

import pytest

from loom_cli.main import main

NO_CREDENTIALS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE",
                  "AWS_DEFAULT_PROFILE", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_SQS")


@pytest.fixture
def queues(state_file, tmp_path, monkeypatch):
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
        state_file.parent.mkdir(parents=True)
        state_file.write_text(json.dumps(
            {"url": "http://127.0.0.1:9", "queue_url": queue, "dlq_url": dlq, "region": "us-east-1", "endpoint": None}))
        yield sqs, queue, dlq


@pytest.fixture
def local_sqs(state_file, tmp_path, monkeypatch):
    """SQS as the local stack has it: moto's server on loopback, and a caller with no AWS credentials."""
    import boto3
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        endpoint = f"http://{host}:{port}"
        admin = boto3.client("sqs", region_name="us-east-1", endpoint_url=endpoint, aws_access_key_id="admin",
                             aws_secret_access_key="admin")
        queue = admin.create_queue(QueueName="steps")["QueueUrl"]
        dlq = admin.create_queue(QueueName="steps-dlq")["QueueUrl"]
        state_file.parent.mkdir(parents=True)
        state_file.write_text(json.dumps({"url": "http://127.0.0.1:9", "queue_url": queue, "dlq_url": dlq,
                                          "region": "us-east-1", "endpoint": endpoint}))
        for name in NO_CREDENTIALS:
            monkeypatch.delenv(name, raising=False)
        monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
        monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
        monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
        yield admin, queue, dlq
    finally:
        server.stop()


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
    assert all(r["sent_at"].endswith("Z") for r in rows)
    assert _visible(sqs, dlq) == 2
    assert main(["dlq", "list"]) == 0 and "step 2 at version 7" in capsys.readouterr().out


def test_dlq_list_on_the_local_stack_without_aws_credentials_lists_the_same_each_time(local_sqs, capsys):
    # given: the local stack's queues (moto on loopback), a caller with no AWS credentials at all
    admin, _, dlq = local_sqs
    admin.send_message(QueueUrl=dlq, MessageBody=json.dumps(STEP))
    admin.send_message(QueueUrl=dlq, MessageBody=json.dumps(NOTICE))
    # when: listed twice
    assert main(["dlq", "list"]) == 0, capsys.readouterr().err
    first = capsys.readouterr().out
    assert main(["dlq", "list"]) == 0
    second = capsys.readouterr().out
    # then: both messages, the same listing both times (no count that grows with each look), still queued
    assert "step 2 at version 7" in first and "step_error: boom" in first
    assert first == second
    assert _visible(admin, dlq) == 2


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
    err = capsys.readouterr().err
    assert "--env-dir" in err and "make up" in err


def test_dlq_against_loom_dev_whose_file_is_gone_names_it_and_the_way_to_a_deployed_stack(state_file, tmp_path,
                                                                                         monkeypatch, capsys):
    # given: the state file records the one-process SQLite runtime, whose file is not there
    monkeypatch.chdir(tmp_path)
    state_file.parent.mkdir(parents=True, exist_ok=True)
    gone = tmp_path / "loom.db"
    state_file.write_text(json.dumps({"kind": "lite", "url": "http://127.0.0.1:9", "db": str(gone)}))
    # when
    code = main(["dlq", "list"])
    # then: a usage error naming the file and how to reach a deployed stack's DLQ; nothing created
    err = capsys.readouterr().err
    assert code == 2 and f"{gone} does not exist" in err and "--env-dir" in err, err
    assert not gone.exists()


def test_dlq_against_loom_dev_without_its_package_says_what_to_install(state_file, tmp_path, monkeypatch, capsys):
    # given: a `loom dev` runtime recorded, and no loom-lite installed where this `loom` runs
    import loom_cli.dlq

    monkeypatch.chdir(tmp_path)
    state_file.parent.mkdir(parents=True, exist_ok=True)
    state_file.write_text(json.dumps({"kind": "lite", "url": "http://127.0.0.1:9", "db": str(tmp_path / "loom.db")}))
    monkeypatch.setattr(loom_cli.dlq, "entry_points", lambda group: [])
    # when
    code = main(["dlq", "redrive"])
    # then
    err = capsys.readouterr().err
    assert code == 2 and "install loom-lite" in err and "--env-dir" in err, err


def test_workflows_table_summarises_each_input_schema():
    from loom_cli.render import input_summary

    schema = {"properties": {"order_id": {"type": "string"}, "email": {"anyOf": [{"type": "string"}, {"type": "null"}]}},
              "required": ["order_id"]}
    assert input_summary(schema) == "order_id*: string, email: string|null"
    assert input_summary(None) == "any JSON object"


class _Sampling:
    """An SQS client whose short polls (WaitTimeSeconds=0) sample no server holding a message, as SQS's short
    polling may while messages remain; a long poll asks them all."""

    def __init__(self, messages):
        self.messages, self.receives = messages, []

    def receive_message(self, **kw):
        self.receives.append(kw["WaitTimeSeconds"])
        if kw["WaitTimeSeconds"] == 0 or not self.messages:
            return {}
        got, self.messages = self.messages[:kw["MaxNumberOfMessages"]], self.messages[kw["MaxNumberOfMessages"]:]
        return {"Messages": got}

    def change_message_visibility(self, **kw):
        pass


def test_dlq_list_long_polls_so_an_empty_short_poll_does_not_end_it_early():
    from loom_cli.dlq import peek

    messages = [{"MessageId": f"m-{i}", "ReceiptHandle": f"r-{i}", "Body": "{}", "Attributes": {}} for i in range(3)]
    client = _Sampling(messages)
    # when
    rows = peek(client, "https://sqs.example/dlq", 10)
    # then: every message, and each receive waited
    assert [r["message_id"] for r in rows] == ["m-0", "m-1", "m-2"], rows
    assert client.receives and 0 not in client.receives, client.receives


def test_dlq_redrive_returns_step_messages_behind_more_notices_than_its_limit_and_list_says_when_there_may_be_more(
        queues, capsys):
    # given: 105 failure notices ahead of 3 step messages
    sqs, queue, dlq = queues
    for _ in range(105):
        sqs.send_message(QueueUrl=dlq, MessageBody=json.dumps(NOTICE))
    for _ in range(3):
        sqs.send_message(QueueUrl=dlq, MessageBody=json.dumps(STEP))
    # when: listed with the default limit
    assert main(["dlq", "list"]) == 0
    # then: it says the listing stopped at its limit
    assert "20 shown, the --limit: there may be more" in capsys.readouterr().out
    # when: redriven with the default limit (100)
    assert main(["dlq", "redrive"]) == 0
    # then: the 3 step messages are back on the step queue (before: none, the notices used up the limit), each
    # notice counted once and left
    out = capsys.readouterr().out
    assert "returned 3 step message(s)" in out and "105 other message(s)" in out, out
    assert _visible(sqs, queue) == 3 and _visible(sqs, dlq) == 105
