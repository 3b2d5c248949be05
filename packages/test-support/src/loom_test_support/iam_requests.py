"""What IAM authorizes for one recorded AWS call: each action, on which resource ARN, with what context.

The local stack records calls as ``{"principal", "service", "operation", "params", "context"?}``
(packages/local-runtime, ``loom_local.calls``). IAM does not authorize an operation but an action on a
resource, and some operations need several (AWS's Service Authorization Reference):

- DynamoDB acts on ``table/<name>``, and a Query or Scan with ``IndexName`` on
  ``table/<name>/index/<index>``; ``TransactWriteItems`` is authorized per item action (PutItem,
  UpdateItem, DeleteItem, ConditionCheckItem) on each item's table, ``BatchGetItem`` and
  ``BatchWriteItem`` by their own action on each table they name;
- SQS acts on the queue's ARN (from its URL); a batch operation is its single action
  (``DeleteMessageBatch`` is ``sqs:DeleteMessage``);
- EventBridge ``PutEvents`` acts on each entry's bus (``default`` when the entry names none);
- CloudWatch Logs writes act on the log stream's ARN;
- a Function URL call is ``lambda:InvokeFunctionUrl`` on the function, and, for URLs created since
  October 2025, ``lambda:InvokeFunction`` with ``lambda:InvokedViaFunctionUrl``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit


class UnknownCallError(Exception):
    """A recorded call this module cannot map to IAM: add its row here (never let it pass unchecked)."""


@dataclass(frozen=True)
class Request:
    """One action on one resource, as IAM evaluates it."""

    principal: str
    action: str
    resource: str
    context: tuple[tuple[str, str], ...] = ()
    operation: str = field(default="", compare=False)
    """The API operation it came from (for the report)."""


_BATCH = {"DeleteMessageBatch": "DeleteMessage", "SendMessageBatch": "SendMessage",
          "ChangeMessageVisibilityBatch": "ChangeMessageVisibility"}
_TRANSACT = {"Put": "PutItem", "Update": "UpdateItem", "Delete": "DeleteItem", "ConditionCheck": "ConditionCheckItem"}


def queue_arn(url: str, region: str, account: str) -> str:
    """``https://sqs.<region>.amazonaws.com/<account>/<name>`` (or moto's form) as the queue's ARN."""
    parts = [p for p in urlsplit(url).path.split("/") if p]
    if len(parts) < 2:
        raise UnknownCallError(f"queue URL {url!r} has no account and name")
    return f"arn:aws:sqs:{region}:{parts[-2] or account}:{parts[-1]}"


def requests_of(call: dict[str, Any], region: str, account: str) -> list[Request]:
    """The IAM requests one recorded call makes."""
    principal, service, op = call["principal"], call["service"], call["operation"]
    params: dict[str, Any] = call.get("params") or {}
    context = tuple(sorted((call.get("context") or {}).items()))

    def req(action: str, resource: str, ctx: tuple[tuple[str, str], ...] = context) -> Request:
        return Request(principal, f"{service}:{action}", resource, ctx, op)

    if service == "dynamodb":
        table = f"arn:aws:dynamodb:{region}:{account}:table"
        if op == "TransactWriteItems":
            return [req(_TRANSACT[kind], f"{table}/{spec['TableName']}")
                    for item in params.get("TransactItems") or [] for kind, spec in item.items()]
        if op in ("BatchGetItem", "BatchWriteItem"):  # its own action, on each table it names
            tables = list(params.get("RequestItems") or {})
            if not tables:
                raise UnknownCallError(f"dynamodb:{op} without RequestItems: {params}")
            return [req(op, f"{table}/{name}") for name in tables]
        if "TableName" not in params:
            raise UnknownCallError(f"dynamodb:{op} without a TableName: {params}")
        resource = f"{table}/{params['TableName']}"
        if params.get("IndexName") and op in ("Query", "Scan"):
            resource += f"/index/{params['IndexName']}"
        return [req(op, resource)]
    if service == "sqs":
        if "QueueUrl" not in params:
            raise UnknownCallError(f"sqs:{op} without a QueueUrl: {params}")
        return [req(_BATCH.get(op, op), queue_arn(params["QueueUrl"], region, account))]
    if service == "events" and op == "PutEvents":
        out = []
        for entry in params.get("Entries") or []:
            bus = entry.get("EventBusName") or "default"
            arn = bus if bus.startswith("arn:") else f"arn:aws:events:{region}:{account}:event-bus/{bus}"
            out.append(req("PutEvents", arn))
        return out
    if service == "logs" and op in ("CreateLogStream", "PutLogEvents"):
        group, stream = params["logGroupName"], params["logStreamName"]
        return [req(op, f"arn:aws:logs:{region}:{account}:log-group:{group}:log-stream:{stream}")]
    if service == "lambda" and op == "InvokeFunctionUrl":
        arn = params["FunctionName"]
        return [req("InvokeFunctionUrl", arn),
                req("InvokeFunction", arn, tuple(sorted({**dict(context), "lambda:InvokedViaFunctionUrl": "true"}.items())))]
    raise UnknownCallError(f"no IAM mapping for {service}:{op} (principal {principal}); add one in {__name__}")
