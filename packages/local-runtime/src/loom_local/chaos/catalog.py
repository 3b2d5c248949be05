"""The examples as a chaos run drives them: inputs, what an operator does to each, how each must end.

A *variant* is one way to run an example workflow (``order_saga`` with an undeliverable item, an
``expense_approval`` answered by its callback link, ...): how to make its input, the operator's
script (each action waits for its statuses, and a refusal that means "not yet" is tried again), how it
must end when nothing cancelled it, what the payment ledger must hold, and where a worker can be
killed on its way (crash points with what they match, all reached by every run of the variant).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Action:
    op: str
    """cancel, wake, redrive, fix, send, send_again, callback, callback_again, restart."""
    when: tuple[str, ...] = ()
    """Statuses the execution must be in (none: any time after the start)."""
    after_s: float = 0.0
    """At least this long after the previous action (or the start)."""
    not_yet: tuple[str, ...] = ()
    """Refusals that mean "not in that state yet": looked at again later, not recorded as the answer."""


@dataclass(frozen=True)
class Site:
    """A crash point a worker reaches on every run of a variant, with what the arm matches (the execution's id
    is added when it is armed)."""

    point: str
    match: dict[str, Any]
    label: str


Check = Callable[[dict[str, Any], dict[str, Any]], "str | None"]


def _no_check(context: dict[str, Any], given: dict[str, Any]) -> str | None:
    return None


@dataclass(frozen=True)
class Variant:
    workflow: str
    name: str
    make_input: Callable[[random.Random, str], dict[str, Any]]
    end: str
    """The status it ends in when no cancel took effect."""
    weight: float
    script: tuple[Action, ...] = ()
    charges: int = 0
    refunds: int = 0
    compensated: bool | None = None
    check: Check = _no_check
    """What the ended context must show, given the input: None when right, else what is wrong."""
    sites: tuple[Site, ...] = ()
    cancels: bool = False
    """Its script cancels: left out of a profile without cancels."""
    error_code: str | None = None

    @property
    def key(self) -> str:
        return f"{self.workflow}/{self.name}"


def _expect(key: str, value_of: Callable[[dict[str, Any]], Any]) -> Check:
    def check(context: dict[str, Any], given: dict[str, Any]) -> str | None:
        want, got = value_of(given), (context or {}).get(key)
        return None if got == want else f"context[{key!r}] is {got!r}, expected {want!r}"
    return check


def _order(rng: random.Random, tag: str, sku: str = "demo-sku") -> dict[str, Any]:
    return {"order_id": f"order-{tag}", "amount_cents": rng.randint(100, 99_999), "items": [{"sku": sku, "qty": 1}]}


def _task_sites(steps: tuple[int, ...], label: str) -> tuple[Site, ...]:
    return tuple(Site(p, {"step": s}, f"{label} step {s}") for s in steps
                 for p in ("worker.after_claim", "step.enter", "step.return", "worker.after_record"))


_ORDER_SITES = _task_sites((0, 1, 3), "order") + (
    Site("worker.after_checkpoint", {"step": 0}, "order chain"),
    Site("worker.after_record", {"step": 2}, "sleep record"),
    Site("worker.after_enqueue", {"step": 2}, "sleep message"),
)
_SAGA_UNDO = (
    Site("worker.after_claim", {"step": 1, "compensation": True}, "refund claim"),
    Site("step.return", {"step": 1, "compensation": True}, "refund body"),
    Site("worker.after_record", {"step": 1, "compensation": True}, "refund record"),
)
_BRANCH = (
    Site("step.enter", {"step": 1, "branch": 3}, "map branch body"),
    Site("worker.after_record", {"step": 1, "branch": 2}, "map branch record"),
    Site("worker.after_checkpoint", {"step": 1}, "map fan-out commit"),
)

_WAIT = ("WAITING",)
_MATCH_CHARGE = _expect("charged_cents", lambda given: given["amount_cents"])

VARIANTS: tuple[Variant, ...] = (
    Variant("order_fulfillment", "plain", _order, "COMPLETED", 10, charges=1, check=_MATCH_CHARGE, sites=_ORDER_SITES),
    Variant("order_fulfillment", "woken", _order, "COMPLETED", 8, charges=1, check=_MATCH_CHARGE, sites=_ORDER_SITES,
            script=(Action("wake", ("SLEEPING",), not_yet=("not_waiting",)),)),
    Variant("order_saga", "plain", _order, "COMPLETED", 6, charges=1, check=_MATCH_CHARGE, sites=_ORDER_SITES),
    Variant("order_saga", "undeliverable", lambda rng, tag: _order(rng, tag, "undeliverable"), "FAILED", 6,
            charges=1, refunds=1, compensated=True, sites=_task_sites((0, 1), "order") + _SAGA_UNDO,
            error_code="permanent_error"),
    Variant("order_saga", "cancel_sleeping", _order, "COMPLETED", 5, charges=1, cancels=True,
            script=(Action("cancel", ("SLEEPING",)),), sites=_task_sites((0, 1), "order")),
    Variant("order_saga", "cancel_early", _order, "COMPLETED", 3, charges=1, cancels=True,
            script=(Action("cancel", (), after_s=0.5),)),
    Variant("flaky_greeting", "plain", lambda rng, tag: {"name": tag, "failures": rng.randint(0, 2)}, "COMPLETED", 14,
            check=_expect("greeting", lambda given: f"Hello, {given['name']}!"),
            sites=_task_sites((0,), "greeting") + (Site("worker.after_checkpoint", {"step": 0}, "greeting chain"),)),
    Variant("flaky_greeting", "retried", lambda rng, tag: {"name": tag, "failures": 2}, "COMPLETED", 4,
            check=_expect("greeting", lambda given: f"Hello, {given['name']}!"),
            sites=(Site("worker.after_enqueue", {"step": 0}, "retry message"),)),
    Variant("expense_approval", "event", lambda rng, tag: {"expense_id": tag, "amount_cents": rng.randint(1, 9999)},
            "COMPLETED", 5, check=_expect("decision", lambda given: "paid"),
            script=(Action("send", (), after_s=1.0), Action("send_again")),
            sites=(Site("worker.after_checkpoint", {"step": 0}, "approval chain"),)),
    Variant("expense_approval", "callback", lambda rng, tag: {"expense_id": tag, "amount_cents": rng.randint(1, 9999)},
            "COMPLETED", 5, check=_expect("decision", lambda given: "paid"),
            script=(Action("callback", _WAIT), Action("callback_again")),
            sites=(Site("worker.after_checkpoint", {"step": 1}, "wait commit"),
                   Site("step.enter", {"step": 0}, "approval request body"))),
    Variant("expense_approval", "timed_out", lambda rng, tag: {"expense_id": tag, "amount_cents": 500}, "COMPLETED", 3,
            check=_expect("decision", lambda given: "declined"), script=(Action("wake", _WAIT, not_yet=("not_waiting",)),),
            sites=(Site("worker.after_enqueue", {"step": 1}, "wait timeout message"),)),
    Variant("fragile_import", "fixed", lambda rng, tag: {"feed": f"feed-{tag}"}, "COMPLETED", 7,
            check=_expect("imported_rows", lambda given: 3),
            script=(Action("wake", ("SLEEPING",), not_yet=("not_waiting",)), Action("fix", ("FAILED",)),
                    Action("redrive", ("FAILED",), not_yet=("not_failed",))),
            sites=(Site("step.enter", {"step": 0}, "manifest body"),
                   Site("worker.after_checkpoint", {"step": 1}, "sleep commit"))),
    Variant("poison_pill", "plain", lambda rng, tag: {"note": tag}, "FAILED", 3, error_code="step_error",
            sites=(Site("step.enter", {"step": 1}, "poison body"),)),
    Variant("poison_pill", "redriven", lambda rng, tag: {"note": tag}, "FAILED", 3, error_code="step_error",
            script=(Action("redrive", ("FAILED",), not_yet=("not_failed",)),)),
    Variant("defaults_tour", "plain", lambda rng, tag: {"text": f"chaos run {tag}"}, "COMPLETED", 10,
            check=_expect("doubled", lambda given: 2 * len(given["text"].split())),
            sites=_task_sites((0, 1), "defaults")),
    Variant("batch_resize", "plain", lambda rng, tag: {"count": rng.randint(6, 12), "flaky_every": rng.choice([0, 4])},
            "COMPLETED", 10, check=_expect("resized", lambda given: given["count"]), sites=_BRANCH),
)

COVERAGE: tuple[tuple[str, str, dict[str, Any]], ...] = (
    ("order_fulfillment/woken", "step.return", {"step": 1}),
    ("order_fulfillment/plain", "worker.after_claim", {"step": 3}),
    ("order_fulfillment/plain", "step.enter", {"step": 1}),
    ("order_fulfillment/plain", "worker.after_record", {"step": 1}),
    ("order_fulfillment/plain", "worker.after_checkpoint", {"step": 0}),
    ("order_fulfillment/plain", "worker.after_enqueue", {"step": 2}),
    ("flaky_greeting/retried", "worker.after_enqueue", {"step": 0}),
    ("order_saga/undeliverable", "step.return", {"step": 1, "compensation": True}),
    ("order_saga/undeliverable", "worker.after_claim", {"step": 1, "compensation": True}),
    ("batch_resize/plain", "step.enter", {"step": 1, "branch": 3}),
    ("batch_resize/plain", "worker.after_record", {"step": 1, "branch": 2}),
    ("batch_resize/plain", "worker.after_checkpoint", {"step": 1}),
    ("expense_approval/callback", "worker.after_checkpoint", {"step": 1}),
    ("poison_pill/plain", "step.enter", {"step": 1}),
)
"""One worker kill at each crash point, on a step of each kind that reaches it (the rest are at random)."""

BY_KEY = {v.key: v for v in VARIANTS}
WORKFLOWS = tuple(dict.fromkeys(v.workflow for v in VARIANTS))


def variants(cancels: bool) -> list[Variant]:
    return [v for v in VARIANTS if cancels or not v.cancels]


@dataclass
class Expectation:
    status: str
    charges: int
    refunds: int
    compensated: bool | None = None
    check: Check = field(default=_no_check)
    error_code: str | None = None
    why: str = ""


def expectation(variant: Variant, cancel: dict[str, Any] | None) -> Expectation:
    """How an execution of ``variant`` must end, given what its cancel (if it sent one) was answered.

    A cancel the API accepted (it answered with the execution, not a refusal) ends it CANCELLED, and
    every charge it made is refunded (``compensated: true`` once a charge was made); a cancel refused
    because the execution had ended leaves the variant's own ending.
    """
    if cancel is not None and cancel.get("ok"):
        return Expectation("CANCELLED", charges=-1, refunds=-1, why="its cancel was accepted")
    why = "its cancel came after it ended" if cancel is not None else "no cancel"
    return Expectation(variant.end, variant.charges, variant.refunds, variant.compensated, variant.check,
                       variant.error_code, why)
