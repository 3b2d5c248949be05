"""The chaos run's plan and report: seeded plans that cover every crash point, goals said met or missed with the
numbers that decide them, and `python -m loom_local.chaos --check` failing on a broken ledger."""

from __future__ import annotations

import copy
import json
from collections import Counter
from pathlib import Path

from loom_local.chaos import __main__ as chaos_main
from loom_local.chaos import catalog, figures, report
from loom_local.chaos.config import profile
from loom_local.chaos.plan import make_plan

RECORDED = Path(__file__).parent / "fixtures" / "chaos_faults_run.json"


def test_make_plan_when_given_the_same_seed_makes_the_same_plan_and_kills_at_every_crash_point():
    # given
    config = profile("faults", seed=7)
    # when
    first, again, other = make_plan(config, "n"), make_plan(config, "n"), make_plan(profile("faults", seed=8), "n")
    # then
    assert first == again and first != other
    kills = [p.kill for p in first.executions if p.kill]
    assert len(kills) == 32 and len({p.execution_id for p in first.executions}) == 150
    by_id = {p.execution_id: p.variant for p in first.executions}
    covered = [(by_id[k.match["execution_id"]], k.point, {n: v for n, v in k.match.items() if n != "execution_id"})
               for k in kills if k.how == "each point"]
    assert sorted(map(repr, covered)) == sorted(map(repr, catalog.COVERAGE))
    assert {k.point for k in kills} >= {"worker.after_claim", "worker.after_record", "worker.after_checkpoint",
                                        "worker.after_enqueue", "step.enter", "step.return"}
    assert Counter((p.control_kill, p.duplicate, p.replay) for p in first.executions)[(True, False, False)] <= 2
    assert sum(p.duplicate for p in first.executions) == 12 and sum(p.replay for p in first.executions) == 6
    assert {p.variant.split("/")[0] for p in first.executions} == set(catalog.WORKFLOWS)


def test_make_plan_for_the_backlog_profile_has_no_fault_and_no_cancel_and_starts_within_45_s():
    # when
    plan = make_plan(profile("backlog"), "n")
    # then
    assert len(plan.executions) == 300
    assert not any(p.kill or p.control_kill or p.duplicate or p.replay for p in plan.executions)
    assert not any(catalog.BY_KEY[p.variant].cancels for p in plan.executions)
    assert max(p.start_at_s for p in plan.executions) < 45


def test_profile_when_the_count_changes_scales_the_fault_mix_and_keeps_the_start_rate():
    # when
    small, default = profile("faults", count=30), profile("faults")
    # then
    assert (default.worker_kills, default.sweeper_kills, default.control_kills, default.duplicates,
            default.replays) == (32, 2, 2, 12, 6)
    assert (small.worker_kills, small.sweeper_kills, small.duplicates) == (6, 1, 2)
    assert small.start_window_s == 12.0 and default.start_window_s == 60.0


def _figures(profile_name: str, stale: int, total: int) -> dict:
    record = json.loads(RECORDED.read_text())
    f = figures.measure(record)
    f["profile"] = profile_name
    f["deliveries"].update(total=total, stale=stale, stale_share=stale / total)
    return f


def test_render_when_the_backlog_stale_share_is_over_the_goal_says_missed_and_what_dominates():
    # given: 57% of 2,298 deliveries stale, the issue's own numbers
    f = _figures("backlog", 1310, 2298)
    # when
    text = report.render(f, [])
    # then
    assert "goal: stale share 57.0% of 2298 deliveries: goal at most 5.0%: MISSED" in text
    assert "what dominates: " in text and "stalled_lease (after a kill)" in text
    assert "invariants: all held" in text


def test_render_when_the_backlog_stale_share_is_within_the_goal_says_met():
    text = report.render(_figures("backlog", 40, 1000), [])
    assert "goal at most 5.0%: met" in text and "what dominates" not in text


def test_render_when_an_invariant_failed_lists_each_violation():
    # given
    violations = [{"rule": "one charge per order", "execution_id": "e-1", "variant": "order_saga/plain",
                   "detail": "order o-1 charged 2 times"}]
    # when
    text = report.render(_figures("faults", 10, 100), violations)
    # then
    assert "INVARIANTS: 1 violation(s):\n  - one charge per order: e-1 (order_saga/plain): order o-1 charged 2 times" in text
    assert "(the 5.0% goal is the backlog profile's)" in text


def test_main_check_when_the_recorded_ledger_holds_a_double_charge_exits_1_naming_it(tmp_path, capsys):
    # given: the recorded run with one charge written twice
    record = json.loads(RECORDED.read_text())
    broken = copy.deepcopy(record)
    broken["ledger"]["charges"].append(dict(broken["ledger"]["charges"][0]))
    intact, double = tmp_path / "intact.json", tmp_path / "double.json"
    intact.write_text(json.dumps(record))
    double.write_text(json.dumps(broken))
    # when
    ok = chaos_main.main(["--check", str(intact)])
    failed = chaos_main.main(["--check", str(double)])
    # then
    out = capsys.readouterr().out
    assert (ok, failed) == (0, 1)
    key = record["ledger"]["charges"][0]["idempotency_key"]
    assert f"one charge per order: {key.split(':')[0]} (None): idempotency key {key} charged 2 times" in out


def test_main_check_when_the_record_cannot_be_read_exits_2_saying_why(tmp_path, capsys):
    assert chaos_main.main(["--check", str(tmp_path / "missing.json")]) == 2
    assert "cannot read the recorded run" in capsys.readouterr().err
