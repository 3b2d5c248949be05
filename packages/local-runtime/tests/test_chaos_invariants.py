"""The chaos run's invariant checker, on a recorded run (20 executions of every example under kills, duplicated
and replayed messages and operator actions) and on copies of it broken one way at a time."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from loom_local.chaos import invariants

RECORDED = Path(__file__).parent / "fixtures" / "chaos_faults_run.json"


@pytest.fixture(scope="module")
def recorded() -> dict:
    return json.loads(RECORDED.read_text())


@pytest.fixture
def run(recorded) -> dict:
    return copy.deepcopy(recorded)


def _of(run: dict, variant: str) -> str:
    return next(p["execution_id"] for p in run["plan"]["executions"] if p["variant"] == variant)


def _rules(found: list[dict]) -> set[str]:
    return {v["rule"] for v in found}


def test_check_when_the_recorded_run_is_intact_finds_no_violation(run):
    # given: a run in which every invariant held (its kills fired, its charges and refunds are in the ledger)
    assert any(a["fired"] for a in run["faults"]["arms"]) and run["ledger"]["refunds"]
    # when / then
    assert invariants.check(run) == []


def test_check_when_an_order_is_charged_twice_under_its_key_reports_one_charge_per_order(run):
    # given: the ledger holds a second line for one charge's idempotency key (the provider charged twice)
    first = run["ledger"]["charges"][0]
    run["ledger"]["charges"].append({**first, "charge_id": "ch_999999"})
    # when
    found = invariants.check(run)
    # then
    eid = first["idempotency_key"].split(":")[0]
    assert {(v["rule"], v["execution_id"]) for v in found} >= {("one charge per order", eid)}
    assert any(f"idempotency key {first['idempotency_key']} charged 2 times" in v["detail"] for v in found)
    assert any(f"order {first['order_id']} charged 2 times" in v["detail"] for v in found)
    assert any("charged 2 time(s), expected 1" in v["detail"] for v in found)


def test_check_when_a_step_charged_under_another_key_reports_the_order_charged_twice(run):
    # given: a second charge of the same order under the key of another step of the execution (a body that
    # passed the wrong key to the provider)
    first = run["ledger"]["charges"][0]
    eid = first["idempotency_key"].split(":")[0]
    run["ledger"]["charges"].append({**first, "charge_id": "ch_999998", "idempotency_key": f"{eid}:3"})
    # when
    found = invariants.check(run)
    # then
    assert [v for v in found if v["rule"] == "one charge per order" and f"order {first['order_id']}" in v["detail"]]


def test_check_when_a_compensated_charge_was_not_refunded_reports_it(run):
    # given: the undeliverable saga ended compensated, but its refund is missing from the ledger
    eid = _of(run, "order_saga/undeliverable")
    run["ledger"]["refunds"] = [r for r in run["ledger"]["refunds"] if not r["idempotency_key"].startswith(eid)]
    # when
    found = invariants.check(run)
    # then
    assert [(v["rule"], v["execution_id"], v["detail"]) for v in found] == [
        ("each compensated charge refunded once", eid, "refunded 0 time(s), expected 1")]


def test_check_when_a_charge_was_refunded_twice_reports_it(run):
    # given
    run["ledger"]["refunds"].append(dict(run["ledger"]["refunds"][0]))
    # when / then
    assert "each compensated charge refunded once" in _rules(invariants.check(run))


def test_check_when_an_accepted_cancel_did_not_end_it_cancelled_reports_the_ending(run):
    # given: the API accepted the cancel of the saga while it slept, yet it completed
    eid = _of(run, "order_saga/cancel_sleeping")
    assert run["actions"][eid][0]["ok"] is True
    run["finals"][eid]["status"] = "COMPLETED"
    # when
    found = invariants.check(run)
    # then
    assert any(v["rule"] == "ends as its actions dictate" and v["execution_id"] == eid
               and "expected CANCELLED (its cancel was accepted)" in v["detail"] for v in found)


def test_check_when_an_execution_is_still_live_at_the_bound_reports_it_not_ended(run):
    # given
    eid = _of(run, "flaky_greeting/plain")
    run["finals"][eid]["status"] = "RUNNING"
    # when
    found = invariants.check(run)
    # then
    assert [(v["rule"], v["execution_id"]) for v in found] == [("ended", eid)]


def test_check_when_a_repeated_start_created_an_execution_reports_idempotent_starts(run):
    # given: the same token and input sent again answered created
    eid = _of(run, "expense_approval/callback")
    restart = next(a for a in run["actions"][eid] if a["op"] == "restart")
    restart["answer"]["created"] = True
    # when / then
    assert [(v["rule"], v["execution_id"]) for v in invariants.check(run)] == [("idempotent starts", eid)]


def test_check_when_a_replayed_message_moved_the_execution_reports_it(run):
    # given: the execution's version moved after its old message was replayed
    replay = next(i for i in run["faults"]["injected"] if i["kind"] == "replay")
    run["finals"][replay["execution_id"]]["version"] += 1
    # when / then
    assert "stale copies change nothing" in _rules(invariants.check(run))


def test_check_when_a_message_and_its_duplicate_both_did_work_reports_it(run):
    # given: both deliveries of a duplicated message advanced the execution
    dup = next(i for i in run["faults"]["injected"] if i["kind"] == "duplicate")
    for m in (dup["of"], dup["message_id"]):
        run["runtime"]["deliveries"].append({"at": 0, "message_id": m, "execution_id": dup["execution_id"],
                                             "request_id": "r", "outcome": "advanced"})
    # when / then
    assert "stale copies change nothing" in _rules(invariants.check(run))


def test_check_when_a_completed_execution_lacks_a_step_record_reports_each_step_once(run):
    # given
    eid = _of(run, "defaults_tour/plain")
    run["finals"][eid]["history"] = run["finals"][eid]["history"][:-1]
    # when / then
    assert [(v["rule"], v["execution_id"]) for v in invariants.check(run)] == [("each step once", eid)]


def test_check_when_a_callback_link_worked_twice_reports_the_operator_answer(run):
    # given
    eid = _of(run, "expense_approval/callback")
    again = next(a for a in run["actions"][eid] if a["op"] == "callback_again")
    again.pop("refused")
    again.update(ok=True, answer={"outcome": "delivered"})
    # when / then
    assert [(v["rule"], v["execution_id"]) for v in invariants.check(run)] == [("operator answers", eid)]
