"""``loom dlq list`` and ``loom dlq redrive``: the dead-letter queue, read and emptied with your AWS
credentials (the control plane has no rights on it). The queues come from ``--env-dir``'s Terraform
outputs (``queue_url``, ``dlq_url``) or from the local stack's ``.loom/local.json``.

The DLQ holds step messages the transport gave up on (SQS moved them after ``maxReceiveCount``) and,
when no status-change bus is configured, failure notices of FAILED executions. ``redrive`` returns the
step messages to the step queue (a stale one is acknowledged and changes nothing, so returning every one
is safe) and leaves notices where they are: they are not work to redo.
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .client import CliError

NOTICE_KIND = "loom.execution_failed"


@dataclass(frozen=True)
class Queues:
    queue_url: str
    dlq_url: str
    region: str | None
    endpoint: str | None


def queues(env_dir: str | None, local_state: Path) -> Queues:
    if env_dir:
        out = _terraform_outputs(Path(env_dir))
        try:
            return Queues(out["queue_url"]["value"], out["dlq_url"]["value"],
                          (out.get("region") or {}).get("value"), (out.get("endpoint") or {}).get("value"))
        except (KeyError, TypeError):
            raise CliError(f"{env_dir} has no queue_url/dlq_url outputs; has this environment been applied?", 2) from None
    if local_state.exists():
        try:
            state = json.loads(local_state.read_text())
            return Queues(state["queue_url"], state["dlq_url"], state.get("region"), state.get("endpoint"))
        except (ValueError, KeyError) as exc:
            raise CliError(f"{local_state} is unreadable ({exc}); run `make down && make up` again", 2) from None
    raise CliError("the dlq commands read the queues from --env-dir terraform/envs/<env> or the local stack "
                   "(`make up`): pass --env-dir", 2)


def _terraform_outputs(env_dir: Path) -> dict[str, Any]:
    if not env_dir.is_dir():
        raise CliError(f"--env-dir {env_dir} is not a directory", 2)
    try:
        out = subprocess.run(["terraform", f"-chdir={env_dir}", "output", "-json", "-no-color"],
                             capture_output=True, text=True, timeout=60)
    except FileNotFoundError:
        raise CliError("--env-dir needs the terraform CLI on PATH", 2) from None
    if out.returncode != 0:
        raise CliError(f"`terraform output` failed in {env_dir}: {out.stderr.strip()}", 2)
    return json.loads(out.stdout or "{}")


def sqs_client(q: Queues, profile: str | None = None) -> Any:
    import botocore.session
    from botocore.config import Config

    session = botocore.session.Session(profile=profile)
    region = q.region or session.get_config_variable("region") or "us-east-1"
    return session.create_client("sqs", region_name=region, endpoint_url=q.endpoint,
                                 config=Config(retries={"mode": "standard", "max_attempts": 3}, connect_timeout=5,
                                               read_timeout=30))


def describe(message: dict[str, Any]) -> dict[str, Any]:
    """One dead-lettered message, as an operator reads it."""
    try:
        body = json.loads(message.get("Body") or "")
    except ValueError:
        body = None
    attrs = message.get("Attributes") or {}
    row = {"message_id": message["MessageId"], "receives": int(attrs.get("ApproximateReceiveCount", 0)),
           "sent_at": attrs.get("SentTimestamp")}
    if isinstance(body, dict) and body.get("kind") == NOTICE_KIND:
        error = body.get("error") or {}
        row.update(kind="failure_notice", execution_id=body.get("execution_id"), workflow=body.get("workflow"),
                   detail=f"{error.get('code')}: {error.get('message')}")
    elif isinstance(body, dict) and {"execution_id", "step", "version"} <= set(body):
        row.update(kind="step_message", execution_id=body["execution_id"],
                   detail=f"step {body['step']} at version {body['version']}")
    else:
        row.update(kind="unknown", execution_id=None, detail=(message.get("Body") or "")[:80])
    return row


def peek(client: Any, dlq_url: str, limit: int) -> list[dict[str, Any]]:
    """Up to ``limit`` messages, left on the queue (visibility 0: visible again at once)."""
    seen: dict[str, dict[str, Any]] = {}
    empty_rounds = 0
    while len(seen) < limit and empty_rounds < 2:
        got = client.receive_message(QueueUrl=dlq_url, MaxNumberOfMessages=min(10, limit - len(seen)),
                                     VisibilityTimeout=0, WaitTimeSeconds=0, AttributeNames=["All"]).get("Messages", [])
        fresh = [m for m in got if m["MessageId"] not in seen]
        empty_rounds = empty_rounds + 1 if not fresh else 0
        for m in fresh:
            seen[m["MessageId"]] = m
    return [describe(m) for m in list(seen.values())[:limit]]


def redrive(client: Any, q: Queues, limit: int) -> dict[str, int]:
    """Move up to ``limit`` step messages back to the step queue; notices and unknown bodies stay."""
    moved = kept = 0
    held: list[str] = []
    while moved + kept < limit:
        got = client.receive_message(QueueUrl=q.dlq_url, MaxNumberOfMessages=min(10, limit - moved - kept),
                                     VisibilityTimeout=60, WaitTimeSeconds=0, AttributeNames=["All"]).get("Messages", [])
        if not got:
            break
        for m in got:
            if describe(m)["kind"] == "step_message":
                client.send_message(QueueUrl=q.queue_url, MessageBody=m["Body"])
                client.delete_message(QueueUrl=q.dlq_url, ReceiptHandle=m["ReceiptHandle"])
                moved += 1
            else:
                held.append(m["ReceiptHandle"])
                kept += 1
    for handle in held:  # visible again for the next `dlq list`
        client.change_message_visibility(QueueUrl=q.dlq_url, ReceiptHandle=handle, VisibilityTimeout=0)
    return {"returned": moved, "left": kept}
