"""Server-rendered HTML for the console: the executions list, the workflows, one execution's timeline.

Everything here is a pure function of API documents, so the live view (``server.py`` re-renders a
fragment on every change and pushes it over SSE) and the first page load show the same thing, and the
unit tests check the markup without a browser. Times go out as ``<time datetime=...>`` with a text
rendered here; ``console.js`` keeps relative times and countdowns ticking.
"""

from __future__ import annotations

import datetime as dt
import html
import json
import urllib.parse
from typing import Any

LIVE = ("RUNNING", "SLEEPING", "WAITING", "LIVE")
ENDED = ("COMPLETED", "FAILED", "CANCELLED", "COMPENSATION_FAILED")
LIST_STATUSES = ("LIVE", "COMPLETED", "FAILED", "CANCELLED")
RESULT_INLINE_MAX = 160
"""A result whose JSON is longer than this is collapsed (a ``<details>``) in the timeline."""


def esc(value: Any) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def parse_ts(text: str | None) -> dt.datetime | None:
    if not text:
        return None
    try:
        when = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return when if when.tzinfo else when.replace(tzinfo=dt.timezone.utc)


def span(seconds: float) -> str:
    """A duration for people: ``850 ms``, ``12 s``, ``3 min 20 s``, ``2 h 05 min``."""
    if seconds < 1:
        return f"{max(0, round(seconds * 1000))} ms"
    s = int(round(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    if s < 86400:
        return f"{s // 3600} h {s % 3600 // 60:02d} min"
    return f"{s // 86400} d {s % 86400 // 3600} h"


def relative(text: str | None, now: dt.datetime | None = None) -> str:
    when = parse_ts(text)
    if when is None:
        return "-"
    delta = ((now or dt.datetime.now(dt.timezone.utc)) - when).total_seconds()
    if abs(delta) < 1:
        return "just now"
    return f"{span(delta)} ago" if delta > 0 else f"in {span(-delta)}"


def time_tag(text: str | None, mode: str = "rel", now: dt.datetime | None = None) -> str:
    """``mode`` rel: "3 min ago"; left: "12 s left" (a countdown, for sleeps, backoffs and timeouts)."""
    if not text:
        return "-"
    if mode == "left":
        when = parse_ts(text)
        left = (when - (now or dt.datetime.now(dt.timezone.utc))).total_seconds() if when else 0
        shown = f"{span(left)} left" if left > 0 else "due now"
    else:
        shown = relative(text, now)
    return f'<time datetime="{esc(text)}" data-{mode} title="{esc(text)}">{esc(shown)}</time>'


def badge(status: str | None) -> str:
    s = status or "UNKNOWN"
    return f'<span class="badge s-{esc(s.lower())}">{esc(s)}</span>'


def page(title: str, body: str, token: str, script: str = "") -> str:
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="loom-console-token" content="{esc(token)}">
<title>{esc(title)} · Loom</title><link rel="stylesheet" href="/static/console.css"></head>
<body><header class="top"><a class="brand" href="/">Loom</a><nav><a href="/">Executions</a>
<a href="/workflows">Workflows</a></nav><span id="live" class="live" title="live updates">●</span></header>
<div id="banner" class="banner" hidden></div>
<main>{body}</main>
<dialog id="confirm"><form method="dialog" id="confirm-form"><h3 id="confirm-title"></h3>
<div id="confirm-body"></div><div id="confirm-error" class="error" hidden></div>
<menu><button value="cancel" id="confirm-back" type="button">Back</button>
<button type="button" id="confirm-yes" class="primary">Confirm</button></menu></form></dialog>
<script src="/static/console.js"></script>{script}</body></html>"""


# ---------------------------------------------------------------- executions list


def list_query(workflow: str | None, status: str | None, next_token: str | None = None, limit: int = 20) -> str:
    q = {k: v for k, v in (("workflow", workflow), ("status", status), ("limit", limit),
                           ("next_token", next_token)) if v}
    return urllib.parse.urlencode(q)


def list_page(listing: dict, workflows: list[str], workflow: str | None, status: str | None,
              next_token: str | None, token: str, now: dt.datetime | None = None) -> str:
    wf_options = "".join(f'<option value="{esc(w)}"{" selected" if w == workflow else ""}>{esc(w)}</option>'
                         for w in workflows)
    st_options = "".join(f'<option value="{s}"{" selected" if s == status else ""}>{s}</option>'
                         for s in LIST_STATUSES)
    filters = f"""<form class="filters" method="get" action="/">
<label>Workflow <select name="workflow" id="f-workflow"><option value="">all</option>{wf_options}</select></label>
<label>Status <select name="status" id="f-status"><option value="">any</option>{st_options}</select></label>
<button type="submit">Filter</button> <a class="button primary" href="/workflows">Start an execution</a></form>"""
    live = "" if next_token else f' data-sse="/sse/list?{esc(list_query(workflow, status))}"'
    body = f"""<h1>Executions</h1>{filters}
<div id="list"{live}>{list_fragment(listing, workflow, status, next_token, now)}</div>"""
    return page("Executions", body, token)


def list_fragment(listing: dict, workflow: str | None, status: str | None, next_token: str | None,
                  now: dt.datetime | None = None) -> str:
    rows = []
    for x in listing.get("executions", []):
        eid = x.get("execution_id", "")
        rows.append(f"""<tr data-id="{esc(eid)}"><td>{badge(x.get("status"))}</td>
<td><a href="/executions/{esc(urllib.parse.quote(eid))}">{esc(eid)}</a></td><td>{esc(x.get("workflow"))}</td>
<td>{time_tag(x.get("created_at"), now=now)}</td></tr>""")
    table = ("<table class=\"executions\"><thead><tr><th>status</th><th>execution</th><th>workflow</th>"
             f"<th>started</th></tr></thead><tbody>{''.join(rows)}</tbody></table>") if rows \
        else '<p class="empty">No executions match.</p>'
    pager = []
    if next_token:
        pager.append(f'<a href="/?{esc(list_query(workflow, status))}">⇤ newest</a>')
    if listing.get("next_token"):
        pager.append(f'<a id="next-page" href="/?{esc(list_query(workflow, status, listing["next_token"]))}">'
                     'older →</a>')
    note = ("<p class=\"hint\">LIVE is running, sleeping or waiting: open one to see which. The list index is "
            "eventually consistent: a start or an end shows a moment later.</p>")
    return table + (f'<nav class="pager">{" ".join(pager)}</nav>' if pager else "") + note


# ---------------------------------------------------------------- workflows (the start form: forms.py)


def workflows_page(body: dict, token: str) -> str:
    cards = []
    for wf in body.get("workflows", []):
        steps = " → ".join(f'<span class="k-{esc(s.get("kind", "step"))}">{esc(s["name"])}</span>'
                           for s in wf.get("steps", []))
        name = wf["name"]
        cards.append(f"""<section class="card"><h2>{esc(name)}</h2><p class="steps">{steps}</p>
<a class="button primary" href="/workflows/{esc(urllib.parse.quote(name))}/start">Start {esc(name)}</a></section>""")
    return page("Workflows", "<h1>Workflows</h1>" + ("".join(cards) or '<p class="empty">No workflows.</p>'), token)


# ---------------------------------------------------------------- one execution


def execution_page(e: dict, history: dict, wf: dict | None, token: str, now: dt.datetime | None = None) -> str:
    eid = e["execution_id"]
    body = f"""<p class="crumbs"><a href="/">Executions</a> / {esc(e.get("workflow"))}</p>
<div id="execution" data-id="{esc(eid)}" data-sse="/sse/executions/{esc(urllib.parse.quote(eid))}">
{execution_fragment(e, history, wf, now)}</div>"""
    return page(f"{e.get('workflow')} {eid[:8]}", body, token)


def _actions(e: dict) -> str:
    status, buttons = e.get("status"), []
    if status in LIVE:
        buttons.append('<button data-action="cancel" class="danger">Cancel…</button>')
        if e.get("timer") in ("sleep", "retry") or status == "SLEEPING":
            buttons.append('<button data-action="wake">Wake now…</button>')
        event = (e.get("waiting_for") or {}).get("event") or ""
        buttons.append(f'<button data-action="send" data-event="{esc(event)}">Send event…</button>')
    if status in ("FAILED", "COMPENSATION_FAILED"):
        buttons.append(f'<button data-action="redrive" data-step="{esc(_step_label(e))}" class="primary">Redrive…</button>')
    return f'<div class="actions">{"".join(buttons)}</div>' if buttons else ""


def _error_block(err: dict | None, cls: str = "error") -> str:
    if not err:
        return ""
    return f'<pre class="{cls}"><b>{esc(err.get("code"))}</b>: {esc(err.get("message"))}</pre>'


def _json_block(value: Any, label: str = "result") -> str:
    if value is None:
        return ""
    text = json.dumps(value, indent=2, sort_keys=True, default=str)
    if len(text) <= RESULT_INLINE_MAX:
        return f'<code class="result" title="{esc(label)}">{esc(json.dumps(value, sort_keys=True, default=str))}</code>'
    return f'<details class="result"><summary>{esc(label)} ({len(text):,} characters)</summary><pre>{esc(text)}</pre></details>'


def execution_fragment(e: dict, history: dict, wf: dict | None, now: dt.datetime | None = None,
                       failures: dict[tuple[int, int], dict] | None = None) -> str:
    """The part of the execution page that live updates replace: header, actions, timeline, operations.

    ``failures`` are the failed attempts the live view saw, ``(step_index, attempt) -> error``: a step's
    record keeps only its latest error, and a step that succeeds after retries keeps none.
    """
    status = e.get("status")
    marks = []
    if e.get("redrives"):
        marks.append(f'<span class="mark redrive" title="redriven">↻ redriven ×{esc(e["redrives"])}</span>')
    if e.get("compensated"):
        marks.append('<span class="mark compensated" title="its compensations ran">⎌ compensated</span>')
    facts = [("execution", f'<code>{esc(e.get("execution_id"))}</code>'), ("workflow", esc(e.get("workflow"))),
             ("step", esc(_step_label(e))), ("started", time_tag(e.get("created_at"), now=now)),
             ("updated", time_tag(e.get("updated_at"), now=now)), ("started by", esc(e.get("started_by") or "-")),
             ("attempts", esc(e.get("total_attempts") if e.get("total_attempts") is not None else "-"))]
    if e.get("cancelled_by"):
        why = f' ({esc(e["cancel_reason"])})' if e.get("cancel_reason") else ""
        facts.append(("cancelled by", esc(e["cancelled_by"]) + why))
    waiting = e.get("waiting_for") or None
    if status == "WAITING" and waiting:
        timeout = f', times out {time_tag(waiting.get("timeout_at"), "left", now)}' if waiting.get("timeout_at") else ""
        facts.append(("waiting for", f'event <b>{esc(waiting.get("event"))}</b>{timeout}'))
    elif e.get("next_wake_at") and e.get("timer") in ("sleep", "retry"):
        facts.append((e["timer"], time_tag(e["next_wake_at"], "left", now)))
    dl = "".join(f"<dt>{k}</dt><dd>{v}</dd>" for k, v in facts)
    head = f"""<div class="head"><h1>{badge(status)} {esc(e.get("workflow"))} {"".join(marks)}</h1>{_actions(e)}</div>
<dl class="facts">{dl}</dl>{_error_block(e.get("error"), "error big") if status not in LIVE else ""}"""
    context = _json_block(e.get("context"), "context") if e.get("context") is not None else ""
    ops = operations_list(history.get("operations", []), now)
    return (f'{head}<h2>Timeline</h2>{timeline(e, history.get("steps", []), wf, now, failures)}'
            f'{"<h2>Context</h2>" + context if context else ""}{ops}')


def _step_label(e: dict) -> str:
    index, count = e.get("current_step"), e.get("step_count")
    if index is None:
        return "-"
    if not count:
        return str(index)
    name = e.get("current_step_name") or ("(done)" if index >= count else "")
    return f"{index}/{count} {name}".strip()


def _duration(r: dict) -> str:
    start, end = parse_ts(r.get("started_at")), parse_ts(r.get("finished_at"))
    return span((end - start).total_seconds()) if start and end else ""


def timeline(e: dict, records: list[dict], wf: dict | None, now: dt.datetime | None = None,
             failures: dict[tuple[int, int], dict] | None = None) -> str:
    planned = (wf or {}).get("steps") or []
    main: dict[int, dict] = {}
    branches: dict[int, list[dict]] = {}
    compensations, corrupt = [], []
    for r in records:
        if "step_index" not in r:
            corrupt.append(r)
        elif r.get("kind") == "compensation":
            compensations.append(r)
        elif r.get("branch") is not None:
            branches.setdefault(r["step_index"], []).append(r)
        else:
            main[r["step_index"]] = r
    count = max([len(planned), e.get("step_count") or 0, *(i + 1 for i in main), *(i + 1 for i in branches)])
    sleeping = _sleeping_index(e, planned, main)
    items = []
    for index in range(count):
        spec = planned[index] if index < len(planned) else {}
        seen = sorted((a, err) for (i, a), err in (failures or {}).items() if i == index)
        items.append(_step_item(e, index, spec, main.get(index), branches.get(index, []), sleeping, now, seen))
    for r in corrupt:
        items.append(f'<li class="step t-failed"><div class="row"><span class="name">corrupt record '
                     f'{esc(r.get("sort_key"))}</span></div><pre class="error">{esc(r.get("detail"))}</pre></li>')
    out = f'<ol class="timeline" id="timeline">{"".join(items)}</ol>'
    if compensations:
        comp = "".join(_record_row(r, f'⎌ compensate {esc(r.get("name"))}', now) for r in compensations)
        out += f'<h2>Compensation</h2><ol class="timeline compensation">{comp}</ol>'
    return out


def _is_sleep(spec: dict, r: dict | None) -> bool:
    return spec.get("kind") == "sleep" or bool(r and isinstance(r.get("result"), dict) and "wake_at" in r["result"])


def _sleeping_index(e: dict, planned: list[dict], main: dict[int, dict]) -> int | None:
    """Which step a SLEEPING execution sleeps in: a sleep step records its wake_at and the execution then
    waits at the step after it (``current_step``), so it is the one before, when that is a sleep."""
    if e.get("status") != "SLEEPING" or e.get("current_step") is None:
        return None
    before = e["current_step"] - 1
    if before >= 0 and _is_sleep(planned[before] if before < len(planned) else {}, main.get(before)):
        return before
    return e["current_step"]


def _step_item(e: dict, index: int, spec: dict, r: dict | None, branches: list[dict], sleeping: int | None,
               now, seen: list[tuple[int, dict]] = ()) -> str:
    status, current = e.get("status"), e.get("current_step")
    kind = spec.get("kind") or ("sleep" if _is_sleep(spec, r) else "step")
    name = (r or {}).get("name") or spec.get("name") or f"step {index}"
    is_current = index == current and status not in ("COMPLETED",)
    notes = []
    if r is not None and is_current and status in LIVE and r.get("status") == "FAILED":
        state = "running"  # the next attempt after a failed one; the record keeps the failure until it settles
    elif r is not None:
        state = {"SUCCEEDED": "done", "FAILED": "failed", "RUNNING": "running"}.get(r.get("status"), "running")
    elif is_current and status in LIVE:
        state = "running"
    elif is_current and status in ("FAILED", "CANCELLED", "COMPENSATION_FAILED"):
        state = "stopped"
    else:
        state = "pending" if status in LIVE else "skipped"
    if index == sleeping and e.get("next_wake_at"):
        state = "sleeping"
        notes.append(f'sleeping, {time_tag(e["next_wake_at"], "left", now)} (until {esc(e["next_wake_at"])})')
    elif is_current and status == "SLEEPING":
        state = "pending"
        notes.append("runs when the sleep ends")
    elif is_current and status == "WAITING":
        state = "waiting"
        w = e.get("waiting_for") or {}
        timeout = f', times out {time_tag(w.get("timeout_at"), "left", now)}' if w.get("timeout_at") else ", no timeout"
        notes.append(f'waiting for event <b>{esc(w.get("event") or "?")}</b>{timeout}')
    elif is_current and status == "RUNNING" and e.get("timer") == "retry" and e.get("next_wake_at"):
        state = "retrying"
        notes.append(f'attempt {esc(e.get("attempt") or (r or {}).get("attempts") or "?")} failed; next attempt '
                     f'{time_tag(e["next_wake_at"], "left", now)}')
    elif is_current and status == "RUNNING" and (r is None or r.get("status") != "SUCCEEDED"):
        notes.append("running" + (f', attempt {esc(e["attempt"])}' if e.get("attempt") else ""))
    if kind == "sleep" and spec.get("sleep_s") is not None:
        notes.append(f'sleep {span(float(spec["sleep_s"]))}')
    if r is not None and r.get("attempts"):
        attempts = r["attempts"]
        notes.append(f'{attempts} attempt{"s" if attempts != 1 else ""}' + (" (retried)" if attempts > 1 else ""))
    if r is not None and _duration(r) and kind != "sleep":
        notes.append(f"took {_duration(r)}")
    if r is not None and r.get("started_at"):
        notes.append(f'started {time_tag(r["started_at"], now=now)}')
    body = ""
    shown = (r.get("attempts"), r.get("error")) if r is not None and r.get("error") else None
    earlier = [(a, err) for a, err in seen if (a, err) != shown]
    if earlier:
        rows = "".join(f'<li>attempt {esc(a)} failed: <b>{esc(err.get("code"))}</b>: {esc(err.get("message"))}</li>'
                       for a, err in earlier)
        body += f'<ul class="attempts" title="failed attempts seen by this page">{rows}</ul>'
    if r is not None:
        if r.get("error"):
            label = "error" if state == "failed" else "a failed attempt's error"
            body += f'<div class="errlabel">{label}</div>{_error_block(r["error"])}'
        if r.get("corrupt"):
            body += f'<pre class="error">CORRUPT: {esc(r.get("detail"))}</pre>'
        body += _json_block(r.get("result"))
    if is_current and status == "FAILED" and r is None:
        body += _error_block(e.get("error"))
    for b in sorted(branches, key=lambda x: x.get("branch", 0)):
        body += _record_row(b, f'branch {esc(b.get("branch"))}', now, tag="div")
    mark = ""
    if kind not in ("step", "sleep"):
        mark += f'<span class="kind">{esc(kind)}</span>'
    return (f'<li class="step t-{state} k-{esc(kind)}" data-step="{index}"><div class="row"><span class="idx">{index}'
            f'</span><span class="name">{esc(name)}</span>{mark}<span class="state">{esc(state)}</span>'
            f'<span class="notes">{" · ".join(notes)}</span></div>{body}</li>')


def _record_row(r: dict, title: str, now, tag: str = "li") -> str:
    state = {"SUCCEEDED": "done", "FAILED": "failed"}.get(r.get("status"), "running")
    attempts = r.get("attempts")
    notes = [f"{attempts} attempt{'s' if attempts != 1 else ''}" if attempts else "", _duration(r)]
    return (f'<{tag} class="step t-{state} sub"><div class="row"><span class="name">{title}</span>'
            f'<span class="state">{esc(state)}</span><span class="notes">{" · ".join(n for n in notes if n)}</span>'
            f'</div>{_error_block(r.get("error"))}{_json_block(r.get("result"))}</{tag}>')


def operations_list(ops: list[dict], now: dt.datetime | None = None) -> str:
    if not ops:
        return ""
    rows = []
    for op in ops:
        if op.get("corrupt"):
            rows.append(f'<li class="op">corrupt record {esc(op.get("sort_key"))}: {esc(op.get("detail"))}</li>')
            continue
        detail = op.get("detail") if isinstance(op.get("detail"), dict) else {}
        what = esc(op.get("reason") or "")
        if op.get("op") == "redrive" and detail.get("error"):
            err = detail["error"]
            what = (f'after {esc(detail.get("step_name", detail.get("step_index")))} failed ({esc(detail.get("attempts", "?"))} '
                    f'attempts): <b>{esc(err.get("code"))}</b>: {esc(err.get("message"))}')
        elif op.get("op") == "wake":
            what = f'skipped the {esc(detail.get("was"))} due {esc(detail.get("due"))}'
        icon = {"redrive": "↻", "cancel": "⨯", "wake": "⏰", "event": "✉"}.get(op.get("op"), "•")
        rows.append(f'<li class="op op-{esc(op.get("op"))}">{icon} <b>{esc(op.get("op"))}</b> by {esc(op.get("by"))} '
                    f'{time_tag(op.get("at"), now=now)} <span class="notes">{what}</span></li>')
    return f'<h2>Operator actions</h2><ul class="ops">{"".join(rows)}</ul>'
