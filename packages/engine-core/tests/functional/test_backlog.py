"""A backlog on the step queue (a burst of starts, throttled concurrency, a slow downstream): the sweeper
must not multiply the queue (issue 27). Engine + sweeper + memory store + manual clock; the queue holds
every message until the test delivers it, as a backlog would. Counted from the queue's own sends."""

from __future__ import annotations

import math
from collections import Counter

from engine_core import EngineSettings, Registry, sleep, workflow
from engine_core.testing import LocalRunner

LEASE_S = 360.0  # the Terraform default: the step queue's visibility timeout (6 x the worker's 60 s)


def flow(registry: Registry, runs: Counter):
    def work(ctx):
        runs[ctx.execution_id] += 1
        return {"done": True}

    @workflow("backlogged", registry=registry)
    class Backlogged:
        steps = [work]

    def before(ctx):
        return {}

    def after(ctx):
        runs[ctx.execution_id] += 1

    @workflow("napping", registry=registry)
    class Napping:
        steps = [before, sleep(minutes=5), after]


def copies(runner, eid: str) -> int:
    return sum(1 for m in runner.queue.messages if m.body.execution_id == eid)


def test_a_backlog_older_than_the_lease_costs_copies_logarithmic_in_its_age_and_each_step_runs_once():
    registry, runs = Registry(), Counter()
    flow(registry, runs)
    runner = LocalRunner(registry, settings=EngineSettings(lease_s=LEASE_S))
    ids = [runner.start("backlogged", {}) for _ in range(20)]
    # when: nothing is delivered for two hours (every message waits behind the backlog) while the
    # sweeper ticks every minute
    backlog_s = 7200
    for _ in range(backlog_s // 60):
        runner.clock.advance(60)
        runner.sweeper.sweep()
    # then: each execution's message was re-sent with a doubling lease, not every lease period
    bound = 1 + math.ceil(math.log2(backlog_s / LEASE_S)) + 1
    per_execution = [copies(runner, eid) for eid in ids]
    assert max(per_execution) <= bound, per_execution
    assert min(per_execution) >= 2  # the first lease ran out: the sweeper did re-send once at least
    # and when the backlog drains, every execution runs its step once; the other copies are stale
    for eid in ids:
        assert runner.run_until_done(eid).status.value == "COMPLETED"
    assert all(runs[eid] == 1 for eid in ids)
    stale = [o for o in runner.outcomes if o.kind == "stale"]
    assert len(stale) == sum(per_execution) - len(ids)


def test_a_due_timer_whose_delayed_message_is_queued_is_not_dispatched_again_by_the_sweeper():
    registry, runs = Registry(), Counter()
    flow(registry, runs)
    runner = LocalRunner(registry, settings=EngineSettings(lease_s=LEASE_S))
    eid = runner.start("napping", {})
    while runner.engine.get(eid).status.value != "SLEEPING":
        runner.step_once()
    assert copies(runner, eid) == 1  # the sleep's delayed message
    # when: the wake time passes with the message still queued behind a backlog, and the sweeper ticks
    for _ in range(6):
        runner.clock.advance(60)
        runner.sweeper.sweep()
    # then: no second message; the queued one wakes it
    assert copies(runner, eid) == 1
    assert runner.run_until_done(eid).status.value == "COMPLETED" and runs[eid] == 1
    assert not [o for o in runner.outcomes if o.kind == "stale"]


def test_a_wake_sends_its_message_and_the_sweeper_does_not_send_another():
    registry, runs = Registry(), Counter()
    flow(registry, runs)
    runner = LocalRunner(registry, settings=EngineSettings(lease_s=LEASE_S))
    eid = runner.start("napping", {})
    while runner.engine.get(eid).status.value != "SLEEPING":
        runner.step_once()
    runner.queue.purge()  # (as if the sleep's message were far behind)
    runner.engine.operator.wake(eid, "ops")
    for _ in range(3):
        runner.clock.advance(60)
        runner.sweeper.sweep()
    assert copies(runner, eid) == 1
