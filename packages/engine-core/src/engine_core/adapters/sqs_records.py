"""One SQS record of the worker's batch, as one delivery of a step message to the engine.

Each record of a batch gets an equal share of the invocation's time left when the batch began, so no
record waits behind another's chain (``yield_after_ms``: the engine hands on through the queue when the
share is used). What a record's end means to SQS:

- handled (a step ran, or the message was stale, a duplicate, or for an execution that ended): its outcome's
  kind is returned and the batch's reply (``answer_batch``) leaves it out, so SQS deletes it;
- not a step message: ``MalformedMessageError``, so SQS redelivers it and then moves it to the DLQ after
  ``maxReceiveCount``;
- too little time left for its step: nothing was written; its visibility is reset at once
  (``release``) so an invocation with room takes it, and ``InsufficientTimeError`` fails the record;
- the engine raised: the record fails and SQS redelivers it after the visibility timeout.

``answer_batch`` is the partial batch response around it: a record that raised is named in
``batchItemFailures`` and SQS redelivers it alone. It is the loop Powertools' ``BatchProcessor`` runs for
an SQS batch, without its import, which loads asyncio and every event source's data class (about 20 ms of
the worker's cold start in its zip); a record is read as the dict Lambda hands over.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from ..backlog import sent_at_from_ms
from ..errors import InsufficientTimeError, MalformedMessageError
from ..model import StepMessage

if TYPE_CHECKING:
    from .bootstrap import Runtime

SQSRecord = Mapping[str, Any]
"""One record of an SQS event, as Lambda hands it over (``messageId``, ``receiptHandle``, ``body``, ``attributes``)."""


def answer_batch(event: Mapping[str, Any], on_record: Callable[[SQSRecord], Any]) -> dict[str, list[dict[str, str]]]:
    """The reply to an SQS batch (``ReportBatchItemFailures``): each record handed to ``on_record`` in turn,
    and the ones that raised named, so SQS redelivers them and deletes the rest. A batch whose every record
    failed gets the same reply, not an invocation error: erroring would add Lambda's error backoff to records
    that only need a later, roomier invocation."""
    failures = []
    for record in event.get("Records") or ():
        try:
            on_record(record)
        except Exception:  # noqa: BLE001 - the record is redelivered; what it raised was logged by on_record
            failures.append({"itemIdentifier": str(record.get("messageId"))})
    return {"batchItemFailures": failures}


class RecordHandler:
    """Handles the records of one invocation, each within its fair share of the time left (``on_record`` of
    ``answer_batch``)."""

    def __init__(self, runtime: Runtime, logger: Any, remaining_ms: Callable[[], int], records: int):
        self.runtime, self.logger = runtime, logger
        self.remaining_ms = remaining_ms
        self.share_ms = remaining_ms() / max(1, records)

    def __call__(self, record: SQSRecord) -> str:
        logger, engine = self.logger, self.runtime.engine
        message_id = record.get("messageId")
        try:
            message = StepMessage.model_validate_json(record.get("body") or "")
        except ValidationError as exc:
            logger.error("not a step message; SQS moves it to the DLQ after maxReceiveCount",
                         extra={"message_id": message_id, "problems": exc.error_count()})
            raise MalformedMessageError(f"message {message_id} is not a step message") from None
        # message_id on every line of the record: a report joins each delivery to its outcome by it
        logger.append_keys(execution_id=message.execution_id, step_index=message.step, message_id=message_id)
        engine.backlog.observe(message, sent_at_from_ms((record.get("attributes") or {}).get("SentTimestamp")))
        try:
            outcome = engine.process(message, remaining_ms=self.remaining_ms, yield_after_ms=self.share_ms)
        except InsufficientTimeError as exc:
            logger.warning("too little time left for this record's step; released for redelivery now", extra={
                "remaining_ms": exc.remaining_ms, "needed_ms": exc.needed_ms})
            self.runtime.release(record["receiptHandle"])
            raise
        except Exception:
            logger.exception("processing failed; SQS redelivers the record")
            raise
        finally:
            logger.remove_keys(["execution_id", "step_index", "message_id"])
        logger.info("message handled", extra={"execution_id": message.execution_id, "message_id": message_id,
                                              "outcome": outcome.kind,
                                              "detail": outcome.detail, "steps_run": outcome.steps_run})
        return outcome.kind


__all__ = ["RecordHandler", "SQSRecord", "answer_batch"]
