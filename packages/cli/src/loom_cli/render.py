"""Plain-text tables for terminals."""

from __future__ import annotations

import json
from typing import Any


def table(headers: list[str], rows: list[list[Any]], limit: int = 60) -> str:
    cells = [[_cell(v, limit) for v in row] for row in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]
    line = lambda values: "  ".join(v.ljust(w) for v, w in zip(values, widths)).rstrip()  # noqa: E731
    return "\n".join([line(headers), line(["-" * w for w in widths])] + [line(r) for r in cells])


def _cell(value: Any, limit: int = 60) -> str:
    if value is None:
        return "-"
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def step_label(e: dict) -> str:
    """The current step as every command numbers it: its index (the ``#`` of ``loom history``, counted
    from 0), out of the step count, and its name: ``3/5 ship_order``; ``5/5 (done)`` once past the last."""
    index, count = e["current_step"], e.get("step_count")
    if not count:
        return str(index)
    name = e.get("current_step_name") or ("(done)" if index >= count else "")
    return f"{index}/{count} {name}".strip()


def execution_table(e: dict) -> str:
    error = e.get("error")
    rows = [
        ["execution_id", e["execution_id"]], ["workflow", e["workflow"]], ["status", e["status"]],
        ["current step", step_label(e)], ["version", e["version"]], ["attempts", e.get("total_attempts")],
        ["next wake", e.get("next_wake_at") and f"{e['next_wake_at']} ({e.get('timer')})"],
        ["created", e.get("created_at")], ["updated", e.get("updated_at")],
        ["started by", e.get("started_by")],
        ["error", error and f"{error.get('code')}: {error.get('message')}"],
        ["context", e.get("context")],
    ]
    if e.get("cancelled_by"):
        rows.insert(-2, ["cancelled by", e["cancelled_by"] + (f" ({e['cancel_reason']})" if e.get("cancel_reason") else "")])
    if e.get("redrives"):
        rows.insert(-2, ["redrives", e["redrives"]])
    waiting = e.get("waiting_for")
    if waiting:
        rows.insert(-2, ["waiting for", f"event {waiting.get('event')}"
                         + (f" (times out {waiting['timeout_at']})" if waiting.get("timeout_at") else " (no timeout)")])
    fanout = e.get("fanout")
    if fanout:
        rows.insert(-2, ["branches", f"{fanout.get('succeeded')}/{fanout.get('branches')} done, at most "
                                     f"{fanout.get('max_concurrency')} at once"])
    if e.get("failed_step") is not None and e.get("failed_step") != e.get("current_step"):
        rows.insert(-2, ["failed step", e["failed_step"]])
    if e.get("compensating") or e.get("compensated"):
        rows.insert(-2, ["compensation", "running" if e.get("compensating") else "done: the completed steps were undone"])
    comp = e.get("compensation_error")
    if comp:
        rows.insert(-2, ["compensation error", f"{comp.get('code')}: {comp.get('message')}"])
    return table(["field", "value"], rows)


def events_table(h: dict) -> str:
    rows = []
    for ev in h.get("events") or []:
        if ev.get("corrupt"):
            rows.append(["CORRUPT", ev.get("sort_key"), "-", "-", "-", ev.get("detail")])
            continue
        step = ev.get("consumed_by_step")
        rows.append([ev.get("event"), ev.get("event_id"), ev.get("sent_at"), ev.get("by"),
                     "kept for a wait" if step is None else f"step {step}", ev.get("data")])
    return table(["event", "event id", "sent", "by", "consumed by", "data"], rows)


def executions_table(executions: list[dict]) -> str:
    rows = [[x["execution_id"], x["workflow"], x["status"], x.get("created_at")] for x in executions]
    return table(["execution_id", "workflow", "status", "created"], rows)


def operations_table(h: dict) -> str:
    rows = []
    for op in h.get("operations", []):
        if op.get("corrupt"):
            rows.append(["?", "CORRUPT", "-", op.get("sort_key"), op.get("detail")])
            continue
        detail = op.get("detail") or {}
        error = detail.get("error") if isinstance(detail, dict) else None
        what = op.get("reason")
        if error:  # a redrive: the failure it left behind
            what = f"after {detail.get('step_name', detail.get('step_index'))} failed " \
                   f"({detail.get('attempts', '?')} attempts): {error.get('code')}: {error.get('message')}"
        elif op.get("op") == "wake" and isinstance(detail, dict):
            what = f"skipped the {detail.get('was')} due {detail.get('due')}"
        rows.append([op.get("version"), op.get("op"), op.get("at"), op.get("by"), what])
    return table(["version", "operation", "at", "by", "reason / detail"], rows, limit=160)


def history_table(h: dict) -> str:
    rows = []
    for r in h.get("steps", []):
        if r.get("corrupt") and "step_index" not in r:
            rows.append(["?", r.get("sort_key"), "CORRUPT", "-", "-", "-", r.get("detail")])
            continue
        err = r.get("error")
        detail = f"{err['code']}: {err['message']}" if err and r["status"] != "SUCCEEDED" else r.get("result")
        if r.get("corrupt"):
            detail = f"CORRUPT: {r.get('detail')}"
        rows.append([r["step_index"], r["name"], r["status"], r["attempts"], r.get("started_at"), r.get("finished_at"), detail])
    return table(["#", "step", "status", "attempts", "started", "finished", "result / error"], rows)


def workflows_table(body: dict) -> str:
    rows = []
    for wf in body.get("workflows", []):
        steps = " > ".join(s["name"] for s in wf["steps"])
        retry = wf["retry"]
        rows.append([wf["name"], len(wf["steps"]), f"{retry['max_attempts']}x base {retry['base']:g}s max {retry['max_delay']:g}s",
                     input_summary(wf.get("input_schema")), steps])
    return table(["workflow", "steps", "retry", "input (* required; --json for the JSON Schema)", "step list"], rows)


def input_summary(schema: dict | None) -> str:
    """The input's fields from its JSON Schema: ``order_id*: string, amount_cents*: integer, ...``."""
    if not schema:
        return "any JSON object"
    required = set(schema.get("required", []))
    fields = []
    for name, prop in (schema.get("properties") or {}).items():
        kind = prop.get("type") or ("|".join(p.get("type", "?") for p in prop.get("anyOf", [])) or "object")
        fields.append(f"{name}{'*' if name in required else ''}: {kind}")
    return ", ".join(fields) or "{}"
