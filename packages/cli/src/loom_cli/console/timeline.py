"""One execution as a timeline: every planned step in order, with its record, attempts, timers, branches,
compensations, the events sent to it and the operator's actions."""

from __future__ import annotations

import datetime as dt

from ._html import LIVE, error_block, esc, json_block, parse_ts, span, time_tag

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
    count = max([len(planned) or e.get("step_count") or 0, *(i + 1 for i in main), *(i + 1 for i in branches)])
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
        comp = "".join(_record_row(r, _undo_title(r, planned), now) for r in compensations)
        out += f'<h2>Compensation</h2><ol class="timeline compensation">{comp}</ol>'
    return out


def _undo_title(r: dict, planned: list[dict]) -> str:
    """A compensation record carries its step's index and name; the workflow names the undo function."""
    i = r.get("step_index")
    undo = planned[i].get("compensate") if isinstance(i, int) and i < len(planned) else None
    return f'⎌ {esc(undo or "compensation")} <span class="notes">undoes step {esc(i)} {esc(r.get("name"))}</span>'


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
    if status in ("FAILED", "COMPENSATION_FAILED") and e.get("failed_step") is not None:
        current = e["failed_step"]  # compensation moves on from the step that failed; show where it failed
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
    elif is_current and status == "RUNNING" and e.get("fanout"):
        f = e["fanout"]
        notes.append(f'{esc(f.get("succeeded"))}/{esc(f.get("branches"))} branches done'
                     + (f', at most {esc(f["max_concurrency"])} at once' if f.get("max_concurrency") else ""))
    elif is_current and status == "RUNNING" and (r is None or r.get("status") != "SUCCEEDED"):
        notes.append("running" + (f', attempt {esc(e["attempt"])}' if e.get("attempt") else ""))
    if kind == "wait_for_event" and not (is_current and status == "WAITING"):
        timeout = f', timeout {span(float(spec["timeout_s"]))}' if spec.get("timeout_s") else ""
        notes.append(f'waits for event <b>{esc(spec.get("event"))}</b>{timeout}')
    if kind in ("map", "parallel"):
        over = f' over <code>{esc(spec["over"])}</code>' if spec.get("over") else ""
        shown = is_current and e.get("fanout")  # the progress note says it already
        limit = f', at most {esc(spec["max_concurrency"])} at once' if spec.get("max_concurrency") and not shown else ""
        notes.append(f"{kind}{over}{limit}")
    if r is not None and r.get("event_id"):
        notes.append(f'got event id <code>{esc(r["event_id"])}</code>')
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
            body += f'<div class="errlabel">{label}</div>{error_block(r["error"])}'
        if r.get("corrupt"):
            body += f'<pre class="error">CORRUPT: {esc(r.get("detail"))}</pre>'
        body += json_block(r.get("result"))
    if is_current and status == "FAILED" and r is None:
        body += error_block(e.get("error"))
    body += _branches(branches, now)
    mark = ""
    if kind not in ("step", "sleep"):
        mark += f'<span class="kind">{esc(kind)}</span>'
    if spec.get("compensate"):
        mark += f'<span class="kind" title="runs if the execution fails for good or is cancelled after this step">' \
                f'undo: {esc(spec["compensate"])}</span>'
    return (f'<li class="step t-{state} k-{esc(kind)}" data-step="{index}"><div class="row"><span class="idx">{index}'
            f'</span><span class="name">{esc(name)}</span>{mark}<span class="state">{esc(state)}</span>'
            f'<span class="notes">{" · ".join(notes)}</span></div>{body}</li>')


BRANCHES_SHOWN_OPEN = 8
"""More branches than this are listed collapsed (a map over 1,000 items), opened when one failed."""


def _branches(branches: list[dict], now) -> str:
    if not branches:
        return ""
    rows = "".join(_branch_row(b, now) for b in sorted(branches, key=lambda x: x.get("branch", 0)))
    rows = f'<table class="branches"><tbody>{rows}</tbody></table>'
    counts: dict[str, int] = {}
    for b in branches:
        counts[_state(b)] = counts.get(_state(b), 0) + 1
    summary = f'{len(branches)} branches: ' + ", ".join(f"{n} {state}" for state, n in sorted(counts.items()))
    if len(branches) <= BRANCHES_SHOWN_OPEN:
        return f'<div class="branches"><div class="errlabel">{esc(summary)}</div>{rows}</div>'
    opened = " open" if counts.get("failed") else ""
    return f'<details class="branches"{opened}><summary>{esc(summary)}</summary>{rows}</details>'


def _branch_row(b: dict, now) -> str:
    state = _state(b)
    notes = [f'{b["attempts"]} attempt{"s" if b["attempts"] != 1 else ""}' if b.get("attempts") else "", _duration(b)]
    if b.get("next_wake_at"):
        notes.append(f'next attempt {time_tag(b["next_wake_at"], "left", now)}')
    detail = error_block(b.get("error")) if b.get("error") else json_block(b.get("result"))
    if b.get("result_omitted"):
        detail = '<span class="notes">result too large to show here</span>'
    return (f'<tr class="t-{esc(state)}"><td class="idx">{esc(b.get("branch"))}</td><td class="state">{esc(state)}</td>'
            f'<td class="notes">{" · ".join(n for n in notes if n)}</td><td>{detail}</td></tr>')


def _state(r: dict) -> str:
    return {"SUCCEEDED": "done", "FAILED": "failed"}.get(r.get("status"), str(r.get("status") or "running").lower())


def _record_row(r: dict, title: str, now, tag: str = "li") -> str:
    state = _state(r)
    attempts = r.get("attempts")
    notes = [f"{attempts} attempt{'s' if attempts != 1 else ''}" if attempts else "", _duration(r)]
    if r.get("next_wake_at"):
        notes.append(f'next attempt {time_tag(r["next_wake_at"], "left", now)}')
    if r.get("result_omitted"):
        notes.append("result too large to show here")
    return (f'<{tag} class="step t-{state} sub"><div class="row"><span class="name">{title}</span>'
            f'<span class="state">{esc(state)}</span><span class="notes">{" · ".join(n for n in notes if n)}</span>'
            f'</div>{error_block(r.get("error"))}{json_block(r.get("result"))}</{tag}>')


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


def events_list(events: list[dict] | None, now: dt.datetime | None = None) -> str:
    """The events sent to the execution, each with the step that consumed it (or kept for a later wait)."""
    if not events:
        return ""
    rows = []
    for ev in events:
        if ev.get("corrupt"):
            rows.append(f'<li class="op">corrupt record {esc(ev.get("sort_key"))}: {esc(ev.get("detail"))}</li>')
            continue
        step = ev.get("consumed_by_step")
        where = f"consumed by step {esc(step)}" if step is not None else "kept until a wait for it"
        rows.append(f'<li class="op op-event">✉ <b>{esc(ev.get("event"))}</b> <code>{esc(ev.get("event_id"))}</code> by '
                    f'{esc(ev.get("by"))} {time_tag(ev.get("sent_at"), now=now)} <span class="notes">{where}</span>'
                    f'{json_block(ev.get("data"), "data")}</li>')
    return f'<h2>Events</h2><ul class="ops events">{"".join(rows)}</ul>'
