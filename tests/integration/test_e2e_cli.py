"""The loom CLI against the local runtime's Function URL: start, watch to the end, inspect, errors."""

from __future__ import annotations

import json
import re

from loom_cli.main import main


def test_the_cli_starts_watches_and_inspects_an_execution(loom, capsys):
    # given
    token, eid = loom.new_token("cli")
    order = json.dumps({"order_id": "o-cli", "amount_cents": 500, "items": [{"sku": "mug", "qty": 1}]})
    # when: started and watched to the end through the URL, unsigned (loopback)
    code = main(["--url", loom.url, "start", "order_fulfillment", "--input", order, "--token", token, "--watch"])
    out = capsys.readouterr().out
    # then
    assert code == 0, out
    assert out.splitlines()[0] == f"{eid}  order_fulfillment  RUNNING  started"
    assert "sleeping" in out and "COMPLETED" in out and "notify_customer" in out
    assert main(["--url", loom.url, "--json", "history", eid]) == 0
    history = json.loads(capsys.readouterr().out)
    assert [s["status"] for s in history["steps"]] == ["SUCCEEDED"] * 5
    assert main(["--url", loom.url, "workflows"]) == 0
    assert "order_fulfillment" in capsys.readouterr().out
    # and an API error keeps its code, with exit status 3
    assert main(["--url", loom.url, "status", "not-an-id"]) == 3
    assert "execution_not_found" in capsys.readouterr().err


def test_the_cli_watch_exits_1_for_a_failed_execution(loom, capsys):
    token, eid = loom.new_token("cli-poison")
    code = main(["--url", loom.url, "start", "poison_pill", "--token", token, "--watch"])
    out = capsys.readouterr().out
    assert code == 1, out
    assert "FAILED" in out


def _progress(out: str) -> list[str]:
    return [line for line in out.splitlines() if line.split(" ")[0] in (
        "RUNNING", "SLEEPING", "WAITING", "COMPLETED", "FAILED", "CANCELLED", "COMPENSATION_FAILED")]


def test_the_cli_follows_a_map_to_its_end_and_lists_each_branch(loom, capsys):
    # given / when: a map over 12 images, every 5th failing its first attempt, started and watched
    token, eid = loom.new_token("cli-map")
    code = main(["--url", loom.url, "start", "batch_resize", "--input", '{"count": 12, "flaky_every": 5}',
                 "--token", token, "--watch"])
    out = capsys.readouterr().out
    # then: it ends COMPLETED (no KeyError on the branches' records), each branch in the history
    assert code == 0, out
    assert _progress(out)[-1].startswith("COMPLETED")
    assert re.search(r"^1\s+resize_images\s+fanout\s+SUCCEEDED\s+15\s.*12 branches: 12 done; 15 attempts "
                     r"\(3 retried\)", out, re.M), out
    assert all(f"resize_images[{b}]" in out for b in range(12))
    assert main(["--url", loom.url, "status", eid]) == 0 and "COMPLETED" in capsys.readouterr().out


def test_the_cli_shows_a_compensated_saga_and_a_waiting_approval(loom, capsys):
    # given: a saga whose carrier refuses the order after the charge, woken out of its pickup wait
    token, eid = loom.new_token("cli-saga")
    order = {"order_id": "o-cli-saga", "amount_cents": 700, "items": [{"sku": "undeliverable", "qty": 1}]}
    loom.start("order_saga", order, token)
    loom.wait(eid, until=("SLEEPING",))
    assert main(["--url", loom.url, "wake", eid]) == 0
    # when: watched to its end
    code = main(["--url", loom.url, "watch", eid, "--interval", "0.2"])
    out = capsys.readouterr().out
    # then: exit 1, each line once, the refund as a compensation row under its step
    lines = _progress(out)
    assert code == 1 and len(lines) == len(set(lines)), out
    assert lines[-1].startswith("FAILED") and lines[-1].endswith("(compensated)"), out
    assert re.search(r"^1\s+charge_payment\s+compensation\s+SUCCEEDED\s.*refunded_cents", out, re.M), out
    # given: an approval waiting for its answer
    token, waiting = loom.new_token("cli-wait")
    loom.start("expense_approval", {"expense_id": "x-cli", "amount_cents": 300}, token)
    loom.wait(waiting, until=("WAITING",))
    assert main(["--url", loom.url, "status", waiting]) == 0
    status = capsys.readouterr().out
    assert re.search(r"^waiting for\s+event approved \(times out ", status, re.M), status
    code = main(["--url", loom.url, "send", waiting, "approved", "--data", '{"approved": true}', "--event-id", "c-1"])
    assert code == 0 and "delivered" in capsys.readouterr().out
    assert loom.wait(waiting)["status"] == "COMPLETED"
    assert main(["--url", loom.url, "history", waiting]) == 0
    assert re.search(r"^1\s+approval\s+event\s+SUCCEEDED", capsys.readouterr().out, re.M)
