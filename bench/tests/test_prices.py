"""Dollar and free-tier arithmetic (bench/prices.py, bench/analysis.py) and the import-time parser."""

import math

import pytest

from bench import analysis, prices
from bench.coldstart import self_time_by_package, top_level_cumulative_us


def test_every_price_names_its_source_and_a_positive_amount():
    for p in prices.AWS_PRICES + prices.PEER_PRICES:
        assert p.usd > 0 and p.source and p.unit


def test_step_cost_breakdown_per_million_steps():
    cost = prices.StepCost(lambda_invocations=1, dynamodb_wru=4, dynamodb_rru=1, sqs_billed_requests=3,
                           memory_mb=256, billed_ms=100)
    b = cost.breakdown_usd_per_million()
    assert b["Lambda requests"] == pytest.approx(0.20)
    assert b["Lambda duration"] == pytest.approx(0.025 * 0.0000166667 * 1e6)  # 0.25 GB x 0.1 s
    assert b["DynamoDB writes"] == pytest.approx(2.50)
    assert b["DynamoDB reads"] == pytest.approx(0.125)
    assert b["SQS requests"] == pytest.approx(1.20)
    assert cost.usd_per_million() == pytest.approx(sum(b.values()))


def test_provisioned_free_tier_is_a_rate_over_the_month():
    step = prices.StepCost(lambda_invocations=1, dynamodb_wru=10, dynamodb_rru=1, sqs_billed_requests=2)
    none = prices.FixedMonthly(0, 0, 0, 0, 0)
    fit = prices.free_tier_fit(step, wcu_per_step=10, rcu_per_step=1, fixed=none)
    assert fit.dynamodb_wcu == pytest.approx(25 * 2_592_000 / 10)
    assert fit.dynamodb_rcu == pytest.approx(25 * 2_592_000)
    assert fit.lambda_requests == pytest.approx(1_000_000)
    assert fit.sqs_requests == pytest.approx(500_000)
    assert fit.binding() == ("SQS requests (1M/month)", pytest.approx(500_000))


def test_fixed_usage_is_deducted_before_steps_and_never_goes_negative():
    step = prices.StepCost(lambda_invocations=1, dynamodb_wru=1, dynamodb_rru=1, sqs_billed_requests=1)
    fixed = prices.FixedMonthly(lambda_invocations=2_000_000, gb_seconds=0, dynamodb_wcu=0, dynamodb_rcu=0,
                                sqs_requests=400_000)
    fit = prices.free_tier_fit(step, 1, 1, fixed)
    assert fit.lambda_requests == 0
    assert fit.sqs_requests == pytest.approx(600_000)


def test_zero_per_step_use_fits_without_bound():
    step = prices.StepCost(lambda_invocations=0, dynamodb_wru=0, dynamodb_rru=0, sqs_billed_requests=0)
    fit = prices.free_tier_fit(step, 0, 0, prices.FixedMonthly(0, 0, 0, 0, 0))
    assert math.isinf(fit.lambda_requests)


def test_idle_esm_polls_and_sweeper_ticks_per_month():
    assert prices.idle_esm_receives_per_month(pollers=5, long_poll_s=20) == 648_000
    assert prices.SWEEPER_TICKS_PER_MONTH == 43_200
    assert analysis.sweeper_idle_rcu_per_tick(16) == 8.0


def test_all_in_spreads_the_per_execution_cost_over_its_steps():
    per_step = {"requests": {"a": 2.0}, "write_units": 10.0}
    fixed = {"requests": {"a": 5.0, "b": 10.0}, "write_units": 5.0}
    assert analysis.all_in(per_step, fixed, steps=5) == {"requests": {"a": 3.0, "b": 2.0}, "write_units": 11.0}


IMPORTTIME = """\
import time: self [us] | cumulative | imported package
import time:       100 |        100 |   engine_core.clock
import time:      2000 |       5000 |     pydantic.main
import time:       300 |       5300 |   engine_core
import time:       700 |       9000 | loom_worker.handler
import time:        50 |         50 | loom_worker
"""


def test_importtime_parser_takes_the_top_level_line():
    assert top_level_cumulative_us(IMPORTTIME, "loom_worker.handler") == 9000
    assert top_level_cumulative_us(IMPORTTIME, "engine_core") == 5300
    assert top_level_cumulative_us(IMPORTTIME, "missing") is None


def test_importtime_self_time_by_package():
    assert self_time_by_package(IMPORTTIME)[:2] == [("pydantic", 2.0), ("loom_worker", 0.75)]
