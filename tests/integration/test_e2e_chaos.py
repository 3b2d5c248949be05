"""A short chaos run (``make chaos`` in small) on the session's stack: one kill of each kind, every invariant holds."""

from __future__ import annotations

import sys
import uuid

from loom_local.chaos import figures, invariants, report
from loom_local.chaos.config import profile
from loom_local.chaos.driver import Run, Target
from loom_local.chaos.plan import make_plan

VARIANTS = ("order_fulfillment/woken", "order_saga/cancel_sleeping", "expense_approval/callback",
            "flaky_greeting/plain", "fragile_import/fixed", "batch_resize/plain")


def test_a_short_chaos_run_with_one_kill_of_each_kind_keeps_every_invariant_and_counts_what_happened(loom):
    # given: six executions of six variants; a worker SIGKILLed after the card was charged, the sweeper killed
    # after its first re-drive claim, the control plane killed after a create; a duplicated and a replayed message;
    # a cancel, a wake, a fix and redrive, a callback used twice and a repeated start
    config = profile("faults", count=6, worker_kills=1, sweeper_kills=1, control_kills=1, duplicates=1, replays=1,
                     restarts=1, variants=VARIANTS, duration_s=150)
    plan = make_plan(config, nonce=f"it{uuid.uuid4().hex[:6]}")
    target = Target.of(loom.stack, loom.ledger, loom.fixes)

    # when
    record = Run(plan, target, progress=lambda m: print(m, file=sys.stderr, flush=True), drain_s=5).run()

    # then: no invariant broke, and the report counts the faults that really happened
    violations = invariants.check(record)
    measured = figures.measure(record)
    text = report.render(measured, violations)
    assert violations == [], text
    assert sum(measured["by_status"].values()) == 6 and set(measured["by_status"]) <= {"COMPLETED", "CANCELLED"}, text
    assert measured["by_status"].get("CANCELLED") == 1, text
    assert measured["kills"]["fired"] == {"worker": 1, "sweeper": 1, "control-plane": 1}, text
    assert measured["injected"] == {"duplicate": 1, "replay": 1}, text
    (killed,) = measured["kills"]["interrupted"]
    assert killed["point"] == "step.return" and killed["execution_id"] in {m["execution_id"] for m in killed["held"]}
    (rerun,) = measured["kills"]["reruns"]
    assert rerun["rerun_s"] is not None and rerun["step"] == 1, text  # the charge ran again (and charged once)
    assert measured["deliveries"]["total"] > 0 and measured["deliveries"]["by_category"].get("work", 0) > 0, text
    assert any(r["cause"] == "after a kill" for r in measured["redrives"]["by_reason"]), text
