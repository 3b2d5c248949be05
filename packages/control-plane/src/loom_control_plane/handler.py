"""Control-plane Lambda: Loom's JSON API behind a Function URL with AWS_IAM auth. The routes are
``routes.ROUTES`` on the app of ``app.py`` (404 and 405 are built from them); every reply is JSON,
errors included. EventBridge Scheduler also invokes it directly with a schedule's firing
(``schedules.py``)."""

from __future__ import annotations

import gc

gc.disable()  # until init_done() at the end of this module: a cold start's collections are wasted work

import os

from aws_lambda_powertools.logging import correlation_paths
from aws_lambda_powertools.utilities.typing import LambdaContext

from engine_core.adapters.lambda_runtime import init_done, lambda_setup

from .access import AccessPolicy
from .app import App
from .schedules import is_schedule_event, on_schedule
from .schedules import load as load_schedules

setup = lambda_setup()
logger, metrics, runtime = setup.logger, setup.metrics, setup.runtime
access = AccessPolicy.from_env(os.environ)
if access.problem is not None:
    logger.error("LOOM_WORKFLOW_ACCESS is invalid: start and the operator's actions are refused",
                 extra={"problem": access.problem})
schedules, schedules_problem = load_schedules(os.environ)
if schedules_problem is not None:
    logger.error("LOOM_SCHEDULES is invalid: every firing fails and GET /schedules answers 500 until it is fixed",
                 extra={"problem": schedules_problem})

# Read at each request, so a test (or a debugger) that replaces one of these module globals is heard.
app = App(runtime, logger, lambda: (access, schedules, schedules_problem))


@logger.inject_lambda_context(correlation_id_path=correlation_paths.LAMBDA_FUNCTION_URL, clear_state=True)
@metrics.log_metrics
def handler(event: dict, context: LambdaContext) -> dict:
    if is_schedule_event(event):
        return on_schedule(runtime, schedules, schedules_problem, event, context.get_remaining_time_in_millis()).as_dict()
    return app.resolve(event, context)


init_done()
