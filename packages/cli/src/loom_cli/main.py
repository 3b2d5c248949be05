"""``loom``: start, watch and inspect executions.

Exit status: 0 success; 1 the watched execution FAILED; 2 bad usage or configuration; 3 the API
refused the request (its error code and message are printed); 4 the control plane could not be
reached or answered badly.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from .client import ApiError, CliError, Client
from .render import execution_table, history_table, workflows_table

URL_ENV = "LOOM_URL"
LOCAL_STATE = Path(".loom/local.json")


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
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
        out = subprocess.run(["terraform", f"-chdir={env_dir}", "output", "-raw", "function_url"],
                             capture_output=True, text=True, timeout=60)
    except FileNotFoundError:
        raise CliError("--env-dir needs the terraform CLI on PATH", 2) from None
    if out.returncode != 0 or not out.stdout.strip():
        raise CliError(f"`terraform output function_url` failed in {env_dir}: {out.stderr.strip() or 'empty output'}; "
                       "has this environment been applied?", 2)
    return out.stdout.strip()


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="loom", description="Start, watch and inspect Loom executions.",
                                epilog="Exit status: 0 ok, 1 execution FAILED (watch), 2 usage, 3 API error, 4 unreachable.")
    p.add_argument("--url", help=f"control plane Function URL (default: ${URL_ENV}, --env-dir, or the `make up` stack)")
    p.add_argument("--env-dir", help="read the URL from `terraform output function_url` in this environment directory")
    p.add_argument("--json", action="store_true", help="print the API's JSON instead of tables")
    sign = p.add_mutually_exclusive_group()
    sign.add_argument("--sign", dest="sign", action="store_true", default=None,
                      help="SigV4-sign requests (default: on for non-loopback URLs)")
    sign.add_argument("--no-sign", dest="sign", action="store_false", help="never sign requests")
    p.add_argument("--region", help="AWS region for signing (default: from the URL or the AWS config)")
    p.add_argument("--profile", help="AWS profile for signing (default: the standard credential chain)")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    s = sub.add_parser("start", help="start an execution")
    s.add_argument("workflow")
    s.add_argument("--input", default="{}", help="JSON object, or @file.json (default: {})")
    s.add_argument("--token", help="idempotency token: the same token and input start at most one execution")
    s.add_argument("--watch", action="store_true", help="then watch it until it ends")
    s.set_defaults(func=cmd_start)

    for name, func, text in (("status", cmd_status, "show an execution"),
                             ("history", cmd_history, "show an execution's step records")):
        c = sub.add_parser(name, help=text)
        c.add_argument("execution_id")
        c.set_defaults(func=func)

    w = sub.add_parser("watch", help="follow an execution until it ends; exit 1 if it FAILED")
    w.add_argument("execution_id")
    w.add_argument("--interval", type=float, default=1.0, help="seconds between polls (default 1)")
    w.add_argument("--timeout", type=float, default=None, help="give up after this many seconds (exit 4)")
    w.set_defaults(func=cmd_watch)

    sub.add_parser("workflows", help="list registered workflows").set_defaults(func=cmd_workflows)
    return p


def cmd_start(client: Client, args) -> int:
    payload: dict[str, Any] = {"workflow": args.workflow, "input": _load_input(args.input)}
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
    _, body = client.request("GET", f"/executions/{args.execution_id}")
    _print_json(body) if args.json else print(execution_table(body))
    return 0


def cmd_history(client: Client, args) -> int:
    _, body = client.request("GET", f"/executions/{args.execution_id}/history")
    _print_json(body) if args.json else print(history_table(body))
    return 0


def cmd_workflows(client: Client, args) -> int:
    _, body = client.request("GET", "/workflows")
    _print_json(body) if args.json else print(workflows_table(body))
    return 0


def cmd_watch(client: Client, args) -> int:
    started, last = time.monotonic(), None
    while True:
        _, e = client.request("GET", f"/executions/{args.execution_id}")
        line = progress_line(e, client)
        if args.json:
            if e != last:
                print(json.dumps(e, sort_keys=True), flush=True)
        elif line != last:
            print(line, flush=True)
        last = e if args.json else line
        if e["status"] in ("COMPLETED", "FAILED"):
            if not args.json:
                _, h = client.request("GET", f"/executions/{args.execution_id}/history")
                print(history_table(h))
            return 0 if e["status"] == "COMPLETED" else 1
        if args.timeout is not None and time.monotonic() - started > args.timeout:
            raise CliError(f"execution {args.execution_id} still {e['status']} after {args.timeout:g} s")
        time.sleep(args.interval)


def progress_line(e: dict, client: Client | None = None) -> str:
    """One line of live progress: step, status, attempts, and time left on a sleep or backoff."""
    count = e.get("step_count")
    where = f"step {e['current_step'] + (1 if e['status'] not in ('COMPLETED',) else 0)}/{count}" if count else f"step {e['current_step']}"
    name = e.get("current_step_name") or ""
    status = e["status"]
    if status == "SLEEPING" or e.get("timer") == "retry":
        remaining = _seconds_until(e.get("next_wake_at"))
        what = "sleeping" if status == "SLEEPING" else "retry backoff"
        return f"{status:<9} {where} {name}  {what}, {remaining} left"
    if status == "FAILED":
        err = e.get("error") or {}
        return f"{status:<9} {where} {name}  {err.get('code')}: {err.get('message')}"
    attempts = f"  attempts so far: {e['total_attempts']}" if e.get("total_attempts") else ""
    return f"{status:<9} {where} {name}{attempts}"


def _seconds_until(iso: str | None) -> str:
    if not iso:
        return "?"
    when = dt.datetime.strptime(iso, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=dt.timezone.utc)
    seconds = max(0, int((when - dt.datetime.now(dt.timezone.utc)).total_seconds()))
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m{seconds % 60:02d}s" if seconds >= 3600 else f"{seconds // 60}m{seconds % 60:02d}s"


def _load_input(text: str) -> Any:
    source = "--input"
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
