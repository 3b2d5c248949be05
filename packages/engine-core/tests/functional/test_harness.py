"""The in-process harness users test their own workflows with."""

from __future__ import annotations

import datetime as dt
import time

from engine_core import ManualClock, RetryPolicy, Status, StepRecord, sleep, step, workflow
from engine_core.testing import FakeQueue, LocalRunner


def test_five_steps_with_two_hour_sleep_and_flaky_step_complete_in_well_under_a_second(registry):
    # given: a step that fails twice then succeeds, and a two-hour sleep
    def reserve(ctx):
        return {"reserved": (ctx["sku"], 2)}

    def charge(ctx):
        if ctx.attempt < 3:
            raise ConnectionError("payment gateway timeout")
        return {"charge_id": f"ch-{ctx.idempotency_key}"}

    def ship(ctx):
        assert ctx["reserved"] == ("abc", 2)  # tuples stay tuples across steps
        return {"shipped": True}

    def notify(ctx):
        return None

    @workflow("harness_orders", registry=registry)
    class Orders:
        steps = [reserve, charge, sleep(hours=2), ship, notify]
        retry = RetryPolicy(max_attempts=5, base=2, max_delay=900)

    runner = LocalRunner(registry)
    started = time.perf_counter()
    # when
    eid = runner.start("harness_orders", {"sku": "abc"})
    e = runner.run_until_done(eid)
    elapsed = time.perf_counter() - started
    # then
    assert e.status is Status.COMPLETED
    assert elapsed < 0.5, f"took {elapsed:.3f} s"
    history = runner.history(eid)
    assert [r.name for r in history] == ["reserve", "charge", "sleep_7200s", "ship", "notify"]
    assert [r.attempts for r in history] == [1, 3, 1, 1, 1]
    assert all(isinstance(r, StepRecord) for r in history)
    assert runner.clock.now() - dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc) >= dt.timedelta(hours=2)


def test_a_sleep_of_months_runs_in_a_few_steps_waking_at_its_time_and_step_once_still_moves_one_tick(registry):
    # given: a 90-day sleep between two steps (longer than a queue delay: only the sweeper wakes it)
    @workflow("quarterly", registry=registry)
    class Quarterly:
        steps = [step(lambda ctx: {"billed": True}, name="bill"), sleep(days=90),
                 step(lambda ctx: {"renewed": True}, name="renew")]

    runner = LocalRunner(registry)
    t0 = runner.clock.now()
    eid = runner.start("quarterly", {})
    # when / then: run_until_done skips the sweeper ticks that find nothing (before: one 60 s tick a step,
    # 129,600 of them, over its 100,000)
    assert runner.run_until_done(eid, max_iterations=20).status is Status.COMPLETED
    assert dt.timedelta(days=90) <= runner.clock.now() - t0 <= dt.timedelta(days=90, minutes=2)
    # and: step_once alone still moves at most one tick, for a test that acts between ticks
    again = runner.start("quarterly", {})
    runner.run_until(again, "SLEEPING")
    before = runner.clock.now()
    runner.step_once()
    assert runner.clock.now() - before <= runner.sweep_interval


def test_runner_survives_a_queue_that_duplicates_reorders_delays_and_drops(registry):
    @workflow("chaos", registry=registry)
    class Chaos:
        steps = [lambda_free(i) for i in range(6)]

    for seed in range(20):
        clock = ManualClock()
        queue = FakeQueue(clock, seed=seed, duplicate_rate=0.3, drop_rate=0.2, reorder=True, max_extra_delay_s=30)
        runner = LocalRunner(registry, clock=clock, queue=queue)
        ids = [runner.start("chaos", {"n": n}) for n in range(3)]
        for eid in ids:
            e = runner.run_until_done(eid)
            assert e.status is Status.COMPLETED and e.version >= 8  # claim + 6 commits, + one re-drive per lost message
            assert [r.attempts for r in runner.history(eid)] == [1] * 6


def lambda_free(i):
    def body(ctx):
        return {f"s{i}": i}

    body.__name__ = f"s{i}"
    return body


def test_local_runner_on_the_default_registry_loads_installed_workflow_packages():
    # given: a fresh interpreter, where nothing has imported the examples yet
    import subprocess
    import sys

    code = ("from engine_core.testing import LocalRunner\n"
            "runner = LocalRunner()\n"
            "eid = runner.start('order_fulfillment', {'order_id': 'o-1', 'amount_cents': 1200})\n"
            "print(runner.run_until_done(eid).status.value)\n")
    # when
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    # then: the loom.workflows entry points were loaded, as a Lambda does at cold start
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "COMPLETED"
