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

    runner = LocalRunner(registry)
    eid = runner.start("typed_list", START)
    runner.run_until(eid, "WAITING")
    assert runner.send_event(eid, "signed", {"at": "2026-05-01T10:00:00Z", "by": "ana"}) == "delivered"
    done = runner.run_until_done(eid)
    assert done.status is Status.COMPLETED, done.error
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

    runner = LocalRunner(registry)
    eid = runner.start("typed_code", START)
    runner.run_until(eid, "WAITING")
    assert runner.send_event(eid, "signed", {"at": "2026-05-01T10:00:00Z", "by": "ana"}) == "delivered"
    done = runner.run_until_done(eid)
    assert done.status is Status.COMPLETED, done.error
    booking = seen["booking"]
    assert isinstance(booking, Booking) and booking.plan is Plan.pro and booking.order_id == "o-1"
    assert booking.starts_at == dt.datetime(2026, 5, 1, 9, tzinfo=PLUS_2) and str(booking.hook) == "https://example.com/hook"
    assert seen["signed"] == {"at": dt.datetime(2026, 5, 1, 10, tzinfo=dt.timezone.utc), "by": "ana"}
