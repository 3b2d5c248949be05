"""``order_fulfillment``: reserve inventory, charge, wait for the carrier, ship, notify.

``order_saga`` is the same order as a saga: if shipping fails for good (an item with sku
``undeliverable``) or the order is cancelled after the charge, ``refund_payment`` undoes the charge
and the execution ends with ``compensated: true``.

Input (``OrderInput``, validated at start): ``{"order_id": str, "amount_cents": int > 0,
"items": [{"sku": str, "qty": int > 0}, ...], "email": str}``; ``items`` and ``email`` are optional,
and other fields pass through to the steps unchanged.

The wait is 20 seconds so the local demo finishes in about two minutes; a real shop would wait
hours (``sleep(hours=2)``) and the engine treats both the same way (SQS delay up to 15 minutes,
the sweeper beyond that).
"""

from __future__ import annotations

import hashlib
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from engine_core import PermanentStepError, RetryPolicy, StepContext, sleep, step, workflow

from .ledger import LEDGER

CARRIER_PICKUP_WAIT_S = 20


class OrderItem(BaseModel):
    sku: str = Field(min_length=1)
    qty: int = Field(gt=0)


class OrderInput(BaseModel):
    """What ``order_fulfillment`` takes. A start that does not fit is refused (HTTP 400 ``invalid_input``)."""

    model_config = ConfigDict(extra="allow")

    order_id: str = Field(min_length=1, description="The shop's order id")
    amount_cents: int = Field(gt=0, description="What to charge, in cents")
    items: list[OrderItem] = Field(default_factory=lambda: [OrderItem(sku="demo-sku", qty=1)])
    email: str | None = Field(default=None, description="Where to send the shipping notice")


def _token(prefix: str, key: str) -> str:
    """A stable identifier derived from the idempotency key, so a re-run returns the same one."""
    return f"{prefix}-{hashlib.sha256(key.encode()).hexdigest()[:12]}"


def _require_order(ctx: StepContext) -> str:
    order_id = ctx.get("order_id")
    if not isinstance(order_id, str) or not order_id:
        raise PermanentStepError("input needs a non-empty string 'order_id'")
    return order_id


def reserve_inventory(ctx: StepContext) -> dict[str, Any]:
    _require_order(ctx)
    items = ctx.get("items", [{"sku": "demo-sku", "qty": 1}])
    if not isinstance(items, list) or not all(
        isinstance(i, dict) and isinstance(i.get("sku"), str) and type(i.get("qty")) is int and i["qty"] > 0
        for i in items
    ):
        raise PermanentStepError("'items' must be a list of {\"sku\": str, \"qty\": positive int}")
    return {"reservation_id": _token("res", ctx.idempotency_key), "reserved_units": sum(i["qty"] for i in items)}


def charge_payment(ctx: StepContext) -> dict[str, Any]:
    order_id = _require_order(ctx)
    amount = ctx.get("amount_cents")
    if type(amount) is not int or amount <= 0:
        raise PermanentStepError("input needs a positive integer 'amount_cents'")
    charge = LEDGER.charge(ctx.idempotency_key, order_id=order_id, amount_cents=amount)
    return {"charge_id": charge.charge_id, "charged_cents": charge.amount_cents}


def refund_payment(ctx: StepContext) -> dict[str, Any]:
    """charge_payment's compensation: ``ctx.idempotency_key`` is the charge's own key, ``ctx.result``
    its result. The ledger refunds a charge once however often this runs."""
    refund = LEDGER.refund(ctx.idempotency_key)
    return {"refunded_cents": refund.amount_cents, "refunded_charge": refund.charge_id}


UNDELIVERABLE_SKU = "undeliverable"
"""An item with this sku makes the carrier refuse the order after it was charged: the refund runs."""


def ship_order(ctx: StepContext) -> dict[str, Any]:
    if any(item.get("sku") == UNDELIVERABLE_SKU for item in ctx.get("items", [])):
        raise PermanentStepError(f"the carrier refuses sku {UNDELIVERABLE_SKU!r}; the charge is refunded")
    return {"tracking_number": _token("TRK", ctx.idempotency_key).upper()}


def notify_customer(ctx: StepContext) -> dict[str, Any]:
    return {"notification_id": _token("msg", ctx.idempotency_key), "notified": ctx.get("email") or "customer"}


@workflow("order_fulfillment")
class OrderFulfillment:
    steps = [
        reserve_inventory,
        charge_payment,
        sleep(seconds=CARRIER_PICKUP_WAIT_S, name="wait_for_carrier_pickup"),
        ship_order,
        notify_customer,
    ]
    retry = RetryPolicy(max_attempts=5, base=1.0, max_delay=30.0)
    step_timeout_s = 10
    input_model = OrderInput


@workflow("order_saga")
class OrderSaga:
    """order_fulfillment with a refund compensation on the charge."""

    steps = [
        reserve_inventory,
        step(charge_payment, compensate=refund_payment),   # undone if a later step fails for good, or on cancel
        sleep(seconds=CARRIER_PICKUP_WAIT_S, name="wait_for_carrier_pickup"),
        ship_order,
        notify_customer,
    ]
    retry = RetryPolicy(max_attempts=5, base=1.0, max_delay=30.0)
    step_timeout_s = 10
    input_model = OrderInput
