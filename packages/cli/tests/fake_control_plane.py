"""A stateful fake control plane, for the CLI, console, ``loom send`` and ``loom mcp`` tests (served by
conftest.py).

It answers the routes of the API (docs/api.md) with the documented shapes and error codes, as the API
answers once issue 21's engine side is in: a listing shows each execution's real status and filters by
it, and an event id sent before is ``duplicate`` even after the execution ended. Tests change its
documents directly to play an execution forward, or ``play`` a captured one (``documents/*.json``, real
documents of the deployed API's routes: see capture_documents.py).
"""

from __future__ import annotations

import copy
import json
import threading
import urllib.parse
from pathlib import Path

DOCUMENTS = Path(__file__).resolve().parent / "documents"
SCENARIOS = ("map", "parallel", "compensated", "waiting", "sleeping", "compensation_failed")

ORDER_SCHEMA = {
    "$defs": {"OrderItem": {"properties": {"sku": {"minLength": 1, "title": "Sku", "type": "string"},
                                           "qty": {"exclusiveMinimum": 0, "title": "Qty", "type": "integer"}},
                            "required": ["sku", "qty"], "title": "OrderItem", "type": "object"}},
    "additionalProperties": True,
    "properties": {
        "order_id": {"description": "The shop's order id", "minLength": 1, "title": "Order Id", "type": "string"},
        "amount_cents": {"description": "What to charge, in cents", "exclusiveMinimum": 0, "title": "Amount Cents",
                         "type": "integer"},
        "items": {"items": {"$ref": "#/$defs/OrderItem"}, "title": "Items", "type": "array"},
        "email": {"anyOf": [{"type": "string"}, {"type": "null"}], "default": None,
                  "description": "Where to send the shipping notice", "title": "Email"},
        "gift": {"type": "boolean", "default": False, "title": "Gift"},
        "speed": {"enum": ["standard", "express"], "default": "standard", "title": "Speed"},
    },
    "required": ["order_id", "amount_cents"], "title": "OrderInput", "type": "object",
}
ORDER_STEPS = [
    {"index": 0, "name": "reserve_inventory", "kind": "step"},
    {"index": 1, "name": "charge_payment", "kind": "step"},
    {"index": 2, "name": "wait_for_carrier_pickup", "kind": "sleep", "sleep_s": 20},
    {"index": 3, "name": "ship_order", "kind": "step"},
    {"index": 4, "name": "notify_customer", "kind": "step"},
]
WORKFLOWS = {"workflows": [
    {"name": "order_fulfillment", "fingerprint": "f1", "retry": {"max_attempts": 5, "base": 1.0, "max_delay": 30.0},
     "step_timeout_s": 10, "input_schema": ORDER_SCHEMA, "steps": ORDER_STEPS},
    {"name": "expense_approval", "fingerprint": "f3", "retry": {"max_attempts": 5, "base": 2.0, "max_delay": 900.0},
     "step_timeout_s": 10, "input_schema": None, "steps": [
         {"index": 0, "name": "request_approval", "kind": "step"},
         {"index": 1, "name": "wait_approved", "kind": "wait_for_event", "event": "approved", "timeout_s": 86400},
         {"index": 2, "name": "settle_expense", "kind": "step", "compensate": "refund"}]},
    {"name": "batch_resize", "fingerprint": "f4", "retry": {"max_attempts": 5, "base": 2.0, "max_delay": 900.0},
     "step_timeout_s": 10, "input_schema": None, "steps": [
         {"index": 0, "name": "list_images", "kind": "step"},
         {"index": 1, "name": "resize_images", "kind": "map", "over": "images", "max_concurrency": 10},
         {"index": 2, "name": "summarize", "kind": "step"}]},
    {"name": "free_form", "fingerprint": "f2", "retry": {"max_attempts": 3, "base": 2.0, "max_delay": 60.0},
     "step_timeout_s": None, "input_schema": None, "steps": [{"index": 0, "name": "only", "kind": "step"}]},
]}
LIVE = ("RUNNING", "SLEEPING", "WAITING")


def execution_doc(eid: str, workflow: str = "order_fulfillment", status: str = "RUNNING", step: int = 0,
                  created_at: str = "2026-01-01T00:00:00.000000Z", **extra) -> dict:
    """A whole ``GET /executions/{id}`` document (every field the API writes), for an order by default."""
    steps = next((w["steps"] for w in WORKFLOWS["workflows"] if w["name"] == workflow), ORDER_STEPS)
    names = [s["name"] for s in steps]
    return {"execution_id": eid, "workflow": workflow, "status": status, "current_step": step, "version": 2,
            "context": {"order_id": "o-1"}, "error": None, "next_wake_at": None, "timer": None, "total_attempts": 1,
            "attempt": 1, "attempt_started_at": None, "started_by": "local", "cancelled_by": None,
            "cancel_reason": None, "redrives": 0, "waiting_for": None, "compensating": False, "compensated": None,
            "failed_step": None, "compensation_error": None, "created_at": created_at, "updated_at": created_at,
            "expires_at": None, "step_count": len(names), "current_step_name": names[step] if step < len(names) else None,
            **extra}


def scenario(name: str) -> dict:
    """A captured execution: ``{"workflow", "sequence": [{"execution", "history"}, ...]}``."""
    return json.loads((DOCUMENTS / f"{name}.json").read_text())


class FakeControlPlane:
    def __init__(self):
        self.lock = threading.Lock()
        self.requests: list[dict] = []
        self.workflows = copy.deepcopy(WORKFLOWS)
        self.executions: dict[str, dict] = {}
        self.histories: dict[str, dict] = {}
        self.scripts: dict[str, list[dict]] = {}
        """Per execution: what each next GET answers (a captured sequence), the last one repeated."""
        self.starts: dict[str, str] = {}
        self.tokens: dict[str, str] = {}
        """Idempotency token -> the execution it started (as typed: the API compares tokens whole)."""
        """Per workflow: the (played) execution the next POST /executions of it answers with."""
        self.events: list[dict] = []
        self.url = ""
        self.counter = 0
        self.refusal: tuple[int, dict] | None = None
        """When set, what POST /executions answers."""
        self.schedules = json.loads((DOCUMENTS / "schedules.json").read_text())
        """What GET /schedules answers (documents/schedules.json: the control plane's document)."""

    def add(self, doc: dict, steps: list[dict] | None = None, operations: list[dict] | None = None) -> dict:
        with self.lock:
            self.executions[doc["execution_id"]] = doc
            self.histories[doc["execution_id"]] = {"steps": steps or [], "operations": operations or []}
        return doc

    def play(self, name: str, at: int | None = -1) -> str:
        """Serve a captured execution: its workflow, and its document number ``at`` (None: every GET
        answers the next document of the sequence, each with the history of its moment). Returns its id."""
        captured = scenario(name)
        with self.lock:
            wf = captured["workflow"]
            self.workflows["workflows"] = [w for w in self.workflows["workflows"] if w["name"] != wf["name"]] + [wf]
            first = captured["sequence"][0 if at is None else at]
            eid = first["execution"]["execution_id"]
            self.executions[eid] = copy.deepcopy(first["execution"])
            self.histories[eid] = copy.deepcopy(first["history"])
            if at is None:
                self.scripts[eid] = copy.deepcopy(captured["sequence"])
        return eid

    def update(self, eid: str, steps: list[dict] | None = None, **changes) -> None:
        with self.lock:
            self.executions[eid] = {**self.executions[eid], **changes,
                                    "version": self.executions[eid]["version"] + 1}
            if steps is not None:
                self.histories[eid]["steps"] = steps

    def route(self, method: str, target: str, body) -> tuple[int, dict]:
        split = urllib.parse.urlsplit(target)
        path, query = split.path, dict(urllib.parse.parse_qsl(split.query))
        parts = [urllib.parse.unquote(p) for p in path.strip("/").split("/")]
        with self.lock:
            if path == "/workflows":
                return 200, copy.deepcopy(self.workflows)
            if path == "/schedules" and method == "GET":
                return 200, copy.deepcopy(self.schedules)
            if path == "/executions" and method == "POST":
                return self._start(body)
            if path == "/executions" and method == "GET":
                return self._list(query)
            if parts[0] == "callbacks" and len(parts) == 2 and method == "POST":
                if parts[1] != "cb-1":
                    return 404, {"error": "callback_not_found", "message": f"no callback {parts[1]}"}
                self.events.append({"execution_id": "callback", "event": "callback", "event_id": parts[1],
                                    "data": (body or {}).get("data", {})})
                return 200, {"execution_id": "w-1", "event": "approved", "event_id": "cb-1", "outcome": "delivered"}
            if parts[0] != "executions" or len(parts) < 2:
                return 404, {"error": "not_found", "message": f"no route {path}"}
            e = self.executions.get(parts[1])
            if e is None:
                return 404, {"error": "execution_not_found", "message": f"execution {parts[1]} does not exist"}
            if len(parts) == 2 and method == "GET":
                script = self.scripts.get(parts[1])
                if script:
                    moment = script.pop(0) if len(script) > 1 else script[0]
                    self.executions[parts[1]], self.histories[parts[1]] = moment["execution"], moment["history"]
                return 200, copy.deepcopy(self.executions[parts[1]])
            if parts[2:] == ["history"]:
                return self._history(parts[1], query)
            ended = {"error": "execution_ended", "message": f"execution {parts[1]} is {e['status']}",
                     "execution_status": e["status"]}
            if parts[2:] == ["cancel"] and method == "POST":
                if e["status"] not in LIVE:
                    return (200, copy.deepcopy(e)) if e["status"] == "CANCELLED" else (409, ended)
                if e.get("compensating"):  # already undoing (a failure, or an earlier cancel): answered unchanged
                    return 200, copy.deepcopy(e)
                e.update(status="CANCELLED", cancelled_by="local", cancel_reason=(body or {}).get("reason"),
                         next_wake_at=None, timer=None, version=e["version"] + 1)
                return 200, copy.deepcopy(e)
            if parts[2:] == ["redrive"] and method == "POST":
                if e["status"] != "FAILED":
                    return 409, {"error": "not_failed", "message": f"execution {parts[1]} is {e['status']}",
                                 "execution_status": e["status"]}
                e.update(status="RUNNING", error=None, redrives=e["redrives"] + 1, version=e["version"] + 1)
                return 202, copy.deepcopy(e)
            if parts[2:] == ["wake"] and method == "POST":
                if e["status"] not in LIVE:
                    return 409, ended
                if e.get("timer") not in ("sleep", "retry", "event"):
                    return 409, {"error": "not_waiting", "message": "nothing to wake: no sleep, retry backoff or event wait",
                                 "execution_status": e["status"]}
                e.update(status="RUNNING", timer="lease", version=e["version"] + 1)
                return 200, copy.deepcopy(e)
            if len(parts) == 4 and parts[2] == "events" and method == "POST":
                if not isinstance(body, dict) or not isinstance(body.get("data", {}), dict):
                    return 400, {"error": "invalid_request", "message": "data must be a JSON object"}
                event_id = body.get("event_id") or f"ev-{len(self.events) + 1}"
                duplicate = any(x["event_id"] == event_id and x["execution_id"] == parts[1] for x in self.events)
                if duplicate:  # checked first: a retried send after the end is still a duplicate, not a refusal
                    return 202, {"execution_id": parts[1], "event": parts[3], "event_id": event_id,
                                 "outcome": "duplicate"}
                if e["status"] not in LIVE:
                    return 409, ended
                self.events.append({"execution_id": parts[1], "event": parts[3], "event_id": event_id,
                                    "data": body.get("data", {})})
                outcome = "delivered" if (e.get("waiting_for") or {}).get("event") == parts[3] else "buffered"
                return 202, {"execution_id": parts[1], "event": parts[3], "event_id": event_id, "outcome": outcome}
            return 405, {"error": "method_not_allowed", "message": f"{method} {path}"}

    def _history(self, eid: str, query: dict) -> tuple[int, dict]:
        """A page of records (``limit``, 50 by default, as the API); operations and events with the first."""
        h, limit, start = self.histories[eid], int(query.get("limit", 50)), int(query.get("next_token", 0))
        steps = h["steps"][start:start + limit]
        token = str(start + limit) if start + limit < len(h["steps"]) else None
        page = {"execution_id": eid, "steps": copy.deepcopy(steps), "operations": [], "next_token": token}
        if start == 0:
            mine = [{"event": x["event"], "event_id": x["event_id"], "sent_at": "2026-01-01T00:00:00.000000Z",
                     "by": "local", "data": x["data"], "consumed_by_step": None}
                    for x in self.events if x["execution_id"] == eid]
            page.update(operations=copy.deepcopy(h["operations"]), events=(h.get("events") or []) + mine)
        return 200, page

    def _start(self, body) -> tuple[int, dict]:
        if self.refusal is not None:
            return self.refusal
        wf = next((w for w in self.workflows["workflows"] if w["name"] == (body or {}).get("workflow")), None)
        if wf is None:
            return 404, {"error": "unknown_workflow", "message": f"no workflow named {(body or {}).get('workflow')!r}"}
        token = (body or {}).get("idempotency_token")
        if token is not None and token in self.tokens:  # the same token (and input) again: the execution it started
            eid = self.tokens[token]
            return 200, {"execution_id": eid, "workflow": wf["name"], "status": self.executions[eid]["status"],
                         "current_step": self.executions[eid]["current_step"], "created": False,
                         "links": {"self": f"/executions/{eid}", "history": f"/executions/{eid}/history"}}
        if wf["name"] in self.starts:
            eid = self.starts.pop(wf["name"])
            return 202, {"execution_id": eid, "workflow": wf["name"], "status": "RUNNING", "current_step": 0,
                         "created": True, "links": {"self": f"/executions/{eid}", "history": f"/executions/{eid}/history"}}
        schema = wf["input_schema"] or {}
        missing = [r for r in schema.get("required", []) if r not in body.get("input", {})]
        if missing:
            return 400, {"error": "invalid_input", "message": f"input for workflow {wf['name']!r} is invalid",
                         "problems": [{"field": m, "problem": "Field required", "type": "missing"} for m in missing]}
        self.counter += 1
        eid = f"00000000-0000-4000-8000-{self.counter:012d}"
        doc = execution_doc(eid, wf["name"], created_at=f"2026-01-02T00:00:{self.counter:02d}.000000Z",
                            context=body.get("input", {}))
        self.executions[eid] = doc
        self.histories[eid] = {"steps": [], "operations": []}
        if token is not None:
            self.tokens[token] = eid
        return 202, {"execution_id": eid, "workflow": wf["name"], "status": "RUNNING", "current_step": 0, "created": True,
                     "links": {"self": f"/executions/{eid}", "history": f"/executions/{eid}/history"}}

    def _list(self, query: dict) -> tuple[int, dict]:
        limit = int(query.get("limit", 20))
        if not 1 <= limit <= 100:
            return 400, {"error": "invalid_request", "message": "limit must be 1-100"}
        rows = sorted(self.executions.values(), key=lambda x: x["created_at"], reverse=True)
        if query.get("workflow"):
            rows = [x for x in rows if x["workflow"] == query["workflow"]]
        if query.get("status"):
            rows = [x for x in rows if x["status"] == query["status"]]
        if query.get("next_token"):  # the key of the last entry of the page before, as the API's tokens are
            rows = [x for x in rows if f"{x['created_at']}#{x['execution_id']}" < query["next_token"]]
        page = rows[:limit]
        # as DynamoDB's LastEvaluatedKey: a full page gets a token, whether or not anything follows
        token = f"{page[-1]['created_at']}#{page[-1]['execution_id']}" if len(page) == limit else None
        return 200, {"executions": [{"execution_id": x["execution_id"], "workflow": x["workflow"], "status": x["status"],
                                     "created_at": x["created_at"]} for x in page], "next_token": token}
