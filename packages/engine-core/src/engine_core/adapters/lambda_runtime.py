"""The three handlers' shared Lambda setup, built once per execution environment (cold start).

Every Lambda zip ships Powertools; engine-core does not require it, so only this module imports it (and
only when a handler imports this module). What it does, in the order a cold start needs it:

- one Powertools ``Logger`` and ``Metrics`` (service and namespace from ``POWERTOOLS_*``);
- the warning Powertools gives an invocation that emits no metric silenced: acknowledging or rejecting
  without a metric is normal here, not worth a log line per invocation;
- the engine (``bootstrap.from_environment``: store, queue, clients), then engine-core's loggers
  formatted like the handler's (``copy_config_to_registered_loggers``), so every line is one JSON shape.

Only Powertools' logging and metrics load here; each handler imports the Powertools utility its event
needs (the worker's batch processing, the control plane's Function URL resolver) itself.

Example:
    >>> from engine_core.adapters.lambda_runtime import lambda_setup
    >>> setup = lambda_setup()           # at module scope: warm invocations reuse it
    >>> logger, metrics, runtime = setup.logger, setup.metrics, setup.runtime
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.logging.utils import copy_config_to_registered_loggers

from .bootstrap import Runtime, from_environment

NO_METRICS_WARNING = "No application metrics to publish"


@dataclass(frozen=True)
class LambdaSetup:
    logger: Logger
    metrics: Metrics
    runtime: Runtime


def lambda_setup(**bootstrap: Any) -> LambdaSetup:
    """Logger, Metrics and the engine runtime for a handler module (``bootstrap`` goes to ``from_environment``)."""
    logger, metrics = Logger(), Metrics()
    warnings.filterwarnings("ignore", NO_METRICS_WARNING)
    runtime = from_environment(metrics=metrics, **bootstrap)
    copy_config_to_registered_loggers(source_logger=logger, include={"engine_core"})
    return LambdaSetup(logger, metrics, runtime)


__all__ = ["LambdaSetup", "lambda_setup"]
