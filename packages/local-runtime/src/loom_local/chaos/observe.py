"""What happened, read after a run from what the stack wrote: nothing here is assumed or counted by the driver.

- ``invocations.jsonl``: each worker invocation's messages (id, execution, step, version, receive
  count) and every invocation's start (pid, deadline) and end (ok, crashed, timeout);
- ``steps.jsonl``: each step, branch and compensation body a worker started;
- the worker's log: what each delivery did (``message handled`` with its outcome, or ``released`` for
  want of time, or ``raised``: the engine raised and SQS redelivers it), joined to the delivery by its
  message id;
- the sweeper's log: each re-drive (``re-drove execution``) with the sweeper's reason;
- the payment ledger the functions share (charges, and refunds beside it), line by line.

Only the run's own executions (and the sweeper and control-plane invocations of its time window)
are kept, so a run on a shared stack reads nothing of another's.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

from ..invocations import FILE as INVOCATIONS
from ..invocations import STEPS_FILE, read_jsonl

HANDLED = "message handled"
RELEASED = "too little time left for this record's step; released for redelivery now"
FAILED = "processing failed; SQS redelivers the record"
REDROVE = "re-drove execution"


def log_lines(path: Path) -> list[tuple[float, dict[str, Any]]]:
    """A function log's JSON lines (Powertools') with the time the runtime wrote each one (epoch seconds)."""
    out = []
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return out
    for line in text.splitlines():
        stamp, _, rest = line.partition(" ")
        _, _, rest = rest.partition(" ")
        if not rest.startswith("{"):
            continue
        try:
            doc = json.loads(rest)
            at = dt.datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=dt.timezone.utc).timestamp()
        except ValueError:
            continue
        if isinstance(doc, dict):
            out.append((at, doc))
    return out


def runtime(log_dir: Path, functions: dict[str, str], executions: set[str], since: float, until: float
            ) -> dict[str, Any]:
    """The run's share of what the stack recorded between ``since`` and ``until`` (epoch seconds)."""
    records = [r for r in read_jsonl(log_dir / INVOCATIONS) if since <= r.get("at", 0) <= until]
    held = []
    for r in records:
        if r["kind"] == "held":
            ours = [m for m in r.get("messages", []) if m.get("execution_id") in executions]
            if ours:
                held.append({**r, "messages": ours})
    requests = {r["request_id"] for r in held}
    roles = {name: role for role, name in functions.items()}
    others = {r["request_id"] for r in records if r["kind"] == "start" and r.get("role") in ("sweeper", "control-plane")}
    keep = requests | others
    invocations = held + [r for r in records if r["kind"] in ("start", "end") and r["request_id"] in keep]
    message_ids = {m["message_id"] for r in held for m in r["messages"]}
    deliveries = []
    for at, doc in log_lines(log_dir / f"{functions['worker']}.log"):
        if doc.get("message_id") not in message_ids or not since <= at <= until:
            continue
        what = {HANDLED: doc.get("outcome"), RELEASED: "released", FAILED: "raised"}.get(doc.get("message"))
        if what is not None:
            deliveries.append({"at": at, "message_id": doc["message_id"], "execution_id": doc.get("execution_id"),
                               "request_id": doc.get("function_request_id"), "outcome": what,
                               "detail": doc.get("detail")})
    redrives = [{"at": at, "execution_id": doc["execution_id"], "reason": doc.get("reason"),
                 "step_index": doc.get("step_index"), "attempt": doc.get("attempt"),
                 "request_id": doc.get("function_request_id")}
                for at, doc in log_lines(log_dir / f"{functions['sweeper']}.log")
                if doc.get("message") == REDROVE and doc.get("execution_id") in executions and since <= at <= until]
    steps = [s for s in read_jsonl(log_dir / STEPS_FILE) if s.get("execution_id") in executions
             and since <= s.get("at", 0) <= until]
    return {"invocations": invocations, "deliveries": deliveries, "redrives": redrives, "steps": steps,
            "roles": roles}


def ledger(path: Path, executions: set[str]) -> dict[str, list[dict[str, Any]]]:
    """The ledger's charge and refund lines whose idempotency key belongs to one of ``executions``, every
    line kept (a key charged twice shows twice)."""
    def lines(p: Path) -> list[dict[str, Any]]:
        return [x for x in read_jsonl(p) if str(x.get("idempotency_key", "")).split(":", 1)[0] in executions]

    return {"charges": lines(path), "refunds": lines(path.with_suffix(path.suffix + ".refunds"))}


def final_state(client: Any, execution_id: str) -> dict[str, Any]:
    """The execution and its history as the API answers them (what the invariants are checked against)."""
    e = client.get(execution_id)
    h = client.history(execution_id)
    steps = [{k: getattr(r, k, None) for k in ("step_index", "name", "kind", "status", "attempts", "started_at",
                                               "finished_at", "branch")}
             for r in h.steps if hasattr(r, "status")]
    error = None if e.error is None else {"code": e.error.code, "message": (e.error.message or "")[:300]}
    return {"status": e.status, "version": e.version, "context": e.context, "error": error,
            "compensated": e.compensated, "redrives": e.redrives, "created_at": e.created_at,
            "updated_at": e.updated_at, "current_step": e.current_step, "total_attempts": e.total_attempts,
            "step_count": e.step_count,
            "history": steps, "operations": [o.document() for o in h.operations]}
