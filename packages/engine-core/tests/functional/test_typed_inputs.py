"""A workflow's ``input_model`` (pydantic): starts are validated, nothing is written for a bad input, the
steps see the validated values, and the JSON Schema is published."""

from __future__ import annotations

import pytest
from pydantic import BaseModel, Field

from engine_core import InvalidInputError, RegistrationError, Registry, Status, workflow
from engine_core.testing import LocalRunner


class Order(BaseModel):
    order_id: str = Field(min_length=1)
    amount_cents: int = Field(gt=0)
    gift: bool = False


def make() -> LocalRunner:
    registry = Registry()

    def charge(ctx):
        return {"charged": ctx["amount_cents"], "kinds": [type(ctx["amount_cents"]).__name__, type(ctx["gift"]).__name__]}

    @workflow("typed_order", registry=registry)
    class TypedOrder:
        steps = [charge]
        input_model = Order

    def echo(ctx):
        return {"echo": dict(ctx)}

    @workflow("untyped", registry=registry)
    class Untyped:
        steps = [echo]

    return LocalRunner(registry)


def test_steps_receive_the_validated_values_with_defaults_and_coercion():
    runner = make()
    eid = runner.start("typed_order", {"order_id": "o-1", "amount_cents": "1200"})
    assert runner.run_until_done(eid).status is Status.COMPLETED
    assert runner.context(eid)["kinds"] == ["int", "bool"] and runner.context(eid)["gift"] is False


def test_an_invalid_input_names_every_field_and_writes_nothing():
    runner = make()
    with pytest.raises(InvalidInputError) as refused:
        runner.start("typed_order", {"amount_cents": -5, "gift": "maybe"})
    fields = {p["field"]: p["type"] for p in refused.value.problems}
    assert fields == {"order_id": "missing", "amount_cents": "greater_than", "gift": "bool_parsing"}
    assert "order_id" in str(refused.value) and runner.store.metas == {} and runner.queue.sent == 0


def test_a_workflow_without_a_model_takes_any_object_as_before():
    runner = make()
    eid = runner.start("untyped", {"anything": [1, 2], "goes": None})
    runner.run_until_done(eid)
    assert runner.context(eid)["echo"] == {"anything": [1, 2], "goes": None}


def test_describe_publishes_the_input_json_schema():
    runner = make()
    schema = runner.engine.registry.get("typed_order").input_schema()
    assert schema["required"] == ["order_id", "amount_cents"]
    assert schema["properties"]["amount_cents"] == {"exclusiveMinimum": 0, "title": "Amount Cents", "type": "integer"}
    assert runner.engine.registry.get("untyped").input_schema() is None


def test_an_input_model_that_is_not_a_pydantic_model_is_refused_at_registration():
    with pytest.raises(RegistrationError, match="input_model"):
        @workflow("bad_model", registry=Registry())
        class Bad:
            steps = [lambda ctx: None]
            input_model = dict
