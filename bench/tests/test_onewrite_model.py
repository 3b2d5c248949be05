"""The one-write step's arithmetic (``bench/report/onewrite.py``), from stored item sizes."""

from __future__ import annotations

from bench.report.onewrite import best, item_sizes, model


def test_model_of_a_100_byte_record_folded_every_two_steps_costs_half_a_unit_more_than_today():
    m = model(meta=828, record=407, fold_every=2)

    assert (m["now"], m["carried"], m["fold"], m["one_write"]) == (2, 2.0, 0.5, 2.5)
    assert (m["requests_now"], m["requests_one_write"]) == (2.0, 1.5)


def test_best_fold_interval_of_a_10_kb_record_is_every_step_and_still_twice_todays_units():
    m = best(meta=828, record=10_547)

    assert m["k"] == 1 and m["now"] == 12 and m["one_write"] == 23


def test_item_sizes_take_the_median_stored_size_of_the_execution_item_and_of_a_step_record():
    trace = {"happy": [
        {"api": "dynamodb:PutItem", "error": None, "items": [["#META", 740, 828]]},
        {"api": "dynamodb:PutItem", "error": None, "items": [["STEP#001#a", 0, 407]]},
        {"api": "dynamodb:PutItem", "error": "ConditionalCheckFailed", "items": [["STEP#001#a", 407, 9999]]},
        {"api": "dynamodb:Query", "error": None, "items": [["examined", 828, 828]]},
        {"api": "dynamodb:PutItem", "error": None, "items": [["#META", 828, 830]]},
        {"api": "dynamodb:PutItem", "error": None, "items": [["STEP#002#b", 0, 409]]},
    ]}

    assert item_sizes(trace) == (829, 408)
    assert item_sizes({"happy": []}) is None
