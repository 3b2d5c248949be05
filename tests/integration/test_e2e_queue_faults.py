"""Duplicate deliveries, a poison step, and a purged queue during a sleep."""

from __future__ import annotations

import time

from e2e_support import (
    GREETING_STEPS,
    ORDER_STEPS,
    assert_each_step_once,
    assert_versions,
    records_for,
    step_message,
    ts,
    wait_for,
)


def test_duplicate_deliveries_of_the_same_message_advance_once(loom):
    token, eid = loom.new_token("duplicate")
    since = time.time()
    loom.start("flaky_greeting", {"name": "dup", "failures": 0}, token)
    first = step_message(eid, 0, 1)
    for _ in range(2):  # two more copies of the first step message, racing the original
        loom.sqs.send_message(QueueUrl=loom.queue_url, MessageBody=first)
    done = loom.wait(eid)
    assert done["status"] == "COMPLETED", done
    assert_versions(done, 4)  # start, claim 0, step 0 (+ claim 1), step 1

    # And every step message once more, after the end.
    for step, version in ((0, 1), (1, 2)):
        loom.sqs.send_message(QueueUrl=loom.queue_url, MessageBody=step_message(eid, step, version))
    # the first message, its two copies and these two (step 1 ran in the same chain: no message of its own)
    wait_for(lambda: len(records_for(loom.events, eid, since)) >= 5, "all five deliveries", 30)
    ids = {r["message_id"] for r in records_for(loom.events, eid, since)}
    wait_for(lambda: ids <= {m for b in loom.events.of("batch_done", since) for m in b.get("message_ids", [])},
             "every delivery to be handled", 30)
    assert loom.execution(eid) == done
    history = loom.history(eid)
    assert_each_step_once(history, GREETING_STEPS)
    assert [h["attempts"] for h in history] == [1, 1]


def test_a_poison_step_ends_failed_with_one_notice_on_the_dlq(loom):
    token, eid = loom.new_token("poison")
    loom.start("poison_pill", {}, token)
    e = loom.wait(eid, timeout_s=60)
    assert e["status"] == "FAILED", e
    assert e["error"]["code"] == "step_error" and e["error"]["step_name"] == "swallow_poison"
    assert "(attempt 3 of 3)" in e["error"]["message"]
    assert e["next_wake_at"] is None
    # start, claim accept, accept (+ claim poison), 2 x (retry scheduled + claim), failed
    assert_versions(e, 8, timer_redrives_allowed=2)

    history = loom.history(eid)
    assert [(h["name"], h["status"], h["attempts"], h["final"]) for h in history] == [
        ("accept", "SUCCEEDED", 1, False), ("swallow_poison", "FAILED", 3, True)]  # never_reached never ran
    assert "this step always fails" in history[1]["error"]["message"]

    notices = wait_for(lambda: loom.dlq_notices(eid), "the failure notice on the DLQ", 15)
    time.sleep(2 * 1.0 + 1)  # a couple of sweeps and any redelivery: still exactly one
    notices += loom.dlq_notices(eid)
    assert len(notices) == 1, notices
    assert notices[0]["kind"] == "loom.execution_failed" and notices[0]["error"]["code"] == "step_error"


def test_a_sleep_whose_message_was_purged_resumes_on_time_through_the_sweeper(loom):
    token, eid = loom.new_token("lost-timer")
    loom.start("order_fulfillment", {"order_id": "o-timer", "amount_cents": 700}, token)
    sleeping = loom.wait(eid, check=lambda e: e["timer"] == "sleep" or e["status"] != "RUNNING")
    assert sleeping["status"] == "SLEEPING", sleeping
    since = time.time()
    loom.sqs.purge_queue(QueueUrl=loom.queue_url)  # the delayed wake-up message is gone
    attrs = loom.sqs.get_queue_attributes(QueueUrl=loom.queue_url, AttributeNames=["All"])["Attributes"]
    assert sum(int(attrs[k]) for k in ("ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible",
                                       "ApproximateNumberOfMessagesDelayed")) == 0

    e = loom.wait(eid, timeout_s=60)
    assert e["status"] == "COMPLETED", e
    history = loom.history(eid)
    assert_each_step_once(history, ORDER_STEPS)
    wake_at = ts(history[2]["result"]["wake_at"])
    resumed = ts(history[3]["started_at"])
    assert wake_at <= resumed, "woke early"
    # The due key of a timer whose message rides SQS's delay is the wake time plus that message's lease
    # (DESIGN.md, backlog rows): a queued wake-up is never dispatched twice, and a lost one is re-driven
    # once its lease has run out, by the next 1 s sweep.
    env = loom.deployment.worker.environment
    lease = max(float(env.get("LOOM_LEASE_S") or 0), 10 + int(env.get("LOOM_TIME_MARGIN_MS") or 3000) / 1000)
    late = (resumed - wake_at).total_seconds()
    assert lease - 1 <= late < lease + 5, f"woke {late:.1f} s late; its lease is {lease:g} s"
    # start, claim reserve, reserve (+ claim charge), charge, sleep, sweeper wake, claim ship,
    # ship (+ claim notify), notify
    assert_versions(e, 9)
    redriven = [t["payload"]["redriven"] for t in loom.events.of("tick_done", since)
                if (t.get("payload") or {}).get("redriven")]
    assert any("timer_due" in r for r in redriven), redriven
