"""The ledger's counter alone: what a carry adds, what it leaves for the next one, and when it adds nothing."""

from __future__ import annotations

import datetime as dt

import pytest

from engine_core.ledger import Meter
from engine_core.model import Execution, Ledger, Status, Timer

NOW = dt.datetime(2026, 3, 1, 12, 0, tzinfo=dt.timezone.utc)


def _execution(eid: str = "e-1", ledger: Ledger | None = None, status: Status = Status.RUNNING) -> Execution:
    live = not status.is_terminal
    return Execution(execution_id=eid, workflow="w", status=status, current_step=0, version=1, fingerprint="f",
                     input_digest="d", created_at=NOW, updated_at=NOW, next_wake_at=NOW if live else None,
                     timer=Timer.LEASE if live else None, ledger=ledger)


def test_carry_adds_the_counts_and_the_carrying_write_counted_in_advance():
    # given: a delivery that read once (2 read units) and wrote once (1 unit)
    meter = Meter(reports_requests=True, reports_units=True)
    meter.begin("e-1", delivered=True)
    meter.request(read_units=2.0)
    meter.request(write_units=1.0)
    # when
    new = meter.carry(_execution(ledger=Ledger(requests=10, read_units=1.5, write_units=4.0, messages=2)))
    # then: the two requests plus the carrying write (one request, one unit), and the delivering message
    assert new.ledger.requests == 13 and new.ledger.messages == 3
    assert (new.ledger.read_units, new.ledger.write_units) == (3.5, 6.0)


def test_carried_leaves_only_what_the_carrying_write_reported_beyond_its_advance():
    # given: a carry, then the store reports the carrying write itself at 2.0 units (an index write too)
    meter = Meter(reports_requests=True, reports_units=True)
    meter.begin("e-1", delivered=True)
    meter.request(read_units=1.0)
    first = meter.carry(_execution())
    meter.request(write_units=2.0)
    meter.carried()
    # when: the delivery's next commit carries
    second = meter.carry(first)
    # then: the first write's extra unit rode along; the request was not counted twice; one message in all
    assert first.ledger.requests == 2 and first.ledger.write_units == 1.0
    assert second.ledger.requests == 3 and second.ledger.write_units == 1.0 + 1.0 + 1.0
    assert second.ledger.messages == 1


def test_an_ending_that_owes_its_finalize_counts_that_write_in_advance():
    meter = Meter(reports_requests=True, reports_units=True)
    meter.begin("e-1", delivered=False)
    new = meter.carry(_execution(status=Status.COMPLETED), finalizes=True)
    assert (new.ledger.requests, new.ledger.write_units, new.ledger.messages) == (2, 2.0, 0)


@pytest.mark.parametrize("opened, enabled", [(None, True), ("e-2", True), ("e-1", False)])
def test_carry_for_an_execution_no_delivery_holds_adds_nothing(opened, enabled):
    # given: the sweeper or an operator (no delivery open), another execution's delivery, or the ledger off
    meter = Meter(enabled=enabled, reports_requests=True)
    if opened is not None:
        meter.begin(opened, delivered=True)
    meter.request()
    e = _execution()
    # then
    assert meter.carry(e) is e


def test_a_store_that_reports_nothing_leaves_requests_at_zero_and_counts_messages():
    meter = Meter()
    meter.begin("e-1", delivered=True)
    new = meter.carry(_execution())
    meter.carried()
    again = meter.carry(new)
    assert (again.ledger.requests, again.ledger.write_units, again.ledger.messages) == (0, 0.0, 1)


def test_end_closes_the_meter_so_later_requests_are_not_counted():
    meter = Meter(reports_requests=True)
    meter.begin("e-1", delivered=True)
    meter.end()
    meter.request()
    assert meter.carry(_execution()).ledger is None


def test_the_ledger_round_trips_through_the_item_in_tenths_of_a_unit():
    from engine_core.adapters._items import execution_from_attrs, execution_to_attrs

    e = _execution(ledger=Ledger(requests=7, read_units=2.5, write_units=12.0, messages=2, lambda_ms=345))
    attrs = execution_to_attrs(e)
    assert {k: attrs[k] for k in ("cost_req", "cost_rru10", "cost_wru10", "cost_msg", "cost_ms")} == {
        "cost_req": 7, "cost_rru10": 25, "cost_wru10": 120, "cost_msg": 2, "cost_ms": 345}
    assert execution_from_attrs("e-1", attrs).ledger == e.ledger
    assert not any(k.startswith("cost_") for k in execution_to_attrs(_execution()))


def test_an_unreadable_ledger_attribute_makes_the_item_corrupt():
    from engine_core.adapters._items import execution_from_attrs, execution_to_attrs
    from engine_core.errors import CorruptStateError

    attrs = {**execution_to_attrs(_execution(ledger=Ledger(requests=1))), "cost_req": "many"}
    with pytest.raises(CorruptStateError):
        execution_from_attrs("e-1", attrs)


def _branch(b: int, ledger: Ledger | None = None):
    from engine_core.model import Branch, BranchStatus
    return Branch(step_index=2, branch=b, status=BranchStatus.RUNNING, version=2, generation=1, updated_at=NOW,
                  next_wake_at=NOW, ledger=ledger)


def test_a_branch_delivery_carries_its_counts_on_its_own_branch_item_only():
    # given: the delivery of branch 1 of step 2, which read once
    meter = Meter(reports_requests=True, reports_units=True)
    meter.begin("e-1", delivered=True, branch=(2, 1))
    meter.request(read_units=0.5)
    # when: it writes its own branch (a completion: four units in advance), then launches branch 3
    mine = meter.carry_branch(_branch(1, Ledger(requests=3, messages=1)), write_units=4.0)
    meter.carried()
    meter.request(write_units=4.0)  # the store reports the completion itself
    other = meter.carry_branch(_branch(3), write_units=1.0)
    meter.carried()
    # then: its read, its write and its message are on its own item; the launch carries nothing
    assert mine.ledger == Ledger(requests=5, read_units=0.5, write_units=4.0, messages=2, lambda_ms=mine.ledger.lambda_ms)
    assert other.ledger is None
    assert (meter.requests, meter.write_units, meter.messages) == (0, 0.0, 0)


def test_a_fan_in_adds_every_branch_ledger_once_even_when_its_commit_is_retried():
    # given: a fan-in over two branches whose first commit loses its race
    meter = Meter(reports_requests=True)
    meter.begin("e-1", delivered=True, branch=(2, 1))
    ledgers = [Ledger(requests=4, messages=1), Ledger(requests=6, messages=1), None]
    meter.include_branches(ledgers)
    meter.carry(_execution())  # lost: not carried
    # when: the fan-in is done again and its commit applies
    meter.include_branches(ledgers)
    new = meter.carry(_execution())
    meter.carried()
    meter.request()  # the store reports the commit itself
    again = meter.carry(_execution(ledger=new.ledger))
    # then: the branches' 10 requests and 2 messages once, with this delivery's message and its commit; the
    # next commit adds only itself
    assert (new.ledger.requests, new.ledger.messages) == (11, 3)
    assert (again.ledger.requests, again.ledger.messages) == (12, 3)
