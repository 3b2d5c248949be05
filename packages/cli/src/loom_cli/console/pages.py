"""Server-rendered HTML for the console: the executions list, the workflows, one execution's timeline.

Everything here is a pure function of the SDK's models of the API's documents, so the live view
(``server.py`` re-renders a fragment on every change and pushes it over SSE) and the first page load
show the same thing, and the unit tests check the markup without a browser. Times go out as
``<time datetime=...>`` with a text rendered here; ``console.js`` keeps relative times and countdowns ticking.
"""

from __future__ import annotations

import datetime as dt
import urllib.parse
from collections.abc import Iterable

from ..readings import UNNAMED_WAIT, branches_not_counted, compensation_note, where
from ..prices import ledger_usd, usd_text
from ..render import cost_text, input_summary
from ..sdk.models import Cost, Execution, History, ListPage, Workflow
from ..sdk.stream import FailedAttempt
from ._html import LIST_STATUSES, LIVE, badge, error_block, esc, json_block, time_tag
from .icons import icon
from .timeline import events_list, operations_list, timeline


def page(title: str, body: str, token: str, script: str = "") -> str:
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="loom-console-token" content="{esc(token)}">
<title>{esc(title)} · Loom</title><link rel="icon" type="image/svg+xml" href="/static/favicon.svg">
<link rel="stylesheet" href="/static/console.css"></head>
<body><header class="top"><a class="brand" href="/">Loom</a><nav><a href="/">Executions</a>
<a href="/workflows">Workflows</a>
<a href="/schedules">Schedules</a></nav><span id="live" class="live" title="live updates">●</span></header>
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


def list_page(listing: ListPage, workflows: list[str], workflow: str | None, status: str | None,
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


def list_fragment(listing: ListPage, workflow: str | None, status: str | None, next_token: str | None,
                  now: dt.datetime | None = None) -> str:
    rows = []
    for x in listing.executions:
        eid = x.execution_id
        rows.append(f"""<tr data-id="{esc(eid)}"><td>{badge(x.status)}</td>
<td><a href="/executions/{esc(urllib.parse.quote(eid))}">{esc(eid)}</a></td><td>{esc(x.workflow)}</td>
<td>{time_tag(x.created_at, now=now)}</td></tr>""")
    table = ("<table class=\"executions\"><thead><tr><th>status</th><th>execution</th><th>workflow</th>"
             f"<th>started</th></tr></thead><tbody>{''.join(rows)}</tbody></table>") if rows \
        else '<p class="empty">No executions match.</p>'
    pager = []
    if next_token:
        pager.append(f'<a href="/?{esc(list_query(workflow, status))}">⇤ newest</a>')
    if listing.next_token:
        pager.append(f'<a id="next-page" href="/?{esc(list_query(workflow, status, listing.next_token))}">'
                     'older →</a>')
    note = "<p class=\"hint\">The list index is eventually consistent: a start or an end shows a moment later.</p>"
    return table + (f'<nav class="pager">{" ".join(pager)}</nav>' if pager else "") + note


# ---------------------------------------------------------------- workflows (the start form: forms.py)


def workflows_page(workflows: list[Workflow], token: str) -> str:
    cards = []
    for wf in workflows:
        steps = " → ".join(f'<span class="k-{esc(s.kind)}">{esc(s.name)}</span>' for s in wf.steps)
        if wf.style == "code":  # its steps are the calls the function makes, known as each execution runs
            steps = f"code-first: <code>{esc(wf.function or '?')}</code>"
        retry = wf.retry
        policy = (f'retries: {esc(retry.max_attempts)} attempts, backoff from {esc(retry.base)} s to '
                  f'{esc(retry.max_delay)} s') if retry else ""
        versions = " · ".join(f"v{esc(v.version)}{' (newest)' if v.version == wf.version else ''}: "
                              f"{esc('?' if v.live is None else v.live)} live"
                              f"{f' ({esc(v.function)})' if v.function and v.version != wf.version else ''}"
                              for v in sorted(wf.versions, key=lambda v: -v.version))
        cards.append(f"""<section class="card"><h2>{esc(wf.name)}</h2><p class="steps">{steps}</p>
<p class="hint">input: {esc(input_summary(wf.input_schema))} · {policy}</p>
{f'<p class="hint versions">versions: {versions}</p>' if versions else ""}
<a class="button primary" href="/workflows/{esc(urllib.parse.quote(wf.name))}/start">Start {esc(wf.name)}</a></section>""")
    return page("Workflows", "<h1>Workflows</h1>" + ("".join(cards) or '<p class="empty">No workflows.</p>'), token)


# ---------------------------------------------------------------- one execution


def execution_page(e: Execution, history: History, wf: Workflow | None, token: str,
                   now: dt.datetime | None = None) -> str:
    eid = e.execution_id
    wf_link = f'<a href="/?workflow={esc(urllib.parse.quote(e.workflow))}">{esc(e.workflow)}</a>'
    body = f"""<p class="crumbs"><a href="/">Executions</a> / {wf_link} / <code id="execution-id">{esc(eid)}</code></p>
<div id="execution" data-id="{esc(eid)}" data-sse="/sse/executions/{esc(urllib.parse.quote(eid))}">
{execution_fragment(e, history, wf, now)}</div>"""
    return page(f"{e.workflow} {eid[:8]}", body, token)


def _wake_says(e: Execution) -> str | None:
    """What a wake does to ``e`` now (the API takes it for a sleep, a retry backoff or an event wait), or None."""
    wakeable = e.timer in ("sleep", "retry") or e.status == "SLEEPING" or (
        e.status == "WAITING" and not (e.waiting_for and e.waiting_for.arrived))
    if wakeable and e.cannot_run is not None:
        return (f"Its version {e.workflow_version} is not deployed here: the delivery that comes now fails it "
                "(then redrive it onto a deployed version).")
    if e.compensating and e.timer == "retry":
        return "The undo's retry backoff ends now and the undo runs (the step it undoes does not run again)."
    if e.timer == "sleep" or e.status == "SLEEPING":
        return "The sleep ends now and the step after it runs."
    if e.timer == "retry":
        return "The retry backoff ends now and the step runs again."
    if e.status == "WAITING" and not (e.waiting_for and e.waiting_for.arrived):
        return ("The wait times out now, with no event: it takes its default if it has one, else waits again if its "
                "retry policy allows another wait period, else the step fails (event_timeout).")
    return None


def _actions(e: Execution, wf: Workflow | None, history: History) -> str:
    status, buttons = e.status, []
    if status in LIVE:
        buttons.append('<button data-action="cancel" class="danger">Cancel…</button>')
        say = _wake_says(e)
        if say is not None:
            buttons.append(f'<button data-action="wake" data-say="{esc(say)}">Wake now…</button>')
        waits = wf.waits_for() if wf is not None else None
        if waits is None or waits:  # a workflow that never waits takes no event (unknown here: offer it)
            event = (e.waiting_for.event if e.waiting_for else None) or (waits[0] if waits else "")
            buttons.append(f'<button data-action="send" data-event="{esc(event)}">Send event…</button>')
    if status == "FAILED" and not e.compensated:  # the API refuses a compensated one, and COMPENSATION_FAILED
        buttons.append(f'<button data-action="redrive" data-step="{esc(where(e, wf, history))}" class="primary">'
                       'Redrive…</button>')
    return f'<div class="actions">{"".join(buttons)}</div>' if buttons else ""


def cost_fact(c: Cost) -> str:
    """The ledger in a few words, its full line (with the dollar estimate) on hover."""
    usd = usd_text(sum(ledger_usd(c.read_units, c.write_units, c.messages, c.lambda_ms).values()))
    return (f'<span class="cost" title="{esc(cost_text(c))}">{esc(c.requests)} requests · '
            f'{esc(f"{c.read_units + c.write_units:g}")} units · {esc(c.messages)} msgs · ~{esc(usd)}</span>')


def execution_fragment(e: Execution, history: History, wf: Workflow | None, now: dt.datetime | None = None,
                       failures: Iterable[FailedAttempt] = ()) -> str:
    """The part of the execution page that live updates replace: header, actions, timeline, operations.

    ``failures`` are the failed attempts the live view saw: a step's record keeps only its latest
    error, and a step that succeeds after retries keeps none.
    """
    status = e.status
    marks = []
    if e.redrives:
        marks.append(f'<span class="mark redrive" title="redriven">{icon("redrive")} redriven ×{esc(e.redrives)}</span>')
    if e.compensating and not e.ended:
        marks.append(f'<span class="mark compensated" title="{esc(compensation_note(e, wf))}">{icon("undo")} '
                     'compensating…</span>')
    elif e.compensating:
        marks.append(f'<span class="mark compensated" title="its undo stopped half way: a redrive goes on undoing">'
                     f'{icon("undo")} undo stopped</span>')
    if e.compensated:
        marks.append(f'<span class="mark compensated" title="its compensations ran">{icon("undo")} compensated</span>')
    attempts = e.total_attempts if e.total_attempts is not None else "-"
    facts = [("step", esc(where(e, wf, history))), ("started", time_tag(e.created_at, now=now)),
             ("updated", time_tag(e.updated_at, now=now)), ("started by", esc(e.started_by or "-")),
             ("attempts" if e.ended else "attempts so far", esc(f"{attempts}{branches_not_counted(e, wf)}")),
             ("version", esc(e.workflow_version) + (f' (pinned: {esc(" → ".join(e.steps))})' if e.steps else ""))]
    if e.cancelled_by:
        why = f' ({esc(e.cancel_reason)})' if e.cancel_reason else ""
        facts.append(("cancel requested by" if e.cancel_requested else "cancelled by", esc(e.cancelled_by) + why))
    if e.cost is not None:
        facts.append(("cost" if e.ended else "cost so far", cost_fact(e.cost)))
    waiting = e.waiting_for
    if status == "WAITING" and waiting is not None:
        timeout = f', times out {time_tag(waiting.timeout_at, "left", now)}' if waiting.timeout_at else ""
        what = f'event <b>{esc(waiting.event)}</b>' if waiting.event else esc(UNNAMED_WAIT)
        came = ": it came, its delivery resumes the execution" if waiting.arrived else ""
        facts.append(("waiting for", f'{what}{came}{timeout}'))
    elif e.next_wake_at and e.timer in ("sleep", "retry"):
        facts.append((e.timer, time_tag(e.next_wake_at, "left", now)))
    dl = "".join(f"<dt>{k}</dt><dd>{v}</dd>" for k, v in facts)
    head = f"""<div class="head"><h1>{badge(status)} {esc(e.workflow)} {"".join(marks)}</h1>{_actions(e, wf, history)}</div>
<dl class="facts">{dl}</dl>{error_block(e.error, "error big") if status not in LIVE else ""}"""
    if e.cannot_run is not None:
        head += f'<div class="errlabel">cannot go on here</div>{error_block(e.cannot_run, "error big")}'
    if e.compensating and not e.ended:
        head += f'<p class="hint">{esc(compensation_note(e, wf))}</p>'
    elif e.compensating:
        head += '<p class="hint">its undo stopped at this step (the error says why): a redrive goes on undoing</p>'
    if e.compensating_for is not None:
        head += ('<div class="errlabel">it was undoing its completed steps after this failure: a redrive goes on '
                 f'undoing, and it ends with it</div>{error_block(e.compensating_for, "error big")}')
    if e.compensation_error is not None:
        head += f'<div class="errlabel">compensation failed</div>{error_block(e.compensation_error, "error big")}'
    context = json_block(e.context, "context") if e.context is not None else ""
    ops = events_list(history, now, ended=e.ended) + operations_list(history.operations, now)
    return (f'{head}<h2>Timeline</h2>{timeline(e, history, wf, now, failures)}'
            f'{"<h2>Context</h2>" + context if context else ""}{ops}')
