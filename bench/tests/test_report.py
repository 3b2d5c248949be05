"""The report's conclusions follow the data: altered results change the words.

``fixtures/results.json`` is one bench run's ``bench/.results/`` (every section, `--quick`); each test
changes a figure the way a regression would and reads what the rendered report says about it.
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import pytest

from bench import report
from bench.report import findings

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "results.json"


@pytest.fixture
def results() -> dict[str, Any]:
    return copy.deepcopy(json.loads(FIXTURE.read_text()))


def _against(text: str, target: str) -> str:
    """The bold "Against the target (...): ..." sentence of one target."""
    (match,) = re.findall(rf"\*\*Against the target \({re.escape(target)}[^)]*\): ([^*]*)\*\*", text)
    return match


def _target_rows(text: str, start: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith(f"| {start}")]


def _per_step(results: dict[str, Any], label: str = "1 KB") -> dict[str, Any]:
    return results["steps"]["sizes"][label]["per_step"]


def test_render_when_every_target_is_met_says_met_everywhere(results: dict[str, Any]) -> None:
    # given: the measured run, with the handlers' imports made to fit the budget
    for r in results["coldstart"]["venv"].values():
        r["import_ms"] = 200.0

    # when
    text = report.render(results)

    # then
    targets = text.split("## Targets", 1)[1].split("\n## ", 1)[0]
    assert "**missed**" not in targets
    assert _against(text, "at most 2 requests per step").startswith("met")
    assert _against(text, "at most 3 write units per step").startswith("met")
    assert _against(text, "under $2 per million steps").startswith("met")
    assert _against(text, "reads proportional to due work").startswith("met")
    assert _against(text, "handler import under 300 ms").startswith("met by every handler")
    assert "What would cut it" not in text


def test_render_when_a_step_makes_more_requests_says_missed(results: dict[str, Any]) -> None:
    # given: a step that makes a third PutItem
    p = _per_step(results)
    p["requests"]["dynamodb:PutItem"] += 1
    p["aws_requests"] += 1

    # when
    text = report.render(results)

    # then
    (row,) = _target_rows(text, "At most 2 AWS requests per step (1 KB")
    assert row.endswith("**missed** |")
    assert _against(text, "at most 2 requests per step").startswith("missed")
    assert "makes 3 PutItem" in text


def test_render_when_write_units_exceed_the_target_says_missed(results: dict[str, Any]) -> None:
    # given
    p = _per_step(results)
    p["write_units"], p["wcu_table"] = 5.0, 5.0

    # when
    text = report.render(results)

    # then
    (row,) = _target_rows(text, "At most 3 write units per step (1 KB")
    assert row.endswith("**missed** |")
    assert _against(text, "at most 3 write units per step").startswith("missed")
    (versus,) = _target_rows(text, "write units, table + index (1 KB)")
    assert versus.endswith("**missed** |")
    assert "misses" in text.split("## The step path v2 against v1", 1)[1].split("\n## ", 1)[0]


def test_render_when_sweeper_reads_grow_with_table_size_says_missed(results: dict[str, Any]) -> None:
    # given: the biggest table makes the tick read every sleeping execution
    biggest = max(results["sweep"]["by_table_size"], key=lambda r: r["sleeping"])
    biggest["index_items_read"] = biggest["sleeping"] + biggest["due"]

    # when
    text = report.render(results)

    # then
    assert not findings.sweep(results["sweep"]).ok
    assert _against(text, "reads proportional to due work").startswith("missed")
    assert "**change with the table's size**" in text
    assert "Only live executions carry GSI1 keys" not in text  # the explanation of a met target


def test_render_when_one_handler_imports_slowly_names_it(results: dict[str, Any]) -> None:
    # given
    venv = results["coldstart"]["venv"]
    for r in venv.values():
        r["import_ms"] = 200.0
    venv["worker"]["import_ms"] = 450.0

    # when
    text = report.render(results)

    # then
    assert _against(text, "handler import under 300 ms").startswith("missed by worker")
    assert "What would cut it" in text


def test_render_when_a_step_costs_more_than_a_peer_says_more(results: dict[str, Any]) -> None:
    # given: 20 write units per 1 KB step ($12.50 per million, above the cheapest peer's $8)
    p = _per_step(results)
    p["write_units"], p["wcu_table"] = 20.0, 20.0

    # when
    text = report.render(results)

    # then
    assert _against(text, "under $2 per million steps").startswith("missed, $12.50")
    assert "A Loom step costs 1.6x more than one on the cheapest peer above" in text


def test_render_when_idle_polls_decide_the_free_tier_says_so(results: dict[str, Any]) -> None:
    # given: a step with its own SQS request and invocation, and almost no write units
    p = _per_step(results)
    p["sqs_billed"], p["requests"]["lambda:Invoke"], p["write_units"] = 1.0, 1.0, 0.01

    # when
    text = report.render(results)

    # then
    assert "SQS requests binds because of the idle long polls" in text
    assert "steps/month (Lambda requests)" in text


def test_render_when_the_deployed_functions_differ_from_the_prediction_says_differs(results: dict[str, Any]) -> None:
    # given
    happy = findings.happy_run(results["local"])
    happy["requests"]["dynamodb:GetItem"] = happy["requests"].get("dynamodb:GetItem", 0) + 1

    # when
    text = report.render(results)

    # then
    assert "**differs** from the in-process prediction" in text


def test_render_with_the_measured_run_keeps_verdicts_consistent(results: dict[str, Any]) -> None:
    # when
    text = report.render(results)

    # then: each section's sentence agrees with its rows in the Targets table
    steps = results["steps"]
    for target, checks in (("at most 2 requests per step", findings.request_checks(steps)),
                           ("at most 3 write units per step", findings.write_unit_checks(steps))):
        assert _against(text, target).startswith("met" if findings.all_met(checks) else "missed")
    assert _against(text, "under $2 per million steps").startswith("met" if findings.usd_check(steps).ok else "missed")


def test_render_with_only_the_steps_section_renders() -> None:
    # given
    steps = json.loads(FIXTURE.read_text())["steps"]

    # when
    text = report.render({"steps": steps})

    # then
    assert "## Requests per step, by AWS API" in text
    assert "## Sweeper cost" not in text
