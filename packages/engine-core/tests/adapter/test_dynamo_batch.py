"""The batched reads of execution items (``BatchGetItem``) when DynamoDB leaves keys unprocessed, as a
throttled table does (moto never does: the client here leaves some on request)."""

from __future__ import annotations

import pytest
from test_store_contract import INPUT, new_execution

from engine_core.adapters import _dynamo_batch
from engine_core.errors import StorageError


@pytest.fixture
def throttled(dynamo_client_factory, monkeypatch):
    """A DynamoDB store whose BatchGetItem leaves every key unprocessed for its first ``throttled.calls``
    calls; the backoffs it waits are recorded, not slept."""
    store = dynamo_client_factory()
    real = store.client.batch_get_item
    state = {"throttled_calls": 0, "calls": 0, "slept": []}

    def batch_get_item(RequestItems, **kw):
        state["calls"] += 1
        if state["calls"] <= state["throttled_calls"]:
            return {"Responses": {}, "UnprocessedKeys": RequestItems}
        return real(RequestItems=RequestItems, **kw)

    monkeypatch.setattr(store.client, "batch_get_item", batch_get_item)
    monkeypatch.setattr(_dynamo_batch.time, "sleep", state["slept"].append)
    for n in range(3):
        store.create(new_execution(n + 1), INPUT)
    return store, state


def test_unprocessed_keys_are_asked_again_after_a_growing_backoff(throttled):
    store, state = throttled
    state["throttled_calls"] = 3
    # when
    found = _dynamo_batch.statuses(store, [new_execution(n + 1).execution_id for n in range(3)])
    # then: every status, read at the 4th call, after three waits each longer than the one before
    assert len(found) == 3 and state["calls"] == 4
    assert len(state["slept"]) == 3 and state["slept"] == sorted(state["slept"]) and state["slept"][0] > 0


def test_keys_still_unprocessed_after_every_try_fail_the_read_retryably_instead_of_being_left_out(throttled):
    store, state = throttled
    state["throttled_calls"] = 100
    # when
    with pytest.raises(StorageError) as raised:
        _dynamo_batch.statuses(store, [new_execution(n + 1).execution_id for n in range(3)])
    # then
    assert state["calls"] == _dynamo_batch.TRIES and raised.value.retryable
    assert "left 3 of 3 keys unprocessed" in str(raised.value) and "read capacity" in str(raised.value)


def test_an_execution_named_twice_is_read_once(throttled):
    # given: a list page that named one execution twice (seen in two partitions of the list index)
    store, state = throttled
    eid = new_execution(1).execution_id
    # when: DynamoDB refuses a BatchGetItem whose keys repeat one ("Provided list of item keys contains duplicates")
    found = _dynamo_batch.statuses(store, [eid, new_execution(2).execution_id, eid])
    # then
    assert set(found) == {eid, new_execution(2).execution_id} and state["calls"] == 1


def test_a_list_page_shows_an_execution_seen_in_two_partitions_once(dynamo_client_factory, monkeypatch):
    # given: the list index's partitions are read one after another; an execution whose partition changed
    # between two of those reads is in both answers
    store = dynamo_client_factory()
    store.create(new_execution(1), INPUT)
    real = store.client.query
    seen: list = []

    def query(**args):
        resp = real(**args)
        seen.extend(resp.get("Items", []))
        return resp if resp.get("Items") or not seen else {**resp, "Items": seen[:1]}

    monkeypatch.setattr(store.client, "query", query)
    # when
    page = store.query_list(limit=10)
    # then
    assert [e.execution_id for e in page.entries] == [new_execution(1).execution_id], page.entries
