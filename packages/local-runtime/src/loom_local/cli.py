"""``python -m loom_local``: run the local stack in the foreground, keep it up in the background, or demo it.

    python -m loom_local run    [options]   foreground; Ctrl-C stops everything
    python -m loom_local up     [options]   background; prints the URL, writes .loom/local.json
    python -m loom_local down               stops what `up` started (its table is saved, `up` restores it)
    python -m loom_local reset              stops it too, and deletes the saved table: the next `up` starts clean
    python -m loom_local status [--json]    is it up, and where (exit 0 either way)

A running stack is recorded in RUN_DIR/local.json and in the per-user state file that ``loom`` and the
SDK read from any directory (``$LOOM_STATE_FILE``, else ``$XDG_STATE_HOME`` or ``~/.local/state`` /
``loom/local.json``), both refreshed every few seconds with the functions' current processes.
    python -m loom_local demo   [options]   the guided tour (`make demo`)

Exit status: 0 success, 1 the stack failed (the message says why and what to do), 2 bad usage.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from loom_cli.sdk.locate import state_file as user_state_file

from . import runs
from .demo import run as run_demo
from .options import examples_environment, options_from, stack_args
from .stack import LocalStack, StackOptions, _shown, install_signal_handlers

STATE_NAME = "local.json"
PID_NAME = "runtime.pid"
TABLE_FILE = Path("state") / "table.json"
"""The saved Loom table, under the run directory (``.loom/state/table.json``)."""
REFRESH_S = 2.0
"""How often a running stack rewrites its state files (the functions' processes come and go)."""
UP_LINE = "Loom is up."
"""How `run` announces itself; `up` prints its own summary instead of echoing this line."""
EXAMPLES_LEDGER = Path("state") / "examples-ledger.jsonl"
"""The examples' payment ledger, kept (and reset) with the table: the charges of the kept executions."""


class CliError(Exception):
    pass


def _write_json(path: Path, body: dict) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(body, indent=2) + "\n")
    tmp.replace(path)


def state_of(stack: LocalStack) -> dict[str, Any]:
    d = stack.deployment
    assert d is not None and d.queue is not None
    return {
        "url": stack.url,
        "endpoint": stack.endpoint,
        "region": stack.opts.region,
        "pids": stack.pids(),
        "run_dir": str(stack.run_dir),
        "logs": str(stack.log_dir),
        "fault_dir": str(stack.fault_dir),
        "run": str(stack.stack_dir),
        "queue_url": d.queue.url,
        "dlq_url": d.queue.dlq_url,
        "table": d.worker.environment.get("LOOM_TABLE_NAME"),
        "deployment": d.summary(),
        "started_at": time.time(),
    }


def _table_file(args: argparse.Namespace, run_dir: Path) -> Path:
    explicit = getattr(args, "state_file", None)
    return explicit.resolve() if explicit else run_dir / TABLE_FILE


def _forget(user_state: Path, run_dir: Path) -> None:
    """Remove the per-user record if it is this stack's (another checkout's `make up` may have replaced it)."""
    try:
        mine = json.loads(user_state.read_text()).get("run_dir") == str(run_dir)
    except (OSError, ValueError, AttributeError):
        return
    if mine:
        user_state.unlink(missing_ok=True)


def run_options(args: argparse.Namespace) -> StackOptions:
    """The stack `run` (and so `make up`) starts: the table kept across runs, the examples set up as the demo's."""
    opts = options_from(args)
    opts.state_file = _table_file(args, opts.run_dir)
    opts.function_env.update(examples_environment(opts.run_dir / EXAMPLES_LEDGER))
    return opts


def cmd_run(args: argparse.Namespace) -> int:
    opts = run_options(args)
    (opts.run_dir / EXAMPLES_LEDGER).parent.mkdir(parents=True, exist_ok=True)
    state, user_state = opts.run_dir / STATE_NAME, user_state_file()
    stack = LocalStack(opts)
    install_signal_handlers(stack)
    started_at = time.time()

    def record() -> None:
        body = {**state_of(stack), "started_at": started_at, "repo": str(opts.repo)}
        _write_json(state, body)
        user_state.parent.mkdir(parents=True, exist_ok=True)
        _write_json(user_state, body)

    try:
        stack.start()
        record()
        print(f"{UP_LINE} Control plane: {stack.url}  (Ctrl-C stops everything)", flush=True)
        stack.wait(tick=record, every_s=REFRESH_S)
    except KeyboardInterrupt:
        print("stopping: function processes, pollers, schedule, Function URL, emulator", file=sys.stderr, flush=True)
    finally:
        stack.stop()
        state.unlink(missing_ok=True)
        _forget(user_state, opts.run_dir)
        (opts.run_dir / PID_NAME).unlink(missing_ok=True)
    return 0


def _alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _read_state(run_dir: Path) -> dict[str, Any] | None:
    path = run_dir / STATE_NAME
    if not path.exists():
        return None
    try:
        return json.loads(path.read_text())
    except ValueError:
        return None


def cmd_up(args: argparse.Namespace) -> int:
    repo = args.repo.resolve()
    run_dir = (args.run_dir or repo / ".loom").resolve()
    run_dir.mkdir(parents=True, exist_ok=True)
    existing = _read_state(run_dir)
    pid_file = run_dir / PID_NAME
    if existing and _alive(existing.get("pids", {}).get("runtime")):
        print(f"already up: {existing['url']}  (`make down` stops it)")
        return 0
    if pid_file.exists() and _alive(int(pid_file.read_text() or 0)):
        raise CliError(f"a local runtime (pid {pid_file.read_text()}) is still starting or stopping; wait, or run "
                       "`make down`")
    (run_dir / STATE_NAME).unlink(missing_ok=True)
    run_id = args.run_id or runs.new_run_id()
    log_path = run_dir / runs.RUNS / run_id / "logs" / "runtime.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    forwarded = list(args.forward or []) + ([] if args.run_id else ["--run-id", run_id])
    with open(log_path, "w") as log:
        child = subprocess.Popen([sys.executable, "-m", "loom_local", "run", *forwarded], stdout=log, stderr=log,
                                 stdin=subprocess.DEVNULL, cwd=repo, start_new_session=True)
    pid_file.write_text(str(child.pid))
    print(f"starting the local stack in the background (pid {child.pid}, log {log_path}); the Terraform apply takes "
          "about a minute", flush=True)
    shown = 0
    try:
        while True:
            lines = log_path.read_text(errors="replace").splitlines()
            for line in lines[shown:]:
                if not line.startswith(UP_LINE):  # the summary below says it, once
                    print(f"  {line}", flush=True)
            shown = len(lines)
            state = _read_state(run_dir)
            if state is not None:
                break
            if child.poll() is not None:
                raise CliError(f"the local runtime exited with status {child.returncode} while starting; the lines "
                               f"above (and {log_path}) say why")
            time.sleep(0.3)
    except KeyboardInterrupt:
        _stop_pid(child.pid, 20)
        pid_file.unlink(missing_ok=True)
        print("interrupted: stopped the half-started stack", file=sys.stderr)
        return 130
    url = state["url"]
    print(f"""
Loom is up (runtime pid {child.pid}). Control plane Function URL: {url}
State, pids and URL: {run_dir / STATE_NAME} (and {user_state_file()}, where `loom` finds it from any directory)
This run's logs: {log_path.parent} (also {run_dir / 'logs'})

  curl -s {url}/workflows
  curl -s -X POST {url}/executions -H 'content-type: application/json' \\
       -d '{{"workflow": "order_fulfillment", "input": {{"order_id": "o-1", "amount_cents": 1299}}}}'
  curl -s {url}/executions/<execution_id>
  curl -s {url}/executions/<execution_id>/history

Locally the URL needs no credentials; the deployed one uses AWS_IAM (SigV4-signed requests).
`make down` stops everything and keeps the table (the next `make up` restores it); `make reset` starts clean.""")
    return 0


def _stop_pid(pid: int, grace_s: float) -> bool:
    if not _alive(pid):
        return True
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return True
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        if not _alive(pid):
            return True
        time.sleep(0.1)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    return False


def _saved_count(path: Path) -> int | None:
    try:
        return int(json.loads(path.read_text())["count"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _mtime(path: Path) -> int | None:
    try:
        return path.stat().st_mtime_ns
    except OSError:
        return None


def cmd_down(args: argparse.Namespace, *, report_save: bool = True) -> int:
    repo = args.repo.resolve()
    run_dir = (args.run_dir or repo / ".loom").resolve()
    table_file = _table_file(args, run_dir)
    saved_before = _mtime(table_file)
    state = _read_state(run_dir)
    pid_file = run_dir / PID_NAME
    pids: list[int] = []
    if state:
        p = state.get("pids", {})
        pids = [p.get("runtime"), p.get("emulator"), *[x for xs in (p.get("functions") or {}).values() for x in xs]]
    elif pid_file.exists():
        pids = [int(pid_file.read_text() or 0)]
    runtime = pids[0] if pids else None
    if not any(_alive(x) for x in pids if x):
        for f in (run_dir / STATE_NAME, pid_file):
            f.unlink(missing_ok=True)
        print("nothing to stop: the local stack is not running")
        return 0
    clean = _stop_pid(runtime, 30) if runtime else True
    for pid in pids[1:]:
        if pid and _alive(pid):  # only if the runtime could not clean up after itself
            os.kill(pid, signal.SIGKILL)
    for f in (run_dir / STATE_NAME, pid_file):
        f.unlink(missing_ok=True)
    _forget(user_state_file(), run_dir)  # the runtime does it on a clean stop; not if it had to be killed
    print("stopped the local stack" + ("" if clean else " (the runtime did not stop in 30 s and was killed)"))
    if report_save:
        shown = _shown(table_file)
        if _mtime(table_file) not in (None, saved_before):
            print(f"kept its table: {_saved_count(table_file)} items in {shown} (`make up` restores them, "
                  "`make reset` starts clean)")
        else:
            print(f"WARNING: the table was not saved this time ({run_dir / 'logs' / 'runtime.log'} says why); "
                  + (f"{shown} still holds the previous save" if saved_before else "nothing is kept"))
    return 0


def cmd_reset(args: argparse.Namespace) -> int:
    repo = args.repo.resolve()
    run_dir = (args.run_dir or repo / ".loom").resolve()
    cmd_down(args, report_save=False)  # stopping saves the table; it is deleted next
    table_file = _table_file(args, run_dir)
    # The save, and any unreadable saves set aside next to it.
    gone = sorted(p for p in table_file.parent.glob(f"{table_file.stem}*{table_file.suffix}") if p.is_file())
    for p in gone:
        p.unlink()
    if table_file.parent == run_dir / TABLE_FILE.parent and table_file.parent.is_dir():
        shutil.rmtree(table_file.parent, ignore_errors=True)
    if gone:
        print(f"deleted the saved table ({', '.join(p.name for p in gone)} in {table_file.parent}): the next "
              "`make up` starts with an empty table")
    else:
        print("no saved table: the next `make up` starts with an empty table")
    return 0


def _pids(pids: list[int] | None) -> str:
    if not pids:
        return "no execution environment now (one starts with the function's next invocation)"
    return f"pid{'s' if len(pids) > 1 else ''} {', '.join(map(str, pids))}"


def cmd_status(args: argparse.Namespace) -> int:
    """Is it up, and where; exit 0 either way (`make local-status` answers a question, it does not fail)."""
    run_dir = (args.run_dir or args.repo.resolve() / ".loom").resolve()
    state = _read_state(run_dir)
    up = bool(state) and _alive(state.get("pids", {}).get("runtime"))
    if args.json:
        shown = {k: state.get(k) for k in ("url", "endpoint", "pids", "logs", "queue_url", "dlq_url", "table")} \
            if up else None
        print(json.dumps({"running": up, **(shown or {})}, indent=2))
        return 0
    if not up:
        print("the local stack is not running (`make up` starts it)")
        return 0
    pids = state.get("pids", {})
    lines = [f"the local stack is up: {state['url']}",
             f"  runtime pid {pids.get('runtime')}, emulator (moto) pid {pids.get('emulator')} at {state.get('endpoint')}"]
    lines += [f"  {role}: {_pids(found)}" for role, found in sorted((pids.get("functions") or {}).items())]
    lines += [f"  table {state.get('table')}; queue {state.get('queue_url')}; dead letters {state.get('dlq_url')}",
              f"  function logs in {state.get('logs')}; recorded in {run_dir / STATE_NAME} and {user_state_file()}"]
    print("\n".join(lines))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m loom_local", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run the stack in the foreground")
    stack_args(run)
    run.set_defaults(func=cmd_run)
    up = sub.add_parser("up", help="start the stack in the background")
    stack_args(up)
    up.set_defaults(func=cmd_up, forward=None)
    state_help = "where the table is kept across runs (default: RUN_DIR/state/table.json)"
    for cmd in (run, up):
        cmd.add_argument("--state-file", type=Path, default=None, help=state_help)
    down = sub.add_parser("down", help="stop what `up` started (its table is saved)")
    reset = sub.add_parser("reset", help="stop what `up` started and delete the saved table")
    for cmd, func in ((down, cmd_down), (reset, cmd_reset)):
        cmd.add_argument("--repo", type=Path, default=Path.cwd())
        cmd.add_argument("--run-dir", type=Path, default=None)
        cmd.add_argument("--state-file", type=Path, default=None, help=state_help)
        cmd.set_defaults(func=func)
    status = sub.add_parser("status", help="is the stack up")
    status.add_argument("--json", action="store_true", help="print it as JSON ({\"running\": false} when it is not)")
    status.add_argument("--repo", type=Path, default=Path.cwd())
    status.add_argument("--run-dir", type=Path, default=None)
    status.set_defaults(func=cmd_status)
    demo = sub.add_parser("demo", help="the guided tour")
    stack_args(demo)
    demo.add_argument("--keep", action="store_true", help="keep the stack running after the tour (Ctrl-C stops it)")
    demo.set_defaults(func=run_demo)
    raw = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(raw)
    if args.command == "up":
        args.forward = raw[1:]  # `up` runs `run` in the background with the same options
    try:
        return args.func(args)
    except CliError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except Exception as exc:  # noqa: BLE001 - every known failure carries a message saying what to do
        from .deployment import DeploymentError
        from .stack import StackError
        from .terraform import TerraformError

        if isinstance(exc, (DeploymentError, StackError, TerraformError)):
            print(f"error: {exc}", file=sys.stderr)
            return 1
        raise
