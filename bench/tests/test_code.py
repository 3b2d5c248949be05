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
