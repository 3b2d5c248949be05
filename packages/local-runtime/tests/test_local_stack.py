"""The stack end to end on a hand-made deployment (tiny zips, created through the emulator's API).

Terraform is not needed here: ``provision`` creates what terraform/envs/local would (queue + DLQ with
a redrive policy, three functions, a disabled SQS mapping with ReportBatchItemFailures, a Function URL,
a schedule rule), so the runtime's discovery, zip check, polling, schedule and URL are tested alone.
"""

from __future__ import annotations

import io
import json
import os
import socket
import time
import urllib.request
import zipfile
from pathlib import Path

import pytest

from loom_local.deployment import DeploymentError, code_sha256
from loom_local.stack import LocalStack, StackError, StackOptions

HERE = Path(__file__).parent
VISIBILITY_S = 2
MAX_RECEIVES = 2


def _zip_bytes(path: Path) -> bytes:
    return path.read_bytes()


def provision_tiny(zip_dir: Path, out_file: Path, *, report_failures: bool = True, tamper: bool = False,
                   second_mapping: str | None = None):
    def provision(stack: LocalStack) -> None:
        iam, lam, sqs, events = (stack.client(s) for s in ("iam", "lambda", "sqs", "events"))
        role = iam.create_role(RoleName="tiny", AssumeRolePolicyDocument=json.dumps({
            "Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Principal": {"Service": "lambda.amazonaws.com"},
                                                    "Action": "sts:AssumeRole"}]}))["Role"]["Arn"]
        dlq = sqs.create_queue(QueueName="tiny-dlq")["QueueUrl"]
        dlq_arn = sqs.get_queue_attributes(QueueUrl=dlq, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        q = sqs.create_queue(QueueName="tiny-steps", Attributes={
            "VisibilityTimeout": str(VISIBILITY_S),
            "RedrivePolicy": json.dumps({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": MAX_RECEIVES})})["QueueUrl"]
        q_arn = sqs.get_queue_attributes(QueueUrl=q, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        env = {"Variables": {"TINY_OUT": str(out_file), "TINY_QUEUE_URL": q}}
        arns = {}
        for role_name, handler in (("worker", "worker"), ("sweeper", "sweeper"), ("control-plane", "control")):
            code = _zip_bytes(zip_dir / f"{role_name}.zip")
            if tamper and role_name == "worker":
                code = code + b"\0"  # deployed bytes differ from the local zip
            arns[role_name] = lam.create_function(
                FunctionName=f"tiny-{role_name}", Runtime="python3.11", Role=role, Handler=f"tiny_handlers.{handler}",
                Code={"ZipFile": code}, Timeout=10, MemorySize=256, Environment=env)["FunctionArn"]
        for _ in range(2 if second_mapping == "same" else 1):  # "same": a create retried after a slow answer
            lam.create_event_source_mapping(EventSourceArn=q_arn, FunctionName=arns["worker"], BatchSize=5,
                                            Enabled=False,
                                            FunctionResponseTypes=["ReportBatchItemFailures"] if report_failures else [])
        if second_mapping == "other":  # a second deployment's worker on its own queue
            other = sqs.create_queue(QueueName="other-steps")["QueueUrl"]
            other_arn = sqs.get_queue_attributes(QueueUrl=other, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
            lam.create_event_source_mapping(EventSourceArn=other_arn, FunctionName=arns["sweeper"], Enabled=False)
        lam.create_function_url_config(FunctionName=arns["control-plane"], AuthType="AWS_IAM")
        rule = events.put_rule(Name="tiny-sweep", ScheduleExpression="rate(1 minute)")
        events.put_targets(Rule="tiny-sweep", Targets=[{"Id": "sweeper", "Arn": arns["sweeper"]}])
        assert rule["RuleArn"]

    return provision


@pytest.fixture
def zip_dir(tmp_path: Path) -> Path:
    import sys

    sys.path.insert(0, str(HERE))
    try:
        from conftest import build_tiny_zip
    finally:
        sys.path.remove(str(HERE))
    d = tmp_path / "dist"
    for role in ("worker", "sweeper", "control-plane"):
        build_tiny_zip(d / f"{role}.zip", role)
    return d


def _options(tmp_path: Path, zip_dir: Path, provision, **kw) -> StackOptions:
    return StackOptions(repo=HERE.parents[2], run_dir=tmp_path / "run", zip_dir=zip_dir, provision=provision,
                        sweep_every_s=kw.pop("sweep_every_s", 0.5), **kw)


def test_the_stack_runs_a_hand_made_deployment_and_stops_clean(tmp_path, zip_dir, out_file, read_out):
    events: list[tuple[str, dict]] = []
    stack = LocalStack(_options(tmp_path, zip_dir, provision_tiny(zip_dir, out_file),
                                observer=lambda k, d: events.append((k, d))))
    with stack:
        d = stack.deployment
        assert {r: f.name for r, f in d.functions.items()} == {
            "worker": "tiny-worker", "sweeper": "tiny-sweeper", "control-plane": "tiny-control-plane"}
        assert {r: f.zip_path.name for r, f in d.functions.items()} == {
            "worker": "worker.zip", "sweeper": "sweeper.zip", "control-plane": "control-plane.zip"}
        assert d.worker.code_sha256 == code_sha256(zip_dir / "worker.zip")
        assert d.mapping.batch_size == 5 and d.mapping.report_batch_item_failures
        assert d.mapping_state == "Disabled"  # the emulator cannot run it; the runtime does
        assert d.queue.visibility_timeout_s == VISIBILITY_S and d.queue.max_receive_count == MAX_RECEIVES
        assert d.rule.expression == "rate(1 minute)"
        assert d.url.auth_type == "AWS_IAM"
        assert (d.region, d.account) == ("us-east-1", "123456789012")  # the functions' ARNs name the account

        # The deployed environment reaches the process, plus what Lambda injects.
        status, _, body = _http("GET", stack.url + "/env")
        env = json.loads(body)["env"]
        assert env["TINY_OUT"] == str(out_file)
        assert env["AWS_ENDPOINT_URL"] == stack.endpoint
        assert env["AWS_LAMBDA_FUNCTION_NAME"] == "tiny-control-plane"
        assert env["AWS_LAMBDA_FUNCTION_MEMORY_SIZE"] == "256"

        # Function URL: a structured response, an inferred one, and a function error.
        status, headers, body = _http("POST", stack.url + "/things?a=1&a=2&b=", b'{"x": 1}',
                                      {"content-type": "application/json", "cookie": "c1=v1; c2=v2"})
        assert status == 201 and headers["x-tiny"] == "yes" and headers["set-cookie"] == "a=1"
        event = json.loads(body)
        assert event["version"] == "2.0" and event["rawPath"] == "/things" and event["body"] == '{"x": 1}'
        assert event["queryStringParameters"] == {"a": "1,2", "b": ""} and event["rawQueryString"] == "a=1&a=2&b="
        assert event["cookies"] == ["c1=v1", "c2=v2"] and "cookie" not in event["headers"]
        assert event["requestContext"]["http"]["method"] == "POST"
        assert event["requestContext"]["authorizer"]["iam"]["userArn"] == "local"
        assert _http("GET", stack.url + "/plain")[::2] == (200, b'{"hello": "world"}')
        assert _http("GET", stack.url + "/boom")[0] == 502

        # The schedule fires the sweeper with a scheduled event.
        _wait(lambda: [r for r in read_out() if r["kind"] == "tick"], "a sweeper tick")
        tick = next(r for r in read_out() if r["kind"] == "tick")["event"]
        assert tick["detail-type"] == "Scheduled Event" and tick["source"] == "aws.events"
        assert tick["resources"] == [d.rule.arn]

        # The queue: a batch with one failure; the success is deleted, the failure comes back after the
        # visibility timeout and reaches the DLQ after maxReceiveCount receives.
        sqs = stack.client("sqs")
        for body in ({"action": "ok", "n": 1}, {"action": "fail", "n": 2}):
            sqs.send_message(QueueUrl=d.queue.url, MessageBody=json.dumps(body))
        _wait(lambda: _dlq_bodies(stack), "the failing message in the DLQ", timeout_s=30)
        records = [r for r in read_out() if r["kind"] == "record"]
        oks = [r for r in records if r["body"]["n"] == 1]
        fails = [r for r in records if r["body"]["n"] == 2]
        assert len(oks) == 1  # deleted after success, never redelivered
        assert [r["receive_count"] for r in fails] == [str(n) for n in range(1, MAX_RECEIVES + 1)]
        assert set(fails[0]["keys"]) == {"messageId", "receiptHandle", "body", "attributes", "messageAttributes",
                                         "md5OfBody", "eventSource", "eventSourceARN", "awsRegion"}
        assert fails[0]["source"] == d.queue.arn
        assert _dlq_bodies(stack) == [{"action": "fail", "n": 2}]
        pids = stack.pids()
        url_port = stack.url_server.port
        emulator_port = stack.emulator.port

    # Everything stopped: processes gone, ports free.
    for pid in [pids["emulator"], *[p for ps in pids["functions"].values() for p in ps]]:
        assert not _alive(pid), f"process {pid} survived stop()"
    for port in (url_port, emulator_port):
        assert _port_free(port), f"port {port} still bound"


def test_a_zip_that_is_not_the_deployed_one_is_refused(tmp_path, zip_dir, out_file):
    stack = LocalStack(_options(tmp_path, zip_dir, provision_tiny(zip_dir, out_file, tamper=True)))
    with pytest.raises(DeploymentError) as exc:
        stack.start()
    message = str(exc.value)
    assert "deployed worker function tiny-worker has CodeSha256" in message
    assert "make down && make up" in message
    assert stack.emulator.proc.poll() is not None  # a failed start leaves nothing running


def test_a_mapping_created_twice_is_one_worker_and_two_deployments_are_refused_naming_them(tmp_path, zip_dir, out_file,
                                                                                           read_out):
    # given: the worker's mapping twice (terraform's create retried), and apart, a second function's mapping
    twice = LocalStack(_options(tmp_path / "twice", zip_dir, provision_tiny(zip_dir, out_file, second_mapping="same")))
    two = LocalStack(_options(tmp_path / "two", zip_dir, provision_tiny(zip_dir, out_file, second_mapping="other")))
    # when / then: the first runs a message once, through the worker
    with twice:
        assert len(twice.client("lambda").list_event_source_mappings()["EventSourceMappings"]) == 2
        twice.client("sqs").send_message(QueueUrl=twice.deployment.queue.url, MessageBody=json.dumps({"action": "ok"}))
        _wait(lambda: [r for r in read_out() if r["kind"] == "record"], "the record")
        time.sleep(1)
        assert len([r for r in read_out() if r["kind"] == "record"]) == 1
    with pytest.raises(DeploymentError) as exc:
        two.start()
    assert "tiny-worker <- tiny-steps" in str(exc.value) and "tiny-sweeper <- other-steps" in str(exc.value)
    assert two.emulator.proc.poll() is not None


def test_without_report_batch_item_failures_the_failure_list_is_ignored(tmp_path, zip_dir, out_file, read_out):
    stack = LocalStack(_options(tmp_path, zip_dir, provision_tiny(zip_dir, out_file, report_failures=False)))
    with stack:
        sqs = stack.client("sqs")
        sqs.send_message(QueueUrl=stack.deployment.queue.url, MessageBody=json.dumps({"action": "fail"}))
        _wait(lambda: [r for r in read_out() if r["kind"] == "record"], "the record")
        time.sleep(VISIBILITY_S + 1.5)
        # As on AWS (a known pitfall): the "failed" record was deleted with the batch.
        assert len([r for r in read_out() if r["kind"] == "record"]) == 1
        assert _dlq_bodies(stack) == []


def test_missing_zips_say_how_to_build_them(tmp_path, out_file):
    stack = LocalStack(_options(tmp_path, tmp_path / "nothing-here", provision_tiny(tmp_path, out_file)))
    with pytest.raises(StackError, match="make build-local"):
        stack.start()


def _dlq_bodies(stack: LocalStack) -> list[dict]:
    sqs = stack.client("sqs")
    attrs = sqs.get_queue_attributes(QueueUrl=stack.deployment.queue.dlq_url,
                                     AttributeNames=["ApproximateNumberOfMessages"])["Attributes"]
    if int(attrs["ApproximateNumberOfMessages"]) == 0:
        return []
    msgs = sqs.receive_message(QueueUrl=stack.deployment.queue.dlq_url, MaxNumberOfMessages=10,
                               VisibilityTimeout=0).get("Messages", [])
    return [json.loads(m["Body"]) for m in msgs]


def _http(method: str, url: str, body: bytes | None = None, headers: dict | None = None):
    req = urllib.request.Request(url, data=body, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, {k.lower(): v for k, v in resp.headers.items()}, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, {k.lower(): v for k, v in exc.headers.items()}, exc.read()


def _wait(check, what: str, timeout_s: float = 15.0):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout_s:g} s waiting for {what}")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _port_free(port: int) -> bool:
    """Nothing listens on it (connections in TIME_WAIT may linger; SO_REUSEADDR ignores them)."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def test_a_redeploy_through_the_lambda_api_runs_the_new_code_and_keeps_the_queues(tmp_path, zip_dir, out_file):
    # given: a running stack, and a second build whose zips differ (a release file added to each)
    import shutil

    release_2 = tmp_path / "dist-2"
    shutil.copytree(zip_dir, release_2)
    for z in release_2.glob("*.zip"):
        with zipfile.ZipFile(z, "a") as zf:
            zf.writestr("RELEASE", "2")
    stack = LocalStack(_options(tmp_path, zip_dir, provision_tiny(zip_dir, out_file)))
    with stack:
        queue_url = stack.deployment.queue.url
        before = json.loads(_http("GET", stack.url + "/env")[2])["env"]["LAMBDA_TASK_ROOT"]
        # when
        d = stack.redeploy(release_2, via="api")
        # then: the emulator holds the new code, and the next invocation runs it from its own unpacked copy
        assert {r: f.code_sha256 for r, f in d.functions.items()} == {
            r: code_sha256(release_2 / f"{r}.zip") for r in ("worker", "sweeper", "control-plane")}
        after = json.loads(_http("GET", stack.url + "/env")[2])["env"]["LAMBDA_TASK_ROOT"]
        assert after != before and (Path(after) / "RELEASE").read_text() == "2"
        assert d.queue.url == queue_url
        # and a directory that lacks one function's zip is refused, naming it, with nothing changed
        (release_2 / "sweeper.zip").unlink()
        with pytest.raises(StackError, match="no sweeper.zip in .* for the sweeper function tiny-sweeper"):
            stack.redeploy(release_2, via="api")
        assert stack.zip_dir == release_2.resolve() and stack.deployment is d
        assert stack.client("lambda").get_function(FunctionName="tiny-worker")["Configuration"]["CodeSha256"] == \
            d.worker.code_sha256
