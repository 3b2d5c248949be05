"""``loom dlq list`` and ``loom dlq redrive``: the dead-letter queue, read and emptied with your AWS
credentials (the control plane has no rights on it). The queues come from ``--env-dir``'s Terraform
outputs (``queue_url``, ``dlq_url``) or from the local stack ``make up`` recorded (its moto endpoint on
loopback takes any credentials, so none are needed there). Against a ``loom dev`` runtime, the same two
commands read and redrive the dead letters its SQLite file keeps (``loom_lite.dead_letters``).

The DLQ holds step messages the transport gave up on (SQS moved them after ``maxReceiveCount``) and,
when no status-change bus is configured, failure notices of FAILED executions. ``redrive`` returns the
step messages to the step queue (a stale one is acknowledged and changes nothing, so returning every one
is safe) and leaves notices where they are: they are not work to redo.

SQS has no way to look without receiving, and every receive counts in a message's
``ApproximateReceiveCount``, so ``list`` receives each message once (hidden while it looks, then visible
again at once) and does not show that count: it would grow with every listing.
"""

from __future__ import annotations

import datetime as dt
import json
import urllib.parse
from dataclasses import dataclass
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

from .sdk import LoomError
from .sdk.errors import CONFIGURATION, UNREACHABLE
from .sdk.locate import local_stack, state_file, terraform_outputs
from .sdk.transport import LOOPBACK_HOSTS

NOTICE_KIND = "loom.execution_failed"
LOOK_S = 30
"""How long ``list`` keeps a message hidden while it looks (so one listing receives each message once)."""
POLL_S = 1
"""Each receive waits up to this long (long polling): a short poll samples only some of SQS's servers and may
answer empty while messages remain, which would end a listing or a redrive early."""
HOLD_S = 300
"""How long ``redrive`` keeps a message it leaves hidden while it reads on (each is read once per redrive)."""
LOCAL_CREDENTIALS = {"aws_access_key_id": "loom-local", "aws_secret_access_key": "loom-local"}
DLQ_ENTRY_POINTS = "loom.dlq"
"""Where ``loom dlq`` finds the reader of a ``loom dev`` file's dead letters (loom-lite registers it)."""


@dataclass(frozen=True)
class Queues:
    queue_url: str
    dlq_url: str
    region: str | None
    endpoint: str | None

    @property
    def is_local(self) -> bool:
        return bool(self.endpoint) and urllib.parse.urlparse(self.endpoint).hostname in LOOPBACK_HOSTS


def queues(env_dir: str | None) -> Queues:
    if env_dir:
        out = terraform_outputs(Path(env_dir))
        try:
            return Queues(out["queue_url"]["value"], out["dlq_url"]["value"],
                          (out.get("region") or {}).get("value"), (out.get("endpoint") or {}).get("value"))
        except (KeyError, TypeError):
            raise LoomError(CONFIGURATION, f"{env_dir} has no queue_url/dlq_url outputs; has this environment been "
                                           "applied?") from None
    state = local_stack()
    if state is not None:
        try:
            return Queues(state["queue_url"], state["dlq_url"], state.get("region"), state.get("endpoint"))
        except KeyError as exc:
            raise LoomError(CONFIGURATION, f"{state_file()} has no {exc}; run `make down && make up` again") from None
    raise LoomError(CONFIGURATION, "the dlq commands read the queues from --env-dir terraform/envs/<env> or the local "
                                   f"stack (`make up` records it in {state_file()}): pass --env-dir (or --db for a "
                                   "`loom dev` file)")


def sqs_client(q: Queues, profile: str | None = None) -> Any:
    import botocore.session
    from botocore.config import Config

    session = botocore.session.Session(profile=profile)
    region = q.region or session.get_config_variable("region") or "us-east-1"
    # the local stack's moto takes any credentials: do not require the caller to have some
    keys = LOCAL_CREDENTIALS if q.is_local and session.get_credentials() is None else {}
    return session.create_client("sqs", region_name=region, endpoint_url=q.endpoint, **keys,
                                 config=Config(retries={"mode": "standard", "max_attempts": 3}, connect_timeout=5,
                                               read_timeout=30))


def _sent_at(attrs: dict[str, Any]) -> str | None:
    ms = attrs.get("SentTimestamp")
    if not ms or not str(ms).isdigit():
        return None
    return dt.datetime.fromtimestamp(int(ms) / 1000, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def describe(message: dict[str, Any]) -> dict[str, Any]:
    """One dead-lettered message, as an operator reads it."""
    try:
        body = json.loads(message.get("Body") or "")
    except ValueError:
        body = None
    row = {"message_id": message["MessageId"], "sent_at": _sent_at(message.get("Attributes") or {})}
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
    """Up to ``limit`` messages, each received once (hidden while this looks), then visible again at once."""
    seen: dict[str, dict[str, Any]] = {}
    try:
        while len(seen) < limit:
            got = client.receive_message(QueueUrl=dlq_url, MaxNumberOfMessages=min(10, limit - len(seen)),
                                         VisibilityTimeout=LOOK_S, WaitTimeSeconds=POLL_S,
                                         AttributeNames=["All"]).get("Messages", [])
            if not got:
                break
            for m in got:
                seen.setdefault(m["MessageId"], m)
    finally:
        from botocore.exceptions import ClientError

        for m in seen.values():
            try:
                client.change_message_visibility(QueueUrl=dlq_url, ReceiptHandle=m["ReceiptHandle"],
                                                 VisibilityTimeout=0)
            except ClientError:  # deleted meanwhile (a redrive): nothing to show again; else visible after LOOK_S
                pass
    rows = [describe(m) for m in seen.values()]
    return sorted(rows, key=lambda r: (r["sent_at"] or "", r["message_id"]))[:limit]


def redrive(client: Any, q: Queues, limit: int) -> dict[str, int]:
    """Move up to ``limit`` step messages back to the step queue; notices and unknown bodies stay. ``limit``
    counts the step messages: the notices ahead of them are passed over (each held hidden while the queue is
    read, so each is read once), however many there are."""
    moved = 0
    held: dict[str, str] = {}
    try:
        while moved < limit:
            got = client.receive_message(QueueUrl=q.dlq_url, MaxNumberOfMessages=10, VisibilityTimeout=HOLD_S,
                                         WaitTimeSeconds=POLL_S, AttributeNames=["All"]).get("Messages", [])
            if not got or all(m["MessageId"] in held for m in got):  # read through (or what it held came back)
                break
            for m in got:
                if m["MessageId"] in held:
                    continue
                if describe(m)["kind"] == "step_message" and moved < limit:
                    client.send_message(QueueUrl=q.queue_url, MessageBody=m["Body"])
                    client.delete_message(QueueUrl=q.dlq_url, ReceiptHandle=m["ReceiptHandle"])
                    moved += 1
                else:  # a notice, or a step message past the limit: left where it is
                    held[m["MessageId"]] = m["ReceiptHandle"]
    finally:
        for handle in held.values():  # visible again for the next `dlq list`
            client.change_message_visibility(QueueUrl=q.dlq_url, ReceiptHandle=handle, VisibilityTimeout=0)
    return {"returned": moved, "left": len(held)}


# -- the commands -------------------------------------------------------------------------------------------
def _connect(args) -> tuple[Queues, Any]:
    q = queues(args.env_dir)
    try:
        return q, sqs_client(q, args.profile)
    except Exception as exc:  # no credentials, bad region: say so, do not trace
        raise LoomError(UNREACHABLE, f"cannot reach SQS for {q.dlq_url}: {exc}") from None


def _sqs(call, q: Queues):
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        return call()
    except ClientError as exc:
        err = exc.response.get("Error", {})
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 400
        raise LoomError(str(err.get("Code")), f"SQS refused: {err.get('Message')} ({q.dlq_url})",
                        status=status) from None
    except BotoCoreError as exc:
        raise LoomError(UNREACHABLE, f"cannot reach SQS for {q.dlq_url}: {exc}") from None


def cmd_list(args) -> int:
    lite = lite_file(args.env_dir, getattr(args, "db", None))
    if lite is not None:  # `loom dev`: the file's dead_letters table, read without receiving anything
        rows, source = [describe(m) for m in dead_letters(lite, "rows", args.limit)], {"db": lite}
        where = f"the dead_letters table of {lite}"
    else:
        q, sqs = _connect(args)
        rows, source = _sqs(lambda: peek(sqs, q.dlq_url, args.limit), q), {"dlq_url": q.dlq_url}
        where = q.dlq_url
    if getattr(args, "json", False):
        print(json.dumps({**source, "messages": rows}, indent=2, sort_keys=True))
        return 0
    if not rows:
        print(f"the dead-letter queue is empty ({where})")
        return 0
    print(f"{'message':36}  {'kind':14}  {'sent':27}  {'execution':36}  detail")
    for r in rows:
        print(f"{r['message_id']:36}  {r['kind']:14}  {str(r['sent_at'] or '-'):27}  "
              f"{str(r['execution_id'] or '-'):36}  {r['detail']}")
    if len(rows) >= args.limit:
        print(f"\n{len(rows)} shown, the --limit: there may be more (--limit up to 100; `loom dlq redrive` returns "
              "every step message, however many notices are ahead of them)")
    return 0


def cmd_redrive(args) -> int:
    lite = lite_file(args.env_dir, getattr(args, "db", None))
    if lite is not None:
        counts, queue = dead_letters(lite, "redrive", args.limit), f"the step queue of {lite}"
    else:
        q, sqs = _connect(args)
        counts, queue = _sqs(lambda: redrive(sqs, q, args.limit), q), q.queue_url
    if getattr(args, "json", False):
        print(json.dumps(counts, indent=2, sort_keys=True))
    else:
        print(f"returned {counts['returned']} step message(s) to {queue}; {counts['left']} other message(s) "
              "(failure notices, and step messages past --limit) left on the dead-letter queue")
    return 0


# -- a `loom dev` file ----------------------------------------------------------------------------------------
def lite_file(env_dir: str | None, db: str | None = None) -> str | None:
    """``--db``, else the SQLite file of the ``loom dev`` runtime the state file records (None: --env-dir, or a
    local stack)."""
    if db:
        if env_dir:
            raise LoomError(CONFIGURATION, "--db names a `loom dev` file and --env-dir a deployed stack: pass one")
        return str(Path(db).resolve())
    state = None if env_dir else local_stack()
    if state is None or state.get("kind") != "lite":
        return None
    if not state.get("db"):
        raise LoomError(CONFIGURATION, f"{state_file()} records a `loom dev` runtime but not its file; start `loom "
                                       "dev` again")
    return str(state["db"])


def dead_letters(db: str, action: str, limit: int) -> Any:
    """``rows`` or ``redrive`` of the ``loom dev`` runtime's dead letters (``loom_lite.dead_letters``, found under
    the ``loom.dlq`` entry point group: this package does not import the runtime)."""
    found = [ep for ep in entry_points(group=DLQ_ENTRY_POINTS) if ep.name == "lite"]
    if not found:
        raise LoomError(CONFIGURATION, f"{db} is a `loom dev` file, whose dead letters only its package reads: "
                                       "install loom-lite here (or pass --env-dir for a deployed stack)")
    try:
        return getattr(found[0].load(), action)(db, limit)
    except Exception as exc:  # noqa: BLE001 - the file's problem, said as the runtime words it, not a traceback
        raise LoomError(CONFIGURATION, f"cannot read the dead letters of {db}: {exc}") from None
