"""The operator's own AWS calls: `loom dlq list` and `loom dlq redrive` on the deployed queues.

They run with the operator's credentials (the local stack's operator key), so every SQS call they make
is recorded and checked at the end of the session against the `operator_policy_json` output, like the
functions' calls against their roles (conftest.py).
"""

from __future__ import annotations

import json

from e2e_support import step_message

from loom_cli.main import main
from loom_local.calls import OPERATOR_ACCESS_KEY


def test_loom_dlq_list_and_redrive_when_a_step_message_is_dead_lettered_return_it_to_the_step_queue(
        loom, tmp_path, monkeypatch, capsys):
    # given: a finished execution, and a stale step message of it on the DLQ (as SQS leaves one there
    # after maxReceiveCount)
    token, eid = loom.new_token("dlq")
    loom.start("flaky_greeting", {"name": "Dee", "failures": 0}, token)
    loom.wait(eid, until=("COMPLETED",))
    version = loom.execution(eid)["version"]
    loom.sqs.send_message(QueueUrl=loom.dlq_url, MessageBody=step_message(eid, 0, 1))
    state = {"url": loom.url, "queue_url": loom.queue_url, "dlq_url": loom.dlq_url, "region": loom.deployment.region,
             "endpoint": loom.stack.endpoint}
    (tmp_path / "local.json").write_text(json.dumps(state))
    monkeypatch.setenv("LOOM_STATE_FILE", str(tmp_path / "local.json"))  # where `make up` records the stack
    monkeypatch.delenv("LOOM_URL", raising=False)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", OPERATOR_ACCESS_KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "local")
    monkeypatch.delenv("AWS_SESSION_TOKEN", raising=False)
    monkeypatch.delenv("AWS_PROFILE", raising=False)

    # when
    listed = main(["--json", "dlq", "list", "--limit", "100"])
    rows = json.loads(capsys.readouterr().out)["messages"]
    redriven = main(["--json", "dlq", "redrive", "--limit", "100"])
    counts = json.loads(capsys.readouterr().out)

    # then: listed, returned to the step queue, and the stale copy changes nothing
    assert listed == 0 and redriven == 0
    assert [r["kind"] for r in rows if r["execution_id"] == eid] == ["step_message"], rows
    assert counts["returned"] >= 1, counts
    assert main(["--json", "dlq", "list", "--limit", "100"]) == 0
    assert eid not in {r["execution_id"] for r in json.loads(capsys.readouterr().out)["messages"]}
    e = loom.execution(eid)
    assert (e["status"], e["version"]) == ("COMPLETED", version)
