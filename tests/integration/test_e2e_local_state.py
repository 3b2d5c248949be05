"""`make down` / `make up` keeps the table, not the queue: a sleeping execution still completes.

On the session's stack (no second apply): the Loom table the Terraform environment deploys goes
through the local runtime's save, an emptied table and its restore, as across `make down` and
`make up`, and the step queue is purged, as a fresh emulator's is. The execution's wake-up message
is gone with it; the deployed sweeper finds the execution in the due index and re-drives it.
"""

from __future__ import annotations

import time

from e2e_support import ORDER_STEPS, assert_each_step_once

from loom_local import state as table_state


def _items_of(items, eid: str):
    return sorted((i for i in items if i["PK"]["S"] == f"EXEC#{eid}"), key=lambda i: i["SK"]["S"])


def test_a_sleeping_execution_saved_and_restored_without_its_messages_completes(loom, tmp_path):
    table = loom.deployment.worker.environment["LOOM_TABLE_NAME"]
    db = loom.stack.client("dynamodb")
    token, eid = loom.new_token("kept")
    order = {"order_id": "o-kept", "amount_cents": 700, "items": [{"sku": "mug", "qty": 1}]}
    loom.start("order_fulfillment", order, token)
    loom.wait(eid, check=lambda e: e["status"] == "SLEEPING")

    # `make down`: the table is saved. `make up`: a fresh, empty table and queue, then the restore.
    saved = tmp_path / "table.json"
    kept = _items_of(table_state.save(db, table, saved).items, eid)
    sks = [i["SK"]["S"] for i in kept]
    assert "#META" in sks and len([k for k in sks if k.startswith("STEP#")]) >= 2, sks  # and the steps so far
    since = time.time()
    loom.sqs.purge_queue(QueueUrl=loom.queue_url)  # the delayed wake-up message is gone
    # The stack is this worker's, shared with earlier tests whose executions may still be writing
    # their last records: what the clear must leave is nothing of this execution.
    assert table_state.clear(db, table) >= len(kept)
    assert _items_of(table_state.scan(db, table), eid) == []
    assert table_state.restore(db, table, table_state.load(saved).items) >= len(kept)
    assert _items_of(table_state.scan(db, table), eid) == kept

    e = loom.wait(eid, timeout_s=90)
    assert e["status"] == "COMPLETED", e
    assert_each_step_once(loom.history(eid), ORDER_STEPS)
    redriven = [t["payload"]["redriven"] for t in loom.events.of("tick_done", since)
                if (t.get("payload") or {}).get("redriven")]
    assert any("timer_due" in r for r in redriven), redriven  # the sweeper woke it: its message was purged
    assert len(loom.charges(f"{eid}:")) == 1
