"""The lite section's arithmetic and verdicts: strace's counts read right, the marginal per step, and the
report's ratio and verdict following the figures (a slower Loom turns the target to missed)."""

from __future__ import annotations

import copy

import pytest

from bench import lite
from bench.report import lite as report

SUMMARY = """% time     seconds  usecs/call     calls    errors syscall
------ ----------- ----------- --------- --------- ----------------
 64.78    0.025001          29       844           fdatasync
 20.00    0.005000          50       100         3 fsync
------ ----------- ----------- --------- --------- ----------------
100.00    0.030001          17       944         3 total
"""

RESULTS = {
    "steps": 1000, "repeats": 3, "sqlite": "3.40.1", "dbos_version": "3.4.0", "fsync_floor_us": 400.0,
    "loom": {"per_step_ms": 0.8, "cpu_per_step_ms": 0.5, "per_step_ms_runs": [0.8, 0.7, 0.9]},
    "dbos": {"per_step_ms": 3.2, "cpu_per_step_ms": 2.9, "per_step_ms_runs": [3.2, 3.1, 3.3]},
    "growth": [{"steps": 10, "executions": 1, "per_step_ms": 2.0, "cpu_per_step_ms": 1.0},
               {"steps": 1000, "executions": 1, "per_step_ms": 0.8, "cpu_per_step_ms": 0.5},
               {"steps": 10000, "executions": 10, "per_step_ms": 1.2, "cpu_per_step_ms": 0.6}],
    "fsyncs_per_step": {"loom": 1.04, "dbos": 4.1},
}


def render(results) -> str:
    lines: list[str] = []
    report.lite_section(lines.append, results)
    report.target_row(lines.append, results)
    return "\n".join(lines)


def test_lite_strace_summary_counts_fsync_and_fdatasync_calls_not_errors_or_the_total():
    assert lite.strace_syncs(SUMMARY) == 944


def test_lite_marginal_is_the_difference_over_the_steps_between():
    assert lite.marginal(28, 1054, 10, 1000) == pytest.approx(1026 / 990)


def test_lite_report_states_the_measured_ratio_and_the_target_met():
    text = render(RESULTS)
    assert "met, 4x" in text and "| **met** |" in text
    assert "1.04 | 4.10 |" in text and "2 times that" in text
    assert "| 10,000 | 10 | 1.200 ms | 0.600 ms |" in text and "changed 1.50x" in text


def test_lite_report_turns_to_missed_when_loom_is_not_three_times_faster():
    slower = copy.deepcopy(RESULTS)
    slower["loom"]["per_step_ms"] = 1.6
    text = render(slower)
    assert "missed, 2x" in text and "| **missed** |" in text


def test_lite_report_says_when_fsyncs_were_not_measured():
    without = {**RESULTS, "fsyncs_per_step": None}
    assert "not measured (no strace)" in render(without)
