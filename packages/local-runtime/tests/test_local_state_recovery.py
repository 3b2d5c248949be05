"""Why keeping the table and not the queue loses nothing: the sweeper re-drives every live execution.

`make down` saves the Loom table and `make up` restores it into a fresh emulator, whose queue is
empty. Here the deployed handlers (worker, sweeper: loom_test_support.lambda_harness, moto in-process,
a manual clock) run executions into each live state, the table goes through the local runtime's
save and restore while the queue's messages are dropped, and every execution still completes: each
carries its due-index key, and the sweeper re-drives it when its lease or timer runs out.
"""

from __future__ import annotations

from loom_local import state as table_state
from loom_test_support.lambda_harness import (
    TABLE,
    FakeContext,
    clock,  # noqa: F401 - fixtures
    create_table,
    lambdas,  # noqa: F401
    load_event,
    logs,  # noqa: F401
    world,  # noqa: F401
)

LEASE_S = 120  # LOOM_LEASE_S in the harness environment


def _status(world, eid: str) -> str:
    return world.meta(eid)["status"]["S"]


def test_executions_restored_without_their_messages_are_redriven_and_complete(lambdas, world, clock, tmp_path):
    engine, pump = lambdas.sweeper.runtime.engine, lambdas.pump

    def start(workflow: str, input: dict, token: str) -> str:
        return engine.start(workflow, input, token).execution.execution_id

    # given: a finished execution, and one in each live state, with their messages on the queue
    done = start("flaky_greeting", {"name": "done", "failures": 0}, "t-done")
    assert pump.run_until_settled(done) == "COMPLETED"
    sleeping = start("order_fulfillment", {"order_id": "o-1", "amount_cents": 100}, "t-sleeping")
    while _status(world, sleeping) != "SLEEPING":
        assert pump.deliver(), "ran out of messages before the sleep"
    retrying = start("flaky_greeting", {"name": "retrying", "failures": 1}, "t-retrying")
    while not world.meta(retrying).get("timer", {}).get("S") == "retry":
        assert pump.deliver(), "ran out of messages before the retry"
    queued = start("flaky_greeting", {"name": "queued", "failures": 0}, "t-queued")  # first message not delivered
    live = {"queued": queued, "sleeping": sleeping, "retrying": retrying}
    assert world.visible_count(world.queue_url) == 1  # queued's (the others' messages are delayed)
    assert {name: _status(world, eid) for name, eid in live.items()} == {
        "queued": "RUNNING", "sleeping": "SLEEPING", "retrying": "RUNNING"}
    before = world.items()

    # when: `make down` saves the table; `make up` applies a fresh one and an empty queue, and restores it
    saved = tmp_path / "state" / "table.json"
    table_state.save(world.dynamodb, TABLE, saved)
    world.dynamodb.delete_table(TableName=TABLE)
    world.sqs.purge_queue(QueueUrl=world.queue_url)
    create_table(world.dynamodb)
    restored = table_state.load(saved)
    assert table_state.restore(world.dynamodb, TABLE, restored.items) == len(before)
    assert world.items() == before and world.visible_count(world.queue_url) == 0

    # then: once leases and timers run out, the sweeper re-drives each live execution from the due index
    clock.advance(2 * LEASE_S + 1)
    report = lambdas.sweeper.handler(load_event("eventbridge_scheduled"), FakeContext())
    assert report["redriven"] == {"stalled_lease": 1, "timer_due": 1, "retry_due": 1}, report
    for name, eid in live.items():
        assert pump.run_until_settled(eid) == "COMPLETED", name
    assert world.meta(done) == next(i for i in before if i["PK"]["S"] == f"EXEC#{done}" and i["SK"]["S"] == "#META")
