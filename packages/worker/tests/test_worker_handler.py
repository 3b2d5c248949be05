"""The worker Lambda, fed SQS batches shaped like tests/events/sqs_step_batch.json, on moto."""

from __future__ import annotations

import json
import time
import uuid

import pytest
from loom_test_support.lambda_harness import FakeContext, load_event, records_event

from loom_examples import LEDGER

ORDER = {"order_id": "o-1001", "amount_cents": 4999, "email": "ada@example.com"}


@pytest.fixture(autouse=True)
def _clean_ledger():
    LEDGER.reset()
    yield
    LEDGER.reset()


def _start(lambdas, workflow: str, payload: dict | None = None) -> str:
    """Start an execution and take its first step message off the queue, for hand-built batches."""
    execution_id = lambdas.worker.runtime.engine.start(workflow, payload or {}).execution.execution_id
    return execution_id


def _first_message_body(world) -> str:
    (message,) = world.drain(world.queue_url)
    return message["Body"]


def _step_message(execution_id: str, step: int, version: int) -> str:
    return json.dumps({"execution_id": execution_id, "step": step, "version": version})


def test_sample_event_when_its_executions_do_not_exist_acknowledges_both(lambdas, world):
    # given: the stored sample batch, whose executions were never started here, sent just now
    event = load_event("sqs_step_batch")
    for record in event["Records"]:
        record["attributes"]["SentTimestamp"] = str(int(time.time() * 1000))
    # when
    response = lambdas.worker.handler(event, FakeContext())
    # then
    assert response == {"batchItemFailures": []}
    assert world.items() == []


def test_batch_when_one_body_is_malformed_fails_only_that_record(lambdas, world):
    # given
    good = [_start(lambdas, "flaky_greeting", {"name": "Ada", "failures": 0}) for _ in range(2)]
    world.drain(world.queue_url)
    event = records_event([_step_message(good[0], 0, 1), "{not json", _step_message(good[1], 0, 1)])
    bad_id = event["Records"][1]["messageId"]
    # when
    response = lambdas.worker.handler(event, FakeContext())
    # then
    assert response == {"batchItemFailures": [{"itemIdentifier": bad_id}]}
    for execution_id in good:
        assert world.meta(execution_id)["current_step"]["N"] == "1"


@pytest.mark.parametrize("body", [
    "not json at all",
    '{"execution_id": "not-a-uuid", "step": 0, "version": 1}',
    '{"execution_id": "7d9f1c2e-3b4a-4c5d-8e6f-0a1b2c3d4e5f", "step": -1, "version": 1}',
    '{"execution_id": "7d9f1c2e-3b4a-4c5d-8e6f-0a1b2c3d4e5f", "step": 0, "version": 1, "result": {"x": 1}}',
    "",
])
def test_malformed_body_when_redelivered_ends_in_dlq_without_touching_state(lambdas, world, body):
    # given
    world.sqs.send_message(QueueUrl=world.queue_url, MessageBody=body or " ")
    # when: SQS redelivers it until maxReceiveCount, then moves it on the next receive
    failures = [lambdas.pump.deliver() for _ in range(4)]
    # then
    assert failures[:3] == [1, 1, 1] and failures[3] == 0
    assert all(r["batchItemFailures"] for r in lambdas.pump.responses)
    expected = json.loads(body) if body.startswith("{") else body or " "
    assert [d.get("raw", d) for d in world.dead_letters()] == [expected]
    assert world.visible_count(world.queue_url) == 0
    assert world.items() == []


def test_duplicate_message_when_step_already_done_is_acknowledged_and_changes_nothing(lambdas, world):
    # given: the first delivery ran step 0 and enqueued step 1
    execution_id = _start(lambdas, "order_fulfillment", ORDER)
    body = _first_message_body(world)
    assert lambdas.worker.handler(records_event([body]), FakeContext()) == {"batchItemFailures": []}
    before, queued = world.items(), world.drain(world.queue_url)
    # when: SQS delivers the same message again, twice in one batch
    response = lambdas.worker.handler(records_event([body, body]), FakeContext())
    # then
    assert response == {"batchItemFailures": []}
    assert world.items() == before
    assert world.visible_count(world.queue_url) == 0
    assert [json.loads(m["Body"])["step"] for m in queued] == [1]
    assert world.meta(execution_id)["version"]["N"] == "3"  # start, claim of step 0, its commit


def test_stale_message_when_version_moved_on_is_acknowledged_and_changes_nothing(lambdas, world):
    # given
    execution_id = _start(lambdas, "order_fulfillment", ORDER)
    lambdas.worker.handler(records_event([_first_message_body(world)]), FakeContext())
    world.drain(world.queue_url)
    before = world.items()
    # when: a message for the current step at an old version, and one from the future
    response = lambdas.worker.handler(records_event([
        _step_message(execution_id, 1, 1), _step_message(execution_id, 5, 9)]), FakeContext())
    # then
    assert response == {"batchItemFailures": []}
    assert world.items() == before
    assert world.visible_count(world.queue_url) == 0


def test_message_when_execution_is_terminal_is_acknowledged_and_changes_nothing(lambdas, world):
    # given
    execution_id = _start(lambdas, "flaky_greeting", {"name": "Ada", "failures": 0})
    assert lambdas.pump.run_until_settled(execution_id) == "COMPLETED"
    before = world.items()
    # when
    response = lambdas.worker.handler(records_event([_step_message(execution_id, 0, 1),
                                                     _step_message(execution_id, 2, 3)]), FakeContext())
    # then
    assert response == {"batchItemFailures": []}
    assert world.items() == before
    assert world.visible_count(world.queue_url) == 0
    assert world.dead_letters() == []


def test_order_fulfillment_when_pumped_completes_with_one_charge_and_small_messages(lambdas, world):
    # given
    execution_id = _start(lambdas, "order_fulfillment", ORDER)
    # when
    status = lambdas.pump.run_until_settled(execution_id)
    # then
    assert status == "COMPLETED"
    steps = lambdas.worker.runtime.engine.history(execution_id)
    assert [(s.name, s.status.value) for s in steps] == [
        ("reserve_inventory", "SUCCEEDED"), ("charge_payment", "SUCCEEDED"), ("wait_for_carrier_pickup", "SUCCEEDED"),
        ("ship_order", "SUCCEEDED"), ("notify_customer", "SUCCEEDED")]
    assert len(LEDGER.charges()) == 1
    assert lambdas.pump.bodies and all(len(b.encode()) < 4096 for b in lambdas.pump.bodies)
    assert {tuple(sorted(json.loads(b))) for b in lambdas.pump.bodies} == {("execution_id", "step", "version")}
    assert world.dead_letters() == []


def test_flaky_step_when_it_fails_twice_is_retried_and_completes(lambdas, world):
    # given
    execution_id = _start(lambdas, "flaky_greeting", {"name": "Ada", "failures": 2})
    # when
    status = lambdas.pump.run_until_settled(execution_id)
    # then
    assert status == "COMPLETED"
    compose = lambdas.worker.runtime.engine.history(execution_id)[0]
    assert compose.attempts == 3 and compose.status.value == "SUCCEEDED"


def test_poison_step_when_attempts_run_out_fails_execution_with_one_dead_letter(lambdas, world):
    # given
    execution_id = _start(lambdas, "poison_pill")
    # when
    status = lambdas.pump.run_until_settled(execution_id)
    for _ in range(3):  # late duplicates of the last message change nothing, send nothing
        lambdas.worker.handler(records_event([_step_message(execution_id, 1, 6)]), FakeContext())
    # then
    assert status == "FAILED"
    execution = lambdas.worker.runtime.engine.get(execution_id)
    assert execution.error.code == "step_error" and "PoisonError" in execution.error.message
    poison = lambdas.worker.runtime.engine.history(execution_id)[1]
    assert (poison.name, poison.status.value, poison.attempts, poison.is_final) == ("swallow_poison", "FAILED", 3, True)
    assert "PoisonError" in poison.error.message
    notices = world.dead_letters()
    assert len(notices) == 1
    assert notices[0]["execution_id"] == execution_id and notices[0]["kind"] == "loom.execution_failed"
    assert all(not r["batchItemFailures"] for r in lambdas.pump.responses)


def test_batch_when_time_is_too_short_fails_every_record_and_writes_nothing(lambdas, world):
    # given: steps of these workflows need their 10 s timeout plus a 3 s margin
    ids = [_start(lambdas, "flaky_greeting", {"name": str(i), "failures": 0}) for i in range(3)]
    world.drain(world.queue_url)
    event = records_event([_step_message(i, 0, 1) for i in ids])
    before = world.items()
    # when
    response = lambdas.worker.handler(event, FakeContext(remaining_ms=12_000))
    # then
    assert response == {"batchItemFailures": [{"itemIdentifier": r["messageId"]} for r in event["Records"]]}
    assert world.items() == before
    assert world.visible_count(world.queue_url) == 0


class _TightFor(FakeContext):
    """Plenty of time, except while the named execution's record is handled (a slow record before it)."""

    def __init__(self, tight_for: str):
        super().__init__()
        self.tight_for, self.current = tight_for, None

    def get_remaining_time_in_millis(self) -> int:
        return 2_000 if self.current == self.tight_for else 60_000


def test_batch_when_one_record_cannot_fit_it_alone_is_left_and_the_others_still_run(lambdas, world, monkeypatch):
    # given
    ids = [_start(lambdas, "flaky_greeting", {"name": str(i), "failures": 0}) for i in range(3)]
    world.drain(world.queue_url)
    unknown = str(uuid.uuid4())
    event = records_event([_step_message(ids[0], 0, 1), _step_message(ids[1], 0, 1), _step_message(unknown, 0, 1),
                           _step_message(ids[2], 0, 1)])
    context, processed = _TightFor(ids[1]), []
    original = lambdas.worker.runtime.engine.process

    def process(message, **kw):
        context.current = message.execution_id
        processed.append(message.execution_id)
        return original(message, **kw)

    monkeypatch.setattr(lambdas.worker.runtime.engine, "process", process)
    # when
    response = lambdas.worker.handler(event, context)
    # then: only the record that found too little time is left for redelivery, before any write;
    # the records after it (an unknown execution, another step) were still handled
    assert response == {"batchItemFailures": [{"itemIdentifier": event["Records"][1]["messageId"]}]}
    assert processed == [ids[0], ids[1], unknown, ids[2]]
    assert world.meta(ids[0])["current_step"]["N"] == "1" and world.meta(ids[2])["current_step"]["N"] == "1"
    assert world.meta(ids[1])["version"]["N"] == "1"


def test_engine_log_lines_when_step_runs_are_json_with_execution_fields(lambdas, world, logs):
    # given
    execution_id = _start(lambdas, "flaky_greeting", {"name": "Ada", "failures": 0})
    event = records_event([_first_message_body(world)])
    # when
    lambdas.worker.handler(event, FakeContext())
    # then
    lines = logs.lines()
    started = [line for line in lines if line["message"] == "step started"]
    assert started, [line["message"] for line in lines]
    assert started[0]["execution_id"] == execution_id
    assert started[0]["workflow"] == "flaky_greeting"
    assert (started[0]["step"], started[0]["attempt"]) == ("compose_greeting", 1)
    assert started[0]["level"] == "INFO" and started[0]["service"] == "loom-test"
    assert "function_request_id" in started[0]
    handled = [line for line in lines if line["message"] == "message handled"]
    assert handled[0]["outcome"] == "advanced" and handled[0]["execution_id"] == execution_id
    # each line of the record names its message, so a delivery can be joined to its outcome
    message_id = event["Records"][0]["messageId"]
    assert handled[0]["message_id"] == started[0]["message_id"] == message_id


def test_metrics_when_batch_runs_are_emitted_in_embedded_metric_format(lambdas, world, capsys):
    # given
    _start(lambdas, "flaky_greeting", {"name": "Ada", "failures": 0})
    body = _first_message_body(world)
    capsys.readouterr()
    # when
    lambdas.worker.handler(records_event([body]), FakeContext())
    # then
    blobs = [json.loads(line) for line in capsys.readouterr().out.splitlines() if '"_aws"' in line]
    assert len(blobs) == 1
    (directive,) = blobs[0]["_aws"]["CloudWatchMetrics"]
    assert directive["Namespace"] == "LoomTest"
    names = {m["Name"] for m in directive["Metrics"]}
    assert {"StepsSucceeded", "StepDuration"} <= names
    assert blobs[0]["StepsSucceeded"] == [1.0]


def test_due_retry_when_first_delivery_lacks_time_still_completes_after_the_lease(lambdas, world, clock):
    # given: attempt 1 failed; its retry message arrives at an invocation with too little time left
    execution_id = _start(lambdas, "flaky_greeting", {"name": "Ada", "failures": 1})
    lambdas.pump.deliver()
    world.sqs.purge_queue(QueueUrl=world.queue_url)  # the delayed retry message, on real time
    clock.advance(5)
    retry = _step_message(execution_id, 0, 3)  # start, claim of attempt 1, its retry
    short = lambdas.worker.handler(records_event([retry]), FakeContext(remaining_ms=5_000))
    # when: SQS redelivers it to a roomy invocation, and the schedule keeps firing
    again = lambdas.worker.handler(records_event([retry]), FakeContext())
    status = lambdas.pump.run_until_settled(execution_id)
    # then: nothing is lost; the step's second attempt ran and the execution finished
    assert len(short["batchItemFailures"]) == 1 and again == {"batchItemFailures": []}
    assert status == "COMPLETED"
    assert lambdas.worker.runtime.engine.history(execution_id)[0].attempts == 2


def test_defaults_tour_on_every_default_completes_in_a_60_s_worker(monkeypatch, clock, logs):
    # given: a worker whose timeout is Lambda's 60 s, and a workflow that sets no timeout or retry
    from loom_test_support.lambda_harness import Lambdas, aws_world

    with aws_world(monkeypatch, LOOM_FUNCTION_TIMEOUT_S="60", LOOM_MAX_CHAIN_STEPS="100") as world:
        lambdas = Lambdas(world, clock, logs)
        execution_id = _start(lambdas, "defaults_tour", {"text": "three little words"})
        # when
        status = lambdas.pump.run_until_settled(execution_id)
        # then: the derived budget ran every step in a 60 s invocation, the default policy retried once
        assert lambdas.worker.runtime.settings.default_step_timeout_s == 55.0
        assert status == "COMPLETED"
        history = lambdas.worker.runtime.engine.history(execution_id)
        assert [(r.name, r.status.value, r.attempts) for r in history] == [
            ("count_words", "SUCCEEDED", 1), ("flaky_double", "SUCCEEDED", 2), ("sleep_2s", "SUCCEEDED", 1),
            ("summarize", "SUCCEEDED", 1)]


def test_worker_start_when_a_step_budget_cannot_fit_the_timeout_is_refused_naming_both(monkeypatch, clock, logs):
    # given: the examples set step_timeout_s = 10; a 12 s worker cannot fit 10 s plus the margin
    from loom_test_support.lambda_harness import Lambdas, aws_world

    from engine_core import ConfigurationError

    with aws_world(monkeypatch, LOOM_FUNCTION_TIMEOUT_S="12"):
        # when / then
        with pytest.raises(ConfigurationError) as refused:
            Lambdas(world=None, clock=clock, logs=logs).worker  # noqa: B018 (the import is the start)
    text = str(refused.value)
    assert "12 s" in text and "10 s budget" in text and "needs 13.25 s" in text and "worker_timeout_s" in text


def test_chained_delivery_runs_steps_back_to_back_until_the_sleep(monkeypatch, clock, logs):
    # given: chaining on (the deployed default)
    from loom_test_support.lambda_harness import Lambdas, aws_world

    with aws_world(monkeypatch, LOOM_MAX_CHAIN_STEPS="100") as world:
        lambdas = Lambdas(world, clock, logs)
        execution_id = _start(lambdas, "order_fulfillment", ORDER)
        # when: one delivery
        response = lambdas.worker.handler(records_event([_first_message_body(world)]), FakeContext())
        # then: reserve and charge ran in that one invocation; the sleep handed on through the queue
        assert response == {"batchItemFailures": []}
        meta = world.meta(execution_id)
        assert (meta["status"]["S"], meta["current_step"]["N"]) == ("SLEEPING", "2")  # it waits at the sleep
        names = [r.name for r in lambdas.worker.runtime.engine.history(execution_id)]
        assert names[:2] == ["reserve_inventory", "charge_payment"]


class _SlowFirstRecord(FakeContext):
    """A 60 s invocation (the Terraform default) whose first record's step takes 5 s: after it, every
    record with the default 55 s budget finds too little time left."""

    def __init__(self):
        super().__init__()
        self.handled = 0

    def get_remaining_time_in_millis(self) -> int:
        return 59_500 if self.handled == 0 else 54_500


def test_full_batch_on_every_default_runs_what_fits_and_puts_the_rest_back_on_the_queue_at_once(monkeypatch, clock, logs):
    # given: the Terraform defaults (60 s worker, batch of 10, the default step budget) and ten ready executions
    from loom_test_support.lambda_harness import Lambdas, aws_world, sqs_event

    with aws_world(monkeypatch, LOOM_FUNCTION_TIMEOUT_S="60") as world:
        lambdas = Lambdas(world, clock, logs)
        ids = [_start(lambdas, "defaults_tour", {"n": i}) for i in range(10)]
        got = world.sqs.receive_message(QueueUrl=world.queue_url, MaxNumberOfMessages=10, AttributeNames=["All"],
                                        VisibilityTimeout=360)
        messages = got["Messages"]
        assert len(messages) == 10 and world.visible_count(world.queue_url) == 0
        arn = world.sqs.get_queue_attributes(QueueUrl=world.queue_url, AttributeNames=["QueueArn"])
        context = _SlowFirstRecord()
        original = lambdas.worker.runtime.engine.process

        def process(message, **kw):
            try:
                return original(message, **kw)
            finally:
                context.handled += 1

        monkeypatch.setattr(lambdas.worker.runtime.engine, "process", process)
        # when
        response = lambdas.worker.handler(sqs_event(messages, arn["Attributes"]["QueueArn"]), context)
        # then: the first ran; the nine that could not start were written nothing and are visible again now,
        # not after the 360 s visibility timeout
        failed = {f["itemIdentifier"] for f in response["batchItemFailures"]}
        assert len(failed) == 9 and messages[0]["MessageId"] not in failed
        assert [world.meta(i)["version"]["N"] for i in ids[1:]] == ["1"] * 9
        assert world.visible_count(world.queue_url) >= 9


def test_records_that_waited_half_a_lease_mark_the_backlog_once_and_change_no_execution(lambdas, world):
    # given: a finished execution, and its step messages received after a long wait in the queue
    execution_id = _start(lambdas, "flaky_greeting", {"name": "Ada", "failures": 0})
    assert lambdas.pump.run_until_settled(execution_id) == "COMPLETED"
    before = world.items()
    lease_s = lambdas.worker.runtime.settings.lease_s
    # when
    response = lambdas.worker.handler(records_event([_step_message(execution_id, 0, 1), _step_message(execution_id, 2, 3)],
                                                    sent_s_ago=lease_s), FakeContext())
    # then: one mark item (the two records came within a quarter lease), the execution untouched
    assert response == {"batchItemFailures": []}
    added = [i for i in world.items() if i not in before]
    assert [(i["PK"]["S"], i["SK"]["S"]) for i in added] == [("QUEUE#backlog", "#MARK")]
    waited_ms = int(added[0]["observed_ms"]["N"]) - int(added[0]["visible_ms"]["N"])
    assert lease_s * 1000 <= waited_ms < lease_s * 1000 + 60_000
    assert [i for i in world.items() if i["PK"]["S"] != "QUEUE#backlog"] == before


def test_a_batch_without_records_is_answered_with_no_failures(lambdas, world):
    # when: an event with no Records (and one with an empty list)
    replies = [lambdas.worker.handler({}, FakeContext()), lambdas.worker.handler({"Records": []}, FakeContext())]
    # then
    assert replies == [{"batchItemFailures": []}] * 2
    assert world.items() == []
