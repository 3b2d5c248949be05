"""The invariants of a chaos run, checked on its record (see :mod:`.driver`) and nothing else.

- ``ended``: every execution that started has ended (within the run's bound);
- ``ends as its actions dictate``: its status (and error code, ``compensated`` and what its context must
  show) is its variant's, or CANCELLED when the API accepted its cancel;
- ``one charge per order``: no idempotency key and no order charged twice in the ledger, and each
  execution charged exactly as often as it must be (the charge its context names);
- ``each compensated charge refunded once``: no key refunded twice, no refund without its charge, and
  a compensated execution's charge refunded;
- ``idempotent starts``: every start, retried start and repeated start answered with the execution's
  own id (``created`` false when it had been created before);
- ``each step once``: an execution that completed holds one SUCCEEDED record for each of its steps;
- ``operator answers``: an event sent again with its id is a ``duplicate``, a callback link used again is
  refused ``callback_used``;
- ``stale copies change nothing``: a replayed message finds nothing to do and leaves the version as it
  was; of a message and its duplicate, at most one does the work.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass
from typing import Any

from . import catalog
from .config import ENDED

NOTHING_TO_DO = ("stale", "duplicate", "conflict", "superseded", "terminal", "missing")
"""Delivery outcomes of a message that found nothing to do: a stale copy."""
NOT_WORK = NOTHING_TO_DO + ("early", "released", "raised")
"""Outcomes that moved nothing on (an early timer message is only sent again for its time)."""


@dataclass(frozen=True)
class Violation:
    rule: str
    execution_id: str | None
    variant: str | None
    detail: str


def check(record: dict[str, Any]) -> list[dict[str, Any]]:
    """Every violation of the run's invariants (empty: they all held)."""
    out: list[Violation] = []
    plans = {p["execution_id"]: p for p in record["plan"]["executions"]}
    charges, refunds = record["ledger"]["charges"], record["ledger"]["refunds"]
    out += _ledger(charges, refunds)
    for eid, p in plans.items():
        def bad(rule: str, detail: str, eid: str = eid, p: dict[str, Any] = p) -> None:
            out.append(Violation(rule, eid, p["variant"], detail))

        start = record["starts"].get(eid, {})
        _starts(p, start, record, bad)
        if "answer" not in start:
            continue
        final = record["finals"].get(eid) or {}
        if "status" not in final:
            bad("ended", f"its end could not be read: {final.get('unreadable')}")
            continue
        if final["status"] not in ENDED:
            bad("ended", f"still {final['status']} at step {final['current_step']} when the run's bound "
                         f"({record['window']['bound_s']:g} s) was reached")
            continue
        actions = record["actions"].get(eid, [])
        cancel = next((a for a in actions if a["op"] == "cancel"), None)
        want = catalog.expectation(catalog.BY_KEY[p["variant"]], cancel)
        mine = [c for c in charges if c["idempotency_key"].split(":", 1)[0] == eid]
        undone = [r for r in refunds if r["idempotency_key"].split(":", 1)[0] == eid]
        _ending(final, want, p["input"], len(mine), len(undone), bad)
        _charged(final, mine, bad)
        _steps_once(final, bad)
        _answers(actions, bad)
    out += _injected(record, plans)
    return [asdict(v) for v in out]


def _ledger(charges: list[dict[str, Any]], refunds: list[dict[str, Any]]) -> list[Violation]:
    out = []
    for key, n in Counter(c["idempotency_key"] for c in charges).items():
        if n > 1:
            out.append(Violation("one charge per order", key.split(":")[0], None,
                                 f"idempotency key {key} charged {n} times in the ledger"))
    for order, n in Counter(c["order_id"] for c in charges).items():
        if n > 1:
            keys = sorted({c["idempotency_key"] for c in charges if c["order_id"] == order})
            out.append(Violation("one charge per order", keys[0].split(":")[0], None,
                                 f"order {order} charged {n} times (keys {', '.join(keys)})"))
    charged = {c["idempotency_key"] for c in charges}
    for key, n in Counter(r["idempotency_key"] for r in refunds).items():
        if n > 1:
            out.append(Violation("each compensated charge refunded once", key.split(":")[0], None,
                                 f"the charge under {key} was refunded {n} times"))
        if key not in charged:
            out.append(Violation("each compensated charge refunded once", key.split(":")[0], None,
                                 f"a refund under {key}, which charged nothing"))
    return out


def _starts(p: dict[str, Any], start: dict[str, Any], record: dict[str, Any], bad) -> None:
    rule = "idempotent starts"
    if "answer" not in start:
        bad(rule, f"never started: {start.get('errors') or 'no start was sent'}")
        return
    if start["answer"]["execution_id"] != p["execution_id"]:
        bad(rule, f"its start answered {start['answer']['execution_id']}, not the id its token gives")
    if start["errors"] and start["answer"]["created"]:
        control = [a for a in record["faults"]["arms"] if a["kind"] == "control-plane"
                   and a.get("execution_id") == p["execution_id"] and a["fired"]]
        if control:
            bad(rule, "the start retried after the control plane was killed past its create answered created: "
                      "the first create was lost")
    for a in record["actions"].get(p["execution_id"], []):
        if a["op"] == "restart":
            answer = a.get("answer") or {}
            if answer.get("execution_id") != p["execution_id"] or answer.get("created") is not False:
                bad(rule, f"the same start sent again answered {answer or a.get('refused')}")


def _ending(final: dict[str, Any], want: catalog.Expectation, given: dict[str, Any], charges: int, refunds: int,
            bad) -> None:
    rule = "ends as its actions dictate"
    if final["status"] != want.status:
        error = final.get("error") or {}
        bad(rule, f"ended {final['status']} ({error.get('code')}: {error.get('message')}), expected "
                  f"{want.status} ({want.why})")
        return
    if want.error_code and (final.get("error") or {}).get("code") != want.error_code:
        bad(rule, f"ended {final['status']} with error {final.get('error')}, expected code {want.error_code}")
    if want.compensated is not None and final.get("compensated") is not want.compensated:
        bad(rule, f"compensated is {final.get('compensated')}, expected {want.compensated}")
    problem = want.check(final.get("context") or {}, given)
    if problem:
        bad(rule, problem)
    if want.status == "CANCELLED":
        if refunds != charges:
            bad("each compensated charge refunded once", f"cancelled with {charges} charge(s) and {refunds} refund(s)")
        if charges and final.get("compensated") is not True:
            bad(rule, f"cancelled after a charge, but compensated is {final.get('compensated')}")
        return
    if charges != want.charges:
        bad("one charge per order", f"charged {charges} time(s), expected {want.charges}")
    if refunds != want.refunds:
        bad("each compensated charge refunded once", f"refunded {refunds} time(s), expected {want.refunds}")


def _charged(final: dict[str, Any], mine: list[dict[str, Any]], bad) -> None:
    named = (final.get("context") or {}).get("charge_id")
    if named is not None and named not in {c["charge_id"] for c in mine}:
        bad("one charge per order", f"its context names charge {named}, which the ledger does not hold for it")


def _steps_once(final: dict[str, Any], bad) -> None:
    if final["status"] != "COMPLETED" or final.get("step_count") is None:
        return
    records = [h for h in final["history"] if h.get("kind") not in ("compensation", "branch")
               and h.get("branch") is None]
    got = [(h["step_index"], h["status"]) for h in records]
    want = [(i, "SUCCEEDED") for i in range(final["step_count"])]
    if got != want:
        bad("each step once", f"completed with step records {got}, expected one SUCCEEDED record per step {want}")


def _answers(actions: list[dict[str, Any]], bad) -> None:
    for a in actions:
        if a["op"] == "send_again" and (a.get("answer") or {}).get("outcome") != "duplicate":
            bad("operator answers", f"an event sent again with its id answered {a.get('answer') or a.get('refused')}, "
                                    "not duplicate")
        if a["op"] == "callback_again" and (a.get("refused") or {}).get("code") != "callback_used":
            bad("operator answers", f"a callback link used again answered {a.get('answer') or a.get('refused')}, "
                                    "not callback_used")


def _injected(record: dict[str, Any], plans: dict[str, dict[str, Any]]) -> list[Violation]:
    out = []
    outcomes: dict[str, list[str]] = {}
    for d in record["runtime"]["deliveries"]:
        outcomes.setdefault(d["message_id"], []).append(d["outcome"])
    rule = "stale copies change nothing"
    for inj in record["faults"]["injected"]:
        eid = inj["execution_id"]
        variant = plans.get(eid, {}).get("variant")
        if inj["kind"] == "replay":
            worked = [o for o in outcomes.get(inj["message_id"], []) if o not in NOT_WORK]
            if worked:
                out.append(Violation(rule, eid, variant, f"the replayed message {inj['message_id']} did {worked}"))
            final = record["finals"].get(eid) or {}
            if final.get("version") is not None and final["version"] != inj["version_at_end"]:
                out.append(Violation(rule, eid, variant, f"version {inj['version_at_end']} when its old message was "
                                                         f"replayed, {final['version']} after"))
        else:
            both = outcomes.get(inj["of"], []) + outcomes.get(inj["message_id"], [])
            worked = [o for o in both if o not in NOT_WORK]
            if len(worked) > 1:
                out.append(Violation(rule, eid, variant, f"a message and its duplicate both did work: {worked}"))
    return out
