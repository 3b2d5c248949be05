"""Example Loom workflows, packaged the way a user's own workflows would be.

Installing this package is enough for the Lambdas to run these workflows: its ``loom.workflows``
entry point names this module, and importing it registers every workflow below.

- ``order_fulfillment``: reserve inventory, charge a (fake) card once per idempotency key, sleep,
  ship, notify.
- ``flaky_greeting``: the first step fails on its first attempts, then succeeds.
- ``poison_pill``: a step that always fails; the execution ends FAILED and a notice reaches the DLQ.
- ``defaults_tour``: sets nothing (no timeout, no retry policy), so the defaults run end to end.
- ``fragile_import``: sleeps two hours, then fails (PermanentStepError) until its feed is fixed; the
  execution to find, wake, fix and redrive.
- ``order_saga``: order_fulfillment as a saga: the charge is refunded if shipping fails for good or
  the order is cancelled.
- ``expense_approval``: waits (WAITING) for an ``approved`` event or its callback token.
- ``batch_resize``: maps over 100 images, at most 10 at a time (a parallel/map step), then reports.
- ``order_fulfillment_code``: order_fulfillment written code-first (``engine_core.durable``): one
  plain function with ``step()`` calls, on the same engine.
"""

from . import approval, batch, defaults, fragile_import, greeting, orders, orders_code, poison
from .ledger import LEDGER, Charge, PaymentLedger

__version__ = "0.3.0"

__all__ = ["LEDGER", "Charge", "PaymentLedger", "__version__", "approval", "batch", "defaults", "fragile_import", "greeting", "orders",
           "orders_code", "poison"]
