"""`loom send` through the deployed event route: an expense approval waiting for its answer gets it."""

from __future__ import annotations

import json

from loom_cli.main import main


def cli(capsys, *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_loom_send_delivers_an_event_to_a_waiting_execution(loom, capsys):
    # given: an expense waiting (costing nothing) for its approval
    token, eid = loom.new_token("send")
    loom.start("expense_approval", {"expense_id": "x-1", "amount_cents": 2500}, token)
    waiting = loom.wait(eid, until=("WAITING",))
    assert waiting["waiting_for"]["event"] == "approved"
    # when
    code, out, err = cli(capsys, "--url", loom.url, "send", eid, "approved", "--data",
                         '{"approved": true, "approver": "ana"}', "--event-id", "mail-1")
    # then: delivered, and the execution resumes with the data in its context (under the wait step's name,
    # or, as engines before issue 21 put it, merged at the top)
    assert code == 0, err
    assert out.strip() == f"{eid}  event approved  delivered  (event id mail-1)"
    done = loom.wait(eid)
    assert done["status"] == "COMPLETED", done
    event = done["context"].get("wait_approved") or done["context"]
    assert (done["context"]["decision"], done["context"]["paid_cents"], event["approver"]) == ("paid", 2500, "ana")
    code, out, _ = cli(capsys, "--url", loom.url, "--json", "history", eid)
    events = json.loads(out)["events"]
    assert [(e["event"], e["event_id"], e["consumed_by_step"]) for e in events] == [("approved", "mail-1", 1)]
    # an ended execution refuses another event, with the API's code and exit status 3
    code, _, err = cli(capsys, "--url", loom.url, "--json", "send", eid, "approved", "--event-id", "mail-2")
    assert code == 3 and json.loads(err)["error"] == "execution_ended"
    code, _, err = cli(capsys, "--url", loom.url, "send", "6f1c2b1e-0000-4000-8000-000000000001", "approved")
    assert code == 3 and "execution_not_found" in err
