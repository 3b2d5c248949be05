"""Worker Lambda: runs workflow steps for each SQS record and reports failed records individually.

One record may run a chain of steps (the engine hands on through the queue when its share of the
invocation, the chain limit or the time runs out). Each record of a batch gets an equal share of the
invocation's time, so no record waits behind another's chain. The event source mapping must set
``FunctionResponseTypes = ["ReportBatchItemFailures"]``, or SQS ignores ``batchItemFailures`` and
deletes the whole batch. A record fails (and is redelivered, then dead-lettered after
``maxReceiveCount``) only when its body is not a step message, when too little invocation time is
left for its step (the other records still run), or when the engine asks for redelivery by raising.
Stale, duplicate and finished-execution messages come back as outcomes and are acknowledged.
"""

from __future__ import annotations

import gc

gc.disable()  # until init_done() at the end of this module: a cold start's collections are wasted work

from collections.abc import Callable

from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from aws_lambda_powertools.utilities.typing import LambdaContext
from pydantic import ValidationError

from engine_core import InsufficientTimeError, MalformedMessageError, StepMessage
from engine_core.adapters.lambda_runtime import init_done, lambda_setup
from engine_core.backlog import sent_at_from_ms
from engine_core.engine import check_fits

setup = lambda_setup()
logger, metrics, runtime = setup.logger, setup.metrics, setup.runtime
check_fits(runtime.registry, runtime.settings)  # a workflow whose steps cannot fit the timeout stops here
# An all-failed batch is answered with batchItemFailures, not an invocation error: erroring would
# add Lambda's error backoff to a batch that only needs a later, roomier invocation.
processor = BatchProcessor(event_type=EventType.SQS, raise_on_entire_batch_failure=False)


class _RecordHandler:
    """Handles the records of one invocation, each within its fair share of the time left."""

    def __init__(self, remaining_ms: Callable[[], int], records: int):
        self.remaining_ms = remaining_ms
        self.share_ms = remaining_ms() / max(1, records)

    def __call__(self, record: SQSRecord) -> str:
        try:
            message = StepMessage.model_validate_json(record.body)
        except ValidationError as exc:
            logger.error("not a step message; SQS moves it to the DLQ after maxReceiveCount",
                         extra={"message_id": record.message_id, "problems": exc.error_count()})
            raise MalformedMessageError(f"message {record.message_id} is not a step message") from None
        # message_id on every line of the record: a report joins each delivery to its outcome by it
        logger.append_keys(execution_id=message.execution_id, step_index=message.step, message_id=record.message_id)
        runtime.engine.backlog.observe(message, sent_at_from_ms(record.attributes.get("SentTimestamp")))
        try:
            outcome = runtime.engine.process(message, remaining_ms=self.remaining_ms, yield_after_ms=self.share_ms)
        except InsufficientTimeError as exc:
            # Nothing was written: back on the queue at once, for an invocation with room for its step.
            logger.warning("too little time left for this record's step; released for redelivery now", extra={
                "remaining_ms": exc.remaining_ms, "needed_ms": exc.needed_ms})
            runtime.release(record.receipt_handle)
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


@logger.inject_lambda_context(clear_state=True)
@metrics.log_metrics
def handler(event: dict, context: LambdaContext) -> dict:
    """Process an SQS batch; return ``{"batchItemFailures": [...]}`` naming the records to redeliver."""
    on_record = _RecordHandler(context.get_remaining_time_in_millis, len(event.get("Records") or []))
    return process_partial_response(event=event, record_handler=on_record, processor=processor, context=context)


init_done()
