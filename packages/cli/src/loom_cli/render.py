"""Plain-text tables for terminals, from the SDK's models."""

from __future__ import annotations

import json
from typing import Any

from .prices import WORKER_MEMORY_MB, ledger_usd, usd_text
from .readings import (UNNAMED_WAIT, branches_not_counted, fanout_summary, never_started, redriven_after,
                       sleep_ended_early, wake_at, where)
from .sdk.models import (BranchRecord, Cost, CorruptRecord, Execution, FanOutProgress, History, ListEntry, StepRecord,
                         Workflow)

CONTEXT_SHOWN = 400
"""``loom status`` shows this much of the context (``--json`` shows all); errors are always shown whole."""


def table(headers: list[str], rows: list[list[Any]], limit: int | None = 60) -> str:
    cells = [[_cell(v, limit) for v in row] for row in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]
    line = lambda values: "  ".join(v.ljust(w) for v, w in zip(values, widths)).rstrip()  # noqa: E731
    rule = ["-" * min(w, 80) for w in widths]  # a whole error or context is wide: the rule need not be
    return "\n".join([line(headers), line(rule)] + [line(r) for r in cells])


def _cell(value: Any, limit: int | None = 60) -> str:
    if value is None:
        return "-"
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True, ensure_ascii=False)
    return text if limit is None or len(text) <= limit else text[: limit - 3] + "..."


def _error(err: Any) -> str | None:
    return None if err is None else f"{err.code}: {err.message}"


def _step_attempts(e: Execution) -> str:
    """What ``attempt`` counts, beside the total: the current step's attempts, an undo's (while compensating
    and after: the step shown is where it failed or was cancelled), or a wait's periods (which the total leaves
    out). Nothing once it ended COMPLETED or CANCELLED, nor while it sleeps or fans out (there it only marks
    that the sleep began, or the branches went out)."""
    if not e.attempt or e.status in ("COMPLETED", "CANCELLED", "SLEEPING") or e.fanout is not None:
        return ""
    if e.compensating:
        return f" (the {'stopped' if e.ended else 'running'} undo's: {e.attempt})"
    if e.status == "COMPENSATION_FAILED":
        return f" (the undo that failed: {e.attempt})"
    if e.compensated is not None:
        return ""
    if e.status == "WAITING":
        return f" (this is wait period {e.attempt} of the step; wait periods are not attempts)"
    return f" (this step's: {e.attempt})"


def execution_table(e: Execution | dict, wf: Workflow | None = None) -> str:
    """``loom status``: every field a person needs, errors in full (their fix hint is at the end)."""
    e = Execution.model_validate(e) if isinstance(e, dict) else e
    context = json.dumps(e.context, sort_keys=True, ensure_ascii=False) if e.context is not None else None
    if context is not None and len(context) > CONTEXT_SHOWN:
        context = context[:CONTEXT_SHOWN] + f"... ({len(context):,} characters: --json shows all)"
    rows: list[list[Any]] = [
        ["execution_id", e.execution_id], ["workflow", e.workflow], ["status", e.status],
        ["current step", where(e, wf)],
        ["pinned to", f"version {e.workflow_version}" + (": " + " > ".join(e.steps) if e.steps else "")],
        ["revision", f"{e.version} (the execution record's; not a workflow version)"],
        ["attempts", f"{e.total_attempts} in all"
                     + _step_attempts(e)
                     + branches_not_counted(e, wf)],
        ["next wake", e.next_wake_at and f"{e.next_wake_at} ({e.timer}"
                      + (": an event came, its delivery is due)" if e.waiting_for and e.waiting_for.arrived else ")")],
        ["created", e.created_at], ["updated", e.updated_at], ["started by", e.started_by],
    ]
    if e.cancelled_by:
        rows.append(["cancel requested by" if e.cancel_requested else "cancelled by",
                     e.cancelled_by + (f" ({e.cancel_reason})" if e.cancel_reason else "")])
    if e.redrives:
        rows.append(["redrives", e.redrives])
    if e.waiting_for is not None:
        w = e.waiting_for
        what = f"event {w.event}" if w.event else UNNAMED_WAIT
        if w.arrived:
            what += ": it came; its delivery resumes the execution"
        rows.append(["waiting for", what + (f" (times out {w.timeout_at})" if w.timeout_at else " (no timeout)")])
    if e.fanout is not None:
        f = e.fanout
        rows.append(["branches", f"{f.succeeded}/{f.branches} done, at most {f.max_concurrency} at once"])
    if e.failed_step is not None and e.failed_step != e.current_step:
        # A cancel's undo starts from where it was cancelled: no step failed there.
        rows.append(["cancelled at step" if e.cancelled_by and e.error is None else "failed step", e.failed_step])
    if e.compensating or e.compensated:
        rows.append(["compensation", "done: the completed steps were undone" if not e.compensating else
                     "running" if not e.ended else "stopped at this step's undo (the error says why): a redrive goes "
                     "on undoing"])
    rows.append(["error", _error(e.error)])
    if e.compensating_for is not None:
        rows.append(["undoing after", f"{_error(e.compensating_for)} (a redrive goes on undoing; it ends with this "
                                      "failure)"])
    if e.compensation_error is not None:
        rows.append(["compensation error", _error(e.compensation_error)])
    if e.context_error:
        rows.append(["context error", e.context_error])
    if e.cannot_run is not None:
        rows.append(["cannot go on", f"{e.cannot_run.code}: {e.cannot_run.message}"])
    if e.cost is not None:
        rows.append(["cost", cost_text(e.cost)])
    rows.append(["context" if e.style != "code" else "input", context])
    if e.style == "code" and e.status == "COMPLETED":
        result = json.dumps(e.result, sort_keys=True, ensure_ascii=False)
        rows.append(["result", result if len(result) <= CONTEXT_SHOWN
                     else result[:CONTEXT_SHOWN] + f"... ({len(result):,} characters: --json shows all)"])
    return table(["field", "value"], rows, limit=None)


def cost_text(c: Cost, memory_mb: int = WORKER_MEMORY_MB) -> str:
    """One line of an execution's ledger, priced (``loom cost`` sums many)."""
    usd = sum(ledger_usd(c.read_units, c.write_units, c.messages, c.lambda_ms, memory_mb).values())
    return (f"{c.requests} DynamoDB requests, {c.read_units:g} read units, {c.write_units:g} write units, "
            f"{c.messages} message{'' if c.messages == 1 else 's'}, {c.lambda_ms} worker ms: about {usd_text(usd)} at list "
            f"prices ({memory_mb} MB)")


def _step_name(r: BranchRecord, names: dict[int, str]) -> str:
    return f"{names.get(r.step_index) or r.name or 'step'}[{r.branch}]"


UNFINISHED_BRANCH = ("PENDING", "RUNNING", "RETRY")


def says_more_once_ended(h: History) -> bool:
    """Whether ``history_table`` (and ``events_table``) would say more of ``h`` once the execution ended: an
    unfinished branch, a fan-out that did not succeed (or has no record of its own yet), an event no wait
    consumed."""
    fanouts = {r.step_index for r in h.steps if isinstance(r, StepRecord) and r.kind != "compensation"
               and (r.kind != "fanout" or r.status == "SUCCEEDED")}
    return any(isinstance(r, BranchRecord) and (r.status in UNFINISHED_BRANCH or r.step_index not in fanouts)
               for r in h.steps) \
        or any(isinstance(r, StepRecord) and r.kind == "fanout" and r.status != "SUCCEEDED" for r in h.steps) \
        or any(getattr(ev, "consumed_by_step", 0) is None for ev in h.events or [])


def history_table(h: History | dict, ended: bool = False, fanouts: list[FanOutProgress] | None = None) -> str:
    """``loom history``: one row per record with its kind (an undo is a ``compensation`` row, a branch is
    ``name[n]`` under its ``fanout`` step, whose attempts are its branches'). Once the execution ``ended``, a
    branch left unfinished (a cancel, a failure of another branch) says it will not run, and an unfinished
    fan-out says how many of its branches never began (no row: ``max_concurrency`` held them back), counted
    from ``fanouts`` (the execution's, ``Execution.fanouts``), or says the rule when the count is not known."""
    h = History.model_validate(h) if isinstance(h, dict) else h
    counts = {f.step_index: f for f in fanouts or () if f.step_index is not None}
    names = {r.step_index: r.name for r in h.steps if isinstance(r, StepRecord)}
    rows: list[list[Any]] = []
    notes: list[str] = []
    for r in h.steps:
        if isinstance(r, CorruptRecord):
            rows.append(["?", r.sort_key, "?", "CORRUPT", "-", "-", "-", r.detail])
            continue
        err = _error(r.error) if r.status != "SUCCEEDED" else None
        detail: Any = err if err is not None else r.result
        if r.corrupt:
            detail = f"CORRUPT: {r.detail}"
        if isinstance(r, BranchRecord):
            if r.result_omitted and err is None:
                detail = "(result too large to show: the step's record holds it)"
            if r.status == "RETRY" and r.next_wake_at:
                detail = f"next attempt {r.next_wake_at}; {detail}"
            if ended and r.status in UNFINISHED_BRANCH:
                detail = "never ran: the execution ended" if r.status == "PENDING" else \
                    f"stopped: the execution ended{'' if detail is None else f'; {detail}'}"
            rows.append([r.step_index, _step_name(r, names), "branch", r.status, r.attempts, r.started_at,
                         r.finished_at, detail])
            continue
        kind, attempts, status = r.kind, r.attempts, r.status
        due = wake_at(r)
        if due is not None and not r.corrupt:
            kind = "sleep"  # recorded when it began: its row's finish is then, its end is wake_at
            early = sleep_ended_early(r, h)
            detail = f"{early} (due {due})" if early else f"wake at {due}"
            if early == "cancelled while sleeping":  # its record says SUCCEEDED: it was written as it began
                status = "CANCELLED"
        elif kind == "event" and r.status == "SUCCEEDED" and not r.event_id and not r.corrupt:
            detail = f"no event came: took its default {_cell(r.result, None)}"
        if kind == "fanout":
            branches = h.branches(r.step_index)
            if branches:
                summary = fanout_summary(branches)
                attempts = summary.attempts
                detail = err if err is not None else summary.text()
            if ended and r.status != "SUCCEEDED":  # under max_concurrency, later branches may never have begun
                notes += [f"{r.name}: {note}" for note in never_started(branches, counts.get(r.step_index))]
        rows.append([r.step_index, r.name, kind, status, attempts, r.started_at, r.finished_at, detail])
    if ended:  # a fan-out cancelled before its step ended has its branches' rows and none of its own
        steps = {r.step_index for r in h.steps if isinstance(r, StepRecord) and r.kind != "compensation"}
        for i, name in {r.step_index: _step_name(r, names).split("[")[0] for r in h.steps
                        if isinstance(r, BranchRecord) and r.step_index not in steps}.items():
            notes += [f"{name}: {note}" for note in never_started(h.branches(i), counts.get(i))]
    out = table(["#", "step", "kind", "status", "attempts", "started", "finished", "result / error"], rows)
    return "\n".join([out, "", *notes]) if notes else out


def _open_fan_out(h: History) -> bool:
    """A parallel or map step that has not fanned in (its branches' ledgers are not in the cost yet)."""
    fanned_in = {r.step_index for r in h.steps if isinstance(r, StepRecord) and r.kind == "fanout"
                 and r.status == "SUCCEEDED"}
    return h.cost is not None and any(isinstance(r, BranchRecord) and r.step_index not in fanned_in for r in h.steps)


def reads_otherwise_once_ended(h: History) -> bool:
    """Whether ``history_report(h, ended)`` depends on ``ended``: an unfinished branch, or an event no wait
    consumed, waits while the execution lives; after its end it never will (asked only then)."""
    return says_more_once_ended(h) or _open_fan_out(h)


def history_report(h: History, ended: bool, fanouts: list[FanOutProgress] | None = None) -> str:
    """What ``loom history`` prints, and ``loom watch`` once the execution ends: the steps, what it cost so
    far, the events and the operator actions (``fanouts``: the execution's, for ``history_table``)."""
    parts = [history_table(h, ended=ended, fanouts=fanouts)]
    if h.cost is not None:
        left_out = ""
        if _open_fan_out(h):
            left_out = ("; the branch deliveries of a parallel or map step that never fanned in are not in it (the "
                        "execution ended before its fan-in)" if ended else "; the branch deliveries of a parallel "
                        "or map step that has not fanned in are not in it (its fan-in adds them)")
        parts.append(f"cost so far: {cost_text(h.cost)}{left_out}")
    if h.events:
        parts.append(events_table(h, ended=ended))
    if h.operations:
        parts.append(operations_table(h))
    return "\n\n".join(parts)


def events_table(h: History, ended: bool = False) -> str:
    """The events sent to the execution; one no wait consumed is ``kept for a wait``, or, once the execution
    ``ended``, ``not consumed``."""
    unconsumed = "not consumed" if ended else "kept for a wait"
    rows = []
    for ev in h.events or []:
        if isinstance(ev, CorruptRecord):
            rows.append(["CORRUPT", ev.sort_key, "-", "-", "-", ev.detail])
            continue
        step = ev.consumed_by_step
        rows.append([ev.event, ev.event_id, ev.sent_at, ev.by, unconsumed if step is None else f"step {step}",
                     ev.data])
    return table(["event", "event id", "sent", "by", "consumed by", "data"], rows)


def executions_table(executions: list[ListEntry]) -> str:
    rows = [[x.execution_id, x.workflow, x.status, x.created_at] for x in executions]
    return table(["execution_id", "workflow", "status", "created"], rows)


def operations_table(h: History) -> str:
    rows = []
    for op in h.operations:
        if isinstance(op, CorruptRecord):
            rows.append(["?", "CORRUPT", "-", op.sort_key, op.detail])
            continue
        detail = op.detail or {}
        error = detail.get("error") if isinstance(detail.get("error"), dict) else None
        what = op.reason
        if error:  # a redrive: the failure it left behind
            what = f"{redriven_after(detail)}: {error.get('code')}: {error.get('message')}"
        elif op.op == "wake":
            what = f"skipped the {detail.get('was')} due {detail.get('due')}"
        if "to_version" in detail:  # a redrive onto another version
            what = f"onto version {detail['to_version']} from {detail.get('from_version')}" + (f"; {what}" if what else "")
        rows.append([op.version, op.op, op.at, op.by, what])
    return table(["revision", "operation", "at", "by", "reason / detail"], rows, limit=160)


def workflows_table(workflows: list[Workflow]) -> str:
    """``loom workflows``: a row per deployed version (the newest first), with the executions live on it."""
    rows = []
    for wf in workflows:
        retry = wf.retry
        policy = f"{retry.max_attempts}x base {retry.base:g}s max {retry.max_delay:g}s" if retry else "-"
        versions = sorted(wf.versions, key=lambda v: -v.version) or [None]
        for v in versions:
            code = (v.style if v is not None else wf.style) == "code"
            names = v.steps if v is not None else [s.name for s in wf.steps]
            function = wf.function if v is None or v.version == wf.version else v.function
            steps = (f"code-first: {function}" if function else "code-first") if code else " > ".join(names)
            live = "-" if v is None or v.live is None else v.live
            newest = v is None or v.version == wf.version
            rows.append([wf.name, wf.version if v is None else v.version, live, "-" if code else len(names),
                         policy if newest else "", input_summary(wf.input_schema) if newest else "", steps])
    return table(["workflow", "version", "live", "steps", "retry", "input (* required; --json for the JSON Schema)",
                  "step list"], rows)


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


def _when(text: str | None) -> str | None:
    """An API time (2026-03-02T09:00:00.000000Z) as 2026-03-02 09:00:00Z."""
    return None if text is None else text.replace("T", " ").split(".")[0] + "Z"


def schedules_table(schedules: list) -> str:
    """``loom schedules``: each schedule, its next firing and what its last one did."""
    rows = []
    for s in schedules:
        last = s.last_firing
        outcome = None if last is None else last.outcome + (f" (+{last.duplicates} repeated)" if last.duplicates else "")
        if last is not None and last.error is not None:
            outcome = f"{outcome}: {last.error.code}"
        rows.append([s.name, s.workflow, s.expression, s.timezone, s.overlap if s.enabled else f"{s.overlap} (disabled)",
                     _when(s.next_firing), None if last is None else _when(last.scheduled_at), outcome,
                     None if last is None else last.execution_id])
    out = table(["schedule", "workflow", "expression", "time zone", "overlap", "next firing", "last firing", "outcome",
                 "execution"], rows, limit=None)
    if not schedules:
        return ("no schedules are deployed (a deployment declares them in Terraform: the schedules input of the loom "
                "module; `loom dev` runs none)")
    problems = [f"{s.name}: {s.problem}" for s in schedules if s.problem]
    return out + ("\n\n" + "\n".join(problems) if problems else "")
