"""The ``loom`` commands: each one SDK call (``loom_cli.sdk``) and what it prints."""

from __future__ import annotations

import json
from typing import Any

from .readings import UNNAMED_WAIT, step_label
from .render import (execution_table, executions_table, history_report, reads_otherwise_once_ended,
                     schedules_table, workflows_table)
from .sdk import LoomClient, LoomError
from .sdk.models import Execution, RetryPolicy, Workflow
from .watch import watch as follow


def print_json(body: Any) -> None:
    print(json.dumps(body, indent=2, sort_keys=True))


def _definition(client: LoomClient, name: str) -> Workflow | None:
    """The workflow's step list, for naming the step a sleep sleeps in and knowing its fan-outs; a table still
    prints without it."""
    try:
        return client.workflow(name)
    except LoomError:
        return None


def start(client: LoomClient, args) -> int:  # args.input, args.data: objects (``args.read_json_arguments``)
    started = client.start(args.workflow, args.input, idempotency_token=args.token,
                           version=args.version)
    if args.json and args.watch:  # one line per document, as the watch that follows prints them (NDJSON)
        print(json.dumps(started.document(), sort_keys=True), flush=True)
    elif args.json:
        print_json(started.document())
    else:
        verb = "started" if started.created else "already started (same token and input)"
        print(f"{started.execution_id}  {started.workflow}  {started.status}  {verb}", flush=True)
    if args.watch:
        return follow(client, started.execution_id, as_json=args.json)
    return 0


def status(client: LoomClient, args) -> int:
    e = client.get(args.execution_id)
    if args.json:
        print_json(e.document())
    else:
        wf = _definition(client, e.workflow)  # names a sleep's step; says what the attempts leave out
        print(execution_table(e, wf if wf is not None and wf.version == e.workflow_version else None))
    return 0


def history(client: LoomClient, args) -> int:
    h = client.history(args.execution_id)
    if args.json:
        print_json(h.document())
        return 0
    e = client.get(args.execution_id) if reads_otherwise_once_ended(h) else None
    print(history_report(h, ended=e is not None and e.ended, fanouts=None if e is None else e.fanouts))
    return 0


def watch(client: LoomClient, args) -> int:
    return follow(client, args.execution_id, interval_s=args.interval, timeout_s=args.timeout, as_json=args.json)


def list_executions(client: LoomClient, args) -> int:
    filters = {"workflow": args.workflow, "status": args.status, "started_after": args.since}
    if args.all:
        entries, token = [], None
        page = client.list_page(**filters, limit=args.limit, next_token=args.next_token)
        while True:
            entries += page.executions
            if not page.next_token:
                break
            page = client.list_page(**filters, limit=args.limit, next_token=page.next_token)
    else:
        page = client.list_page(**filters, limit=args.limit, next_token=args.next_token, check_more=True)
        entries, token = list(page.executions), page.next_token
    if args.json:
        print_json({"executions": [x.document() for x in entries], "next_token": token})
        return 0
    print(executions_table(entries) if entries else "no executions match")
    if token:
        print(f"more: add --all, or --next-token {token}")
    return 0


def cancel(client: LoomClient, args) -> int:
    e = client.cancel(args.execution_id, reason=args.reason)
    if args.json:
        print_json(e.document())
    else:
        why = f" ({e.cancel_reason})" if e.cancel_reason else ""
        undo = "; compensating its completed steps first" if e.compensating else ""
        if e.cancel_requested and not e.ended:
            undo = ("; requested: an attempt holds the step, and the cancel takes effect when it ends "
                    "(loom watch follows it)")
        elif e.compensating and not e.cancelled_by and not e.cancel_requested:  # undoing after a failure
            failed = e.failed_step if e.failed_step is not None else e.current_step
            code = f" ({e.error.code})" if e.error is not None else ""
            print(f"{e.execution_id}  {e.workflow}  {e.status}  not cancelled: it is already undoing its completed "
                  f"steps because step {step_label(e, failed, e.error.step_name if e.error else None)} failed{code}, and ends FAILED once they are undone; "
                  "the cancel changes nothing (loom watch follows it)")
            return 0
        print(f"{e.execution_id}  {e.workflow}  {e.status}  by {e.cancelled_by or '-'}{why}{undo}")
    return 0


def _after_timeout(client: LoomClient, e: Execution) -> str:
    """What a wait's timeout does next, from its step's definition when the API serves the version it runs:
    its default, another wait period under its retry policy, or the step's failure (``event_timeout``)."""
    wf = _definition(client, e.workflow)
    step = wf.step(e.current_step) if wf is not None and wf.version == e.workflow_version else None
    if step is None or step.kind != "wait_for_event":
        return (f"it takes its default if it has one, else waits again if its retry policy allows another wait "
                f"period (this was period {e.attempt}), else the step fails (event_timeout)")
    if step.default is not None:
        return "it takes its default"
    most = (step.retry or RetryPolicy(max_attempts=1)).max_attempts  # a wait waits once unless it says more
    if e.attempt < most:
        return f"it has no default, so it waits again (wait period {e.attempt + 1} of {most}, its retry policy's)"
    return f"it has no default and this was its last wait period ({e.attempt} of {most}): the step fails (event_timeout)"


def redrive(client: LoomClient, args) -> int:
    e = client.redrive(args.execution_id, to_version=args.to_version)
    if args.json:
        print_json(e.document())
    else:
        onto = f" on version {e.workflow_version}" if args.to_version is not None else ""
        print(f"{e.execution_id}  {e.workflow}  {e.status}  redriven from step {step_label(e)}{onto} (redrive {e.redrives})")
    return 0


def wake(client: LoomClient, args) -> int:
    before = client.get(args.execution_id)
    e = client.wake(args.execution_id)
    if args.json:
        print_json(e.document())
    elif before.cannot_run is not None:
        print(f"{e.execution_id}  {e.workflow}  {e.status}  woken: its version {before.workflow_version} is not "
              f"deployed here ({before.cannot_run.code}), so the delivery that comes now fails it; then `loom redrive "
              f"{e.execution_id} --to-version N` moves it onto a deployed version (loom workflows lists them)")
    elif before.status == "WAITING":
        event = before.waiting_for.event if before.waiting_for else None
        what = f"the wait for event {event}" if event else f"the wait ({UNNAMED_WAIT})"
        print(f"{e.execution_id}  {e.workflow}  {e.status}  woken: {what} at step {step_label(before)} timed out "
              f"now: {_after_timeout(client, before)}")
    elif before.compensating:  # its backoff was an undo's: the undo runs, never the step it undoes
        print(f"{e.execution_id}  {e.workflow}  {e.status}  woken: the undo of step {step_label(before)} runs now "
              "(its retry backoff ended); the step itself does not run again")
    elif before.status == "SLEEPING" and before.timer == "sleep":  # a sleep waits at its own step
        print(f"{e.execution_id}  {e.workflow}  {e.status}  woken: the sleep at step {step_label(before)} ends now; "
              f"step {step_label(before, before.current_step + 1)} runs next")
    else:
        print(f"{e.execution_id}  {e.workflow}  {e.status}  woken: step {step_label(e)} runs now")
    return 0


def send(client: LoomClient, args) -> int:
    sent = client.send(args.execution_id, args.name, args.data, event_id=args.event_id)
    if args.json:
        print_json(sent.document())
    else:
        print(f"{sent.execution_id}  event {args.name}  {sent.outcome}  (event id {sent.event_id or '-'})")
    return 0


def callback(client: LoomClient, args) -> int:
    sent = client.complete_callback(args.token, args.data)
    if args.json:
        print_json(sent.document())
    else:
        print(f"{sent.execution_id}  event {sent.event}  {sent.outcome}  (callback)")
    return 0


def workflows(client: LoomClient, args) -> int:
    doc = client.live_versions()
    if args.json:
        print_json(doc)
        return 0
    print(workflows_table([Workflow.model_validate(w) for w in doc.get("workflows", [])]))
    for u in doc.get("undeployed", []):
        print(f"WARNING: {u['live']} live execution(s) run on version {u['version']} of {u['workflow']!r}, which is not "
              "deployed: each fails workflow_version_missing at its next delivery; deploy that version again")
    live = doc.get("live") or {}
    if live and not live.get("complete", True):
        print(f"(live counts stopped at {live.get('read')} executions: each is a lower bound)")
    return 0


def schedules(client: LoomClient, args) -> int:
    listing = client.schedules()
    if args.json:
        print_json(listing.document())
    else:
        print(schedules_table(listing.schedules))
    return 0


def console(client: LoomClient, args) -> int:
    from .console import serve

    return serve(client, port=args.port, open_browser=args.open, interval_s=args.interval)


def mcp(args) -> int:
    """``loom mcp``: the client is made when a tool first needs it, so a start with no URL yet (the stack
    not up, no ``--url``) still serves, and each call says what is missing."""
    from .mcp_server import serve

    def connect() -> LoomClient:
        return LoomClient(args.url, env_dir=args.env_dir, sign=args.sign, region=args.region, profile=args.profile)

    return serve(connect, read_only=args.read_only, tools=args.tools)
