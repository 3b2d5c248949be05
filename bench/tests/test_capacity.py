"""Capacity units from item sizes, by DynamoDB's documented rules (bench/capacity.py)."""

import base64

import pytest

from bench import capacity


@pytest.mark.parametrize(("value", "size"), [
    ({"S": "abc"}, 3),
    ({"S": "é"}, 2),  # UTF-8 bytes, not characters
    ({"N": "123"}, 3),  # ceil(3 digits / 2) + 1
    ({"N": "1000"}, 2),  # trailing zeros are trimmed
    ({"N": "-12.50"}, 3),  # sign, point and trailing zero do not count: "125"
    ({"N": "0.001"}, 2),  # leading zeros are trimmed
    ({"B": base64.b64encode(b"\x00\x01\x02").decode()}, 3),  # raw bytes, not the base64 text
    ({"B": b"\x00\x01"}, 2),
    ({"BOOL": True}, 1),
    ({"NULL": True}, 1),
    ({"SS": ["ab", "c"]}, 3),
    ({"L": [{"S": "x"}, {"N": "1"}]}, 3 + (1 + 1) + (2 + 1)),  # 3 overhead, 1 per element
    ({"M": {"k": {"S": "xy"}}}, 3 + 1 + 2 + 1),  # nested names count
])
def test_value_size_follows_the_documented_rules(value, size):
    assert capacity.value_size(value) == size


def test_item_size_is_names_plus_values():
    item = {"PK": {"S": "EXEC#1"}, "SK": {"S": "#META"}, "version": {"N": "12"}, "finalized": {"BOOL": False}}
    assert capacity.item_size(item) == (2 + 6) + (2 + 5) + (7 + 2) + (9 + 1)


def test_item_size_of_no_item_is_zero():
    assert capacity.item_size(None) == 0
    assert capacity.item_size({}) == 0


@pytest.mark.parametrize(("before", "after", "units"), [
    (0, 0, 1),  # at least one unit
    (0, 1024, 1),
    (0, 1025, 2),
    (3000, 100, 3),  # the larger of before and after
    (100, 3 * 1024 + 1, 4),
])
def test_write_units_round_up_per_kb_on_the_larger_side(before, after, units):
    assert capacity.write_units(before, after) == units


def test_transactional_writes_cost_double():
    assert capacity.write_units(0, 1500, transactional=True) == 4


@pytest.mark.parametrize(("size", "consistent", "units"), [
    (0, True, 1.0),
    (4096, True, 1.0),
    (4097, True, 2.0),
    (4097, False, 1.0),
    (100, False, 0.5),
    (10 * 1024, True, 3.0),
])
def test_read_units_round_up_per_4kb_and_halve_when_eventually_consistent(size, consistent, units):
    assert capacity.read_units(size, consistent) == units


def test_transactional_reads_cost_double():
    assert capacity.read_units(5000, consistent=True, transactional=True) == 4.0


@pytest.mark.parametrize(("before", "after", "writes"), [
    (None, None, 0),
    (None, ("DUE#0", "t1"), 1),  # enters the sparse index
    (("DUE#0", "t1"), None, 1),  # leaves it
    (("DUE#0", "t1"), ("DUE#0", "t1"), 0),  # KEYS_ONLY: nothing else propagates
    (("DUE#0", "t1"), ("DUE#0", "t2"), 2),  # key change: delete + put
])
def test_gsi_writes_by_key_change(before, after, writes):
    assert capacity.gsi_writes(before, after) == writes


def test_index_keys_is_none_for_an_item_outside_the_sparse_index():
    item = {"PK": {"S": "EXEC#1"}, "SK": {"S": "#META"}}
    assert capacity.index_keys(item, "GSI1PK", "GSI1SK") is None
    item.update(GSI1PK={"S": "DUE#3"}, GSI1SK={"S": "2026-01-01T00:00:00.000000Z"})
    assert capacity.index_keys(item, "GSI1PK", "GSI1SK") is not None


@pytest.mark.parametrize(("payload", "billed"), [(0, 1), (76, 1), (65536, 1), (65537, 2), (1024 * 1024, 16)])
def test_sqs_bills_one_request_per_64kb_chunk(payload, billed):
    assert capacity.sqs_billed_requests(payload) == billed


def test_index_entry_writes_count_a_projected_attribute_change_once_and_a_key_change_twice():
    from bench import capacity

    item = {"GSI2PK": {"S": "EXECS"}, "GSI2SK": {"S": "t#1"}, "workflow": {"S": "w"}, "list_status": {"S": "LIVE"}}
    ended = {**item, "list_status": {"S": "COMPLETED"}}
    step = {**item, "current_step": {"N": "3"}}
    entry = lambda i: capacity.index_entry(i, "GSI2PK", "GSI2SK", ("workflow", "list_status"))  # noqa: E731
    assert capacity.index_entry_writes(None, entry(item)) == 1  # start: the entry is put
    assert capacity.index_entry_writes(entry(item), entry(step)) == 0  # a step: nothing projected changed
    assert capacity.index_entry_writes(entry(item), entry(ended)) == 1  # the end: the projection changed
    moved = {**item, "GSI2SK": {"S": "t#2"}}
    assert capacity.index_entry_writes(entry(item), entry(moved)) == 2
