"""The cost ledger on the DynamoDB store (moto): every request the worker's client makes for a delivery,
with the units the service returned for it, ends on the execution item, and no extra write is made."""

from __future__ import annotations

import datetime as dt
from collections import Counter

import pytest

from engine_core import EngineSettings, ManualClock, Registry, Status
from engine_core.adapters.dynamodb import DynamoStore
from engine_core.registry import build_workflow
from engine_core.testing import LocalRunner

UTC = dt.timezone.utc
TABLE = "loom-test"


class Wire:
    """Counts the calls and the reported ConsumedCapacity of one client, by botocore's own events."""

    def __init__(self, client):
        self.calls: Counter = Counter()
        self.units = 0.0
        self.enabled = False
        client.meta.events.register("after-call.dynamodb", self._after, unique_id="test-wire")

    def _after(self, parsed, model, **_):
        if not self.enabled:
            return
        self.calls[model.name] += 1
        consumed = parsed.get("ConsumedCapacity")
        for one in consumed if isinstance(consumed, list) else ([consumed] if consumed else []):
            self.units += float(one.get("CapacityUnits", 0))


def _registry(n: int) -> Registry:
    registry = Registry()

    def make(i: int):
        def body(ctx):
            return {f"s{i}": "x" * 100}
        body.__name__ = f"s{i}"
        return body

    registry.register(build_workflow("chain", [make(i) for i in range(n)]))
    return registry


def _runner(client, ledger: bool = True, **settings) -> LocalRunner:
    s = EngineSettings(**{"lease_s": 120, "shards": 4, "ledger": ledger, **settings})
    return LocalRunner(_registry(4), clock=ManualClock(dt.datetime(2026, 3, 1, 12, 0, tzinfo=UTC)),
                       store=DynamoStore(client, TABLE, shards=4), settings=s)


def _deliver(runner: LocalRunner, wire: Wire, eid: str) -> None:
    """Deliver every message (only the deliveries are on the wire: not the test's reads)."""
    for _ in range(100):
        batch = runner.queue.receive()
        if not batch:
            if runner.store.load(eid).status.is_terminal:
                return
            runner.step_once()
            continue
        for m in batch:
            wire.enabled = True
            try:
                runner.engine.process(m.body)
            finally:
                wire.enabled = False
            runner.queue.ack(m)
    raise AssertionError("execution did not finish")


@pytest.mark.parametrize("chain", [1, 100])
def test_ledger_on_dynamodb_equals_the_requests_and_reported_units_on_the_wire(dynamo_client, chain):
    # given: a four-step execution, chained or one step per delivery
    wire = Wire(dynamo_client)
    runner = _runner(dynamo_client, max_chain_steps=chain)
    eid = runner.start("chain")
    # when
    _deliver(runner, wire, eid)
    e = runner.store.load(eid)
    # then: the ledger holds exactly the calls the deliveries made and the units DynamoDB returned
    assert e.status is Status.COMPLETED and e.ledger is not None
    assert e.ledger.requests == sum(wire.calls.values())
    assert e.ledger.read_units + e.ledger.write_units == pytest.approx(wire.units, abs=0.05)
    assert e.ledger.read_units > 0 and e.ledger.write_units > 0
    assert e.ledger.messages == (1 if chain > 1 else 4)


def test_ledger_on_dynamodb_adds_no_request_of_its_own(dynamo_client):
    # given: the same execution with the ledger on and off
    seen = []
    for on in (True, False):
        wire = Wire(dynamo_client)
        runner = _runner(dynamo_client, ledger=on, max_chain_steps=1)
        eid = runner.start("chain")
        _deliver(runner, wire, eid)
        seen.append(dict(wire.calls))
        dynamo_client.meta.events.unregister("after-call.dynamodb", unique_id="test-wire")
    # then: the same calls of every kind
    assert seen[0] == seen[1]


def test_ledger_on_dynamodb_counts_a_maps_branch_deliveries_through_the_fan_in(dynamo_client):
    # given: a map of four items, two at a time, on DynamoDB
    from engine_core import map_

    def square(ctx):
        return ctx.item * ctx.item

    registry = Registry()
    registry.register(build_workflow("fan_cost", [map_(square, over="xs", max_concurrency=2)]))
    wire = Wire(dynamo_client)
    runner = LocalRunner(registry, clock=ManualClock(dt.datetime(2026, 3, 1, 12, 0, tzinfo=UTC)),
                         store=DynamoStore(dynamo_client, TABLE, shards=4),
                         settings=EngineSettings(lease_s=120, shards=4))
    store = runner.store
    marks = {"last": 0, "finalize": 0}

    def on_wire() -> int:
        return sum(wire.calls.values())

    def carrying(name: str, own_branch=None):
        write = getattr(store, name)

        def written(*args, **kwargs):
            result = write(*args, **kwargs)
            if name == "finalize":
                marks["finalize"] += 1
            elif own_branch is None or own_branch(args[1]):
                marks["last"] = on_wire()
            return result
        return written

    delivering: dict = {"branch": None}
    own = lambda b: (b.step_index, b.branch) == delivering["branch"]  # noqa: E731
    store.commit = carrying("commit")
    store.update_branch = carrying("update_branch", own)
    store.complete_branch = carrying("complete_branch", own)
    store.finalize = carrying("finalize")
    counted = {"calls": 0}
    process = runner.engine.process

    def measured(message, *args, **kwargs):
        before = on_wire()
        marks["last"], delivering["branch"] = before, None if message.branch is None else (message.step, message.branch)
        outcome = process(message, *args, **kwargs)
        counted["calls"] += marks["last"] - before
        return outcome

    runner.engine.process = measured
    eid = runner.start("fan_cost", {"xs": [1, 2, 3, 4]})
    # when
    _deliver(runner, wire, eid)
    e = runner.store.load(eid)
    # then: every request up to each delivery's last write of its own items (the finalize counted with the
    # ending), branch deliveries included; each branch's completion transaction's units are in
    assert e.status is Status.COMPLETED and e.ledger is not None
    assert e.ledger.requests == counted["calls"] + marks["finalize"] < sum(wire.calls.values())
    assert e.ledger.messages == 5
    assert wire.calls["TransactWriteItems"] >= 4 and e.ledger.write_units >= 4 * 2
