"""An execution's cost ledger through the deployed functions: counted by the worker on moto's DynamoDB,
stored on the execution item, shown by ``GET /executions/{id}`` and summed by ``loom cost``."""

from __future__ import annotations

import json

from loom_cli.main import main


def test_a_completed_execution_carries_a_ledger_consistent_with_its_steps(loom, capsys):
    # given: a two-step greeting that fails nothing, run to the end by the deployed worker
    token, eid = loom.new_token("cost")
    loom.start("flaky_greeting", {"name": "cost", "failures": 0}, token)
    e = loom.wait(eid)
    assert e["status"] == "COMPLETED", e
    steps = len(loom.history(eid))
    cost = e["cost"]
    # then: each delivery read once and each step wrote its record and committed (the first claim too),
    # on DynamoDB's own reported units; at least the start's message delivered it; the worker took time
    assert steps == 2
    least = cost["messages"] + 1 + 2 * steps
    assert cost["messages"] >= 1
    assert least <= cost["requests"] <= least + 3 * cost["messages"], cost
    assert cost["write_units"] >= 1 + 2 * steps and cost["read_units"] > 0, cost
    assert cost["lambda_ms"] > 0
    # and: the API shows what the item holds
    item = loom.meta_item(eid)
    assert int(item["cost_req"]["N"]) == cost["requests"] and int(item["cost_msg"]["N"]) == cost["messages"]

    # when: loom cost sums the workflow's recent executions
    assert main(["--url", loom.url, "--no-sign", "--json", "cost", "--workflow", "flaky_greeting", "--since", "1h"]) == 0
    summed = json.loads(capsys.readouterr().out)["workflows"]["flaky_greeting"]
    # then: this execution is in the sum, priced
    assert summed["requests"] >= cost["requests"] and summed["messages"] >= cost["messages"]
    assert summed["usd"] > 0
