"""The three handlers' shared Lambda setup, built once per execution environment (cold start).

Every Lambda zip ships Powertools; engine-core does not require it, so only this module imports it (and
only when a handler imports this module). What it does, in the order a cold start needs it:

- one Powertools ``Logger`` and ``Metrics`` (service and namespace from ``POWERTOOLS_*``);
- the warning Powertools gives an invocation that emits no metric silenced: acknowledging or rejecting
  without a metric is normal here, not worth a log line per invocation;
- the runtime (``bootstrap.from_environment``: store, queue, clients, and the parts the function uses:
  the engine by default, the sweeper alone for the sweeper's Lambda), then engine-core's loggers
  formatted like the handler's (``copy_config_to_registered_loggers``), so every line is one JSON shape;
- at the end of the handler module, ``init_done``: the garbage collector, which the handler turned off on
  its first line, back on, with everything init built frozen out of its scans.

Only Powertools' logging and metrics load here; each handler imports the Powertools utility its event
needs (the worker's batch processing, the control plane's Function URL resolver) itself.

Example:
    >>> from engine_core.adapters.lambda_runtime import lambda_setup
    >>> setup = lambda_setup()           # at module scope: warm invocations reuse it
    >>> logger, metrics, runtime = setup.logger, setup.metrics, setup.runtime
    >>> init_done()                      # the handler module's last line (after ``gc.disable()``, its first)
"""

from __future__ import annotations

import gc
import warnings
from typing import Any, NamedTuple

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.logging.utils import copy_config_to_registered_loggers

from .bootstrap import Runtime, from_environment

NO_METRICS_WARNING = "No application metrics to publish"


class LambdaSetup(NamedTuple):
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


def init_done() -> None:
    """End a handler module's init: the garbage collector back on, init's objects frozen out of its scans.

    A cold start allocates a few hundred thousand objects (boto3 and its service models, pydantic and
    the models it builds, the registry's workflows) and frees almost none of them, so every collection
    during init walks a growing heap for nothing: about 100 ms of each handler's init, boto3's import
    included. A handler therefore calls ``gc.disable()`` before its first import and this after its
    last line of setup. Frozen (``gc.freeze``), those objects live as long as the execution environment
    without the collector ever scanning them again, so the first invocation does not pay the skipped
    collections either, and warm invocations' full collections skip them.
    """
    gc.freeze()
    gc.enable()


__all__ = ["LambdaSetup", "init_done", "lambda_setup"]
