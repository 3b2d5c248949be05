"""The SQS partial batch response: each record handled on its own, the failed ones named for redelivery.

What Powertools' ``BatchProcessor(EventType.SQS, raise_on_entire_batch_failure=False)`` with
``process_partial_response`` does for this worker, without importing its batch utility: that import builds
Powertools' pydantic parser models for every event source it supports (Kafka, Kinesis, DynamoDB streams,
...) and every event data class, about a quarter of the worker's cold start over boto3's, for a loop
over one list. A record is the SQS record as Lambda delivers it, a dict (``messageId``, ``receiptHandle``,
``body``, ``attributes``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


class NotAnSqsBatchError(ValueError):
    """The event is not an SQS batch (no non-empty ``Records`` list): nothing to acknowledge or fail."""


def partial_batch_response(event: dict[str, Any], on_record: Callable[[dict[str, Any]], Any]) -> dict[str, Any]:
    """Run ``on_record`` on every record; a record whose call raises is reported in ``batchItemFailures``.

    Every record runs whatever the others did, and a batch in which every record failed is answered the
    same way (not by raising: an invocation error would add Lambda's error backoff to the whole batch).

    Example:
        >>> partial_batch_response({"Records": [{"messageId": "m-1"}, {"messageId": "m-2"}]},
        ...                        lambda record: 1 / (record["messageId"] == "m-1"))
        {'batchItemFailures': [{'itemIdentifier': 'm-2'}]}
    """
    records = event.get("Records")
    if not records or not isinstance(records, list):
        raise NotAnSqsBatchError("the event is not an SQS batch: it has no Records list; the worker's event "
                                 "source mapping delivers SQS batches")
    failures = []
    for record in records:
        try:
            on_record(record)
        except Exception:  # noqa: BLE001 - the record is reported failed; the handler logged why
            failures.append({"itemIdentifier": record["messageId"]})
    return {"batchItemFailures": failures}


__all__ = ["NotAnSqsBatchError", "partial_batch_response"]
