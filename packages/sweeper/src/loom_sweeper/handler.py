"""Sweeper Lambda: once a minute, wake due timers and re-drive executions whose message was lost.

EventBridge delivers schedules at least once and may run two sweeps at the same time; that is safe
because engine-core claims every execution with a conditional write before enqueueing it. One sweep
claims at most ``LOOM_SWEEP_MAX_ITEMS`` executions and stops early when the invocation is running
out of time, so the rest waits for the next tick instead of being cut off by the timeout.
"""

from __future__ import annotations

import gc

gc.disable()  # until init_done() at the end of this module: a cold start's collections are wasted work

from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from engine_core.adapters.lambda_runtime import init_done, lambda_setup

setup = lambda_setup(parts=("sweeper",))  # the sweeper only: the engine's step path is never imported
logger, metrics, runtime = setup.logger, setup.metrics, setup.runtime


@logger.inject_lambda_context(clear_state=True)
@metrics.log_metrics
def handler(event: dict, context: LambdaContext) -> dict[str, Any]:
    """Run one sweep over every shard and return its report (re-driven by reason, skipped, truncated)."""
    report = runtime.sweeper.sweep(remaining_ms=context.get_remaining_time_in_millis)
    result = {**report.as_dict(), "total_redriven": report.total_redriven}
    # Emitted every tick, zero included, so "no data" on this metric means the sweeper is not running.
    metrics.add_metric(name="Redriven", unit="Count", value=report.total_redriven)
    # The schedule's event is read as the dict it is: Powertools' EventBridgeEvent would import every
    # event data class at cold start for two keys.
    logger.info("sweep done", extra={"schedule_event_id": event.get("id"), "scheduled_time": event.get("time"),
                                     **result})
    return result


init_done()
