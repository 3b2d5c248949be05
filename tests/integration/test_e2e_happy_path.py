"""An order started over HTTP runs through every deployed function to COMPLETED."""

from __future__ import annotations

import datetime as dt

from e2e_support import ORDER_STEPS, assert_each_step_once, assert_versions, ts


def test_an_order_started_over_http_completes_with_its_history_and_context(loom):
    token, eid = loom.new_token("happy")
    order = {"order_id": "o-happy", "amount_cents": 1299, "items": [{"sku": "mug", "qty": 3}], "email": "ada@example.com"}
    assert loom.start("order_fulfillment", order, token) == eid

    sleeping = loom.wait(eid, check=lambda e: e["timer"] == "sleep" or e["status"] != "RUNNING")
    assert sleeping["status"] == "SLEEPING" and sleeping["current_step"] == 2  # at its sleep
    e = loom.wait(eid, timeout_s=90)
    assert e["status"] == "COMPLETED", e
    assert e["error"] is None and e["next_wake_at"] is None and e["timer"] is None
    # One version per transition: start, claim reserve, reserve (+ claim charge), charge, sleep, claim
    # ship (woken by its message, or by the sweeper first: one more), ship (+ claim notify), notify.
    assert_versions(e, 8, timer_redrives_allowed=1)
    assert e["total_attempts"] == 4

    history = loom.history(eid)
    assert_each_step_once(history, ORDER_STEPS)
    assert [h["attempts"] for h in history] == [1, 1, 1, 1, 1]
    wake_at = ts(history[2]["result"]["wake_at"])
    assert ts(history[3]["started_at"]) >= wake_at  # the durable sleep held the next step back

    ctx = e["context"]
    assert {k: ctx[k] for k in order} == order
    assert ctx["reserved_units"] == 3 and ctx["reservation_id"].startswith("res-")
    assert ctx["charged_cents"] == 1299 and ctx["tracking_number"].startswith("TRK-")
    assert ctx["notified"] == "ada@example.com" and ctx["notification_id"].startswith("msg-")
    (charge,) = loom.charges(f"{eid}:")
    assert charge == {"charge_id": ctx["charge_id"], "idempotency_key": f"{eid}:1", "order_id": "o-happy",
                      "amount_cents": 1299}

    # A repeated start with the same token returns the same execution, changed in nothing.
    status, again = loom.api.request("POST", "/executions", {"workflow": "order_fulfillment", "input": order,
                                                             "idempotency_token": token})
    assert status == 200 and again["execution_id"] == eid and again["created"] is False
    assert loom.execution(eid) == e


def test_the_clock_is_utc_and_fixed_width(loom):
    # next_wake_at compares clocks of different processes as strings: fixed-width UTC.
    token, eid = loom.new_token("clock")
    loom.start("flaky_greeting", {"name": "clock", "failures": 0}, token)
    e = loom.wait(eid)
    created = e["created_at"]
    assert created.endswith("Z") and len(created) == len("2026-03-01T12:00:00.000000Z")
    assert abs((ts(created) - dt.datetime.now(dt.timezone.utc)).total_seconds()) < 60
