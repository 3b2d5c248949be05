"""One execution as a timeline: every planned step in order, with its record, attempts, timers, branches,
compensations, the events sent to it and the operator's actions."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable

from ..readings import (UNNAMED_WAIT, attempts_text, fanout_summary, never_started, redriven_after, sleep_ended_early,
                        sleeping_step, state_word, wake_at)
from ..sdk.models import BranchRecord, CorruptRecord, Execution, History, Operation, StepRecord, Workflow, WorkflowStep
from ..sdk.stream import FailedAttempt
from ._html import LIVE, error_block, esc, json_block, parse_ts, span, time_tag
from .icons import icon


OPEN_BRANCH_STATUSES = ("PENDING", "RETRY")
"""A branch waiting for its next attempt: one its ended execution will never run."""


def _duration(r: StepRecord | BranchRecord) -> str:
    start, end = parse_ts(r.started_at), parse_ts(r.finished_at)
    return span((end - start).total_seconds()) if start and end else ""


def timeline(e: Execution, history: History, wf: Workflow | None, now: dt.datetime | None = None,
             failures: Iterable[FailedAttempt] = ()) -> str:
    planned = wf.steps if wf is not None else []
    main = {r.step_index: r for r in history.records()}
    fanned = {r.step_index for r in history.steps if isinstance(r, BranchRecord)}
    corrupt = [r for r in history.steps if isinstance(r, CorruptRecord)]
    count = max([len(planned) or e.step_count or 0, *(i + 1 for i in main), *(i + 1 for i in fanned)])
    sleeping = sleeping_step(e, wf, history)
    failures = list(failures)
    items = []
    for index in range(count):
        spec = planned[index] if index < len(planned) else None
        seen = [(f.attempt if f.branch is None else f"{f.attempt} of branch {f.branch}", f.error)
                for f in failures if f.step_index == index]
        r = main.get(index)
        early = sleep_ended_early(r, history) if r is not None else None
        items.append(_step_item(e, index, spec, r, history.branches(index), sleeping, now, seen, early))
    for r in corrupt:
        items.append(f'<li class="step t-failed"><div class="row"><span class="name">corrupt record '
                     f'{esc(r.sort_key)}</span></div><pre class="error">{esc(r.detail)}</pre></li>')
    out = f'<ol class="timeline" id="timeline">{"".join(items)}</ol>'
    compensations = history.compensations()
    if compensations:
        comp = "".join(_record_row(r, _undo_title(r, planned), now) for r in compensations)
        out += f'<h2>Compensation</h2><ol class="timeline compensation">{comp}</ol>'
    return out


def _undo_title(r: StepRecord, planned: list[WorkflowStep]) -> str:
    """A compensation record carries its step's index and name; the workflow names the undo function."""
    undo = planned[r.step_index].compensate if r.step_index < len(planned) else None
    return (f'{icon("undo")} {esc(undo or "compensation")} <span class="notes">undoes step {esc(r.step_index)} '
            f'{esc(r.name)}</span>')


def _state(e: Execution, index: int, r: StepRecord | None, is_current: bool) -> str:
    status = e.status
    if r is not None and is_current and status in LIVE and r.status == "FAILED":
        return "running"  # the next attempt after a failed one; the record keeps the failure until it settles
    if r is not None:
        return {"SUCCEEDED": "done", "FAILED": "failed", "RUNNING": "running"}.get(r.status, "running")
    if is_current and status in LIVE:
        return "running"
    if is_current and status in ("FAILED", "CANCELLED", "COMPENSATION_FAILED"):
        return "stopped"
    return "pending" if status in LIVE else "skipped"


def _step_item(e: Execution, index: int, spec: WorkflowStep | None, r: StepRecord | None,
               branches: list[BranchRecord], sleeping: int | None, now, seen: list, early: str | None = None) -> str:
    status, current = e.status, e.current_step
    if status in ("FAILED", "COMPENSATION_FAILED") and e.failed_step is not None:
        current = e.failed_step  # compensation moves on from the step that failed; show where it failed
    is_sleep = (spec is not None and spec.kind == "sleep") or (r is not None and wake_at(r) is not None)
    kind = spec.kind if spec is not None else ("sleep" if is_sleep else "step")
    name = ((r.name if r else None) or (spec.name if spec else None) or (branches[0].name if branches else None)
            or (e.current_step_name if index == e.current_step else None) or f"step {index}")
    is_current = index == current and status != "COMPLETED"
    state = _state(e, index, r, is_current)
    notes = []
    if index == sleeping and e.next_wake_at:
        state = "sleeping"
        notes.append(f'sleeping, {time_tag(e.next_wake_at, "left", now)} (until {esc(e.next_wake_at)})')
    elif is_current and status == "SLEEPING":
        state = "pending"
        notes.append("runs when the sleep ends")
    elif is_current and status == "WAITING":
        state = "waiting"
        w = e.waiting_for
        timeout = f', times out {time_tag(w.timeout_at, "left", now)}' if w and w.timeout_at else ", no timeout"
        event = w.event if w else None
        if w is not None and w.arrived:
            notes.append(f'event <b>{esc(event)}</b> came: its delivery resumes the execution' if event else
                         "an event came: its delivery resumes the execution")
        else:
            notes.append((f'waiting for event <b>{esc(event)}</b>' if event else
                          f'waiting: {esc(UNNAMED_WAIT)}') + timeout)
    elif is_current and status == "RUNNING" and e.timer == "retry" and e.next_wake_at:
        state = "retrying"
        notes.append(f'attempt {esc(e.attempt or (r.attempts if r else None) or "?")} failed; next attempt '
                     f'{time_tag(e.next_wake_at, "left", now)}')
    elif is_current and status == "RUNNING" and e.fanout is not None:
        f = e.fanout
        notes.append(f'{esc(f.succeeded)}/{esc(f.branches)} branches done'
                     + (f', at most {esc(f.max_concurrency)} at once' if f.max_concurrency else ""))
    elif is_current and status == "RUNNING" and (r is None or r.status != "SUCCEEDED"):
        notes.append("running" + (f', attempt {esc(e.attempt)}' if e.attempt else ""))
    if kind == "wait_for_event" and spec is not None and not (is_current and status == "WAITING"):
        timeout = f', timeout {span(float(spec.timeout_s))}' if spec.timeout_s else ""
        notes.append(f'waits for event <b>{esc(spec.event)}</b>{timeout}')
    if kind in ("map", "parallel") and spec is not None:
        over = f' over <code>{esc(spec.over)}</code>' if spec.over else ""
        shown = is_current and e.fanout is not None  # the progress note says it already
        limit = f', at most {esc(spec.max_concurrency)} at once' if spec.max_concurrency and not shown else ""
        notes.append(f"{kind}{over}{limit}")
    if r is not None and r.event_id:
        notes.append(f'got event id <code>{esc(r.event_id)}</code>')
    if kind == "sleep" and spec is not None and spec.sleep_s is not None:
        notes.append(f'sleep {span(float(spec.sleep_s))}')
    if early is not None:  # its record says SUCCEEDED, written when it began
        notes.append(esc(early))
        if early.startswith("cancelled"):
            state = "stopped"
    if branches:
        notes.append(esc(fanout_summary(branches).attempts_text()))
    elif r is not None and r.attempts and r.kind != "fanout":
        notes.append(attempts_text(r.attempts))
    if r is not None and _duration(r) and kind != "sleep":
        notes.append(f"took {_duration(r)}")
    if r is not None and r.started_at:
        notes.append(f'started {time_tag(r.started_at, now=now)}')
    body = ""
    shown_error = (r.attempts, r.error) if r is not None and r.error else None
    earlier = [(a, err) for a, err in seen if (a, err) != shown_error]
    if earlier:
        rows = "".join(f'<li>attempt {esc(a)} failed: <b>{esc(err.code)}</b>: {esc(err.message)}</li>'
                       for a, err in earlier)
        body += f'<ul class="attempts" title="failed attempts seen by this page">{rows}</ul>'
    if r is not None:
        if r.error:
            label = "error" if state == "failed" else "a failed attempt's error"
            body += f'<div class="errlabel">{label}</div>{error_block(r.error)}'
        if r.corrupt:
            body += f'<pre class="error">CORRUPT: {esc(r.detail)}</pre>'
        if not branches:  # a fan-in's result is its branches' results, listed with them
            body += json_block(r.result)
    if is_current and status == "FAILED" and r is None:
        body += error_block(e.error)
    cut_short = e.ended and (r is None or r.status != "SUCCEEDED")  # under max_concurrency, some may never have begun
    fan = next((f for f in e.fanouts if f.step_index == index), None)
    body += _branches(branches, now, e.ended, never_started(branches, fan) if cut_short else [])
    mark = ""
    if kind not in ("step", "sleep"):
        mark += f'<span class="kind">{esc(kind)}</span>'
    if spec is not None and spec.compensate:
        mark += f'<span class="kind" title="runs if the execution fails for good or is cancelled after this step">' \
                f'undo: {esc(spec.compensate)}</span>'
    return (f'<li class="step t-{state} k-{esc(kind)}" data-step="{index}"><div class="row"><span class="idx">{index}'
            f'</span><span class="name">{esc(name)}</span>{mark}<span class="state">{esc(state)}</span>'
            f'<span class="notes">{" · ".join(notes)}</span></div>{body}</li>')


BRANCHES_SHOWN_OPEN = 8
"""More branches than this are listed collapsed (a map over 1,000 items), opened when one failed."""


def _branches(branches: list[BranchRecord], now, ended: bool = False, hints: Iterable[str] = ()) -> str:
    """The step's branches; ``hints``: the execution ended before the step did, and under ``max_concurrency``
    later branches never began (they have no row): how many (``readings.never_started``)."""
    if not branches:
        return ""
    rows = "".join(_branch_row(b, now, ended) for b in sorted(branches, key=lambda x: x.branch))
    rows = f'<table class="branches"><tbody>{rows}</tbody></table>'
    rows += "".join(f'<p class="hint">{esc(hint)}</p>' for hint in hints)
    summary = fanout_summary(branches)
    text = summary.states_text()
    if len(branches) <= BRANCHES_SHOWN_OPEN:
        return f'<div class="branches"><div class="errlabel">{esc(text)}</div>{rows}</div>'
    opened = " open" if summary.states.get("failed") else ""
    return f'<details class="branches"{opened}><summary>{esc(text)}</summary>{rows}</details>'


def _branch_row(b: BranchRecord, now, ended: bool = False) -> str:
    state = state_word(b.status)
    notes = [attempts_text(b.attempts) if b.attempts else "", _duration(b)]
    if ended and b.status in OPEN_BRANCH_STATUSES:  # the execution ended (a cancel): nothing runs it now
        state = "skipped"
    elif b.next_wake_at:
        notes.append(f'next attempt {time_tag(b.next_wake_at, "left", now)}')
    detail = error_block(b.error) if b.error else json_block(b.result)
    if b.result_omitted:
        detail = '<span class="notes">result too large to show here</span>'
    return (f'<tr class="t-{esc(state)}"><td class="idx">{esc(b.branch)}</td><td class="state">{esc(state)}</td>'
            f'<td class="notes">{" · ".join(n for n in notes if n)}</td><td>{detail}</td></tr>')


def _record_row(r: StepRecord, title: str, now, tag: str = "li") -> str:
    state = state_word(r.status)
    notes = [attempts_text(r.attempts) if r.attempts else "", _duration(r)]
    return (f'<{tag} class="step t-{state} sub"><div class="row"><span class="name">{title}</span>'
            f'<span class="state">{esc(state)}</span><span class="notes">{" · ".join(n for n in notes if n)}</span>'
            f'</div>{error_block(r.error)}{json_block(r.result)}</{tag}>')


_OP_ICONS = {"redrive": "redrive", "cancel": "cancel", "wake": "wake", "event": "event"}


def operations_list(ops: list[Operation | CorruptRecord], now: dt.datetime | None = None) -> str:
    if not ops:
        return ""
    rows = []
    for op in ops:
        if isinstance(op, CorruptRecord):
            rows.append(f'<li class="op">corrupt record {esc(op.sort_key)}: {esc(op.detail)}</li>')
            continue
        detail = op.detail or {}
        what = esc(op.reason or "")
        if op.op == "redrive" and isinstance(detail.get("error"), dict):
            err = detail["error"]
            what = f'{esc(redriven_after(detail))}: <b>{esc(err.get("code"))}</b>: {esc(err.get("message"))}'
        elif op.op == "wake":
            what = f'skipped the {esc(detail.get("was"))} due {esc(detail.get("due"))}'
        mark = icon(_OP_ICONS.get(op.op, "dot"))
        rows.append(f'<li class="op op-{esc(op.op)}">{mark} <b>{esc(op.op)}</b> by {esc(op.by)} '
                    f'{time_tag(op.at, now=now)} <span class="notes">{what}</span></li>')
    return f'<h2>Operator actions</h2><ul class="ops">{"".join(rows)}</ul>'


def events_list(history: History, now: dt.datetime | None = None, ended: bool = False) -> str:
    """The events sent to the execution, each with the step that consumed it (or kept for a later wait; once
    the execution ``ended``, not consumed)."""
    if not history.events:
        return ""
    rows = []
    for ev in history.events:
        if isinstance(ev, CorruptRecord):
            rows.append(f'<li class="op">corrupt record {esc(ev.sort_key)}: {esc(ev.detail)}</li>')
            continue
        step = ev.consumed_by_step
        where = (f"consumed by step {esc(step)}" if step is not None
                 else "not consumed" if ended else "kept until a wait for it")
        rows.append(f'<li class="op op-event">{icon("event")} <b>{esc(ev.event)}</b> <code>{esc(ev.event_id)}</code> '
                    f'by {esc(ev.by)} {time_tag(ev.sent_at, now=now)} <span class="notes">{where}</span>'
                    f'{json_block(ev.data, "data")}</li>')
    return f'<h2>Events</h2><ul class="ops events">{"".join(rows)}</ul>'
