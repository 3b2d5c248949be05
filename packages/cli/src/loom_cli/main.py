"""``loom``: start, watch, find, cancel, redrive, wake, signal and inspect executions; ``loom console`` (a web
console) and ``loom mcp`` (tools for agents) on the same API.

Exit status: 0 success; 1 the watched execution FAILED, was CANCELLED or its compensation failed; 2 bad usage or
configuration; 3 the API refused the request (its error code and message are printed); 4 the
control plane could not be reached or answered badly.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import subprocess
import sys
import re
import time
import urllib.parse
from pathlib import Path
from typing import Any

from .client import ApiError, CliError, Client
from .render import (
    events_table,
    execution_table,
    executions_table,
    history_table,
    operations_table,
    step_label,
    workflows_table,
)

URL_ENV = "LOOM_URL"
LOCAL_STATE = Path(".loom/local.json")
ENDED = ("COMPLETED", "FAILED", "CANCELLED", "COMPENSATION_FAILED")
PAGE_MAX = 100


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if getattr(args, "without_api", False):
            return args.func(None, args)
        client = Client.create(resolve_url(args), sign=args.sign, region=args.region, profile=args.profile)
        return args.func(client, args)
    except ApiError as exc:
        _error(args, exc.code, exc.api_message, exc.status)
        return exc.exit_code
    except CliError as exc:
        _error(args, "cli_error", str(exc))
        return exc.exit_code
    except KeyboardInterrupt:
        return 130


def resolve_url(args: argparse.Namespace) -> str:
    """--url, then $LOOM_URL, then --env-dir's Terraform output, then the local stack from `make up`."""
    if args.url:
        return args.url
    if os.environ.get(URL_ENV):
        return os.environ[URL_ENV]
    if args.env_dir:
        return _terraform_url(Path(args.env_dir))
    if LOCAL_STATE.exists():
        try:
            return json.loads(LOCAL_STATE.read_text())["url"]
        except (ValueError, KeyError) as exc:
            raise CliError(f"{LOCAL_STATE} is unreadable ({exc}); run `make down && make up` again", 2) from None
    raise CliError(
        "no control plane URL: pass --url, set LOOM_URL, pass --env-dir terraform/envs/<env>, "
        "or start the local stack with `make up`", 2)


def _terraform_url(env_dir: Path) -> str:
    if not env_dir.is_dir():
        raise CliError(f"--env-dir {env_dir} is not a directory", 2)
    try:
        out = subprocess.run(["terraform", f"-chdir={env_dir}", "output", "-raw", "-no-color", "function_url"],
                             capture_output=True, text=True, timeout=60)
    except FileNotFoundError:
        raise CliError("--env-dir needs the terraform CLI on PATH", 2) from None
    if out.returncode != 0 or not out.stdout.strip():
        raise CliError(f"`terraform output function_url` failed in {env_dir}: {out.stderr.strip() or 'empty output'}; "
                       "has this environment been applied?", 2)
    return out.stdout.strip()


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="loom", description="Start, watch, find and operate Loom executions.",
                                epilog="Exit status: 0 ok, 1 watched execution FAILED, CANCELLED or COMPENSATION_FAILED, 2 usage, "
                                       "3 API refused, 4 unreachable.")
    p.add_argument("--url", help=f"control plane Function URL (default: ${URL_ENV}, --env-dir, or the `make up` stack)")
    p.add_argument("--env-dir", help="read the URL from `terraform output function_url` in this environment directory")
    p.add_argument("--json", action="store_true", help="print the API's JSON instead of tables (also after the command)")
    sign = p.add_mutually_exclusive_group()
    sign.add_argument("--sign", dest="sign", action="store_true", default=None,
                      help="SigV4-sign requests (default: on for non-loopback URLs)")
    sign.add_argument("--no-sign", dest="sign", action="store_false", help="never sign requests")
    p.add_argument("--region", help="AWS region for signing (default: from the URL or the AWS config)")
    p.add_argument("--profile", help="AWS profile for signing (default: the standard credential chain)")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, func, text: str, execution_id: bool = True) -> argparse.ArgumentParser:
        c = sub.add_parser(name, help=text, description=text)
        # SUPPRESS: `loom --json status ID` keeps the flag; `loom status ID --json` sets it too
        c.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="print the API's JSON")
        if execution_id:
            c.add_argument("execution_id")
        c.set_defaults(func=func)
        return c

    s = command("start", cmd_start, "start an execution", execution_id=False)
    s.add_argument("workflow")
    s.add_argument("--input", default="{}", help="JSON object, or @file.json (default: {})")
    s.add_argument("--token", help="idempotency token: the same token and input start at most one execution")
    s.add_argument("--watch", action="store_true", help="then watch it until it ends")

    command("status", cmd_status, "show an execution")
    command("history", cmd_history, "show an execution's step records and operator actions (every page)")

    w = command("watch", cmd_watch, "follow an execution until it ends, a line per change; exit 1 if it FAILED, "
                                    "was CANCELLED or its compensation failed")
    w.add_argument("--interval", type=float, default=1.0, help="seconds between polls (default 1)")
    w.add_argument("--timeout", type=float, default=None, help="give up after this many seconds (exit 4)")

    ls = command("list", cmd_list, "list executions, newest first", execution_id=False)
    ls.add_argument("--workflow", help="only this workflow")
    ls.add_argument("--status", type=str.upper, help="LIVE (running, sleeping or waiting), COMPLETED, FAILED, CANCELLED or "
                                                     "COMPENSATION_FAILED")
    ls.add_argument("--since", type=_since, help="started at most this long ago (90s, 30m, 2h, 1d, 1h30m) or "
                                                 "since this ISO-8601 time")
    ls.add_argument("--limit", type=_limit, default=20, help="executions per page, 1-100 (default 20)")
    ls.add_argument("--all", action="store_true", help="follow every page, not just the first")
    ls.add_argument("--next-token", help="continue a listing from the next_token it printed")

    c = command("cancel", cmd_cancel, "end a live execution CANCELLED (a running step finishes; nothing after it runs)")
    c.add_argument("--reason", help="why, kept on the execution and in its history")
    command("redrive", cmd_redrive, "resume a FAILED execution from its failed step, with fresh attempts")
    command("wake", cmd_wake, "end the current sleep or retry backoff now")
    ev = command("send", cmd_send, "send an event to an execution (delivered to its wait_for_event, or buffered "
                                   "until it waits for it)")
    ev.add_argument("name", help="the event's name, as the workflow's wait_for_event names it")
    ev.add_argument("--data", default="{}", help="the event's data: a JSON object, or @file.json (default: {})")
    ev.add_argument("--event-id", help="deduplication id: the same id is delivered at most once")
    command("workflows", cmd_workflows, "list registered workflows", execution_id=False)

    co = command("console", cmd_console, "serve the web console on 127.0.0.1 (lists, timelines, live updates, "
                                         "actions); Ctrl-C stops it", execution_id=False)
    co.add_argument("--port", type=_port, default=0, help="port to listen on (default: a free one, printed)")
    co.add_argument("--open", action="store_true", help="open it in the web browser")
    co.add_argument("--interval", type=float, default=1.0, help="seconds between the polls behind live updates "
                                                                "(default 1)")
    command("mcp", cmd_mcp, "serve the Model Context Protocol on stdio: tools for agents to list workflows, start, "
                            "inspect, list, signal, cancel and redrive executions", execution_id=False)

    d = command("dlq", None, "the dead-letter queue: what the transport gave up on (read with your AWS "
                             "credentials from --env-dir's outputs or the local stack)", execution_id=False)
    dsub = d.add_subparsers(dest="dlq_command", required=True, metavar="ACTION")
    dl = dsub.add_parser("list", help="show dead-lettered messages (they stay on the queue)")
    dl.add_argument("--limit", type=_limit, default=20, help="at most this many, 1-100 (default 20)")
    dl.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="print JSON")
    dl.set_defaults(func=cmd_dlq_list, without_api=True)
    dr = dsub.add_parser("redrive", help="return dead-lettered step messages to the step queue (notices stay)")
    dr.add_argument("--limit", type=_limit, default=100, help="at most this many messages, 1-100 (default 100)")
    dr.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="print JSON")
    dr.set_defaults(func=cmd_dlq_redrive, without_api=True)
    return p


_DURATION = re.compile(r"\A(?:(\d+)w)?(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?\Z")


def _since(text: str) -> str:
    """A duration back from now (2h, 30m, 1d12h) or an ISO-8601 time, as the ISO-8601 UTC time to send."""
    match = _DURATION.fullmatch(text.strip().lower())
    if match and any(match.groups()):
        w, d, h, m, s = (int(g or 0) for g in match.groups())
        when = dt.datetime.now(dt.timezone.utc) - dt.timedelta(weeks=w, days=d, hours=h, minutes=m, seconds=s)
    else:
        try:
            when = dt.datetime.fromisoformat(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is neither a duration (90s, 30m, 2h, 1d, 1h30m) nor an "
                                             "ISO-8601 time (2026-03-01T12:00:00Z)") from None
        if when.tzinfo is None:
            when = when.replace(tzinfo=dt.timezone.utc)
    return when.astimezone(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _port(text: str) -> int:
    if not (text.isdigit() and 0 <= int(text) <= 65535):
        raise argparse.ArgumentTypeError(f"must be a port number from 0 to 65535, got {text!r}")
    return int(text)


def _limit(text: str) -> int:
    if not (text.isdigit() and 1 <= int(text) <= PAGE_MAX):
        raise argparse.ArgumentTypeError(f"must be a whole number from 1 to {PAGE_MAX}, got {text!r}")
    return int(text)


def cmd_start(client: Client, args) -> int:
    payload: dict[str, Any] = {"workflow": args.workflow, "input": _load_input(args.input, "--input")}
    if args.token:
        payload["idempotency_token"] = args.token
    status, body = client.request("POST", "/executions", payload)
    if args.json:
        _print_json(body)
    else:
        verb = "started" if body.get("created", status == 202) else "already started (same token and input)"
        print(f"{body['execution_id']}  {body['workflow']}  {body['status']}  {verb}")
    if args.watch:
        args.interval, args.timeout, args.execution_id = 1.0, None, body["execution_id"]
        return cmd_watch(client, args)
    return 0


def cmd_status(client: Client, args) -> int:
    _, body = client.request("GET", f"/executions/{_id(args)}")
    _print_json(body) if args.json else print(execution_table(body))
    return 0


def cmd_history(client: Client, args) -> int:
    body = full_history(client, args.execution_id)
    if args.json:
        _print_json(body)
    else:
        print(history_table(body))
        if body.get("events"):
            print()
            print(events_table(body))
        if body["operations"]:
            print()
            print(operations_table(body))
    return 0


def full_history(client: Client, execution_id: str) -> dict[str, Any]:
    """Every page of ``GET /executions/{id}/history``, as one document (operations come with the first)."""
    path = f"/executions/{_quote(execution_id)}/history"
    _, first = client.request("GET", f"{path}?limit={PAGE_MAX}")
    steps, operations, token = list(first.get("steps", [])), list(first.get("operations", [])), first.get("next_token")
    while token:
        _, page = client.request("GET", f"{path}?{urllib.parse.urlencode({'limit': PAGE_MAX, 'next_token': token})}")
        steps += page.get("steps", [])
        token = page.get("next_token")
    whole = {"execution_id": first.get("execution_id", execution_id), "steps": steps, "operations": operations,
             "next_token": None}
    if "events" in first:  # the events sent to it, with the first page (issue 12)
        whole["events"] = first["events"]
    return whole


def cmd_list(client: Client, args) -> int:
    query = {k: v for k, v in (("workflow", args.workflow), ("status", args.status), ("started_after", args.since),
                               ("limit", args.limit), ("next_token", args.next_token)) if v is not None}
    executions: list[dict[str, Any]] = []
    while True:
        _, page = client.request("GET", f"/executions?{urllib.parse.urlencode(query)}")
        executions += page.get("executions", [])
        token = page.get("next_token")
        if not (args.all and token):
            break
        query["next_token"] = token
    if args.json:
        _print_json({"executions": executions, "next_token": token})
        return 0
    print(executions_table(executions) if executions else "no executions match")
    if token:
        print(f"more: add --all, or --next-token {token}")
    return 0


def cmd_cancel(client: Client, args) -> int:
    _, e = client.request("POST", f"/executions/{_id(args)}/cancel",
                          {"reason": args.reason} if args.reason is not None else None)
    if args.json:
        _print_json(e)
    else:
        why = f" ({e['cancel_reason']})" if e.get("cancel_reason") else ""
        print(f"{e['execution_id']}  {e['workflow']}  {e['status']}  by {e.get('cancelled_by') or '-'}{why}")
    return 0


def cmd_redrive(client: Client, args) -> int:
    _, e = client.request("POST", f"/executions/{_id(args)}/redrive")
    if args.json:
        _print_json(e)
    else:
        print(f"{e['execution_id']}  {e['workflow']}  {e['status']}  redriven from step {step_label(e)} "
              f"(redrive {e.get('redrives', '?')})")
    return 0


def cmd_wake(client: Client, args) -> int:
    _, e = client.request("POST", f"/executions/{_id(args)}/wake")
    if args.json:
        _print_json(e)
    else:
        print(f"{e['execution_id']}  {e['workflow']}  {e['status']}  woken: step {step_label(e)} runs now")
    return 0


def cmd_send(client: Client, args) -> int:
    payload: dict[str, Any] = {"data": _load_input(args.data, "--data")}
    if args.event_id is not None:
        payload["event_id"] = args.event_id
    _, r = client.request("POST", f"/executions/{_id(args)}/events/{urllib.parse.quote(args.name, safe='')}", payload)
    if args.json:
        _print_json(r)
    else:
        print(f"{r.get('execution_id', args.execution_id)}  event {r.get('event', args.name)}  {r.get('outcome')}"
              f"  (event id {r.get('event_id') or '-'})")
    return 0


def cmd_console(client: Client, args) -> int:
    from .console import serve

    return serve(client, port=args.port, open_browser=args.open, interval_s=args.interval)


def cmd_mcp(client: Client, args) -> int:
    from .mcp_server import serve

    return serve(client)


def _dlq(args):
    from . import dlq

    q = dlq.queues(args.env_dir, LOCAL_STATE)
    try:
        return dlq, q, dlq.sqs_client(q, args.profile)
    except Exception as exc:  # no credentials, bad region: say so, do not trace
        raise CliError(f"cannot reach SQS for {q.dlq_url}: {exc}", 4) from None


def cmd_dlq_list(_client, args) -> int:
    dlq, q, sqs = _dlq(args)
    rows = _sqs_call(lambda: dlq.peek(sqs, q.dlq_url, args.limit), q)
    if args.json:
        _print_json({"dlq_url": q.dlq_url, "messages": rows})
        return 0
    if not rows:
        print(f"the dead-letter queue is empty ({q.dlq_url})")
        return 0
    print(f"{'message':36}  {'kind':14}  {'receives':>8}  {'execution':36}  detail")
    for r in rows:
        print(f"{r['message_id']:36}  {r['kind']:14}  {r['receives']:>8}  {str(r['execution_id'] or '-'):36}  {r['detail']}")
    return 0


def cmd_dlq_redrive(_client, args) -> int:
    dlq, q, sqs = _dlq(args)
    counts = _sqs_call(lambda: dlq.redrive(sqs, q, args.limit), q)
    if args.json:
        _print_json(counts)
    else:
        print(f"returned {counts['returned']} step message(s) to {q.queue_url}; {counts['left']} other message(s) "
              "(failure notices) left on the dead-letter queue")
    return 0


def _sqs_call(call, q):
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        return call()
    except ClientError as exc:
        err = exc.response.get("Error", {})
        raise CliError(f"SQS refused: {err.get('Code')}: {err.get('Message')} ({q.dlq_url})", 3) from None
    except BotoCoreError as exc:
        raise CliError(f"cannot reach SQS for {q.dlq_url}: {exc}", 4) from None


def cmd_workflows(client: Client, args) -> int:
    _, body = client.request("GET", "/workflows")
    _print_json(body) if args.json else print(workflows_table(body))
    return 0


def cmd_watch(client: Client, args) -> int:
    """Poll, and print a line only when something changed: a two-hour sleep is one line, not 7,200."""
    started, last, seen_failures = time.monotonic(), None, set()
    path = f"/executions/{_id(args)}"
    while True:
        _, e = client.request("GET", path)
        if args.json:
            if e != last:
                print(json.dumps(e, sort_keys=True), flush=True)
            last = e
        else:
            key = change_key(e)
            if key != last:
                print(progress_line(e, failed_attempt(client, e, seen_failures)), flush=True)
            last = key
        if e["status"] in ENDED:
            if not args.json:
                print(history_table(full_history(client, args.execution_id)))
            return 0 if e["status"] == "COMPLETED" else 1
        if args.timeout is not None and time.monotonic() - started > args.timeout:
            raise CliError(f"execution {args.execution_id} still {e['status']} after {args.timeout:g} s")
        time.sleep(args.interval)


def change_key(e: dict) -> tuple:
    """What a watcher reports on; the time left on a sleep is shown, but its ticking is no change."""
    err = e.get("error") or {}
    return (e.get("status"), e.get("current_step"), e.get("timer"), e.get("total_attempts"), e.get("next_wake_at")
            if e.get("timer") in ("sleep", "retry") else None, err.get("code"), err.get("message"),
            e.get("compensating"), e.get("compensated"), (e.get("waiting_for") or {}).get("event"),
            (e.get("fanout") or {}).get("succeeded"))


def failed_attempt(client: Client, e: dict, seen: set) -> dict | None:
    """In a retry backoff: the error of the attempt that just failed (from the step's history record), once."""
    if e.get("timer") != "retry" or e.get("status") != "RUNNING":
        return None
    mark = (e.get("current_step"), e.get("total_attempts"))
    if mark in seen:
        return None
    seen.add(mark)
    for r in full_history(client, e["execution_id"])["steps"]:
        if r.get("step_index") == e.get("current_step") and r.get("error"):
            return {**r["error"], "attempt": r.get("attempts")}
    return None


def progress_line(e: dict, failed: dict | None = None) -> str:
    """One line of progress: status, step (numbered as ``loom status`` does), attempts, the failed
    attempt's error, and the time left on a sleep or backoff."""
    status, where = e["status"], f"step {step_label(e)}"
    if status == "WAITING":
        w = e.get("waiting_for") or {}
        left = f", {_seconds_until(w['timeout_at'])} left (until {w['timeout_at']})" if w.get("timeout_at") else ""
        return f"{status:<9} {where}  waiting for event {w.get('event') or '?'}{left}"
    if status == "COMPENSATION_FAILED":
        err, comp = e.get("error") or {}, e.get("compensation_error") or {}
        return (f"{status} {where}  {err.get('code')}: {err.get('message')}; compensation failed: "
                f"{comp.get('code')}: {comp.get('message')}")
    if e.get("compensating"):
        return f"{status:<9} {where}  compensating: undoing the completed steps"
    if status == "SLEEPING" or e.get("timer") == "retry":
        remaining = _seconds_until(e.get("next_wake_at"))
        if status == "SLEEPING":
            return f"{status:<9} {where}  sleeping, {remaining} left (until {e.get('next_wake_at')})"
        error = f"  attempt {failed.get('attempt')} failed: {failed.get('code')}: {failed.get('message')};" \
            if failed else ""
        return f"{status:<9} {where}{error}  retry in {remaining}"
    if status in ("FAILED", "CANCELLED"):
        err = e.get("error") or {}
        why = f"{err.get('code')}: {err.get('message')}" if status == "FAILED" else \
            f"by {e.get('cancelled_by') or '-'}" + (f": {e['cancel_reason']}" if e.get("cancel_reason") else "")
        return f"{status:<9} {where}  {why}" + ("  (compensated)" if e.get("compensated") else "")
    attempts = f"  attempts so far: {e['total_attempts']}" if e.get("total_attempts") else ""
    fanout = e.get("fanout") or {}
    branches = f"  branches done: {fanout.get('succeeded')}/{fanout.get('branches')}" if fanout else ""
    return f"{status:<9} {where}{attempts}{branches}"


def _seconds_until(iso: str | None) -> str:
    if not iso:
        return "?"
    when = dt.datetime.strptime(iso, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=dt.timezone.utc)
    seconds = max(0, int((when - dt.datetime.now(dt.timezone.utc)).total_seconds()))
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m{seconds % 60:02d}s" if seconds >= 3600 else f"{seconds // 60}m{seconds % 60:02d}s"


def _id(args) -> str:
    return _quote(args.execution_id)


def _quote(execution_id: str) -> str:
    return urllib.parse.quote(execution_id, safe="")


def _load_input(text: str, source: str = "--input") -> Any:
    if text.startswith("@"):
        path = Path(text[1:])
        try:
            text, source = path.read_text(), str(path)
        except OSError as exc:
            raise CliError(f"cannot read {path}: {exc.strerror}", 2) from None
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise CliError(f"{source} is not valid JSON: {exc}", 2) from None
    if not isinstance(value, dict):
        raise CliError(f"{source} must be a JSON object, got {type(value).__name__}", 2)
    return value


def _print_json(body: Any) -> None:
    print(json.dumps(body, indent=2, sort_keys=True))


def _error(args, code: str, message: str, status: int | None = None) -> None:
    if getattr(args, "json", False):
        print(json.dumps({"error": code, "message": message, **({"status": status} if status else {})}), file=sys.stderr)
    else:
        print(f"loom: error: {code}: {message}" if code != "cli_error" else f"loom: error: {message}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
