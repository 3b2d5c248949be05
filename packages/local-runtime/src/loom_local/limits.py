"""AWS's size limits that moto does not enforce, with AWS's own error codes and messages.

What moto 5.2 already enforces, with AWS's errors (so the local stack gets them as is): a DynamoDB
item over 400 KB (``ValidationException``: "Item size has exceeded the maximum allowed size", or
"Item size to update ..." for an UpdateItem), a Query page of at most 1 MB (the page stops there and
carries a ``LastEvaluatedKey``), and an SQS message over the queue's ``MaximumMessageSize``
(``InvalidParameterValue``; Loom's queues are deployed with 256 KiB, the AWS provider's default
``max_message_size``; SQS allows up to 1 MiB).

What is enforced here instead:

- Lambda's invocation payload: a request over 6,291,456 bytes is refused before the function runs
  (``RequestEntityTooLargeException``), a response over 6,291,556 bytes fails the invocation
  (``Function.ResponseSizeTooLarge``). Both apply to the Function URL and to the SQS event source
  mapping, which therefore never builds a batch over the request limit.
- EventBridge ``PutEvents``: the entries of one request must total less than 256 KB, counted as
  EventBridge counts them (``ValidationException``: "Total size of the entries in the request is over
  the limit.").
"""

from __future__ import annotations

import json
from typing import Any

LAMBDA_REQUEST_MAX_BYTES = 6 * 1024 * 1024
LAMBDA_RESPONSE_MAX_BYTES = 6 * 1024 * 1024 + 100
"""What Lambda's error message names (6,291,556), 100 bytes over 6 MiB."""
REQUEST_TOO_LARGE = {
    "errorType": "RequestEntityTooLargeException",
    "errorMessage": f"Request must be smaller than {LAMBDA_REQUEST_MAX_BYTES} bytes for the InvokeFunction operation",
}
RESPONSE_TOO_LARGE = {
    "errorType": "Function.ResponseSizeTooLarge",
    "errorMessage": f"Response payload size exceeded maximum allowed payload size ({LAMBDA_RESPONSE_MAX_BYTES} bytes).",
}

PUT_EVENTS_MAX_BYTES = 256 * 1024
PUT_EVENTS_TOO_LARGE = ("ValidationException", "Total size of the entries in the request is over the limit.")


def payload_bytes(value: Any) -> int:
    """The size of a JSON payload as Lambda counts it (its UTF-8 encoding)."""
    return len(json.dumps(value, separators=(",", ":")).encode("utf-8"))


def put_events_entry_bytes(entry: dict[str, Any]) -> int:
    """EventBridge's size of one PutEvents entry: Time 14 bytes, Source, DetailType, Detail, Resources."""
    size = 14 if entry.get("Time") is not None else 0
    for key in ("Source", "DetailType", "Detail"):
        if isinstance(entry.get(key), str):
            size += len(entry[key].encode("utf-8"))
    size += sum(len(r.encode("utf-8")) for r in entry.get("Resources") or [] if isinstance(r, str))
    return size


def put_events_refusal(body: dict[str, Any]) -> tuple[str, str] | None:
    """AWS's (code, message) refusing a PutEvents request body, or None if it fits."""
    total = sum(put_events_entry_bytes(e) for e in body.get("Entries") or [] if isinstance(e, dict))
    return PUT_EVENTS_TOO_LARGE if total >= PUT_EVENTS_MAX_BYTES else None
