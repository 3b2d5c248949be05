"""The three handlers' shared Lambda setup, built once per execution environment (cold start).

Every Lambda zip ships Powertools; engine-core does not require it, so only this module imports it (and
only when a handler imports this module). What it does, in the order a cold start needs it:

- one Powertools ``Logger`` and ``Metrics`` (service and namespace from ``POWERTOOLS_*``);
- the warning Powertools gives an invocation that emits no metric silenced: acknowledging or rejecting
  without a metric is normal here, not worth a log line per invocation;
- the engine (``bootstrap.from_environment``: store, queue, clients), then engine-core's loggers
  formatted like the handler's (``copy_config_to_registered_loggers``), so every line is one JSON shape.

Only Powertools' logging and metrics load here. The worker's SQS batch goes through
:func:`sqs_partial_batch`, the answer Powertools' ``BatchProcessor(EventType.SQS,
raise_on_entire_batch_failure=False)`` gives, without importing its batch utility: that imports asyncio
and, through ``utilities.data_classes``, every event data class Powertools has, a quarter of the cold
start over the floor for a loop of six lines.

Example:
    >>> from engine_core.adapters.lambda_runtime import lambda_setup
    >>> setup = lambda_setup()           # at module scope: warm invocations reuse it
    >>> logger, metrics, runtime = setup.logger, setup.metrics, setup.runtime
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.logging.utils import copy_config_to_registered_loggers

from .bootstrap import Runtime, from_environment

NO_METRICS_WARNING = "No application metrics to publish"
_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LambdaSetup:
    logger: Logger
    metrics: Metrics
    runtime: Runtime


class SqsRecord:
    """One record of an SQS event, as the record handler reads it."""

    __slots__ = ("raw",)

    def __init__(self, raw: dict[str, Any]):
        self.raw = raw

    @property
    def body(self) -> str:
        return self.raw["body"]

    @property
    def message_id(self) -> str:
        return self.raw["messageId"]


def sqs_partial_batch(event: dict[str, Any], record_handler: Callable[[SqsRecord], Any]) -> dict[str, Any]:
    """Run ``record_handler`` on every record; ``{"batchItemFailures": [...]}`` names each one that raised.

    A batch whose records all failed is answered the same way, not with an invocation error (which would
    add Lambda's error backoff). The event source mapping must set ``ReportBatchItemFailures``.
    """
    records = event.get("Records")
    if not isinstance(records, list):
        raise ValueError("Invalid event format: an SQS event has a Records list")
    failures = []
    for raw in records:
        record = SqsRecord(raw)
        try:
            record_handler(record)
        except Exception as exc:  # the record is redelivered; the handler logged why
            _log.debug("record %s failed: %s", record.message_id, type(exc).__name__)
            failures.append({"itemIdentifier": record.message_id})
    return {"batchItemFailures": failures}


def lambda_setup(**bootstrap: Any) -> LambdaSetup:
    """Logger, Metrics and the engine runtime for a handler module (``bootstrap`` goes to ``from_environment``)."""
    logger, metrics = Logger(), Metrics()
    warnings.filterwarnings("ignore", NO_METRICS_WARNING)
    runtime = from_environment(metrics=metrics, **bootstrap)
    copy_config_to_registered_loggers(source_logger=logger, include={"engine_core"})
    return LambdaSetup(logger, metrics, runtime)


__all__ = ["LambdaSetup", "SqsRecord", "lambda_setup", "sqs_partial_batch"]
