"""The handlers' shared Lambda setup: the SQS partial batch answer (Powertools is in every Lambda zip)."""

from __future__ import annotations

import pytest

pytest.importorskip("aws_lambda_powertools")

from engine_core.adapters.lambda_runtime import SqsRecord, sqs_partial_batch  # noqa: E402


def _event(*ids: str) -> dict:
    return {"Records": [{"messageId": i, "body": f"body-{i}", "receiptHandle": "rh"} for i in ids]}


def test_partial_batch_when_some_records_raise_names_only_those():
    # given: a handler that fails the second record
    seen: list[tuple[str, str]] = []

    def handle(record: SqsRecord) -> None:
        seen.append((record.message_id, record.body))
        if record.message_id == "b":
            raise RuntimeError("redeliver me")

    # when
    response = sqs_partial_batch(_event("a", "b", "c"), handle)

    # then: every record ran, in order; only the failed one is named
    assert seen == [("a", "body-a"), ("b", "body-b"), ("c", "body-c")]
    assert response == {"batchItemFailures": [{"itemIdentifier": "b"}]}


def test_partial_batch_when_every_record_raises_answers_rather_than_raising():
    # given / when
    response = sqs_partial_batch(_event("a", "b"), lambda record: 1 / 0)

    # then: an answer naming all of them, not an invocation error
    assert response == {"batchItemFailures": [{"itemIdentifier": "a"}, {"itemIdentifier": "b"}]}


def test_partial_batch_when_the_event_is_not_an_sqs_batch_raises_value_error():
    # given / when / then
    with pytest.raises(ValueError, match="Records"):
        sqs_partial_batch({"detail-type": "Scheduled Event"}, lambda record: None)
    assert sqs_partial_batch({"Records": []}, lambda record: None) == {"batchItemFailures": []}
