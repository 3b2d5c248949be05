"""The saga and approval examples end to end on LocalRunner (memory store, manual clock)."""

from __future__ import annotations

import pytest

from engine_core import REGISTRY, Status
from engine_core.testing import LocalRunner
from loom_examples import LEDGER

ORDER = {"order_id": "o-77", "amount_cents": 2500}


@pytest.fixture(autouse=True)
def _clean_ledger():
    LEDGER.reset()
    yield
    LEDGER.reset()


def test_order_saga_when_shipping_fails_for_good_refunds_the_charge_once():
    runner = LocalRunner(REGISTRY)
    eid = runner.start("order_saga", {**ORDER, "items": [{"sku": "undeliverable", "qty": 1}]})
    # when
    done = runner.run_until_done(eid)
    # then
    assert done.status is Status.FAILED and done.compensated is True
    assert done.error.step_name == "ship_order"
    charges, refunds = LEDGER.charges(), LEDGER.refunds()
    assert len(charges) == 1 and [r.charge_id for r in refunds] == [charges[0].charge_id]
    assert refunds[0].idempotency_key == f"{eid}:1"


def test_order_saga_that_ships_refunds_nothing():
    runner = LocalRunner(REGISTRY)
    eid = runner.start("order_saga", ORDER)
    assert runner.run_until_done(eid).status is Status.COMPLETED
    assert len(LEDGER.charges()) == 1 and LEDGER.refunds() == []


def test_order_saga_cancelled_while_waiting_for_the_carrier_refunds_and_ends_cancelled():
    runner = LocalRunner(REGISTRY)
    eid = runner.start("order_saga", ORDER)
    runner.run_until(eid, "SLEEPING")
    # when
    compensating = runner.engine.operator.cancel(eid, "ops", "customer called")
    done = runner.run_until_done(eid)
    # then
    assert compensating.compensating is True
    assert (done.status, done.compensated, done.cancel_reason) == (Status.CANCELLED, True, "customer called")
    assert len(LEDGER.refunds()) == 1


def test_expense_approval_waits_and_pays_on_the_callback():
    runner = LocalRunner(REGISTRY)
    eid = runner.start("expense_approval", {"expense_id": "e-1", "amount_cents": 900})
    waiting = runner.run_until(eid, "WAITING")
    token = runner.context(eid)["approval_callback"]
    # when
    sent = runner.engine.operator.complete_callback(token, {"approved": True, "approver": "ana"}, "partner")
    done = runner.run_until_done(eid)
    # then
    assert waiting.status is Status.WAITING and sent.outcome == "delivered"
    assert done.status is Status.COMPLETED
    assert runner.context(eid)["decision"] == "paid" and runner.context(eid)["paid_cents"] == 900


def test_expense_approval_with_no_answer_is_declined_by_default_after_a_day():
    runner = LocalRunner(REGISTRY)
    eid = runner.start("expense_approval", {"expense_id": "e-2", "amount_cents": 900})
    done = runner.run_until_done(eid)
    assert done.status is Status.COMPLETED and runner.context(eid)["decision"] == "declined"
    assert (done.updated_at - done.created_at).total_seconds() >= 24 * 3600
