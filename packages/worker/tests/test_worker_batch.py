"""The partial batch response the worker answers SQS with (``loom_worker.batch``)."""

import pytest

from loom_worker.batch import NotAnSqsBatchError, partial_batch_response


def test_partial_batch_response_when_records_fail_names_each_and_runs_the_rest():
    # given
    seen = []

    def on_record(record):
        seen.append(record["messageId"])
        if record["messageId"] != "m-2":
            raise RuntimeError("boom")

    # when
    response = partial_batch_response({"Records": [{"messageId": f"m-{i}"} for i in (1, 2, 3)]}, on_record)
    # then
    assert seen == ["m-1", "m-2", "m-3"]
    assert response == {"batchItemFailures": [{"itemIdentifier": "m-1"}, {"itemIdentifier": "m-3"}]}


@pytest.mark.parametrize("event", [{}, {"Records": []}, {"Records": "m-1"}])
def test_partial_batch_response_when_the_event_is_not_an_sqs_batch_raises_saying_so(event):
    # given / when / then
    with pytest.raises(NotAnSqsBatchError, match="not an SQS batch"):
        partial_batch_response(event, lambda record: None)
