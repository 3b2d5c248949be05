"""The fan-out bench on moto: a map step's marginal cost per branch stays what docs and the report say."""

from __future__ import annotations

import pytest

from bench import fanout


def test_fanout_per_branch_costs_six_write_units_and_one_join_write_whatever_the_branch_count():
    # given / when: 21 branches at concurrency 5 (small, so the test is quick)
    out = fanout.measure(n=21, max_concurrency=5, result_bytes=100)
    per = out["per_branch"]
    # then: create + claim (1 WCU each) + the completion transaction (branch + join, 2 WCU each),
    # plus a small share of the fan-in record; one join write per branch, no index write
    assert out["execution"]["status"] == "COMPLETED" and not out["execution"]["errors"]
    assert per["join_writes"] == pytest.approx(1.0)
    assert 6.0 <= per["write_units"] <= 6.3 and per["wcu_gsi"] == 0
    assert per["dynamodb_requests"]["dynamodb:TransactWriteItems"] == pytest.approx(1.0)
    assert per["dynamodb_requests"]["dynamodb:PutItem"] == pytest.approx(2.0)
