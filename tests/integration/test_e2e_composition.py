"""Composition through the deployed functions: an approval that waits for an event (sent through the
API, or completed by a callback token), and a saga whose refund is SIGKILLed mid-body and still
refunds once. Real processes, real kills, read back through the Function URL as a user would."""

from __future__ import annotations

import pytest
from e2e_support import wait_for

from loom_cli.client import ApiError

EXPENSE = {"expense_id": "e-42", "amount_cents": 1234}


def test_an_approval_waits_costing_nothing_until_its_event_arrives_then_completes(loom):
    token, eid = loom.new_token("approval-event")
    loom.start("expense_approval", EXPENSE, token)
    waiting = loom.wait(eid, until=("WAITING",))
    assert waiting["waiting_for"]["event"] == "approved" and waiting["timer"] == "event"
    # when: the answer, sent twice with one id (a retrying sender)
    body = {"data": {"approved": True, "approver": "ana"}, "event_id": f"mail-{eid[:8]}"}
    status, sent = loom.api.request("POST", f"/executions/{eid}/events/approved", body)
    _, again = loom.api.request("POST", f"/executions/{eid}/events/approved", body)
    done = loom.wait(eid)
    # then
    assert (status, sent["outcome"], again["outcome"]) == (202, "delivered", "duplicate")
    assert done["status"] == "COMPLETED", done
    assert done["context"]["decision"] == "paid" and done["context"]["approver"] == "ana"
    _, history = loom.api.request("GET", f"/executions/{eid}/history")
    assert [(s["name"], s["kind"]) for s in history["steps"]] == [
        ("request_approval", "task"), ("wait_approved", "event"), ("settle_expense", "task")]
    assert len(history["events"]) == 1 and history["events"][0]["consumed_by_step"] == 1


def test_an_event_sent_before_the_wait_is_kept_and_a_callback_token_works_once(loom):
    token, eid = loom.new_token("approval-early")
    # the event arrives before the execution reaches its wait (even before its first step)
    loom.start("expense_approval", EXPENSE, token)
    status, early = loom.api.request("POST", f"/executions/{eid}/events/approved",
                                     {"data": {"approved": False, "approver": "bob"}})
    assert status == 202 and early["outcome"] in ("buffered", "delivered")
    done = loom.wait(eid)
    assert done["status"] == "COMPLETED" and done["context"]["decision"] == "declined"
    # a second execution completed by its callback token, which then refuses a second use
    token2, eid2 = loom.new_token("approval-callback")
    loom.start("expense_approval", EXPENSE, token2)
    waiting = loom.wait(eid2, until=("WAITING",))
    callback = waiting["context"]["approval_callback"]
    status, sent = loom.api.request("POST", f"/callbacks/{callback}", {"data": {"approved": True}})
    assert (status, sent["outcome"]) == (200, "delivered")
    assert loom.wait(eid2)["context"]["decision"] == "paid"
    with pytest.raises(ApiError) as refused:
        loom.api.request("POST", f"/callbacks/{callback}", {"data": {"approved": True}})
    assert (refused.value.status, refused.value.code) == (409, "callback_used")


def test_a_saga_whose_refund_is_killed_mid_body_refunds_once_and_ends_compensated(loom):
    token, eid = loom.new_token("saga-kill")
    arm = loom.faults.arm("step.return", action="kill",
                          match={"execution_id": eid, "step": 1, "compensation": True, "attempt": 1})
    order = {"order_id": "o-saga", "amount_cents": 700, "items": [{"sku": "undeliverable", "qty": 1}]}
    loom.start("order_saga", order, token)
    loom.wait(eid, until=("SLEEPING",))
    loom.api.request("POST", f"/executions/{eid}/wake")  # skip the carrier pickup wait
    (fired,) = loom.faults.wait_fired(arm, timeout_s=60)
    # the refund was made, then its worker died before recording it
    assert fired.info["compensation"] is True and loom.refunds(f"{eid}:")
    crash = wait_for(lambda: [c for c in loom.events.of("crashed") if c.get("pid") == fired.pid], "the crash report")
    assert "SIGKILL" in crash[0]["error"]["errorMessage"]
    # when: its claim runs out, the sweeper re-drives the compensation, which runs again
    done = loom.wait(eid, until=("FAILED", "COMPENSATION_FAILED"), timeout_s=120)
    # then: compensated, the charge refunded exactly once, the compensation recorded once
    assert (done["status"], done["compensated"]) == ("FAILED", True), done
    assert done["error"]["step_name"] == "ship_order" and done["error"]["code"] == "permanent_error"
    assert len(loom.charges(f"{eid}:")) == 1 and len(loom.refunds(f"{eid}:")) == 1
    compensations = [s for s in loom.history(eid) if s["kind"] == "compensation"]
    assert [(s["name"], s["status"], s["attempts"]) for s in compensations] == [("charge_payment", "SUCCEEDED", 2)]
    notices = wait_for(lambda: loom.dlq_notices(eid), "the failure notice")
    assert notices[0]["compensated"] is True
