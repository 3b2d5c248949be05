"""The cost ledger against the bench's wire counts, and the ledger section's verdicts (a ledger off the wire by more
than 5% says so)."""

from __future__ import annotations

import copy

import pytest

from bench.ledger import TOLERANCE, _off_by
from bench.report.ledger import ledger_section

CASE = {"deliveries": 100, "outcomes": {"completed": 20}, "executions": 20, "with_ledger": 20,
        "ledger": {"requests": 440, "units": 440.0, "messages": 20},
        "wire": {"requests": 440, "units": 440.0, "messages": 20, "units_by_size_rules": 880.0},
        "off_by": {"requests": 0.0, "units": 0.0, "messages": 0.0}, "within_tolerance": True}
RESULT = {"executions": 20, "n_steps": 5, "tolerance": TOLERANCE, "cases": {"chained": CASE},
          "item_bytes": {"this execution": {"without": 539, "with": 593, "added": 54}},
          "cpu": {"steps": 200, "repeats": 9, "on_us": 120.0, "off_us": 110.0, "added_us": 10.0,
                  "runs_on_us": [120.0], "runs_off_us": [110.0]}}


def _render(result) -> str:
    out: list[str] = []
    ledger_section(out.append, result)
    return "\n".join(out)


def test_off_by_is_relative_to_the_wire_and_exact_when_equal():
    assert _off_by(440, 440) == 0.0
    assert _off_by(420, 440) == pytest.approx(-20 / 440)
    assert _off_by(1, 0) == float("inf")


def test_the_section_shows_each_count_beside_the_wire_and_the_overhead():
    text = _render(RESULT)
    assert "| chained | 100 | 440 / 440 (exact) | 440 / 440 (exact) | 20 / 20 (exact) | yes |" in text
    assert "| execution item, this execution (bytes, DynamoDB's size rules) | 539 | 593 | 54 |" in text
    assert "| 110 | 120 | +10 |" in text
    assert "`.venv/bin/python -m bench --only ledger`" in text


def test_a_ledger_off_by_more_than_the_tolerance_is_flagged():
    result = copy.deepcopy(RESULT)
    case = result["cases"]["chained"]
    case["ledger"]["requests"], case["off_by"]["requests"], case["within_tolerance"] = 400, -40 / 440, False
    assert "| 400 / 440 (-9.1%) |" in _render(result) and "| **no** |" in _render(result)


@pytest.mark.parametrize("settings, fail_once_at", [({}, None), ({"max_chain_steps": 1}, 1)],
                         ids=["chained", "one step per delivery with a retry"])
def test_the_ledger_equals_the_wire_counts_of_the_same_deliveries(settings, fail_once_at):
    # given/when: three executions through the engine on moto, the wire recorder on every client
    from bench.ledger import compare

    result = compare(executions=3, n_steps=3, settings=settings, fail_once_at=fail_once_at)
    # then: every execution has a ledger, and the sums equal the wire's requests, reported units and messages
    assert result["with_ledger"] == 3 and result["deliveries"] >= 3
    assert result["ledger"]["requests"] == result["wire"]["requests"] > 0
    assert result["ledger"]["units"] == pytest.approx(result["wire"]["units"]) and result["wire"]["units"] > 0
    assert result["ledger"]["messages"] == result["wire"]["messages"] >= 3
    assert result["within_tolerance"]
