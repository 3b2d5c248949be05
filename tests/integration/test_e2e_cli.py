"""The loom CLI against the local runtime's Function URL: start, watch to the end, inspect, errors."""

from __future__ import annotations

import json

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
