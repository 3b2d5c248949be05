"""``order_fulfillment_code``: ``order_fulfillment`` (``orders.py``) written code-first, as one plain
function. The same steps, the same ledger, the same input model, the same retries and the same 20 s
wait for the carrier; each ``step()`` is claimed, retried and recorded exactly like a step of the list,
and a worker killed inside the charge never charges the order twice.

The difference is who holds the data: the function keeps each result in a local variable (the
recorded value comes back, with its exact type, on every replay) instead of merging it into a
context dict.
"""

from __future__ import annotations

import hashlib
from typing import Any

from engine_core import PermanentStepError, RetryPolicy
from engine_core.durable import durable, idempotency_key, sleep, step

from .ledger import LEDGER
from .orders import CARRIER_PICKUP_WAIT_S, UNDELIVERABLE_SKU, OrderInput


def _token(prefix: str) -> str:
    """A stable identifier derived from the step's idempotency key, so a re-run returns the same one."""
    return f"{prefix}-{hashlib.sha256(idempotency_key().encode()).hexdigest()[:12]}"


def reserve_inventory(items: list[dict[str, Any]]) -> dict[str, Any]:
    return {"reservation_id": _token("res"), "reserved_units": sum(i["qty"] for i in items)}


def charge_payment(order_id: str, amount_cents: int) -> dict[str, Any]:
    charge = LEDGER.charge(idempotency_key(), order_id=order_id, amount_cents=amount_cents)
    return {"charge_id": charge.charge_id, "charged_cents": charge.amount_cents}


def ship_order(items: list[dict[str, Any]]) -> str:
    if any(item["sku"] == UNDELIVERABLE_SKU for item in items):
        raise PermanentStepError(f"the carrier refuses sku {UNDELIVERABLE_SKU!r}")
    return _token("TRK").upper()


def notify_customer(email: str | None, tracking_number: str) -> str:
    return _token("msg")


@durable("order_fulfillment_code", retry=RetryPolicy(max_attempts=5, base=1.0, max_delay=30.0), step_timeout_s=10)
def order_fulfillment(order: OrderInput) -> dict[str, Any]:
    items = [item.model_dump() for item in order.items]
    reservation = step("reserve_inventory", reserve_inventory, items)
    charge = step("charge_payment", charge_payment, order.order_id, order.amount_cents)
    sleep(seconds=CARRIER_PICKUP_WAIT_S, name="wait_for_carrier_pickup")
    tracking = step("ship_order", ship_order, items)
    notification = step("notify_customer", notify_customer, order.email, tracking)
    return {"reservation_id": reservation["reservation_id"], "charge_id": charge["charge_id"],
            "charged_cents": charge["charged_cents"], "tracking_number": tracking, "notification_id": notification}
