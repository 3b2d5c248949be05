"""The sweeper Lambda, fed tests/events/eventbridge_scheduled.json, on moto with a manual clock."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from loom_test_support.lambda_harness import FakeContext, load_event, load_handler

LEASE_S = 120  # LOOM_LEASE_S in the harness environment; longer than the examples' 10 s step budget


def _sweep(module, remaining_ms: int = 60_000) -> dict:
    return module.handler(load_event("eventbridge_scheduled"), FakeContext(remaining_ms=remaining_ms))


def _stalled(lambdas, world, workflow: str = "flaky_greeting", count: int = 1) -> list[str]:
    """Executions whose first enqueue was lost: durable in the table, nothing on the queue."""
    engine = lambdas.sweeper.runtime.engine
    ids = [engine.start(workflow, {"name": f"n{i}", "failures": 0}, f"token-{i}").execution.execution_id
           for i in range(count)]
    world.sqs.purge_queue(QueueUrl=world.queue_url)
    return ids


def _queued(world) -> list[dict]:
    return [json.loads(m["Body"]) for m in world.drain(world.queue_url)]


def test_sweep_when_first_enqueue_was_lost_redrives_after_lease_and_execution_completes(lambdas, world, clock):
    # given
    (execution_id,) = _stalled(lambdas, world)
    clock.advance(LEASE_S + 1)
    # when
    report = _sweep(lambdas.sweeper)
    # then
    assert report["redriven"] == {"stalled_lease": 1} and report["total_redriven"] == 1
    assert report["shards_scanned"] == 4 and report["truncated"] is False
    assert world.visible_count(world.queue_url) == 1
    assert lambdas.pump.run_until_settled(execution_id) == "COMPLETED"


def test_sweep_when_lease_not_yet_expired_leaves_execution_alone(lambdas, world, clock):
    # given
    _stalled(lambdas, world)
    clock.advance(LEASE_S - 1)
    before = world.items()
    # when
    report = _sweep(lambdas.sweeper)
    # then
    assert report["total_redriven"] == 0
    assert world.items() == before and world.visible_count(world.queue_url) == 0


def test_sweep_when_schedule_fires_twice_redrives_once(lambdas, world, clock):
    # given
    (execution_id,) = _stalled(lambdas, world)
    clock.advance(LEASE_S + 1)
    # when
    first, second = _sweep(lambdas.sweeper), _sweep(lambdas.sweeper)
    # then
    assert (first["total_redriven"], second["total_redriven"]) == (1, 0)
    assert second["skipped"] == {}  # the claim moved next_wake_at out of the due range
    assert _queued(world) == [{"execution_id": execution_id, "step": 0, "version": 2}]


def test_sweep_when_two_invocations_overlap_claims_each_execution_once(lambdas, world, clock, logs, monkeypatch):
    # given: two sweeper containers; B runs whole while A sits between its read and its claim
    (execution_id,) = _stalled(lambdas, world)
    clock.advance(LEASE_S + 1)
    a = lambdas.sweeper
    b = load_handler("loom_sweeper.handler", clock, logs, as_name="sweeper_container_b")
    reports = {}
    original_load = a.runtime.sweeper.store.load

    def load_then_let_b_run(eid):
        execution = original_load(eid)
        if "b" not in reports:
            reports["b"] = _sweep(b)
        return execution

    monkeypatch.setattr(a.runtime.sweeper.store, "load", load_then_let_b_run)
    # when
    reports["a"] = _sweep(a)
    # then
    assert reports["b"]["redriven"] == {"stalled_lease": 1}
    assert reports["a"]["total_redriven"] == 0 and reports["a"]["skipped"] == {"lost_race": 1}
    assert _queued(world) == [{"execution_id": execution_id, "step": 0, "version": 2}]


def test_sweep_when_a_sleeps_wake_up_message_is_late_wakes_the_execution(lambdas, world, clock):
    # given: order_fulfillment ran up to its 20 s sleep, whose delayed wake-up message is then lost
    engine = lambdas.sweeper.runtime.engine
    execution_id = engine.start("order_fulfillment", {"order_id": "o-1", "amount_cents": 100}).execution.execution_id
    while world.meta(execution_id)["status"]["S"] != "SLEEPING":
        assert lambdas.pump.deliver(), "ran out of messages before the sleep"
    world.sqs.purge_queue(QueueUrl=world.queue_url)  # the delayed wake-up message, on real time
    lease = engine.life.lease_s("order_fulfillment", 2)
    clock.advance(21)
    assert _sweep(lambdas.sweeper)["redriven"] == {}  # due, but its message may still come: nothing sent
    clock.advance(lease)
    # when: the message is a lease late
    report = _sweep(lambdas.sweeper)
    # then
    assert report["redriven"] == {"timer_due": 1}
    assert lambdas.pump.run_until_settled(execution_id) == "COMPLETED"


def test_sweep_when_retry_backoffs_message_is_late_redrives_the_retry(lambdas, world, clock):
    # given: the first attempt failed and its delayed retry message is gone
    engine = lambdas.sweeper.runtime.engine
    execution_id = engine.start("flaky_greeting", {"name": "Ada", "failures": 1}).execution.execution_id
    lambdas.pump.deliver()
    assert world.meta(execution_id)["timer"]["S"] == "retry"
    world.sqs.purge_queue(QueueUrl=world.queue_url)
    clock.advance(5 + engine.life.lease_s("flaky_greeting", 0))  # its delayed message is a lease late
    # when
    report = _sweep(lambdas.sweeper)
    # then
    assert report["redriven"] == {"retry_due": 1}
    assert lambdas.pump.run_until_settled(execution_id) == "COMPLETED"


def test_sweep_when_step_message_was_dead_lettered_redrives_and_completes(lambdas, world, clock):
    # given: every delivery found too little time, so SQS moved the message to the DLQ
    execution_id = lambdas.sweeper.runtime.engine.start("flaky_greeting", {"name": "Ada"}).execution.execution_id
    while lambdas.pump.deliver(FakeContext(remaining_ms=1_000)):
        pass
    assert len(world.dead_letters()) == 1
    clock.advance(LEASE_S + 1)
    # when
    report = _sweep(lambdas.sweeper)
    # then
    assert report["redriven"] == {"stalled_lease": 1}
    assert lambdas.pump.run_until_settled(execution_id) == "COMPLETED"


def test_sweep_when_backlog_exceeds_bound_claims_at_most_the_bound_per_tick(lambdas, world, clock, logs, monkeypatch):
    # given: eight stalled executions, and a sweeper allowed four claims per tick
    _stalled(lambdas, world, count=8)
    monkeypatch.setenv("LOOM_SWEEP_MAX_ITEMS", "4")
    bounded = load_handler("loom_sweeper.handler", clock, logs, as_name="sweeper_bounded")
    clock.advance(LEASE_S + 1)
    # when
    first = _sweep(bounded)
    rest = [_sweep(bounded) for _ in range(8)]
    # then
    assert 1 <= first["total_redriven"] <= 4 and first["truncated"] is True
    assert first["total_redriven"] + sum(r["total_redriven"] for r in rest) == 8
    assert world.visible_count(world.queue_url) == 8


def test_sweep_when_invocation_is_nearly_out_of_time_scans_nothing(lambdas, world, clock):
    # given
    _stalled(lambdas, world)
    clock.advance(LEASE_S + 1)
    # when
    report = _sweep(lambdas.sweeper, remaining_ms=4_000)
    # then
    assert report["shards_scanned"] == 0 and report["truncated"] is True and report["total_redriven"] == 0
    assert world.visible_count(world.queue_url) == 0


def test_sweep_reports_redrives_in_logs_and_embedded_metrics(lambdas, world, clock, logs, capsys):
    # given
    (execution_id,) = _stalled(lambdas, world)
    clock.advance(LEASE_S + 1)
    capsys.readouterr()
    # when
    _sweep(lambdas.sweeper)
    # then
    lines = logs.lines()
    redrove = [line for line in lines if line["message"] == "re-drove execution"]
    assert redrove and redrove[0]["execution_id"] == execution_id and redrove[0]["reason"] == "stalled_lease"
    assert redrove[0]["workflow"] == "flaky_greeting"
    done = [line for line in lines if line["message"] == "sweep done"]
    assert done[0]["redriven"] == {"stalled_lease": 1} and done[0]["schedule_event_id"] == load_event(
        "eventbridge_scheduled")["id"]
    blobs = [json.loads(line) for line in capsys.readouterr().out.splitlines() if '"_aws"' in line]
    (directive,) = blobs[-1]["_aws"]["CloudWatchMetrics"]
    assert directive["Namespace"] == "LoomTest"
    assert {"RedrivenStalledLease", "Redriven"} <= {m["Name"] for m in directive["Metrics"]}
    assert blobs[-1]["RedrivenStalledLease"] == [1.0]


def test_the_sweeper_handler_init_loads_the_workflows_but_not_the_engine_step_path():
    # given a fresh interpreter with a function's environment (the memory store: no table to reach)
    env = {**os.environ, "LOOM_STORE": "memory", "LOOM_QUEUE_URL": "https://sqs.us-east-1.amazonaws.com/1/loom-steps",
           "AWS_DEFAULT_REGION": "us-east-1", "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}
    code = ("import sys, loom_sweeper.handler as h\n"
            "print(len(h.runtime.registry.names()) > 0, sorted(m for m in ('engine_core.engine', 'engine_core.step_run',"
            " 'engine_core.durable.run', 'engine_core.kinds') if m in sys.modules))")
    # when
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    # then
    assert out.strip() == "True []"
