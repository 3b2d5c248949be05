"""Worker Lambda: runs workflow steps for each SQS record and reports failed records individually.

One record may run a chain of steps (the engine hands on through the queue when its share of the
invocation, the chain limit or the time runs out). Each record of a batch gets an equal share of the
invocation's time, so no record waits behind another's chain. The event source mapping must set
``FunctionResponseTypes = ["ReportBatchItemFailures"]``, or SQS ignores ``batchItemFailures`` and
deletes the whole batch. A record fails (and is redelivered, then dead-lettered after
``maxReceiveCount``) only when its body is not a step message, when too little invocation time is
left for its step (the other records still run), or when the engine asks for redelivery by raising.
Stale, duplicate and finished-execution messages come back as outcomes and are acknowledged. What one
record does is ``engine_core.adapters.sqs_records.RecordHandler``; the batch's reply (an all-failed batch's
too) is ``answer_batch`` there.
"""

from __future__ import annotations

import gc

gc.disable()  # until init_done() at the end of this module: a cold start's collections are wasted work

from aws_lambda_powertools.utilities.typing import LambdaContext

from engine_core.adapters.lambda_runtime import init_done, lambda_setup
from engine_core.adapters.sqs_records import RecordHandler, answer_batch
from engine_core.engine import check_fits

setup = lambda_setup()
logger, metrics, runtime = setup.logger, setup.metrics, setup.runtime
check_fits(runtime.registry, runtime.settings)  # a workflow whose steps cannot fit the timeout stops here


@logger.inject_lambda_context(clear_state=True)
@metrics.log_metrics
def handler(event: dict, context: LambdaContext) -> dict:
    """Process an SQS batch; return ``{"batchItemFailures": [...]}`` naming the records to redeliver."""
    on_record = RecordHandler(runtime, logger, context.get_remaining_time_in_millis, len(event.get("Records") or []))
    return answer_batch(event, on_record)


init_done()
