"""The worker's partial batch response (``answer_batch``): the records that raised are named, the others are not."""

from __future__ import annotations

import pytest

from engine_core.adapters.sqs_records import answer_batch


def _event(*ids: str) -> dict:
    return {"Records": [{"messageId": i, "receiptHandle": f"rh-{i}", "body": "{}", "attributes": {}} for i in ids]}


def test_the_records_that_raised_are_named_in_order_and_every_record_is_handed_over_once():
    # given
    seen = []

    def on_record(record):
        seen.append(record["messageId"])
        if record["messageId"] in ("b", "d"):
            raise RuntimeError("redeliver me")
        return "advanced"

    # when
    reply = answer_batch(_event("a", "b", "c", "d"), on_record)
    # then
    assert seen == ["a", "b", "c", "d"]
    assert reply == {"batchItemFailures": [{"itemIdentifier": "b"}, {"itemIdentifier": "d"}]}


def test_a_batch_whose_every_record_failed_is_answered_not_raised():
    def on_record(record):
        raise ValueError("no room")

    assert answer_batch(_event("a", "b"), on_record) == {
        "batchItemFailures": [{"itemIdentifier": "a"}, {"itemIdentifier": "b"}]}


def test_what_is_not_an_exception_ends_the_invocation():
    # given: an interrupt is not a record's failure: the invocation ends and SQS redelivers the whole batch
    def on_record(record):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        answer_batch(_event("a", "b"), on_record)
