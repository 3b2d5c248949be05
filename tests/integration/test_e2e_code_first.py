"""A code-first workflow (``order_fulfillment_code``) through the deployed functions: a real SIGKILL
inside its charge step, the order charged once, the function's return value in the API, and the same
history shape, status and operator reads as its step-list twin."""

from __future__ import annotations

from e2e_support import wait_for

CODE_STEPS = ["reserve_inventory", "charge_payment", "wait_for_carrier_pickup", "ship_order", "notify_customer"]


def test_a_worker_killed_inside_a_code_first_step_resumes_replays_and_charges_once(loom):
    # given: the worker dies (SIGKILL) after the charge was made, before its record
    token, eid = loom.new_token("code-kill")
    arm = loom.faults.arm("step.return", action="kill", match={"execution_id": eid, "step_name": "charge_payment",
                                                               "attempt": 1})

    # when
    loom.start("order_fulfillment_code", {"order_id": "o-code", "amount_cents": 700,
                                          "items": [{"sku": "mug", "qty": 2}]}, token)
    (fired,) = loom.faults.wait_fired(arm, timeout_s=30)
    crash = wait_for(lambda: [c for c in loom.events.of("crashed") if c.get("pid") == fired.pid], "the crash report")
    e = loom.wait(eid, timeout_s=120)

    # then: completed by a fresh process that replayed reserve (not run again) and re-ran the charge
    # with the same idempotency key: one charge; the function's return value is the API's result
    assert "SIGKILL" in crash[0]["error"]["errorMessage"] and fired.info["step"] == 1
    assert e["status"] == "COMPLETED", e
    assert e["style"] == "code" and e.get("step_count") is None
    history = [h for h in loom.history(eid) if h.get("kind") != "branch"]
    assert [h["name"] for h in history] == [*CODE_STEPS, "return"]
    assert all(h["status"] == "SUCCEEDED" for h in history)
    assert [h["attempts"] for h in history[:5]] == [1, 2, 1, 1, 1]
    (charge,) = loom.charges(f"{eid}:")
    assert charge["idempotency_key"] == f"{eid}:1"
    assert e["result"]["charge_id"] == charge["charge_id"] and e["result"]["charged_cents"] == 700
    assert e["result"]["tracking_number"].startswith("TRK-")


def test_a_code_first_workflow_is_listed_with_its_style_and_function(loom):
    # when
    workflows = {w["name"]: w for w in loom.api.request("GET", "/workflows")[1]["workflows"]}

    # then
    code = workflows["order_fulfillment_code"]
    assert code["style"] == "code" and code["steps"] == []
    assert code["function"] == "loom_examples.orders_code.order_fulfillment"
    assert code["input_schema"]["required"] == ["order_id", "amount_cents"]
    assert workflows["order_fulfillment"]["style"] == "steps"
