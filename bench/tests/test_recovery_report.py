"""The recovery section's verdict follows its samples: a recovery past its kill's bound is called missed."""

from __future__ import annotations

from bench.report.recovery import recovery_section


def _results(recoveries: list[float], bound: float = 30.0) -> dict:
    samples = [{"execution_id": f"e{i}", "status": "COMPLETED", "attempts": 2, "recovery_s": r, "bound_s": bound,
                "killed_after_invocation_start_s": 0.5} for i, r in enumerate(recoveries)]
    run = {"worker_timeout_s": 20, "sweep_every_s": 5, "lease_s": 5, "samples": samples, "median_s": recoveries[0],
           "max_s": max(recoveries), "median_bound_s": bound, "within_bound": len(samples)}
    return {"status": "measured", "workflow": "flaky_greeting", "margin_s": 5.0, "runs": {"make up": run}}


def _row(results: dict) -> str:
    out: list[str] = []
    recovery_section(out.append, results)
    (row,) = [line for line in out if line.startswith("| make up")]
    return row


def test_recovery_section_when_every_recovery_is_within_its_bound_says_all_within():
    assert _row(_results([21.0, 24.5])).endswith("| 2 of 2 |")


def test_recovery_section_when_one_recovery_passes_its_bound_says_missed():
    assert _row(_results([21.0, 31.0])).endswith("| 1 of 2 (**missed**) |")


def test_recovery_section_when_not_measured_says_why():
    out: list[str] = []
    recovery_section(out.append, {"status": "pending", "reason": "no terraform CLI on PATH"})
    assert "**Pending.** no terraform CLI on PATH" in "\n".join(out)
