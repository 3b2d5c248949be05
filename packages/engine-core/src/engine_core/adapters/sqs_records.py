"""One SQS record of the worker's batch, as one delivery of a step message to the engine.

Each record of a batch gets an equal share of the invocation's time left when the batch began, so no
record waits behind another's chain (``yield_after_ms``: the engine hands on through the queue when the
share is used). What a record's end means to SQS:

- handled (a step ran, or the message was stale, a duplicate, or for an execution that ended): its outcome's
  kind is returned and Powertools' ``BatchProcessor`` acknowledges it;
- not a step message: ``MalformedMessageError``, so SQS redelivers it and then moves it to the DLQ after
  ``maxReceiveCount``;
- too little time left for its step: nothing was written; its visibility is reset at once
  (``release``) so an invocation with room takes it, and ``InsufficientTimeError`` fails the record;
- the engine raised: the record fails and SQS redelivers it after the visibility timeout.

Powertools is imported only by the Lambda runtime that uses this module (``lambda_runtime``), never by
engine-core's domain.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from ..backlog import sent_at_from_ms
from ..errors import InsufficientTimeError, MalformedMessageError
from ..model import StepMessage

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord

    from .bootstrap import Runtime


class RecordHandler:
    """Handles the records of one invocation, each within its fair share of the time left
    (``record_handler`` of Powertools' ``process_partial_response``)."""

    def __init__(self, runtime: Runtime, logger: Any, remaining_ms: Callable[[], int], records: int):
        self.runtime, self.logger = runtime, logger
        self.remaining_ms = remaining_ms
        self.share_ms = remaining_ms() / max(1, records)

    def __call__(self, record: SQSRecord) -> str:
        logger, engine = self.logger, self.runtime.engine
        try:
            message = StepMessage.model_validate_json(record.body)
        except ValidationError as exc:
            logger.error("not a step message; SQS moves it to the DLQ after maxReceiveCount",
                         extra={"message_id": record.message_id, "problems": exc.error_count()})
            raise MalformedMessageError(f"message {record.message_id} is not a step message") from None
        # message_id on every line of the record: a report joins each delivery to its outcome by it
        logger.append_keys(execution_id=message.execution_id, step_index=message.step, message_id=record.message_id)
        engine.backlog.observe(message, sent_at_from_ms(record.attributes.get("SentTimestamp")))
        try:
            outcome = engine.process(message, remaining_ms=self.remaining_ms, yield_after_ms=self.share_ms)
        except InsufficientTimeError as exc:
            logger.warning("too little time left for this record's step; released for redelivery now", extra={
                "remaining_ms": exc.remaining_ms, "needed_ms": exc.needed_ms})
            self.runtime.release(record.receipt_handle)
            raise
        except Exception:
            logger.exception("processing failed; SQS redelivers the record")
            raise
        finally:
            logger.remove_keys(["execution_id", "step_index", "message_id"])
        logger.info("message handled", extra={"execution_id": message.execution_id, "message_id": record.message_id,
                                              "outcome": outcome.kind,
                                              "detail": outcome.detail, "steps_run": outcome.steps_run})
        return outcome.kind


__all__ = ["RecordHandler"]
