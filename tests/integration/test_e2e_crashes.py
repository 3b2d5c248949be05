"""Real process kills at the named crash points: every execution still completes, each step once."""

from __future__ import annotations

import time

import pytest
from e2e_support import GREETING_STEPS, ORDER_STEPS, assert_each_step_once, assert_versions, records_for, wait_for


def test_a_worker_killed_inside_a_step_body_resumes_and_charges_once(loom):
    token, eid = loom.new_token("body-kill")
    arm = loom.faults.arm("step.return", action="kill", match={"execution_id": eid, "step_name": "charge_payment",
                                                               "attempt": 1})
    loom.start("order_fulfillment", {"order_id": "o-kill", "amount_cents": 500}, token)

    (fired,) = loom.faults.wait_fired(arm, timeout_s=30)
    # The charge was made, then the process died before the checkpoint: a real SIGKILL.
    assert loom.charges(f"{eid}:") and fired.info["step"] == 1
    crash = wait_for(lambda: [c for c in loom.events.of("crashed") if c.get("pid") == fired.pid], "the crash report")
    assert "SIGKILL" in crash[0]["error"]["errorMessage"]

    e = loom.wait(eid, timeout_s=90)
    assert e["status"] == "COMPLETED", e
    history = loom.history(eid)
    assert_each_step_once(history, ORDER_STEPS)
    assert [h["attempts"] for h in history] == [1, 2, 1, 1, 1]  # charge_payment ran twice, recorded once
    # Attempt 2 sent the same idempotency key: the provider returned the first charge.
    (charge,) = loom.charges(f"{eid}:")
    assert charge["idempotency_key"] == f"{eid}:1" and e["context"]["charge_id"] == charge["charge_id"]
    # start, claim reserve, reserve (+ claim charge), [killed; its claim's lease runs out] sweeper
    # re-drive, claim charge (attempt 2), charge, sleep, claim ship, ship (+ claim notify), notify
    assert_versions(e, 10, timer_redrives_allowed=1)


def test_a_worker_killed_after_the_checkpoint_before_the_enqueue_is_redriven(loom):
    token, eid = loom.new_token("after-checkpoint")
    arm = loom.faults.arm("worker.after_checkpoint", match={"execution_id": eid, "step": 0})
    since = time.time()
    loom.start("flaky_greeting", {"name": "checkpoint", "failures": 0}, token)
    loom.faults.wait_fired(arm, timeout_s=30)

    # Step 0 is recorded and the same write claimed step 1 for the killed invocation (a chain): only
    # that claim's lease, which outlasts the invocation's deadline, and the sweeper can move it.
    e = loom.execution(eid)
    assert e["current_step"] == 1 and e["timer"] == "lease" and e["attempt"] == 1
    e = loom.wait(eid)
    assert e["status"] == "COMPLETED", e
    history = loom.history(eid)
    assert_each_step_once(history, GREETING_STEPS)
    assert [h["attempts"] for h in history] == [1, 2]  # the dead claim of step 1 counted as an attempt
    assert_versions(e, 6)  # start, claim 0, step 0 (+ claim 1), sweeper re-drive, claim 1, step 1
    redrives = [t for t in loom.events.of("tick_done", since) if (t.get("payload") or {}).get("redriven")]
    assert any("stalled_lease" in t["payload"]["redriven"] for t in redrives)


def test_a_worker_killed_after_the_enqueue_before_the_ack_gets_a_harmless_redelivery(loom):
    original = loom.deployment.queue.visibility_timeout_s
    loom.set_visibility_timeout(4)  # see the unacknowledged message come back within the test
    try:
        token, eid = loom.new_token("after-enqueue")
        arm = loom.faults.arm("worker.after_enqueue", match={"execution_id": eid, "step": 0})
        since = time.time()
        # Step 0 fails once: the worker sends the retry's delayed message, then dies before the ack.
        loom.start("flaky_greeting", {"name": "enqueue", "failures": 1}, token)
        loom.faults.wait_fired(arm, timeout_s=30)
        done = loom.wait(eid)
        assert done["status"] == "COMPLETED"
        # start, claim 0, retry scheduled, claim 0 (attempt 2), step 0 (+ claim 1), step 1: no sweeper
        # re-drive needed, the retry's message was sent before the kill
        assert_versions(done, 6, timer_redrives_allowed=1)

        # The step-0 message was never deleted: SQS hands it out again, and it changes nothing.
        again = wait_for(lambda: [r for r in records_for(loom.events, eid, since)
                                  if r["body"]["step"] == 0 and r["receive_count"] >= 2], "the redelivery", 30)
        wait_for(lambda: [b for b in loom.events.of("batch_done", since)
                          if again[0]["message_id"] in b.get("message_ids", []) and b["status"] == "ok"],
                 "the redelivered batch to finish", 30)
        assert loom.execution(eid) == done
        history = loom.history(eid)
        assert_each_step_once(history, GREETING_STEPS)
        assert [h["attempts"] for h in history] == [2, 1]
    finally:
        loom.set_visibility_timeout(original)


def test_a_control_plane_killed_after_the_write_before_the_enqueue_still_runs(loom):
    from loom_cli.client import ApiError

    token, eid = loom.new_token("control-crash")
    arm = loom.faults.arm("control.after_create", match={"execution_id": eid})
    with pytest.raises(ApiError) as crashed:
        loom.start("flaky_greeting", {"name": "control", "failures": 0}, token)
    assert crashed.value.status == 502  # the Function URL's answer when the function dies
    (fired,) = loom.faults.fired(arm)
    assert fired.function_name == loom.deployment.control_plane.name

    # The start was durable before the crash: the client's retry returns it, and the sweeper runs it.
    status, reply = loom.api.request("POST", "/executions", {"workflow": "flaky_greeting", "input": {
        "name": "control", "failures": 0}, "idempotency_token": token})
    assert status == 200 and reply["execution_id"] == eid and reply["created"] is False
    e = loom.wait(eid)
    assert e["status"] == "COMPLETED", e
    assert_each_step_once(loom.history(eid), GREETING_STEPS)
    assert_versions(e, 5)  # start, sweeper re-drive, claim 0, step 0 (+ claim 1), step 1
