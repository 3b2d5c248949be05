"""``loom``: start, watch, find, cancel, redrive, wake, signal and inspect executions; ``loom console`` (a web
console) and ``loom mcp`` (tools for agents) on the same API, all through the SDK (``loom_cli.sdk``).

Exit status: 0 success; 1 the watched execution FAILED, was CANCELLED or its compensation failed; 2 bad usage or
configuration; 3 the API refused the request (its error code and message are printed); 4 the
control plane could not be reached, answered badly or failed on its side (a 5xx), or `loom watch --timeout` ran out.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, NoReturn

from . import commands, cost, dev, dlq, versions
from .args import lambda_memory, limit, port, positive, read_json_arguments, seconds, since, status
from .sdk import LoomClient, LoomError
from .sdk.client import INVALID_ARGUMENT
from .sdk.errors import CONFIGURATION
from .sdk.locate import URL_ENV
from .watch import quiet_stdout

USAGE, REFUSED, UNREACHABLE = 2, 3, 4


def exit_code(exc: LoomError) -> int:
    """3 for a refusal of the API, 2 for what the user must fix first, 4 when no answer came (or the API
    failed on its side, or a wait ran out)."""
    if exc.is_refusal:
        return REFUSED
    return USAGE if exc.code in (CONFIGURATION, INVALID_ARGUMENT) else UNREACHABLE


class _Parser(argparse.ArgumentParser):
    """argparse's parser, whose usage errors are JSON on stderr (as every other error) under ``--json``."""

    json_errors = False

    def error(self, message: str) -> NoReturn:
        if self.json_errors:
            print(json.dumps({"error": INVALID_ARGUMENT, "message": f"{self.prog}: {message}"}), file=sys.stderr)
            self.exit(USAGE)
        super().error(message)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    _Parser.json_errors = "--json" in argv
    p = parser()
    args = p.parse_args(_dash_token_last(p, argv))
    try:
        if getattr(args, "without_api", False):
            return args.func(args)
        read_json_arguments(args)
        client = LoomClient(args.url, env_dir=args.env_dir, sign=args.sign, region=args.region, profile=args.profile)
        return args.func(client, args)
    except LoomError as exc:
        _error(args, exc)
        return exit_code(exc)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # `loom status --json | head`: the reader left; say nothing more (and no traceback at exit)
        quiet_stdout()
        return 0


def _dash_token_last(p: argparse.ArgumentParser, argv: list[str]) -> list[str]:
    """``loom callback <token>`` with a token that starts with ``-`` (base64url: about one in 64 does), which
    argparse would take for an option: the token moves behind ``--``, where it can only be the token."""
    if "callback" not in argv or "--" in argv:
        return argv
    sub = next(a for a in p._actions if isinstance(a, argparse._SubParsersAction)).choices["callback"]
    i = _first_positional(p, argv, 0)
    if i is None or argv[i] != "callback":
        return argv
    i = _first_positional(sub, argv, i + 1, dashed=True)
    return argv if i is None or not argv[i].startswith("-") else [*argv[:i], *argv[i + 1:], "--", argv[i]]


def _first_positional(p: argparse.ArgumentParser, argv: list[str], i: int, dashed: bool = False) -> int | None:
    """The index of the first argument from ``i`` on that is none of ``p``'s options nor an option's value
    (``dashed``: one starting with ``-`` counts too)."""
    while i < len(argv):
        arg = argv[i]
        action = p._option_string_actions.get(arg.split("=", 1)[0])
        if action is not None:
            i += 1 + (action.nargs != 0 and "=" not in arg)
            continue
        if arg.startswith("-") and not dashed:
            i += 1
            continue
        return i
    return None


def parser() -> argparse.ArgumentParser:
    p = _Parser(prog="loom", description="Start, watch, find and operate Loom executions.",
                                epilog="Exit status: 0 ok, 1 watched execution FAILED, CANCELLED or COMPENSATION_FAILED, "
                                       "2 usage, 3 API refused, 4 unreachable or failed (or watch --timeout ran out).")
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

    def command(name: str, func, text: str, execution_id: bool = True, json_flag: bool = True):
        c = sub.add_parser(name, help=text, description=text)
        if json_flag:  # SUPPRESS: `loom --json status ID` keeps the flag; `loom status ID --json` sets it too
            c.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="print the API's JSON")
        if execution_id:
            c.add_argument("execution_id")
        c.set_defaults(func=func)
        return c

    s = command("start", commands.start, "start an execution", execution_id=False)
    s.add_argument("workflow")
    s.add_argument("--input", default="{}", help="JSON object, or @file.json (default: {})")
    s.add_argument("--token", help="idempotency token: the same token and input start at most one execution")
    s.add_argument("--version", type=positive, help="the workflow version to run (default: the newest deployed; "
                                                    "`loom workflows` lists them)")
    s.add_argument("--watch", action="store_true", help="then watch it until it ends")

    command("status", commands.status, "show an execution (its error in full)")
    command("history", commands.history, "show an execution's step records and operator actions (every page)")

    w = command("watch", commands.watch, "follow an execution until it ends, a line per change; exit 1 if it "
                                         "FAILED, was CANCELLED or its compensation failed")
    w.add_argument("--interval", type=seconds, default=1.0, help="seconds between polls (default 1)")
    w.add_argument("--timeout", type=seconds, default=None, help="give up after this many seconds (exit 4)")

    ls = command("list", commands.list_executions, "list executions, newest first", execution_id=False)
    ls.add_argument("--workflow", help="only this workflow")
    ls.add_argument("--status", type=status, help="RUNNING, SLEEPING, WAITING, COMPLETED, FAILED, CANCELLED or "
                                                     "COMPENSATION_FAILED; LIVE: any of the first three")
    ls.add_argument("--since", type=since, help="started at most this long ago (90s, 30m, 2h, 1d, 1h30m) or "
                                                "since this ISO-8601 time")
    ls.add_argument("--limit", type=limit, default=20, help="executions per page, 1-100 (default 20)")
    ls.add_argument("--all", action="store_true", help="follow every page, not just the first")
    ls.add_argument("--next-token", help="continue a listing from the next_token it printed")

    c = command("cancel", commands.cancel, "end a live execution CANCELLED (a running step finishes; nothing after "
                                           "it runs; compensations undo the completed steps first)")
    c.add_argument("--reason", help="why, kept on the execution and in its history")
    rd = command("redrive", commands.redrive, "resume a FAILED execution from its failed step, with fresh attempts")
    rd.add_argument("--to-version", type=positive, help="resume on this version of its workflow (refused unless the "
                                                        "steps before the failed one are the same there)")
    command("wake", commands.wake, "end the current sleep or retry backoff now (an event wait times out now: its "
                                   "default applies, or the step fails)")
    ev = command("send", commands.send, "send an event to an execution (delivered to its wait_for_event, or "
                                        "buffered until it waits for it)")
    ev.add_argument("name", help="the event's name, as the workflow's wait_for_event names it (A-Z a-z 0-9 _ . -)")
    ev.add_argument("--data", default="{}", help="the event's data: a JSON object, or @file.json (default: {})")
    ev.add_argument("--event-id", help="deduplication id: the same id is delivered at most once")
    cb = command("callback", commands.callback, "answer a callback token a step issued (ctx.callback_token): the "
                                                "wait it stands for resumes with the data, once", execution_id=False)
    cb.add_argument("token", help="the callback token, as the step handed it out")
    cb.add_argument("--data", default="{}", help="the answer: a JSON object, or @file.json (default: {})")
    ct = command("cost", cost.run, "what recent executions cost, summed per workflow: requests, units, messages and "
                                   "worker time from each execution's ledger, priced at AWS list prices",
                 execution_id=False)
    ct.add_argument("--workflow", help="only this workflow")
    ct.add_argument("--since", type=since, help="started at most this long ago (90s, 30m, 2h, 1d) or since this "
                                                "ISO-8601 time")
    ct.add_argument("--max", type=positive, default=200, help="sum at most this many executions, newest first (one "
                                                              "GET each; default 200)")
    ct.add_argument("--memory-mb", type=lambda_memory, default=512, help="the worker's memory, for Lambda duration "
                                                                    "(default 512, Terraform's worker_memory_mb)")
    command("workflows", commands.workflows, "list registered workflows, each version and the executions live on it",
            execution_id=False)
    versions.add_parser(sub)
    command("schedules", commands.schedules, "list the deployed schedules: expression, time zone, overlap, next firing, "
            "last firing with its outcome and execution", execution_id=False)

    co = command("console", commands.console, "serve the web console on 127.0.0.1 (lists, timelines, live updates, "
                                              "actions); Ctrl-C stops it", execution_id=False, json_flag=False)
    co.add_argument("--port", type=port, default=0, help="port to listen on (default: a free one, printed)")
    co.add_argument("--open", action="store_true", help="open it in the web browser")
    co.add_argument("--interval", type=seconds, default=1.0, help="seconds between the polls behind live updates "
                                                                "(default 1)")
    m = command("mcp", commands.mcp, "serve the Model Context Protocol on stdio: tools for agents to list workflows and "
                                     "schedules, start, inspect, list, signal, cancel and redrive executions",
                execution_id=False, json_flag=False)
    m.add_argument("--read-only", action="store_true", help="offer only the tools that change nothing (list_workflows, "
                                                            "list_schedules, get_execution, get_history, list_executions)")
    m.add_argument("--tools", help="offer only these tools (comma-separated names, e.g. "
                                   "list_executions,get_execution)")
    m.set_defaults(without_api=True)

    d = command("dlq", None, "the dead-letter queue: what the transport gave up on (read with your AWS credentials "
                             "from --env-dir's outputs, or the local stack's; a `loom dev` file's dead letters)",
                execution_id=False, json_flag=False)
    dsub = d.add_subparsers(dest="dlq_command", required=True, metavar="ACTION")
    dl = dsub.add_parser("list", help="show dead-lettered messages (they stay on the queue)")
    dl.add_argument("--limit", type=limit, default=20, help="at most this many, 1-100 (default 20)")
    dl.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="print JSON")
    dl.add_argument("--db", help="a `loom dev` SQLite file, running or not (default: the runtime the state file records)")
    dl.set_defaults(func=dlq.cmd_list, without_api=True)
    dr = dsub.add_parser("redrive", help="return dead-lettered step messages to the step queue (notices stay)")
    dr.add_argument("--limit", type=limit, default=100, help="at most this many step messages (the notices ahead of "
                    "them do not count), 1-100 (default 100)")
    dr.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="print JSON")
    dr.add_argument("--db", help="a `loom dev` SQLite file, running or not (default: the runtime the state file records)")
    dr.set_defaults(func=dlq.cmd_redrive, without_api=True)
    dev.add_parser(sub)
    return p


def _error(args: Any, exc: LoomError) -> None:
    if getattr(args, "json", False):
        doc = {**exc.document, **({"status": exc.status} if exc.status else {})}
        print(json.dumps(doc), file=sys.stderr)
    elif exc.is_refusal:
        print(f"loom: error: {exc.code}: {exc.message}", file=sys.stderr)
    elif exc.status is not None:  # the API failed on its side
        print(f"loom: error: {exc.code} (HTTP {exc.status}): {exc.message}", file=sys.stderr)
    else:
        print(f"loom: error: {exc.message}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
