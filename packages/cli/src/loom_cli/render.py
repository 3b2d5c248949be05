"""Plain-text tables for terminals."""

from __future__ import annotations

import json
from typing import Any


def table(headers: list[str], rows: list[list[Any]]) -> str:
    cells = [[_cell(v) for v in row] for row in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]
    line = lambda values: "  ".join(v.ljust(w) for v, w in zip(values, widths)).rstrip()  # noqa: E731
    return "\n".join([line(headers), line(["-" * w for w in widths])] + [line(r) for r in cells])


def _cell(value: Any, limit: int = 60) -> str:
    if value is None:
        return "-"
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def execution_table(e: dict) -> str:
    step = f"{e['current_step']}" + (f"/{e['step_count']} {e.get('current_step_name') or ''}" if e.get("step_count") else "")
    error = e.get("error")
    rows = [
        ["execution_id", e["execution_id"]], ["workflow", e["workflow"]], ["status", e["status"]],
        ["current step", step.strip()], ["version", e["version"]], ["attempts", e.get("total_attempts")],
        ["next wake", e.get("next_wake_at") and f"{e['next_wake_at']} ({e.get('timer')})"],
        ["created", e.get("created_at")], ["updated", e.get("updated_at")],
        ["error", error and f"{error.get('code')}: {error.get('message')}"],
        ["context", e.get("context")],
    ]
    return table(["field", "value"], rows)


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
        rows.append([wf["name"], len(wf["steps"]), f"{retry['max_attempts']}x base {retry['base']:g}s max {retry['max_delay']:g}s", steps])
    return table(["workflow", "steps", "retry", "step list"], rows)
