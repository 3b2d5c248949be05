"""The code-first section: both styles measured the same way, and the verdict follows the numbers."""

from __future__ import annotations

from bench import code
from bench.report.code import code_section


def _results(code_write_units: float, code_cpu: float) -> dict:
    wire = {"aws_requests": 4.0, "write_units": 3.0, "rcu": 1.0}
    return {"result_bytes": 1024,
            "wire": {"steps": {"per_step": wire, "runs_identical": True},
                     "code": {"per_step": {**wire, "write_units": code_write_units}, "runs_identical": True}},
            "cpu": [{"steps": 100, "chain": 100, "steps_us_per_step": 100.0, "code_us_per_step": code_cpu}]}


def test_verdict_calls_a_figure_over_ten_percent_apart_and_the_report_says_so():
    # when
    close, far = code.verdict(_results(3.0, 108.0)), code.verdict(_results(3.0, 150.0))
    lines: list[str] = []
    code_section(lines.append, _results(3.0, 150.0))

    # then
    assert all(v["within"] for v in close.values())
    assert not far["cpu 100 steps, 100 a delivery"]["within"] and far["write_units"]["within"]
    assert any("1.50x (over 10%)" in line for line in lines)


def test_both_styles_run_the_same_steps_and_cost_the_same_store_calls():
    # when: one small execution of each style, CPU measured on the memory store
    seconds = {style: code.cpu_once(style, 20, 100) for style in code.STYLES}

    # then: both completed (cpu_once raises otherwise) and measured something
    assert all(s > 0 for s in seconds.values())
    assert code.registry_for("code", 3).get(code.WORKFLOW).code is not None
    assert code.registry_for("steps", 3).get(code.WORKFLOW).code is None


def _fit(n_steps: int, chain: int, code_slope: float, steps_slope: float = 0.0) -> dict:
    return {"n_steps": n_steps, "chain": chain, "code": {"slope_us": code_slope, "intercept_us": 300.0},
            "steps": {"slope_us": steps_slope, "intercept_us": 280.0}}


def test_the_report_states_each_case_s_replay_cost_from_its_own_fit():
    # given: a replayed position measured at 2 us among 100 and at 5 us among 1,000
    results = {**_results(3.0, 150.0), "replay": {"cases": [_fit(100, 1, 2.0), _fit(1000, 100, 5.0)]}}
    results["cpu"] += [{"steps": 100, "chain": 1, "steps_us_per_step": 280.0, "code_us_per_step": 400.0},
                       {"steps": 1000, "chain": 100, "steps_us_per_step": 60.0, "code_us_per_step": 85.0}]
    lines: list[str] = []

    # when
    code_section(lines.append, results)

    # then: one step a delivery replays 49.5 positions a step (99 recorded before the last), 99 us at 2 us each;
    # 1,000 steps 100 a delivery replay 4.5 a step, 22.5 us at 5 us each; nothing is replayed at 100/100
    assert code.replayed_per_step(100, 1) == 49.5 and code.replayed_per_step(1000, 100) == 4.5
    assert code.replayed_per_step(100, 100) == 0
    assert "| 100 steps, 1 a delivery | 49.5 | 2.00 us | 99.0 us | +0.00 us | 280.0 us | - |" in lines
    assert "| 1000 steps, 100 a delivery | 4.5 | 5.00 us | 22.5 us | +0.00 us | 60.0 us | - |" in lines
    assert "| 100 steps, 100 a delivery | 0.0 | - | 0.0 us | - | 100.0 us | - |" in lines
    assert any("A position replayed among 1,000 costs 2.5x one among 100" in line for line in lines)


def test_a_replay_fit_at_or_below_zero_is_reported_as_noise_not_as_a_cost():
    # given: deliveries whose CPU fell as they replayed more (load on the machine, not the replay)
    results = {**_results(3.0, 150.0), "replay": {"cases": [_fit(100, 1, -0.4, -0.6)]}}
    results["cpu"].append({"steps": 100, "chain": 1, "steps_us_per_step": 280.0, "code_us_per_step": 400.0})
    lines: list[str] = []

    # when
    code_section(lines.append, results)

    # then: the fit is shown as noise and no cost per step is derived from it
    assert "| 100 steps, 1 a delivery | 49.5 | -0.40 us (noise) | - | -0.60 us | 280.0 us | - |" in lines
    assert not any("costs" in line and "x one among" in line for line in lines)


def test_a_replayed_position_is_measured_from_deliveries_that_replay_more_and_more():
    # when
    floor = code.replay(cases=[(12, 1), (12, 4)], repeats=1, progress=lambda _: None)

    # then: both styles measured in each case (timings too short here to compare), one delivery timed per
    # delivery that runs a body (the last one only returns)
    assert [(c["n_steps"], c["chain"]) for c in floor["cases"]] == [(12, 1), (12, 4)]
    assert all(set(c[s]) == {"slope_us", "intercept_us"} for c in floor["cases"] for s in code.STYLES)
    assert len(code.deliveries_cpu("code", 5)) == len(code.deliveries_cpu("steps", 5)) == 5
    assert len(code.deliveries_cpu("code", 12, 4)) == len(code.deliveries_cpu("steps", 12, 4)) == 3


def test_counted_instructions_join_the_verdict_and_the_table():
    # given: instruction counts, one case within 10% and one over
    results = _results(3.0, 105.0)
    results["instructions"] = {"status": "measured", "tool": "valgrind --tool=callgrind", "layouts": 3, "rows": [
        {"steps": 100, "chain": 100, "steps_per_step": 700_000.0, "code_per_step": 680_000.0,
         "steps_range": [690_000.0, 712_000.0], "code_range": [671_000.0, 688_000.0]},
        {"steps": 100, "chain": 1, "steps_per_step": 1_700_000.0, "code_per_step": 2_380_000.0}]}
    # when
    judged = code.verdict(results)
    lines: list[str] = []
    code_section(lines.append, results)
    # then
    assert judged["instructions 100 steps, 100 a delivery"]["within"]
    assert not judged["instructions 100 steps, 1 a delivery"]["within"]
    assert any(line.startswith("| instructions 100 steps, 1 a delivery | 1,700 K | 2,380 K | 1.40x (over 10%)")
               for line in lines)
    # and each case's lowest and highest layout is shown where it was counted
    assert "- 100 steps, 100 a delivery: steps 690-712 K, code 671-688 K" in lines


def test_cpu_rows_judge_the_fastest_runs_and_show_the_medians_beside_them():
    # given: a case whose fastest runs are within 10% and whose medians are not
    results = {**_results(3.0, 105.0), "replay": {"cases": [_fit(100, 1, 2.0)]}}
    results["cpu"] = [{"steps": 100, "chain": 100, "steps_us_per_step": 60.0, "code_us_per_step": 63.0,
                       "steps_median_us_per_step": 70.0, "code_median_us_per_step": 90.0}]
    lines: list[str] = []
    # when
    judged = code.verdict(results)
    code_section(lines.append, results)
    # then: the verdict is the fastest runs'; the medians are shown, not hidden
    assert judged["cpu 100 steps, 100 a delivery"]["within"]
    assert "| 100 steps, 100 a delivery | 0.0 | - | 0.0 us | - | 60.0 us | 70.0 us, 90.0 us |" in lines


def test_cpu_rows_measured_in_pairs_judge_the_median_pair_and_show_the_fastest_beside_it():
    # given: a case measured in pairs (``code.cpu``) whose fastest runs are 14% apart (one lucky step-list run)
    # and whose paired runs are 5% apart
    results = _results(3.0, 79.0)
    results["cpu"] = [{"steps": 1000, "chain": 100, "steps_us_per_step": 69.0, "code_us_per_step": 79.0,
                       "fastest_ratio": 79.0 / 69.0, "ratio": 1.05}]
    lines: list[str] = []
    # when
    judged = code.verdict(results)
    code_section(lines.append, results)
    # then: the paired ratio is judged, and the fastest runs' ratio is shown beside it
    figure = judged["cpu 1000 steps, 100 a delivery"]
    assert figure["within"] and figure["ratio"] == 1.05 and round(figure["fastest_ratio"], 2) == 1.14
    assert "| cpu 1000 steps, 100 a delivery | 69.00 us | 79.00 us | 1.05x (fastest runs: 1.14x) |" in lines


def test_cpu_pairs_each_code_first_run_with_the_step_list_run_before_it(monkeypatch):
    # given: runs whose times are known (each style's n-th run, in turn: steps, code, steps, code, ...)
    times = iter([1.0, 1.3, 2.0, 2.1, 1.5, 1.56])
    monkeypatch.setattr(code, "CPU_CASES", [(10, 10)])
    monkeypatch.setattr(code, "cpu_once", lambda style, n, chain: next(times))
    # when
    (row,) = code.cpu(repeats=3, progress=lambda _: None)
    # then: pairs 1.30, 1.05 and 1.04: their median; the fastest of each style (1.0 and 1.3) give another ratio
    assert round(row["ratio"], 2) == 1.05 and round(row["fastest_ratio"], 2) == 1.30
    assert row["steps_us_per_step"] == 1.0 / 10 * 1e6
