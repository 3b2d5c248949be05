"""The history-length section: its verdict follows the numbers, and a small run really is flat."""

from __future__ import annotations

from bench import history


def row(steps: int, chain: int, cpu: float, units: float, records: float = 1.0) -> dict:
    return {"steps": steps, "chain": chain, "cpu_us_per_step": cpu, "requests_per_step": 2.0,
            "records_read_per_step": records, "read_units_per_step": units}


def test_flatness_calls_growth_past_half_again_and_past_the_slack_growth():
    rows = [row(100, 1, 100, 2.0), row(10_000, 1, 400, 2.1), row(100, 100, 90, 0.01), row(10_000, 100, 95, 0.02)]
    verdict = history.flatness(rows)
    assert verdict["1"]["grew"] == ["cpu_us_per_step"] and not verdict["1"]["flat"]
    assert verdict["100"]["flat"]  # 0.01 -> 0.02 read units a step is within the slack


def test_a_short_run_reads_a_bounded_tail_per_step_whatever_the_length():
    result = history.measure(repeats=1, progress=lambda _: None, lengths=[100, 400])
    one = {r["steps"]: r for r in result["rows"] if r["chain"] == 1}
    assert one[400]["records_read_per_step"] <= one[100]["records_read_per_step"] + 0.5
    assert one[400]["records_read_per_step"] < 10
