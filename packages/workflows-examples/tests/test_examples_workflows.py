"""The example workflows, run end to end on engine-core's LocalRunner (memory store, manual clock)."""

from __future__ import annotations

import datetime as dt
from importlib.metadata import entry_points

import pytest

import loom_examples
from engine_core import REGISTRY, InvalidInputError, StepContext, Status, StepStatus
from engine_core.adapters.memory import MemoryStore
from engine_core.testing import LocalRunner
from loom_examples import LEDGER, PaymentLedger, orders
from loom_examples.ledger import IdempotencyKeyReusedError

ORDER = {"order_id": "o-1001", "amount_cents": 4999, "items": [{"sku": "mug", "qty": 2}], "email": "ada@example.com"}


@pytest.fixture(autouse=True)
def _clean_ledger():
    LEDGER.reset()
    yield
    LEDGER.reset()


def _steps(runner: LocalRunner, execution_id: str):
    return {r.name: r for r in runner.history(execution_id)}


def test_examples_entry_point_registers_all_three_workflows():
    # given
    eps = [ep for ep in entry_points(group="loom.workflows") if ep.name == "examples"]
    # when
    eps[0].load()
    # then
    assert [ep.value for ep in eps] == ["loom_examples"]
    assert {"order_fulfillment", "flaky_greeting", "poison_pill"} <= set(REGISTRY.names())


def test_order_fulfillment_when_run_completes_and_charges_once():
    # given
    runner = LocalRunner()
    started_at = runner.clock.now()
    # when
    execution_id = runner.start("order_fulfillment", ORDER)
    done = runner.run_until_done(execution_id)
    # then
    assert done.status is Status.COMPLETED
    steps = _steps(runner, execution_id)
    assert list(steps) == ["reserve_inventory", "charge_payment", "wait_for_carrier_pickup", "ship_order",
                           "notify_customer"]
    assert all(r.status is StepStatus.SUCCEEDED for r in steps.values())
    assert [(c.idempotency_key, c.order_id, c.amount_cents) for c in LEDGER.charges()] == [
        (f"{execution_id}:1", "o-1001", 4999)]
    assert runner.clock.now() - started_at >= dt.timedelta(seconds=orders.CARRIER_PICKUP_WAIT_S)


def test_order_fulfillment_when_every_message_is_duplicated_charges_once():
    # given
    runner = LocalRunner()
    runner.queue.duplicate_rate = 1.0
    # when
    execution_id = runner.start("order_fulfillment", ORDER)
    done = runner.run_until_done(execution_id)
    # then
    assert done.status is Status.COMPLETED
    assert len(LEDGER.charges()) == 1
    assert {o.kind for o in runner.outcomes} >= {"stale"}


class _CrashAfterCharge(MemoryStore):
    """Dies once at the worst moment: the card was charged, the checkpoint was not written."""

    crashed = False

    def put_step(self, execution_id, record):
        charged = record.name == "charge_payment" and record.status is StepStatus.SUCCEEDED
        if charged and not self.crashed:
            self.crashed = True
            raise RuntimeError("worker died before its checkpoint")
        return super().put_step(execution_id, record)


def test_charge_payment_when_worker_dies_before_checkpoint_reruns_without_double_charge():
    # given
    store = _CrashAfterCharge()
    runner = LocalRunner(store=store)
    execution_id = runner.start("order_fulfillment", ORDER)
    # when: the crash leaves the message unacknowledged; it comes back after its visibility timeout
    done = runner.run_until_done(execution_id)
    # then
    assert store.crashed and done.status is Status.COMPLETED
    assert [str(e) for e in runner.errors] == ["worker died before its checkpoint"]
    assert LEDGER.requests == 2
    assert len(LEDGER.charges()) == 1
    assert _steps(runner, execution_id)["charge_payment"].attempts == 2


def test_order_fulfillment_when_order_id_missing_is_refused_at_start_and_nothing_runs():
    # given
    runner = LocalRunner()
    # when / then: the input model refuses it before anything is written
    with pytest.raises(InvalidInputError) as refused:
        runner.start("order_fulfillment", {"amount_cents": 100})
    assert [p["field"] for p in refused.value.problems] == ["order_id"]
    assert runner.store.metas == {} and LEDGER.charges() == []


def test_ledger_when_key_repeats_returns_first_charge_and_refuses_changed_amount(tmp_path):
    # given
    ledger = PaymentLedger(tmp_path / "ledger.jsonl")
    first = ledger.charge("e:1", order_id="o-1", amount_cents=10)
    # when
    again = PaymentLedger(tmp_path / "ledger.jsonl").charge("e:1", order_id="o-1", amount_cents=10)
    # then: a second process sees the same charge through the file
    assert again == first
    with pytest.raises(IdempotencyKeyReusedError):
        ledger.charge("e:1", order_id="o-1", amount_cents=11)
    assert len(ledger.charges()) == 1


def test_charge_payment_when_called_twice_with_same_context_charges_once():
    # given
    ctx = StepContext(execution_id="e-1", workflow="order_fulfillment", step_index=1, step_name="charge_payment",
                      attempt=1, data=dict(ORDER))
    # when
    first, second = orders.charge_payment(ctx), orders.charge_payment(ctx)
    # then
    assert first == second
    assert len(LEDGER.charges()) == 1


@pytest.mark.parametrize("failures", [0, 2, 4])
def test_flaky_greeting_when_first_attempts_fail_succeeds_on_the_next(failures):
    # given
    runner = LocalRunner()
    # when
    execution_id = runner.start("flaky_greeting", {"name": "Ada", "failures": failures})
    done = runner.run_until_done(execution_id)
    # then
    assert done.status is Status.COMPLETED
    compose = _steps(runner, execution_id)["compose_greeting"]
    assert compose.attempts == failures + 1
    assert "Hello, Ada!" in str(runner.context(execution_id))
    retried = [o for o in runner.outcomes if o.kind == "retry_scheduled"]
    assert len(retried) == failures


def test_flaky_greeting_when_failures_exceed_attempts_is_refused_at_start():
    # given
    runner = LocalRunner()
    # when / then
    with pytest.raises(InvalidInputError) as refused:
        runner.start("flaky_greeting", {"name": "Ada", "failures": 5})
    assert refused.value.problems[0]["field"] == "failures"


def test_every_example_but_the_defaults_tour_declares_an_input_model_and_publishes_its_schema():
    schemas = {wf.name: wf.input_schema() for wf in REGISTRY.all() if wf.source.startswith("loom_examples.")}
    assert schemas["defaults_tour"] is None  # it sets nothing, on purpose
    assert [name for name, schema in schemas.items() if name != "defaults_tour" and not schema] == []
    assert schemas["order_fulfillment"]["required"] == ["order_id", "amount_cents"]


def test_poison_pill_when_run_fails_after_max_attempts_with_one_dead_letter():
    # given
    runner = LocalRunner()
    # when
    execution_id = runner.start("poison_pill", {})
    done = runner.run_until_done(execution_id)
    # then
    assert done.status is Status.FAILED
    assert done.error.code == "step_error" and "PoisonError" in done.error.message
    steps = _steps(runner, execution_id)
    assert steps["swallow_poison"].attempts == loom_examples.poison.MAX_ATTEMPTS
    assert steps["swallow_poison"].status is StepStatus.FAILED and steps["swallow_poison"].is_final
    assert "never_reached" not in steps
    notices = [d for d in runner.queue.dead_letters if d.get("execution_id") == execution_id]
    assert len(notices) == 1 and notices[0]["kind"] == "loom.execution_failed"


def test_fragile_import_fails_until_its_feed_is_fixed_then_a_redrive_completes_it(tmp_path, monkeypatch):
    # given: no fix for the feed yet
    monkeypatch.setenv("LOOM_EXAMPLES_FIXES_DIR", str(tmp_path))
    runner = LocalRunner()
    eid = runner.start("fragile_import", {"feed": "payroll"})
    # when: the two-hour window passes (on the manual clock) and import_rows fails at once
    failed = runner.run_until_done(eid)
    # then
    assert failed.status is Status.FAILED and failed.current_step == 2
    assert failed.error.code == "permanent_error" and "payroll" in failed.error.message
    assert _steps(runner, eid)["import_rows"].attempts == 1
    # and when the feed is fixed and the execution redriven
    (tmp_path / "payroll").touch()
    runner.engine.operator.redrive(eid, by="test")
    done = runner.run_until_done(eid)
    assert done.status is Status.COMPLETED
    assert runner.engine.context(eid)["summary"] == "3 rows imported from payroll"
