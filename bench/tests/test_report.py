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
from bench.report import coldstart_findings, findings

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
    assert "What is left over the floor" in text


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


def _over_floor(results: dict[str, Any], **over_ms: float) -> None:
    for function, r in results["coldstart"]["venv"].items():
        r["floor_ms"], r["clients"] = 280.0, ["dynamodb", "sqs"]
        r["over_floor_ms"] = over_ms.get(function.replace("-", "_"), 60.0)


def test_render_when_every_handler_is_within_100_ms_of_the_floor_says_met(results: dict[str, Any]) -> None:
    # given: each handler 60 ms over the floor measured beside it
    _over_floor(results)

    # when
    text = report.render(results)

    # then
    assert _against(text, "handler import within 100 ms of the floor").startswith("met by every handler")
    assert "(over the floor: worker +60 ms, sweeper +60 ms and control-plane +60 ms)" in text
    rows = _target_rows(text, "Handler import within 100 ms of the floor")
    assert len(rows) == 3 and all(row.endswith("| +60 ms | **met** |") for row in rows)


def test_render_when_one_handler_is_far_over_the_floor_names_it_and_the_before_after_follows(
        results: dict[str, Any]) -> None:
    # given: the worker 180 ms over its floor, the others within
    _over_floor(results, worker=180.0)

    # when
    text = report.render(results)

    # then
    assert _against(text, "handler import within 100 ms of the floor").startswith("missed by worker")
    assert "| Handler import within 100 ms of the floor, boto3 and its clients (worker, dev venv) | +180 ms | **missed** |" in text
    before = coldstart_findings.coldstart_before()
    assert before is not None  # bench/baseline/coldstart-before-issue15.json is committed
    b = before["venv"]["worker"]["import_ms"]
    assert f"| worker | {b:.0f} ms | {results['coldstart']['venv']['worker']['import_ms']:.0f} ms |" in text


def test_render_without_a_floor_per_handler_states_no_floor_verdict(results: dict[str, Any]) -> None:
    # given: a run from before the floor was measured per handler (the fixture's)
    # when
    text = report.render(results)

    # then
    assert "within 100 ms of the floor" not in text


def _fanout_case(results: dict[str, Any], branches: int, concurrency: int, **per: float) -> dict[str, Any]:
    case = copy.deepcopy(results["fanout"]["cases"][0])
    case["branches"], case["max_concurrency"] = branches, concurrency
    case["per_branch"].update(per)
    return case


def test_render_fanout_when_a_branch_costs_the_same_at_every_size_says_it_stays(results: dict[str, Any]) -> None:
    # given: 1,000 branches at 50, the same per-branch figures as 100 at 10
    results["fanout"]["cases"].append(_fanout_case(results, 1000, 50))

    # when
    text = report.render(results)

    # then
    section = text.split("## Fan-out: what a branch of a map step costs", 1)[1].split("\n## ", 1)[0]
    assert "| 100, 10 | COMPLETED | 6.10 (6.10 + 0) | 3.08 | 1 | 1 |" in section
    assert "| 1,000, 50 | COMPLETED |" in section
    assert ("**The cost of a branch against the map's size: per branch, write units (6.10), read units (3.08), "
            "SQS messages (1) and join-item writes (1) stay the same from 100 to 1,000 branches; every map "
            "completed with no error on the wire.**") in section


def test_render_fanout_when_reads_grow_with_the_map_says_they_grow(results: dict[str, Any]) -> None:
    # given: at 1,000 branches each branch reads 12 units (a fan-in query that reads every branch each time)
    results["fanout"]["cases"].append(_fanout_case(results, 1000, 50, rcu=12.0))

    # when
    text = report.render(results)

    # then
    assert "read units per branch grow from 3.08 at 100 branches to 12 at 1,000" in text
    assert "read units (3.08)" not in text
    assert "write units (6.10)" in text


def test_render_fanout_when_a_map_fails_says_so(results: dict[str, Any]) -> None:
    # given
    results["fanout"]["cases"][0]["execution"]["status"] = "FAILED"

    # when
    text = report.render(results)

    # then
    assert "**A map did not complete cleanly (see its row).**" in text
    assert "every map completed" not in text.lower()


def _zip_run(over: dict[str, float], where: str = "dist/lambda", python: str = "3.12.1") -> dict[str, Any]:
    functions = {}
    for function, over_ms in over.items():
        functions[function] = {
            "zip": f"{where}/{function}.zip", "pycs": 512, "ok": True, "module": f"loom_{function}.handler",
            "import_ms": 300.0 + over_ms, "import_ms_min": 290.0 + over_ms, "import_ms_runs": [300.0 + over_ms],
            "by_package_ms": [["engine_core", 40.0]], "process_wall_ms": 420.0 + over_ms,
            "clients": ["dynamodb", "sqs"], "floor_ms": 300.0, "floor_ms_runs": [300.0], "over_floor_ms": over_ms,
            "sources_only_ms": 600.0 + over_ms, "sources_only_over_floor_ms": 300.0 + over_ms}
    return {"key": f"{where} (python {python})", "dir": where, "python_version": python, "functions": functions}


def test_render_when_the_zips_were_measured_shows_each_init_beside_its_floor_and_names_the_one_over(
        results: dict[str, Any]) -> None:
    # given: the Lambda zips imported on a 3.12, the sweeper 150 ms over its floor, the others within
    results["coldstart"]["zip_runs"] = [_zip_run({"worker": 80.0, "sweeper": 150.0, "control-plane": 90.0})]
    results["coldstart"]["python312"] = "3.12.1"

    # when
    text = report.render(results)

    # then: one row per handler with its init, floor and the same zip's sources-only figure
    assert ("| worker | `dist/lambda/worker.zip` (512 pyc) | 3.12.1 | 380 ms (370) | 300 ms (dynamodb, sqs) | +80 ms | "
            "680 ms (+380 ms) |") in text
    assert _against(text, "each handler's init within 100 ms of the floor").startswith(
        "missed by sweeper, dist/lambda on Python 3.12.1")
    rows = _target_rows(text, "Handler init within 100 ms of the floor")
    assert len(rows) == 3
    assert [r.endswith("**missed** |") for r in rows] == [False, True, False]
    assert "the zips' bytecode saves 300 ms per init on average" in text


def test_render_when_the_libraries_were_measured_splits_each_init_over_the_floor(results: dict[str, Any]) -> None:
    # given: the worker 150 ms over its floor, 90 of them the libraries it imports; the sweeper's libraries
    # not measured (an older result)
    run = _zip_run({"worker": 150.0, "sweeper": 120.0})
    run["functions"]["worker"].update(libraries_ms=390.0, libraries_over_floor_ms=90.0, own_ms=60.0)
    results["coldstart"]["zip_runs"] = [run]
    results["coldstart"]["python312"] = "3.12.1"

    # when
    text = report.render(results)

    # then: the worker's row splits its 150 ms and says what the libraries leave of the 100 ms; no sweeper row
    assert "| worker | `dist/lambda/worker.zip` | 3.12.1 | +150 ms | +90 ms | +60 ms | +10 ms |" in text
    split = text[text.index("Where the time over the floor goes"):]
    split = split[:split.index("\n\n", split.index("| Function |"))]
    assert "| sweeper |" not in split


def test_render_when_every_zip_init_is_within_100_ms_of_its_floor_says_met(results: dict[str, Any]) -> None:
    # given: no 3.12 here, so the local zips on this machine's Python
    results["coldstart"]["zip_runs"] = [_zip_run({"worker": 60.0, "sweeper": 70.0, "control-plane": 99.0},
                                                 "dist/local", "3.11.7")]

    # when
    text = report.render(results)

    # then
    assert _against(text, "each handler's init within 100 ms of the floor").startswith("met by every handler")
    assert "no CPython 3.12 was found here, so the `dist/lambda` zips were not imported" in text
    assert "| Handler init within 100 ms of the floor, boto3 and its clients, in the zip as Lambda loads it " \
           "(control-plane, dist/local on Python 3.11.7) | +99 ms | **met** |" in text


def test_instructions_per_step_show_beside_the_count_before_and_the_change(results: dict[str, Any]) -> None:
    # given: counted instructions, one size halved against the baseline and one not counted
    before = findings.instructions_before()["per_step"]
    results["overhead"]["instructions"] = {"status": "measured", "tool": "valgrind --tool=callgrind", "steps": 1000,
                                           "layouts": 3, "per_step": {"100": before["100"] / 2, "10240": None},
                                           "range": {"100": [before["100"] / 2 - 5000, before["100"] / 2 + 7000],
                                                     "10240": None}}
    # when
    text = report.render(results)
    # then: the mean beside the count before, the change, and the layouts' lowest and highest
    (row_100,) = _target_rows(text, "100 B | " + f"{before['100']:,.0f}")
    assert f"| -50.0% | {before['100'] / 2 - 5000:,.0f} to {before['100'] / 2 + 7000:,.0f} |" in row_100
    assert f"{before['100'] / 2:,.0f}" in row_100
    (row_10k,) = _target_rows(text, "10,240 B | " + f"{before['10240']:,.0f}")
    assert row_10k.endswith("| - | - | - |")
    assert "mean over 3 memory layouts" in text


def test_instructions_not_counted_say_why(results: dict[str, Any]) -> None:
    results["overhead"]["instructions"] = {"status": "not measured: valgrind is not installed"}
    assert "Instructions per step: not measured: valgrind is not installed." in report.render(results)


def test_instructions_without_valgrind_are_not_measured_rather_than_zero(monkeypatch) -> None:
    from bench import code, instructions, overhead

    monkeypatch.setattr(instructions.shutil, "which", lambda name: None)
    assert overhead.instructions_per_step([100]) == {"status": "not measured: valgrind is not installed"}
    assert code.instructions_per_step([(10, 10)]) == {"status": "not measured: valgrind is not installed"}


def test_render_states_whether_code_first_is_within_ten_percent_of_the_step_list(results: dict[str, Any]) -> None:
    # given: a bench run's code-first section (every figure within 10% of the step list's)
    results["code"] = json.loads((FIXTURE.parent / "code.json").read_text())

    # when
    text = report.render(results)

    # then
    (row,) = _target_rows(text, "Code-first per step within 10% of the step list")
    assert row.endswith("**met** |") and "requests 1.00x, write units 1.00x, CPU " in row

    # given: a code-first step 20% slower than the step list's in one case
    cpu = results["code"]["cpu"][0]
    cpu["code_us_per_step"] = cpu["steps_us_per_step"] * 1.2

    # when
    (row,) = _target_rows(report.render(results), "Code-first per step within 10% of the step list")

    # then
    assert row.endswith("**missed** |") and "1.20x" in row


def test_a_section_run_alone_on_a_fresh_checkout_leaves_the_committed_report_and_writes_its_own_beside_it(
        tmp_path, monkeypatch):
    # given: cached results for every section but one (a section run alone where the others never ran)
    import bench.__main__ as bench_main

    fixture = json.loads(FIXTURE.read_text())
    sections = [name for name in fixture if name != "meta"]
    cache, doc = tmp_path / ".results", tmp_path / "docs" / "benchmarks.md"
    monkeypatch.setattr(bench_main, "SECTIONS", sections)
    monkeypatch.setattr(bench_main, "CACHE", cache)
    monkeypatch.setattr(report, "ROOT", tmp_path)
    monkeypatch.setattr(report, "DOC", doc)
    monkeypatch.setattr(report, "CHARTS", tmp_path / "docs" / "bench")
    cache.mkdir()
    doc.parent.mkdir()
    doc.write_text("the committed report\n")
    for name in sections[:-1]:
        (cache / f"{name}.json").write_text(json.dumps(fixture[name]))

    # when / then: the committed report stays (before: rewritten without the missing section), and this run's
    # report is written beside the cached results
    assert bench_main.main(["--report-only"]) == 0
    assert doc.read_text() == "the committed report\n"
    assert "# Benchmarks" in (cache / "benchmarks.partial.md").read_text()
    # and with every section's results, the report is written
    (cache / f"{sections[-1]}.json").write_text(json.dumps(fixture[sections[-1]]))
    assert bench_main.main(["--report-only"]) == 0
    assert doc.read_text().startswith("# Benchmarks")
