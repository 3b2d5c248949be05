"""Who called which AWS API on what: the local stack's record of every call a Loom principal made.

On AWS each function calls under its execution role's credentials, and the Lambda service itself
acts under the same role for what it does on the function's behalf (the SQS event source mapping's
receives and deletes, the log writes). Locally every function process gets an access key id of its
own role (:data:`ACCESS_KEYS`), the worker's SQS poller uses the worker's, and the operator's tools
(the ``loom`` CLI, the console, the MCP server) use :data:`OPERATOR_ACCESS_KEY`. The emulator reads
the key id from each request's SigV4 ``Authorization`` header, exactly as AWS attributes a call, and
appends one JSON line per call to ``<calls dir>/<writer>.jsonl``:

    {"principal": "worker", "service": "dynamodb", "operation": "Query",
     "params": {"TableName": "loom-local", "IndexName": "GSI1"}}

Only what names the resource is kept (table, index, queue, bus, function), never the data. Calls
under any other key (Terraform's, the runtime's own discovery, a test's direct reads) are not
recorded: they are not Loom's to authorize.
"""

from __future__ import annotations

import json
import os
import re
import threading
import urllib.parse
from pathlib import Path
from typing import Any

ACCESS_KEYS = {
    "worker": "ASIALOOMLOCALWORKER0",
    "sweeper": "ASIALOOMLOCALSWEEPER",
    "control-plane": "ASIALOOMLOCALCONTROL",
}
"""The access key id each function's role signs with locally (AWS_ACCESS_KEY_ID in its process)."""
OPERATOR_ACCESS_KEY = "AKIALOOMLOCALOPERATR"
"""Sign with this key id (AWS_ACCESS_KEY_ID) to have a tool's calls checked against the operator policy."""
OPERATOR = "operator"
PRINCIPALS = {**{key: role for role, key in ACCESS_KEYS.items()}, OPERATOR_ACCESS_KEY: OPERATOR}

_CREDENTIAL = re.compile(r"Credential=([A-Z0-9]+)/")
_SERVICE_OF_TARGET = {"DynamoDB_20120810": "dynamodb", "AmazonSQS": "sqs", "AWSEvents": "events"}
_KEPT = ("TableName", "IndexName", "QueueUrl", "QueueName", "EventBusName", "FunctionName")


def principal_of(authorization: str) -> str | None:
    """The Loom principal whose access key id signed a request, or None (not one of Loom's)."""
    found = _CREDENTIAL.search(authorization or "")
    return PRINCIPALS.get(found.group(1)) if found else None


def resource_params(service: str, operation: str, body: dict[str, Any]) -> dict[str, Any]:
    """The request parameters that name what a call acts on (see the module docstring)."""
    params: dict[str, Any] = {k: body[k] for k in _KEPT if isinstance(body.get(k), str)}
    if service == "dynamodb" and operation == "TransactWriteItems":
        params["TransactItems"] = [{kind: {"TableName": spec.get("TableName")} for kind, spec in item.items()
                                    if isinstance(spec, dict)} for item in body.get("TransactItems") or []]
    elif service == "dynamodb" and operation in ("BatchGetItem", "BatchWriteItem"):
        params["RequestItems"] = sorted(body.get("RequestItems") or {})
    elif service == "events" and operation == "PutEvents":
        params["Entries"] = [{"EventBusName": e.get("EventBusName") or "default"} for e in body.get("Entries") or []]
    return params


def parse_request(target: str, content_type: str, body: bytes) -> tuple[str, str, dict[str, Any]] | None:
    """(service, operation, body) of an AWS JSON- or query-protocol request; None for anything else."""
    if target:
        prefix, _, operation = target.partition(".")
        service = _SERVICE_OF_TARGET.get(prefix)
        if service is None:
            return None
        try:
            parsed = json.loads(body or b"{}")
        except ValueError:
            parsed = {}
        return service, operation, parsed if isinstance(parsed, dict) else {}
    if "x-www-form-urlencoded" in content_type and body:
        form = dict(urllib.parse.parse_qsl(body.decode("utf-8", "replace")))
        operation = form.pop("Action", "")
        if operation:  # only SQS still speaks the query protocol among the services Loom calls
            return "sqs", operation, form
    return None


class CallLog:
    """Appends calls to ``<directory>/<writer>.jsonl``, each distinct call once (one writer per process).

    What is authorized is the action on the resource, so a call made a thousand times is one line.
    """

    def __init__(self, directory: str | os.PathLike[str], writer: str):
        self.path = Path(directory) / f"{writer}.jsonl"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._seen: set[bytes] = set()

    def record(self, principal: str, service: str, operation: str, params: dict[str, Any],
               context: dict[str, str] | None = None) -> None:
        line = {"principal": principal, "service": service, "operation": operation, "params": params}
        if context:
            line["context"] = context
        data = (json.dumps(line, sort_keys=True) + "\n").encode()
        with self._lock:
            if data in self._seen:
                return
            self._seen.add(data)
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(fd, data)
            finally:
                os.close(fd)


def read_calls(directory: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Every call recorded under ``directory`` (all writers), in no particular order."""
    out: list[dict[str, Any]] = []
    for path in sorted(Path(directory).glob("*.jsonl")):
        out.extend(json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip())
    return out
