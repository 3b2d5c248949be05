"""Composition through the deployed functions: an approval that waits for an event (sent through the
API, or completed by a callback token), and a saga whose refund is SIGKILLed mid-body and still
refunds once. Real processes, real kills, read back through the Function URL as a user would."""

from __future__ import annotations

import pytest
from e2e_support import ts, wait_for

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
    assert done["context"]["decision"] == "paid" and done["context"]["approval"]["approver"] == "ana"
    assert done["context"]["approver"] == "finance@example.com"  # the input stands: the answer has its own key
    _, history = loom.api.request("GET", f"/executions/{eid}/history")
    assert [(s["name"], s["kind"]) for s in history["steps"]] == [
        ("request_approval", "task"), ("approval", "event"), ("settle_expense", "task")]
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


def _max_overlap(intervals: list[tuple[str, str]]) -> int:
    """The most intervals open at one instant (a start at the same instant as an end does not overlap)."""
    points = sorted([(ts(a), 1) for a, _ in intervals] + [(ts(b), -1) for _, b in intervals])
    most = now = 0
    for _, delta in points:
        now += delta
        most = max(most, now)
    return most


def test_a_map_over_100_items_ten_at_a_time_survives_a_sigkill_inside_a_branch(loom):
    token, eid = loom.new_token("batch-kill")
    # branch 17's first attempt is killed after its body ran (its side effect done, nothing recorded)
    arm = loom.faults.arm("step.return", action="kill", match={"execution_id": eid, "branch": 17, "attempt": 1})
    loom.start("batch_resize", {"count": 100, "flaky_every": 25}, token)
    (fired,) = loom.faults.wait_fired(arm, timeout_s=120)
    assert (fired.info["step"], fired.info["branch"]) == (1, 17)
    crash = wait_for(lambda: [c for c in loom.events.of("crashed") if c.get("pid") == fired.pid], "the crash report")
    assert "SIGKILL" in crash[0]["error"]["errorMessage"]
    # when: the killed branch's claim runs out, the parent's lease brings the sweeper, which re-drives it
    done = loom.wait(eid, timeout_s=240)
    # then: fanned in once, every branch once and in order, the killed one on its second attempt
    assert done["status"] == "COMPLETED", done
    results = done["context"]["resize_images"]
    assert [r["source"] for r in results] == [f"uploads/img-{i:04d}.jpg" for i in range(100)]
    assert done["context"]["resized"] == 100
    entries, token = [], None  # every page: a page of 100 counts the branches listed under their step
    while True:
        _, page = loom.api.request("GET", f"/executions/{eid}/history?limit=100"
                                          + (f"&next_token={token}" if token else ""))
        entries += page["steps"]
        token = page.get("next_token")
        if not token:
            break
    steps = [s for s in entries if s.get("kind") != "branch"]
    branches = [s for s in entries if s.get("kind") == "branch"]
    assert [(s["name"], s["kind"], s["status"]) for s in steps] == [
        ("list_images", "task", "SUCCEEDED"), ("resize_images", "fanout", "SUCCEEDED"), ("summarize", "task", "SUCCEEDED")]
    assert [b["branch"] for b in branches] == list(range(100))
    assert all(b["status"] == "SUCCEEDED" for b in branches)
    attempts = {b["branch"]: b["attempts"] for b in branches}
    assert attempts[17] == 2 and all(attempts[i] == 2 for i in (0, 25, 50, 75))  # flaky_every=25 retried once
    assert sum(attempts.values()) == 100 + 5
    # never more than ten branch attempts running at once (the recorded successful attempts)
    assert _max_overlap([(b["started_at"], b["finished_at"]) for b in branches]) <= 10
