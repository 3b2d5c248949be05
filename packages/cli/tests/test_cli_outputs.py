"""Every output path of the CLI (status, history, watch, list, and start --watch) on the executions that
broke it: a map, a parallel, a compensated saga, a waiting approval, a sleep and a failed compensation,
as the API really answers them (documents/*.json, captured by capture_documents.py)."""

from __future__ import annotations

import copy
import json
import re
import subprocess
import sys

import pytest
from fake_control_plane import SCENARIOS, execution_doc, scenario

from loom_cli.main import main
from loom_cli.watch import progress_line

SHAPES = ("map", "parallel", "compensated", "waiting")


def run(capsys, *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("name", SCENARIOS)
def test_history_of_each_kind_of_execution_prints_every_record_with_its_kind(control_plane, capsys, name):
    eid = control_plane.play(name)
    # when
    code, out, err = run(capsys, "--url", control_plane.url, "history", eid)
    # then: one row per record (a branch is not missing a name: it is its step's, numbered), and a kind column
    assert code == 0, err
    header = out.splitlines()[0].split()
    assert header[:4] == ["#", "step", "kind", "status"]
    records = scenario(name)["sequence"][-1]["history"]["steps"]
    rows = [line for line in out.splitlines()[2:] if re.match(r"\d+\s", line)]
    assert len(rows) == len(records), out


def test_history_of_a_map_names_each_branch_and_counts_its_attempts(control_plane, capsys):
    eid = control_plane.play("map")
    code, out, _ = run(capsys, "--url", control_plane.url, "history", eid)
    assert code == 0
    assert re.search(r"^1\s+resize_images\s+fanout\s+SUCCEEDED\s+6\s.*4 branches: 4 done; 6 attempts \(2 retried\)",
                     out, re.M), out
    for branch in range(4):
        assert re.search(rf"^1\s+resize_images\[{branch}\]\s+branch\s+SUCCEEDED\s+[12]\s", out, re.M), out


def test_history_of_a_parallel_names_each_branch(control_plane, capsys):
    eid = control_plane.play("parallel")
    code, out, _ = run(capsys, "--url", control_plane.url, "history", eid)
    assert code == 0
    assert re.search(r"^1\s+checks\[0\]\s+branch\s+SUCCEEDED\s+2\s.*\sclean$", out, re.M), out
    assert re.search(r"^1\s+checks\[1\]\s+branch\s+SUCCEEDED\s+1\s.*\sin stock$", out, re.M), out
    assert "2 branches: 2 done; 3 attempts (1 retried)" in out


def test_history_of_a_compensated_saga_shows_the_undo_as_a_compensation_row(control_plane, capsys):
    eid = control_plane.play("compensated")
    code, out, _ = run(capsys, "--url", control_plane.url, "history", eid)
    assert code == 0
    assert re.search(r"^1\s+charge_payment\s+task\s+SUCCEEDED\s.*charge_id", out, re.M), out
    assert re.search(r"^1\s+charge_payment\s+compensation\s+SUCCEEDED\s.*refunded_cents", out, re.M), out
    assert re.search(r"^2\s+wait_for_carrier_pickup\s+sleep\s+SUCCEEDED", out, re.M), out
    assert re.search(r"^3\s+ship_order\s+task\s+FAILED\s.*permanent_error: the carrier refuses", out, re.M), out


def test_history_of_an_approval_shows_the_event_it_consumed(control_plane, capsys):
    eid = control_plane.play("waiting")
    code, out, _ = run(capsys, "--url", control_plane.url, "history", eid)
    assert code == 0
    assert re.search(r"^1\s+approval\s+event\s+SUCCEEDED", out, re.M), out  # the wait step, named "approval"
    assert re.search(r"approved\s+mail-7\s.*\s+step 1\s", out), out


@pytest.mark.parametrize("name", SCENARIOS)
def test_status_of_each_kind_of_execution_at_each_moment_prints_its_table(control_plane, capsys, name):
    for at in range(len(scenario(name)["sequence"])):
        eid = control_plane.play(name, at=at)
        code, out, err = run(capsys, "--url", control_plane.url, "status", eid)
        doc = scenario(name)["sequence"][at]["execution"]
        assert code == 0, err
        assert re.search(rf"^status\s+{doc['status']}$", out, re.M), out
        if doc["status"] == "WAITING":
            assert re.search(r"^waiting for\s+event approved \(times out 2026-01-02T", out, re.M), out
        if doc.get("fanout"):
            assert re.search(r"^branches\s+\d+/\d+ done, at most \d+ at once$", out, re.M), out
        if doc["compensating"]:
            assert re.search(r"^compensation\s+running$", out, re.M), out


def test_status_prints_the_whole_error_with_its_fix_hint(control_plane, capsys):
    # given: an error whose fix is at the end of a long message (the API writes them that way)
    message = ("value at $.rows[1042].amount cannot be stored: Decimal('NaN') is not a number the ledger takes; "
               "fix the feed's row 1042 (or drop it), then redrive this execution with `loom redrive`")
    control_plane.add(execution_doc("f-1", status="FAILED", step=2, error={
        "code": "permanent_error", "message": message, "type": "PermanentStepError", "step_index": 2,
        "step_name": "wait_for_carrier_pickup", "retryable": False}))
    # when
    code, out, _ = run(capsys, "--url", control_plane.url, "status", "f-1")
    # then
    assert code == 0 and f"permanent_error: {message}" in out


def test_status_says_whether_a_cancel_is_requested_or_done(control_plane, capsys):
    # given: a FAILED execution whose cancel is still requested (its version was gone when it took effect),
    # and a cancelled one
    control_plane.add(execution_doc("r-1", status="FAILED", step=1, cancelled_by="oncall", cancel_requested=True))
    control_plane.add(execution_doc("c-1", status="CANCELLED", step=1, cancelled_by="oncall"))
    # when / then: each says which it is
    _, requested, _ = run(capsys, "--url", control_plane.url, "status", "r-1")
    _, cancelled, _ = run(capsys, "--url", control_plane.url, "status", "c-1")
    assert "cancel requested by" in requested and "oncall" in requested
    assert "cancelled by" in cancelled and "cancel requested by" not in cancelled


def test_status_of_a_cancel_being_undone_says_where_it_was_cancelled_not_that_a_step_failed(control_plane, capsys):
    # given: a cancel undoing steps 1 and 0 (it was cancelled at step 2), and a failure undoing them
    control_plane.add(execution_doc("u-1", status="RUNNING", step=1, compensating=True, failed_step=2,
                                    cancelled_by="oncall", cancel_reason="customer left"))
    control_plane.add(execution_doc("u-2", status="RUNNING", step=1, compensating=True, failed_step=2, error={
        "code": "permanent_error", "message": "no stock", "retryable": False, "step_index": 2}))
    # when
    _, cancelled, _ = run(capsys, "--url", control_plane.url, "status", "u-1")
    _, failed, _ = run(capsys, "--url", control_plane.url, "status", "u-2")
    # then
    assert re.search(r"^cancelled at step\s+2$", cancelled, re.M) and "failed step" not in cancelled, cancelled
    assert re.search(r"^failed step\s+2$", failed, re.M) and "cancelled at step" not in failed, failed


def test_status_of_an_undo_a_deploy_stopped_names_the_failure_it_was_undoing(control_plane, capsys):
    # given: a failure's undo met a removed version: FAILED, still compensating, the failure kept aside
    control_plane.add(execution_doc("s-1", status="FAILED", step=0, compensating=True, failed_step=1, error={
        "code": "workflow_version_missing", "message": "version 1 is not deployed", "retryable": False},
        compensating_for={"code": "permanent_error", "message": "address rejected", "retryable": False}))
    # when
    _, out, _ = run(capsys, "--url", control_plane.url, "status", "s-1")
    # then: both, and what a redrive does
    assert re.search(r"^error\s+workflow_version_missing: version 1 is not deployed$", out, re.M), out
    assert re.search(r"^undoing after\s+permanent_error: address rejected \(a redrive goes on undoing", out, re.M), out
    # and: its undo is not called running, in status or in watch
    assert re.search(r"^compensation\s+stopped at this step's undo \(the error says why\): a redrive goes on undoing$",
                     out, re.M) and "running" not in out, out
    line = progress_line(control_plane.executions["s-1"])
    assert line.endswith("version 1 is not deployed; its undo stopped here, a redrive goes on undoing (it was undoing "
                         "after permanent_error: address rejected)") and "compensating after" not in line, line


def test_status_of_a_failed_compensation_prints_both_errors_in_full(control_plane, capsys):
    eid = control_plane.play("compensation_failed")
    code, out, _ = run(capsys, "--url", control_plane.url, "status", eid)
    assert code == 0
    assert "permanent_error: the carrier refuses this address" in out
    assert re.search(r"^compensation error\s+permanent_error: compensation of step 'charge' failed: the refund API "
                     r"refused: charge ch-1 is disputed$", out, re.M), out


@pytest.mark.parametrize("sleep_step_is_current", [False, True])
def test_status_of_a_sleeping_execution_names_the_sleep_step(control_plane, capsys, sleep_step_is_current):
    # given: asleep in wait_for_carrier_pickup (index 2): the engine points current_step at the step after
    # it today, and at the sleep itself once issue 21's engine side lands; either reads the same
    eid = control_plane.play("sleeping", at=1)
    if sleep_step_is_current:
        control_plane.update(eid, current_step=2, current_step_name="wait_for_carrier_pickup")
    code, out, _ = run(capsys, "--url", control_plane.url, "status", eid)
    assert code == 0
    assert re.search(r"^current step\s+2/5 wait_for_carrier_pickup$", out, re.M), out


def _watch_lines(out: str) -> list[str]:
    return [line for line in out.splitlines() if line.split(" ")[0] in (
        "RUNNING", "SLEEPING", "WAITING", "COMPLETED", "FAILED", "CANCELLED", "COMPENSATION_FAILED")]


@pytest.mark.parametrize("name, code", [("map", 0), ("parallel", 0), ("compensated", 1), ("waiting", 0),
                                        ("sleeping", 0), ("compensation_failed", 1)])
def test_watch_of_each_kind_of_execution_follows_it_to_the_end_and_prints_its_history(control_plane, capsys,
                                                                                     name, code):
    eid = control_plane.play(name, at=None)
    exit_code, out, err = run(capsys, "--url", control_plane.url, "watch", eid, "--interval", "0.001")
    assert exit_code == code, err
    lines = _watch_lines(out)
    assert len(lines) == len(set(lines)), out  # no line twice
    assert lines[-1].startswith(scenario(name)["sequence"][-1]["execution"]["status"])
    assert "#  step" in out and "kind" in out  # then the history table


def test_watch_of_a_map_shows_the_branches_done_and_ends_with_attempts_not_attempts_so_far(control_plane, capsys):
    eid = control_plane.play("map", at=None)
    code, out, _ = run(capsys, "--url", control_plane.url, "watch", eid, "--interval", "0.001")
    lines = _watch_lines(out)
    assert code == 0
    assert "RUNNING   step 1/3 resize_images  attempts so far: 1  branches done: 2/4" in lines
    # the execution's 2 attempts are its task steps': the line says the branches' are not among them
    assert lines[-1] == "COMPLETED step 3/3 (done)  attempts: 2 (not counting map or parallel branches: loom history " \
                        "shows theirs)"
    assert "resize_images[3]" in out


def test_watch_of_a_sleep_names_the_sleep_step(control_plane, capsys):
    eid = control_plane.play("sleeping", at=None)
    code, out, _ = run(capsys, "--url", control_plane.url, "watch", eid, "--interval", "0.001")
    assert code == 0
    assert any(line.startswith("SLEEPING  step 2/5 wait_for_carrier_pickup  sleeping, ") for line in _watch_lines(out))


def test_watch_of_a_compensation_prints_each_undo_once_with_the_failure_that_started_it(control_plane, capsys):
    # given: the saga compensating for several polls (its undo retried once), then compensated
    captured = scenario("compensated")["sequence"]
    compensating = next(m for m in captured if m["execution"]["compensating"])
    undo_failed = copy.deepcopy(compensating)
    undo_failed["history"]["steps"].append({
        "step_index": 1, "name": "charge_payment", "kind": "compensation", "status": "FAILED", "attempts": 1,
        "started_at": None, "finished_at": None, "result": None, "final": False,
        "error": {"code": "step_error", "message": "refund API timed out"}})
    moments = [compensating]
    for n in range(1, 5):  # each poll a new version, the same step being undone
        later = copy.deepcopy(undo_failed if n >= 2 else compensating)
        later["execution"].update(version=later["execution"]["version"] + n,
                                  total_attempts=later["execution"]["total_attempts"] + n,
                                  timer="retry" if n >= 2 else "lease")
        moments.append(later)
    eid = control_plane.play("compensated", at=0)
    control_plane.scripts[eid] = copy.deepcopy(captured[:2] + moments + captured[-1:])
    # when
    code, out, _ = run(capsys, "--url", control_plane.url, "watch", eid, "--interval", "0.001")
    # then
    lines = _watch_lines(out)
    assert code == 1
    why = ("compensating after ship_order failed (permanent_error: the carrier refuses sku 'undeliverable'; the "
           "charge is refunded): undoing charge_payment with refund_payment")
    assert lines.count(f"RUNNING   step 1/5 charge_payment  {why}") == 1, out
    assert lines.count(f"RUNNING   step 1/5 charge_payment  {why}; undo attempt 1 failed: step_error: refund API "
                       "timed out") == 1, out
    assert lines[-1].startswith("FAILED    step 3/5 ship_order  permanent_error: ") and lines[-1].endswith(
        "(compensated)")


def test_start_watch_of_a_map_follows_it_to_completed(control_plane, capsys):
    eid = control_plane.play("map", at=None)
    control_plane.starts["batch_resize"] = eid
    code, out, err = run(capsys, "--url", control_plane.url, "start", "batch_resize", "--input", '{"count": 4}',
                         "--watch")
    assert code == 0, err
    assert out.splitlines()[0] == f"{eid}  batch_resize  RUNNING  started"
    assert _watch_lines(out)[-1].startswith("COMPLETED") and "resize_images[0]" in out


def test_start_watch_json_prints_one_document_a_line_from_the_start(control_plane, capsys):
    eid = control_plane.play("map", at=None)
    control_plane.starts["batch_resize"] = eid
    code, out, err = run(capsys, "--url", control_plane.url, "--json", "start", "batch_resize", "--input",
                         '{"count": 4}', "--watch")
    assert code == 0, err
    docs = [json.loads(line) for line in out.splitlines()]  # NDJSON: every line a whole document
    assert docs[0]["execution_id"] == eid and docs[-1]["status"] == "COMPLETED" and len(docs) >= 3


@pytest.mark.parametrize("argv", [["list", "--limit", "0"], ["redrive", "e-1", "--to-version", "abc"], ["status"]],
                         ids=["bad-limit", "bad-version", "missing-argument"])
def test_usage_errors_under_json_are_one_json_object_on_stderr(capsys, argv):
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_:
        main(["--url", "http://127.0.0.1:9", "--json", *argv])
    out, err = capsys.readouterr()
    assert exit_.value.code == 2 and out == ""
    doc = json.loads(err)
    assert doc["error"] == "invalid_argument" and doc["message"].startswith("loom ")


def test_list_shows_each_executions_real_status_and_filters_by_it(control_plane, capsys):
    ids = {name: control_plane.play(name, at=1) for name in SHAPES}
    code, out, _ = run(capsys, "--url", control_plane.url, "list")
    assert code == 0
    for name, eid in ids.items():
        status = scenario(name)["sequence"][1]["execution"]["status"]
        assert re.search(rf"^{eid}\s+\S+\s+{status}\s", out, re.M), out
    code, out, _ = run(capsys, "--url", control_plane.url, "list", "--status", "waiting")
    assert code == 0 and ids["waiting"] in out and ids["map"] not in out
    assert control_plane.requests[-1]["path"] == "/executions?status=WAITING&limit=20"
    code, out, _ = run(capsys, "--url", control_plane.url, "--json", "list", "--status", "RUNNING")
    running = {eid for name, eid in ids.items() if scenario(name)["sequence"][1]["execution"]["status"] == "RUNNING"}
    assert running and {x["execution_id"] for x in json.loads(out)["executions"]} == running


def test_list_offers_more_only_when_there_is_more(control_plane, capsys):
    # given: one execution; the API hands out a token for any full page
    control_plane.add(execution_doc("only-one"))
    code, out, _ = run(capsys, "--url", control_plane.url, "list", "--limit", "1")
    assert code == 0 and "only-one" in out and "more" not in out, out
    code, out, _ = run(capsys, "--url", control_plane.url, "--json", "list", "--limit", "1")
    assert json.loads(out)["next_token"] is None
    # and with a second one, there is more
    control_plane.add(execution_doc("second", created_at="2026-01-02T00:00:00.000000Z"))
    code, out, _ = run(capsys, "--url", control_plane.url, "list", "--limit", "1")
    assert "second" in out and out.strip().endswith("more: add --all, or --next-token 2026-01-02T00:00:00.000000Z#second")


def test_status_json_into_a_closed_pipe_ends_quietly(control_plane):
    # given: a document larger than a pipe's buffer, read by `head`, which leaves after 10 bytes
    control_plane.add(execution_doc("big", context={"rows": ["x" * 100] * 3000}))
    loom = [sys.executable, "-m", "loom_cli.main", "--url", control_plane.url, "status", "big", "--json"]
    # when
    done = subprocess.run(f"{' '.join(loom)} | head -c 10 >/dev/null; echo \"loom=${{PIPESTATUS[0]}}\" >&2",
                          shell=True, executable="/bin/bash", capture_output=True, text=True, timeout=60)
    # then: no traceback, exit 0
    assert "Traceback" not in done.stderr and "BrokenPipeError" not in done.stderr, done.stderr
    assert "loom=0" in done.stderr


@pytest.mark.parametrize("command", ["console", "mcp"])
def test_help_of_console_and_mcp_offers_no_json_flag(capsys, command):
    with pytest.raises(SystemExit):
        main([command, "-h"])
    assert "--json" not in capsys.readouterr().out


def test_history_names_the_branches_of_a_step_that_has_no_record_yet_by_the_name_the_api_gives():
    from loom_cli.render import history_table

    # given: a map fanning out: its branches, and no record of the step itself
    page = {"execution_id": "e-1", "steps": [
        {"step_index": 0, "name": "items", "kind": "task", "status": "SUCCEEDED", "attempts": 1, "result": {"xs": [1]}},
        {"step_index": 1, "branch": 0, "kind": "branch", "name": "doubles", "status": "SUCCEEDED", "attempts": 1,
         "result": 2},
        {"step_index": 1, "branch": 1, "kind": "branch", "status": "PENDING"},
        {"step_index": 1, "branch": 2, "kind": "branch", "name": "doubles", "status": "RETRY", "attempts": 1,
         "next_wake_at": "2026-12-03T08:30:00Z", "error": {"code": "step_error", "message": "timeout"}},
    ], "operations": [], "next_token": None}
    # when
    out = history_table(page)
    # then: each branch is its step's name, numbered; one the API did not name falls back to "step"
    assert re.search(r"^1\s+doubles\[0\]\s+branch\s+SUCCEEDED\s+1\s", out, re.M), out
    assert re.search(r"^1\s+step\[1\]\s+branch\s+PENDING\s", out, re.M), out
    # and a branch waiting for its retry says when it comes (wake does not skip it)
    assert re.search(r"^1\s+doubles\[2\]\s+branch\s+RETRY\s.*next attempt 2026-12-03T08:30:00Z; step_error: timeout",
                     out, re.M), out


def test_history_of_an_ended_execution_says_its_unfinished_branches_will_not_run():
    from loom_cli.render import history_table

    # given: a map cancelled half-way: one branch done, one never started, one mid-retry
    page = {"execution_id": "e-1", "steps": [
        {"step_index": 0, "branch": 0, "kind": "branch", "name": "each", "status": "SUCCEEDED", "attempts": 1,
         "result": 1},
        {"step_index": 0, "branch": 1, "kind": "branch", "name": "each", "status": "PENDING"},
        {"step_index": 0, "branch": 2, "kind": "branch", "name": "each", "status": "RETRY", "attempts": 1,
         "error": {"code": "step_error", "message": "timeout"}},
    ], "operations": [], "next_token": None}
    # when
    live, ended = history_table(page), history_table(page, ended=True)
    # then: the recorded status stays; once the execution ended, the row says the branch will not run
    assert "never ran" not in live and "stopped" not in live
    assert re.search(r"^0\s+each\[1\]\s+branch\s+PENDING\s.*never ran: the execution ended", ended, re.M), ended
    assert re.search(r"^0\s+each\[2\]\s+branch\s+RETRY\s.*stopped: the execution ended; step_error: timeout",
                     ended, re.M), ended
    assert re.search(r"^0\s+each\[0\]\s+branch\s+SUCCEEDED\s+1\s", ended, re.M), ended


def test_history_of_an_ended_fan_out_counts_the_branches_that_never_began_from_the_execution():
    from loom_cli.render import history_table
    from loom_cli.sdk.models import FanOutProgress

    # given: a failed map of 5 items, 2 branches a time: 3 rows (a failure among them), 2 branches never began
    rows = [{"step_index": 0, "branch": b, "kind": "branch", "name": "each", "status": status, "attempts": 1}
            for b, status in enumerate(["SUCCEEDED", "FAILED", "PENDING"])]
    page = {"execution_id": "e-1", "next_token": None, "steps": [
        {"step_index": 0, "name": "each", "kind": "fanout", "status": "FAILED", "attempts": 3,
         "error": {"code": "permanent_error", "message": "branch 1: no"}}, *rows]}
    held = FanOutProgress(step_index=0, branches=5, succeeded=1, max_concurrency=2)
    # when
    counted, unknown = history_table(page, ended=True, fanouts=[held]), history_table(page, ended=True)
    # then: how many never began, and why, from the execution's count
    assert "\neach: 2 of its 5 branches never started (max_concurrency 2 held them back and the execution ended " \
           "first): they have no row here" in counted, counted
    # and without a count (an API from before it), the rule
    assert "\neach: a branch with no row here never started (the execution ended first)" in unknown, unknown
    # and nothing when every branch has its row (no max_concurrency below the count: all began at once)
    every = FanOutProgress(step_index=0, branches=3, succeeded=1, max_concurrency=3)
    assert "never started" not in history_table(page, ended=True, fanouts=[every])
    # and a fan-out cancelled before its step ended (its branches' rows only) is counted the same way
    cancelled = {"execution_id": "e-1", "next_token": None, "steps": rows}
    assert "\neach: 2 of its 5 branches never started (max_concurrency 2" in \
        history_table(cancelled, ended=True, fanouts=[held])
    # and another step's count says nothing of this one
    other = FanOutProgress(step_index=4, branches=9, succeeded=0, max_concurrency=1)
    assert "a branch with no row here never started" in history_table(page, ended=True, fanouts=[other])


def test_status_names_the_record_revision_apart_from_the_pinned_workflow_version(control_plane, capsys):
    control_plane.add(execution_doc("v-1", status="RUNNING", step=1, version=7, workflow_version=1))
    _, out, _ = run(capsys, "--url", control_plane.url, "status", "v-1")
    assert re.search(r"^pinned to\s+version 1\b", out, re.M), out
    assert re.search(r"^revision\s+7 \(the execution record's; not a workflow version\)$", out, re.M), out
    assert not re.search(r"^version\s", out, re.M), out


def test_status_shows_non_ascii_data_as_written_not_as_escapes(control_plane, capsys):
    control_plane.add(execution_doc("u-1", context={"who": "Zoë 東京"}))
    code, out, _ = run(capsys, "--url", control_plane.url, "status", "u-1")
    assert code == 0 and '"who": "Zoë 東京"' in out and "\\u" not in out, out


def test_history_says_when_a_sleep_ends_and_that_a_wait_took_its_default():
    from loom_cli.render import history_table

    history = {"execution_id": "h-1", "operations": [], "next_token": None, "steps": [
        {"step_index": 0, "name": "nap", "status": "SUCCEEDED", "attempts": 1, "kind": "task",
         "started_at": "2026-03-01T12:00:00.000000Z", "finished_at": "2026-03-01T12:00:00.000000Z",
         "result": {"wake_at": "2026-03-01T14:00:00.000000Z"}},
        {"step_index": 1, "name": "approval", "status": "SUCCEEDED", "attempts": 1, "kind": "event",
         "event_id": None, "result": {"approved": False}},
        {"step_index": 2, "name": "approval2", "status": "SUCCEEDED", "attempts": 1, "kind": "event",
         "event_id": "e-1", "result": {"approved": True}}]}
    text = history_table(history)
    assert "wake at 2026-03-01T14:00:00.000000Z" in text
    assert 'no event came: took its default {"approved": false}' in text
    assert text.count("no event came") == 1


def test_status_of_a_wait_whose_definition_is_not_deployed_says_so_instead_of_none(control_plane, capsys):
    # given: a waiting execution whose version this deployment does not have (the API cannot name the event)
    control_plane.add(execution_doc("w-1", status="WAITING", step=1, timer="event",
                                    waiting_for={"event": None, "timeout_at": "2026-01-08T00:00:00.000000Z"}))
    # when
    code, out, err = run(capsys, "--url", control_plane.url, "status", "w-1")
    # then
    assert code == 0, err
    assert "event None" not in out
    assert re.search(r"^waiting for\s+an event this deployment cannot name: the definition it waits on is not deployed "
                     r"here", out, re.M), out


def test_status_says_the_attempts_row_is_the_executions_total_and_gives_the_current_steps_own(control_plane, capsys):
    # given: a step on its 2nd attempt after 4 attempts in all (earlier steps retried too)
    control_plane.add(execution_doc("a-1", status="RUNNING", step=2, total_attempts=5, attempt=2))
    control_plane.add(execution_doc("a-2", status="COMPLETED", step=4, total_attempts=5, attempt=1))
    # when / then
    code, out, _ = run(capsys, "--url", control_plane.url, "status", "a-1")
    assert code == 0 and re.search(r"^attempts\s+5 in all \(this step's: 2\)$", out, re.M), out
    code, out, _ = run(capsys, "--url", control_plane.url, "status", "a-2")
    assert code == 0 and re.search(r"^attempts\s+5 in all$", out, re.M), out
    # and: where ``attempt`` only marks that a sleep began or branches went out, it is not called attempts
    control_plane.add(execution_doc("a-3", status="RUNNING", step=0, total_attempts=0, attempt=1,
                                    fanout={"branches": 3, "succeeded": 1, "max_concurrency": 10}))
    control_plane.add(execution_doc("a-4", status="SLEEPING", step=1, total_attempts=1, attempt=1, timer="sleep",
                                    next_wake_at="2999-01-01T00:00:00.000000Z"))
    for eid in ("a-3", "a-4"):
        code, out, _ = run(capsys, "--url", control_plane.url, "status", eid)
        assert code == 0 and "this step's" not in out and re.search(r"^attempts\s+[01] in all", out, re.M), out
    # and: an undo's attempts are the undo's (the step shown is where it was cancelled), a wait's are its periods
    control_plane.add(execution_doc("a-5", status="COMPENSATION_FAILED", step=1, total_attempts=4, attempt=3,
                                    failed_step=1, compensated=False, cancelled_by="oncall",
                                    compensation_error={"code": "step_error", "message": "refund API down"}))
    control_plane.add(execution_doc("a-6", status="RUNNING", step=0, total_attempts=3, attempt=2, compensating=True,
                                    failed_step=1, cancelled_by="oncall"))
    control_plane.add(execution_doc("a-7", "expense_approval", "WAITING", 1, total_attempts=1, attempt=2,
                                    timer="event", waiting_for={"event": "approved", "timeout_at": "2999-01-01T00:00:00Z"}))
    shown = {eid: run(capsys, "--url", control_plane.url, "status", eid)[1] for eid in ("a-5", "a-6", "a-7")}
    assert re.search(r"^attempts\s+4 in all \(the undo that failed: 3\)$", shown["a-5"], re.M), shown["a-5"]
    assert re.search(r"^attempts\s+3 in all \(the running undo's: 2\)$", shown["a-6"], re.M), shown["a-6"]
    assert re.search(r"^attempts\s+1 in all \(this is wait period 2 of the step; wait periods are not attempts\)$",
                     shown["a-7"], re.M), shown["a-7"]


def test_watch_of_a_cancel_whose_undo_failed_says_who_cancelled_not_none(control_plane):
    # given: cancelled (no error of its own), then its undo failed for good
    control_plane.add(execution_doc("x-1", status="COMPENSATION_FAILED", step=1, failed_step=1, compensated=False,
                                    cancelled_by="oncall", cancel_reason="customer left",
                                    compensation_error={"code": "step_error", "message": "refund API down"}))
    # when
    line = progress_line(control_plane.executions["x-1"])
    # then
    assert "None" not in line and "cancelled by oncall: customer left; compensation failed: step_error: refund API " \
                                  "down" in line, line


def test_status_of_a_map_says_its_attempts_do_not_count_the_branches(control_plane, capsys):
    # given: a map's execution, done: 2 task-step attempts, its 4 branches' attempts on their own records
    eid = control_plane.play("map")
    # when
    code, out, err = run(capsys, "--url", control_plane.url, "status", eid)
    # then
    assert code == 0, err
    assert re.search(r"^attempts\s+2 in all \(not counting map or parallel branches: loom history shows theirs\)$",
                     out, re.M), out


def test_status_and_wake_of_an_execution_whose_version_is_not_deployed_say_it_cannot_go_on(control_plane, capsys):
    # given: a sleeping execution pinned to a version this deployment does not have
    problem = {"code": "workflow_version_missing", "message": "this execution started on version 1 of workflow "
               "'order_fulfillment' and runs to its end on it, but ..."}
    control_plane.add(execution_doc("v-1", status="SLEEPING", step=2, timer="sleep", workflow_version=1,
                                    next_wake_at="2999-01-01T00:00:00Z", cannot_run=problem))
    # when / then: status says so in its own row
    code, out, _ = run(capsys, "--url", control_plane.url, "status", "v-1")
    assert code == 0 and re.search(r"^cannot go on\s+workflow_version_missing: this execution started on version 1",
                                   out, re.M), out
    # and: watch's line says it too, with no countdown to a wake that only fails it
    line = progress_line(control_plane.executions["v-1"])
    assert "cannot go on: its version 1 is not deployed here" in line and "left" not in line, line
    # and: wake says the delivery it brings on fails it, not that the next step runs
    code, out, _ = run(capsys, "--url", control_plane.url, "wake", "v-1")
    assert code == 0 and "woken: its version 1 is not deployed here (workflow_version_missing)" in out, out
    assert "runs next" not in out


def test_wake_of_an_undo_in_its_retry_backoff_says_the_undo_runs_not_the_step(control_plane, capsys):
    # given: a failed order undoing charge_payment (step 1), its undo waiting for its next attempt
    control_plane.add(execution_doc("c-1", status="RUNNING", step=1, timer="retry", compensating=True,
                                    failed_step=3, next_wake_at="2999-01-01T00:00:00.000000Z",
                                    error={"code": "permanent_error", "message": "no carrier"}))
    # when
    code, out, _ = run(capsys, "--url", control_plane.url, "wake", "c-1")
    # then
    assert code == 0 and "woken: the undo of step 1/5 charge_payment runs now (its retry backoff ended); the step " \
                         "itself does not run again" in out, out
    assert "woken: step 1/5 charge_payment runs now" not in out, out


@pytest.mark.parametrize("deployed", [True, False])
def test_wake_of_a_wait_prints_one_line_saying_what_the_wake_does(control_plane, capsys, deployed):
    # given: an execution waiting for "approved", its version deployed here or not
    problem = None if deployed else {"code": "workflow_version_missing", "message": "version 1 ... not deployed"}
    control_plane.add(execution_doc("w-9", "expense_approval", "WAITING", 1, timer="event", workflow_version=1,
                                    waiting_for={"event": "approved" if deployed else None,
                                                 "timeout_at": "2999-01-01T00:00:00Z"}, cannot_run=problem))
    # when
    code, out, _ = run(capsys, "--url", control_plane.url, "wake", "w-9")
    # then: the timeout it brings on, or the failure, never both
    assert code == 0 and len(out.strip().splitlines()) == 1, out
    if deployed:
        assert "woken: the wait for event approved at step 1/3 wait_approved timed out now" in out, out
        # its definition says what comes: no default, and no retry policy of its own (a wait waits once)
        assert "it has no default and this was its last wait period (1 of 1): the step fails (event_timeout)" in out, out
    else:
        assert "woken: its version 1 is not deployed here (workflow_version_missing)" in out and "timed out" not in out


def test_wake_of_a_wait_in_its_last_period_or_with_a_default_says_which(control_plane, capsys):
    # given: a wait of 5 periods in its 4th, then in its 5th and last; then the same wait with a default
    control_plane.workflows["workflows"][1]["steps"][1]["retry"] = {"max_attempts": 5}
    control_plane.add(execution_doc("w-6", "expense_approval", "WAITING", 1, timer="event", attempt=4,
                                    waiting_for={"event": "approved", "timeout_at": "2999-01-01T00:00:00Z"}))
    _, again, _ = run(capsys, "--url", control_plane.url, "wake", "w-6")
    for eid in ("w-7", "w-8"):
        control_plane.add(execution_doc(eid, "expense_approval", "WAITING", 1, timer="event", attempt=5,
                                        waiting_for={"event": "approved", "timeout_at": "2999-01-01T00:00:00Z"}))
    _, last, _ = run(capsys, "--url", control_plane.url, "wake", "w-7")
    control_plane.workflows["workflows"][1]["steps"][1]["default"] = {"approved": False}
    _, default, _ = run(capsys, "--url", control_plane.url, "wake", "w-8")
    # then
    assert "it has no default, so it waits again (wait period 5 of 5, its retry policy's)" in again, again
    assert "this was its last wait period (5 of 5): the step fails (event_timeout)" in last, last
    assert "timed out now: it takes its default" in default, default


def test_status_and_watch_of_a_wait_an_event_woke_say_it_came_not_that_it_still_waits(control_plane, capsys):
    # given: an execution whose event came (arrived) and whose delivery is due: next_wake_at is when it came
    control_plane.add(execution_doc("w-5", "expense_approval", "WAITING", 1, timer="event",
                                    next_wake_at="2026-01-01T00:00:30.000000Z",
                                    waiting_for={"event": "approved", "timeout_at": "2026-01-08T00:00:00.000000Z",
                                                 "arrived": True}))
    # when
    code, out, _ = run(capsys, "--url", control_plane.url, "status", "w-5")
    # then: the event came and its delivery is due; the wait's own timeout still shown
    assert code == 0 and re.search(r"^waiting for\s+event approved: it came; its delivery resumes the execution "
                                   r"\(times out 2026-01-08T00:00:00.000000Z\)$", out, re.M), out
    assert re.search(r"^next wake\s+2026-01-01T00:00:30.000000Z \(event: an event came, its delivery is due\)$", out, re.M), out
    # and: watch's line says it is resuming, with no countdown to a timeout that will not come
    line = progress_line(control_plane.executions["w-5"])
    assert line.endswith("event approved came; resuming") and "left" not in line, line
