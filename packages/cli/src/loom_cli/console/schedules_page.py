"""The console's schedules page: each deployed schedule (``GET /schedules``), its next firing counting down,
and what its last firing did, linked to the execution it started (or the live one it skipped for)."""

from __future__ import annotations

import datetime as dt
import urllib.parse

from ..sdk.schedules import ScheduleList
from ._html import error_block, esc, time_tag


def _execution_link(eid: str | None) -> str:
    if not eid:
        return "-"
    return f'<a href="/executions/{esc(urllib.parse.quote(eid))}">{esc(eid)}</a>'


def schedules_body(listing: ScheduleList, now: dt.datetime | None = None) -> str:
    rows = []
    for s in listing.schedules:
        last = s.last_firing
        outcome = "-" if last is None else (
            f'<span class="outcome o-{esc(last.outcome)}">{esc(last.outcome)}</span>'
            + (f' <span class="hint">+{esc(last.duplicates)} repeated</span>' if last.duplicates else ""))
        error = "" if last is None or last.error is None else error_block(last.error.document())
        problem = f'<p class="error">{esc(s.problem)}</p>' if s.problem else ""
        overlap = esc(s.overlap) + ("" if s.enabled else ' <span class="hint">(disabled)</span>')
        rows.append(f"""<tr data-schedule="{esc(s.name)}"><td><b>{esc(s.name)}</b>{problem}</td>
<td><a href="/workflows">{esc(s.workflow)}</a></td><td><code>{esc(s.expression)}</code></td><td>{esc(s.timezone)}</td>
<td>{overlap}</td><td class="next">{time_tag(s.next_firing, "left", now) if s.next_firing else "-"}</td>
<td class="last">{time_tag(last.scheduled_at, now=now) if last else "-"}</td><td class="outcome">{outcome}{error}</td>
<td>{_execution_link(None if last is None else last.execution_id)}</td></tr>""")
    if not rows:
        return ('<h1>Schedules</h1><p class="empty">No schedules are deployed. Add them with the <code>schedules</code> '
                'input of the Terraform loom module.</p>')
    return ('<h1>Schedules</h1><table class="schedules"><thead><tr><th>schedule</th><th>workflow</th><th>expression</th>'
            '<th>time zone</th><th>overlap</th><th>next firing</th><th>last firing</th><th>outcome</th>'
            f'<th>execution</th></tr></thead><tbody>{"".join(rows)}</tbody></table>'
            '<p class="hint">skip: a firing starts nothing while the schedule\'s previous execution is live; allow: '
            'it starts anyway. Each firing starts at most one execution, however often it is delivered.</p>')
