"""The harness finds the repository's event files and shapes events as the Lambda service does."""

from __future__ import annotations

import json

from loom_test_support.lambda_harness import EVENTS_DIR, load_event, records_event


def test_load_event_when_every_event_file_is_read_returns_its_json() -> None:
    # given
    names = sorted(p.stem for p in EVENTS_DIR.glob("*.json"))

    # when
    events = {name: load_event(name) for name in names}

    # then
    assert {"sqs_step_batch", "eventbridge_scheduled", "function_url_get_execution"} <= set(names)
    assert all(events[name] == json.loads((EVENTS_DIR / f"{name}.json").read_text()) for name in names)


def test_records_event_when_given_bodies_keeps_the_sample_record_shape() -> None:
    # given
    sample = load_event("sqs_step_batch")["Records"][0]

    # when
    event = records_event(['{"a": 1}', '{"b": 2}'])

    # then
    assert [r["body"] for r in event["Records"]] == ['{"a": 1}', '{"b": 2}']
    assert set(event["Records"][0]) == set(sample)
