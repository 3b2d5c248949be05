"""The operator's controls through the deployed functions: list, cancel, redrive, wake, history pages.

The 3 a.m. journey runs on ``fragile_import`` (packages/workflows-examples): it sleeps two hours,
then fails with a PermanentStepError until its feed is fixed (a file in LOOM_EXAMPLES_FIXES_DIR,
which every function here gets). Only the CLI and the API are used, as an operator would.
"""

from __future__ import annotations

import json
import time

from e2e_support import ts

from loom_cli.main import main


def cli(capsys, *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_the_3am_journey_poison_find_fix_redrive_completed(loom, capsys):
    # given: tonight's import, asleep until its export window, woken (no two-hour wait) into a poison row
    token, eid = loom.new_token("3am")
    feed = f"payroll-{eid[:8]}"
    loom.start("fragile_import", {"feed": feed}, token)
    asleep = loom.wait(eid, until=("SLEEPING",))
    assert ts(asleep["next_wake_at"]) > ts(asleep["updated_at"]) and asleep["current_step"] == 1  # at its sleep
    code, out, _ = cli(capsys, "--url", loom.url, "wake", eid)
    assert code == 0 and "woken: the sleep at step 1/4 wait_for_export_window ends now; step 2/4 runs next" in out, out
    failed = loom.wait(eid)
    assert failed["status"] == "FAILED", failed
    assert failed["error"]["code"] == "permanent_error" and feed in failed["error"]["message"]
    # find: it is among the failed executions of the last few minutes
    code, out, _ = cli(capsys, "--url", loom.url, "list", "--status", "FAILED", "--since", "10m", "--all", "--json")
    assert code == 0
    assert {"execution_id": eid, "workflow": "fragile_import", "status": "FAILED",
            "created_at": failed["created_at"]} in json.loads(out)["executions"]
    code, out, _ = cli(capsys, "--url", loom.url, "list", "--status", "FAILED", "--workflow", "fragile_import")
    assert code == 0 and eid in out
    # fix, redrive
    (loom.fixes / feed).touch()
    code, out, _ = cli(capsys, "--url", loom.url, "redrive", eid)
    assert code == 0 and f"{eid}  fragile_import  RUNNING  redriven from step 2/4 import_rows (redrive 1)" in out, out
    # COMPLETED, under the same id
    code, out, _ = cli(capsys, "--url", loom.url, "watch", eid, "--interval", "0.2", "--timeout", "60")
    assert code == 0 and "COMPLETED" in out, out
    e = loom.execution(eid)
    assert (e["status"], e["redrives"], e["error"]) == ("COMPLETED", 1, None)
    assert e["context"]["summary"] == f"3 rows imported from {feed}"
    # the history keeps the failure in the redrive's record, and who did what
    code, out, _ = cli(capsys, "--url", loom.url, "--json", "history", eid)
    history = json.loads(out)
    assert [(s["name"], s["status"]) for s in history["steps"]] == [
        ("fetch_manifest", "SUCCEEDED"), ("wait_for_export_window", "SUCCEEDED"), ("import_rows", "SUCCEEDED"),
        ("publish_summary", "SUCCEEDED")]
    wake, redrive = history["operations"]
    assert (wake["op"], wake["detail"]["was"]) == ("wake", "sleep")
    assert redrive["op"] == "redrive" and redrive["version"] > wake["version"]
    assert (redrive["detail"]["step_name"], redrive["detail"]["attempts"]) == ("import_rows", 1)
    assert redrive["detail"]["error"]["code"] == "permanent_error" and feed in redrive["detail"]["error"]["message"]
    assert {wake["by"], redrive["by"], e["started_by"]} == {"local"}
    # and in pages of one over HTTP: each step once, the operations with the first page
    pages, next_token = [], None
    while True:
        query = "limit=1" + (f"&next_token={next_token}" if next_token else "")
        _, page = loom.api.request("GET", f"/executions/{eid}/history?{query}")
        pages.append(page)
        next_token = page["next_token"]
        if not next_token:
            break
    assert [[s["name"] for s in p["steps"]] for p in pages] == [
        ["fetch_manifest"], ["wait_for_export_window"], ["import_rows"], ["publish_summary"]]
    assert [len(p["operations"]) for p in pages] == [2, 0, 0, 0]


def test_a_cancelled_sleeping_execution_leaves_the_due_index_and_never_resumes(loom, capsys):
    # given: an order asleep for its 20 s carrier pickup (its wake-up rides a delayed SQS message)
    token, eid = loom.new_token("cancel")
    loom.start("order_fulfillment", {"order_id": "o-cancel", "amount_cents": 700, "items": []}, token)
    asleep = loom.wait(eid, until=("SLEEPING",))
    assert loom.meta_item(eid)["GSI1PK"]["S"].startswith("DUE#")
    # when
    code, out, _ = cli(capsys, "--url", loom.url, "cancel", eid, "--reason", "customer called")
    # then
    assert code == 0 and out.strip() == (f"{eid}  order_fulfillment  CANCELLED  by "
                                         "local (customer called)"), out
    e = loom.execution(eid)
    assert (e["status"], e["next_wake_at"], e["timer"], e["cancel_reason"]) == ("CANCELLED", None, None,
                                                                                "customer called")
    assert not loom.meta_item(eid).get("GSI1PK", {}).get("S", "").startswith("DUE#")
    # past the sleep's end (the delayed message arrives, the sweeper runs every second): nothing resumes
    time.sleep(max(0.0, (ts(asleep["next_wake_at"]) - ts(e["updated_at"])).total_seconds()) + 4)
    after = loom.execution(eid)
    assert (after["status"], after["version"], after["current_step"]) == ("CANCELLED", e["version"], 2)
    assert [h["name"] for h in loom.history(eid)] == ["reserve_inventory", "charge_payment", "wait_for_carrier_pickup"]
    # cancelling again is a 200 that changes nothing; waking or redriving it is refused with its status
    assert cli(capsys, "--url", loom.url, "cancel", eid)[0] == 0
    assert loom.execution(eid) == after
    code, _, err = cli(capsys, "--url", loom.url, "--json", "wake", eid)
    assert code == 3 and json.loads(err)["error"] == "execution_ended"
    code, _, err = cli(capsys, "--url", loom.url, "redrive", eid, "--json")
    assert code == 3 and json.loads(err)["error"] == "not_failed"
    code, out, _ = cli(capsys, "--url", loom.url, "list", "--status", "CANCELLED", "--since", "10m", "--json")
    assert eid in [x["execution_id"] for x in json.loads(out)["executions"]]


def test_wake_ends_a_two_hour_sleep_now(loom, capsys):
    token, eid = loom.new_token("wake")
    feed = f"fixed-{eid[:8]}"
    (loom.fixes / feed).touch()  # nothing to fix: this one completes once it is past the window
    loom.start("fragile_import", {"feed": feed}, token)
    asleep = loom.wait(eid, until=("SLEEPING",))
    assert (ts(asleep["next_wake_at"]) - ts(asleep["updated_at"])).total_seconds() > 7000
    started = time.monotonic()
    code, out, _ = cli(capsys, "--url", loom.url, "--json", "wake", eid)
    assert code == 0 and json.loads(out)["execution_id"] == eid
    e = loom.wait(eid, timeout_s=30)
    assert e["status"] == "COMPLETED" and time.monotonic() - started < 30
    # waking something that is not waiting is refused, and so is an ended execution
    code, _, err = cli(capsys, "--url", loom.url, "wake", eid)
    assert code == 3 and "execution_ended" in err
