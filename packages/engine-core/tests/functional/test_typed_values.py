"""Typed inputs and event models whose validated values the codec cannot keep as they are (an aware
datetime in pydantic's own timezone, an enum, a URL, an aliased field): a start or an event that fits its
model is stored, and the steps see the validated values, in both styles."""

from __future__ import annotations

import datetime as dt
import enum

from pydantic import BaseModel, Field, HttpUrl

from engine_core import Registry, Status, wait_for_event, workflow
from engine_core.durable import durable
from engine_core.durable import step as dstep
from engine_core.durable import wait_for_event as dwait
from engine_core.testing import LocalRunner

PLUS_2 = dt.timezone(dt.timedelta(hours=2))


class Plan(str, enum.Enum):
    free = "free"
    pro = "pro"


class Booking(BaseModel):
    starts_at: dt.datetime
    plan: Plan
    hook: HttpUrl
    order_id: str = Field(alias="orderId")


class Signature(BaseModel):
    at: dt.datetime
    by: str


START = {"starts_at": "2026-05-01T09:00:00+02:00", "plan": "pro", "hook": "https://example.com/hook", "orderId": "o-1"}


def _start_sign_and_finish(registry: Registry, workflow_name: str) -> tuple[LocalRunner, str]:
    """Start ``workflow_name`` with START, send its ``signed`` event once it waits, and run it to COMPLETED."""
    runner = LocalRunner(registry)
    eid = runner.start(workflow_name, START)
    runner.run_until(eid, "WAITING")
    assert runner.send_event(eid, "signed", {"at": "2026-05-01T10:00:00Z", "by": "ana"}) == "delivered"
    done = runner.run_until_done(eid)
    assert done.status is Status.COMPLETED, done.error
    return runner, eid


def test_a_step_list_input_and_event_of_such_types_are_stored_and_seen_validated():
    registry, seen = Registry(), {}

    def book(ctx):
        seen["plan"] = ctx["plan"]
        return {}

    def after(ctx):
        seen["signature"] = ctx["signed"]
        return {}

    @workflow("typed_list", registry=registry)
    class TypedList:
        input_model = Booking
        steps = [book, wait_for_event("signed", model=Signature, name="signed", timeout=600), after]

    runner, eid = _start_sign_and_finish(registry, "typed_list")
    context = runner.context(eid)
    assert context["starts_at"] == dt.datetime(2026, 5, 1, 9, tzinfo=PLUS_2) and type(context["starts_at"]) is dt.datetime
    assert (context["plan"], context["hook"], context["order_id"]) == ("pro", "https://example.com/hook", "o-1")
    assert seen["plan"] == "pro" and seen["signature"] == {"at": dt.datetime(2026, 5, 1, 10, tzinfo=dt.timezone.utc), "by": "ana"}


def test_a_code_first_input_and_event_of_such_types_come_back_as_the_models():
    registry, seen = Registry(), {}

    @durable("typed_code", registry=registry)
    def flow(booking: Booking):
        seen["booking"] = booking
        signed = dwait("signed", timeout=600, model=Signature)
        seen["signed"] = signed
        return dstep("done", lambda: "ok")

    runner, eid = _start_sign_and_finish(registry, "typed_code")
    booking = seen["booking"]
    assert isinstance(booking, Booking) and booking.plan is Plan.pro and booking.order_id == "o-1"
    assert booking.starts_at == dt.datetime(2026, 5, 1, 9, tzinfo=PLUS_2) and str(booking.hook) == "https://example.com/hook"
    assert seen["signed"] == {"at": dt.datetime(2026, 5, 1, 10, tzinfo=dt.timezone.utc), "by": "ana"}


class Approval(BaseModel):
    approved: bool
    approver: str


def test_a_code_first_wait_coerces_by_the_model_its_decorator_declares_for_the_event():
    registry, got = Registry(), {}

    @durable("declared_events", registry=registry, events={"approved": Approval})
    def flow(input):
        got["decision"] = dwait("approved", timeout=600)  # no model= here: the declared one applies
        return dstep("ship" if got["decision"]["approved"] else "decline", lambda: "done")

    runner = LocalRunner(registry)
    eid = runner.start("declared_events")
    runner.run_until(eid, "WAITING")
    # when: the approver's system sends its boolean as text, which the model coerces
    assert runner.send_event(eid, "approved", {"approved": "false", "approver": "ana"}) == "delivered"
    done = runner.run_until_done(eid)
    # then: the function sees the validated values, as a step list's context holds them: it declines
    assert done.status is Status.COMPLETED and got["decision"] == {"approved": False, "approver": "ana"}
    assert [r.name for r in runner.history(eid) if r.kind == "task"] == ["decline"]


def test_a_code_first_parameter_annotation_that_cannot_be_resolved_is_refused_at_registration():
    import pytest

    from engine_core import RegistrationError

    def flow(order: OrderDefinedNowhere):  # noqa: F821 - this module's `from __future__ import annotations` keeps it text
        return None

    with pytest.raises(RegistrationError, match=r"annotation of its parameter 'order' \('OrderDefinedNowhere'\) "
                                                r"cannot be resolved.*define the model at the module's top level"):
        durable("unresolvable", registry=Registry())(flow)


def test_code_first_sleep_and_map_given_the_wrong_types_fail_naming_the_call():
    from engine_core.durable import map as dmap
    from engine_core.durable import sleep as dsleep

    registry = Registry()

    @durable("bad_sleep", registry=registry)
    def bad_sleep(input):
        dsleep("5")

    @durable("bad_map", registry=registry)
    def bad_map(input):
        dmap("resize", lambda item: item, None)

    runner = LocalRunner(registry)
    slept, mapped = runner.run_until_done(runner.start("bad_sleep")), runner.run_until_done(runner.start("bad_map"))
    assert slept.status is Status.FAILED and "sleep(): seconds must be a number" in slept.error.message, slept.error
    assert mapped.status is Status.FAILED and "map('resize'): the third argument must be the items to map over" \
        in mapped.error.message, mapped.error
