"""The process bootstrap of one local Lambda execution environment. Standard library only.

The local runtime starts it as ``python -I -S _bootstrap.py ...``: isolated mode and no ``site``, so
none of the dev environment's site-packages are importable. ``sys.path`` becomes what Lambda gives a
function: the extracted zip first (``LAMBDA_TASK_ROOT``), then the runtime-provided libraries (boto3
and its dependencies), then the standard library. What runs is the deployed zip.

It then does what Lambda's Python runtime does: imports the handler (the init phase), and answers
invocations one at a time, over two pipes to the local runtime (newline-delimited JSON; stdout and
stderr stay the function's log streams).

Crash points. This file is never part of a Lambda zip, and it is the only place that installs an
``engine_core.faults`` hook: a deployed function has no way to turn one on. The hook reads *arms*
from a control directory that the test (or the demo) writes, claims one atomically (a rename, so a
count of N kills exactly N times across all processes), records that it fired, then acts on its own
process: ``kill`` (SIGKILL), ``stop`` (SIGSTOP, until someone sends SIGCONT) or ``raise``.

The points, the two around every step body included (``step.enter``, ``step.return``), are the
engine's own (``engine_core.faults.POINTS``): the engine reports each with what identifies it.

Body starts. With ``--trace FILE`` every ``step.enter`` (a step, branch or compensation body about to
run) is appended to FILE as one JSON line: ``{"at", "pid", "function", "execution_id", "step",
"step_name", "attempt", "branch", "compensation"}``. A chaos report reads it to time a killed step's
re-run; one short ``O_APPEND`` write per body, so lines from concurrent processes never interleave.
"""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import os
import signal
import sys
import threading
import time
import traceback

# --- crash points -----------------------------------------------------------------------------------
_ARMED, _CLAIMED, _FIRED = "armed", "claimed", "fired"


class InjectedFault(RuntimeError):
    """Raised by an arm whose action is ``raise``: a simulated failure, not a bug."""


class FaultHook:
    def __init__(self, control_dir: str, function_name: str, trace: str = ""):
        self.dir, self.function, self.trace = control_dir, function_name, trace

    # Arms live as files: armed/<id>.json. Listing a small directory costs microseconds.
    def _arms(self, points: tuple[str, ...]) -> list[dict]:
        armed = os.path.join(self.dir, _ARMED)
        try:
            names = sorted(os.listdir(armed))
        except FileNotFoundError:
            return []
        arms = []
        for name in names:
            if not name.endswith(".json"):
                continue
            try:
                with open(os.path.join(armed, name), encoding="utf-8") as f:
                    arm = json.load(f)
            except (OSError, ValueError):
                continue  # claimed meanwhile, or half-written (arms are written with a rename)
            if arm.get("point") in points and arm.get("function") in (None, self.function):
                arms.append(arm)
        return arms

    @staticmethod
    def _matches(arm: dict, info: dict, keys: tuple[str, ...] | None = None) -> bool:
        match = arm.get("match") or {}
        return all(info.get(k) == v for k, v in match.items() if keys is None or k in keys)

    def _claim(self, arm: dict) -> bool:
        src = os.path.join(self.dir, _ARMED, f"{arm['id']}.json")
        dst = os.path.join(self.dir, _CLAIMED, f"{arm['id']}.json")
        try:
            os.rename(src, dst)  # atomic: exactly one process wins each arm
        except OSError:
            return False
        return True

    def _fire(self, arm: dict, info: dict) -> None:
        record = {**arm, "pid": os.getpid(), "info": info, "fired_at": time.time(), "function_name": self.function}
        final = os.path.join(self.dir, _FIRED, f"{arm['id']}.json")
        tmp = final + f".{os.getpid()}.tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(record, f, default=str)
            f.flush()
            os.fsync(f.fileno())
        os.rename(tmp, final)
        print(f"[loom-local] crash point {arm['point']} fired: {arm.get('action', 'kill')} pid {os.getpid()} "
              f"({json.dumps(info, default=str, sort_keys=True)})", file=sys.stderr, flush=True)
        action = arm.get("action", "kill")
        if action == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
            time.sleep(60)  # never reached: SIGKILL cannot be caught
        elif action == "stop":
            os.kill(os.getpid(), signal.SIGSTOP)  # returns when someone sends SIGCONT
        elif action == "raise":
            raise InjectedFault(arm.get("message") or f"fault injected at {arm['point']} by the local runtime")

    def _trace(self, info: dict) -> None:
        line = json.dumps({"at": time.time(), "pid": os.getpid(), "function": self.function, **info}, default=str)
        fd = os.open(self.trace, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, (line + "\n").encode())
        finally:
            os.close(fd)

    # The engine calls this at each named point (engine_core.faults.POINTS), the body points included.
    def __call__(self, name: str, info: dict) -> None:
        if self.trace and name == "step.enter":
            self._trace(info)
        if not self.dir:
            return
        for arm in self._arms((name,)):
            if self._matches(arm, info) and self._claim(arm):
                self._fire(arm, dict(info))
                return


# --- the Lambda context object -------------------------------------------------------------------------
class LambdaContext:
    def __init__(self, request_id: str, deadline_ms: int, function_arn: str):
        env = os.environ
        self.aws_request_id = request_id
        self.function_name = env.get("AWS_LAMBDA_FUNCTION_NAME", "")
        self.function_version = env.get("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST")
        self.invoked_function_arn = function_arn
        self.memory_limit_in_mb = env.get("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "128")
        self.log_group_name = env.get("AWS_LAMBDA_LOG_GROUP_NAME", "")
        self.log_stream_name = env.get("AWS_LAMBDA_LOG_STREAM_NAME", "")
        self.identity = None
        self.client_context = None
        self._deadline_ms = deadline_ms

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int(self._deadline_ms - time.time() * 1000))


class _RequestIdFilter(logging.Filter):
    request_id = ""

    def filter(self, record: logging.LogRecord) -> bool:
        record.aws_request_id = self.request_id
        return True


def _error(exc: BaseException, kind: str | None = None) -> dict:
    frames = traceback.format_list(traceback.extract_tb(exc.__traceback__))
    return {"errorType": kind or type(exc).__name__, "errorMessage": str(exc), "stackTrace": frames}


def _watch_parent(parent: int) -> None:
    # The local runtime owns this process. If it dies without cleaning up, do not outlive it.
    while True:
        time.sleep(0.5)
        if os.getppid() != parent:
            os._exit(137)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--task-root", required=True)
    parser.add_argument("--runtime-libs", required=True)
    parser.add_argument("--handler", required=True)
    parser.add_argument("--faults", default="")
    parser.add_argument("--trace", default="")
    parser.add_argument("--in-fd", type=int, required=True)
    parser.add_argument("--out-fd", type=int, required=True)
    parser.add_argument("--parent", type=int, required=True)
    args = parser.parse_args(argv)

    threading.Thread(target=_watch_parent, args=(args.parent,), daemon=True, name="parent-watch").start()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C belongs to the runtime, which stops us itself

    sys.path[:0] = [args.task_root, args.runtime_libs]
    os.chdir(args.task_root)
    inbox = os.fdopen(args.in_fd, "rb")  # buffered: readline of a 6 MB request must not go byte by byte
    outbox = os.fdopen(args.out_fd, "wb", buffering=0)

    def send(message: dict) -> None:
        outbox.write(json.dumps(message, separators=(",", ":")).encode() + b"\n")

    request_filter = _RequestIdFilter()
    root_handler = logging.StreamHandler(sys.stdout)
    root_handler.setFormatter(logging.Formatter("[%(levelname)s]\t%(asctime)s\t%(aws_request_id)s\t%(message)s"))
    root_handler.addFilter(request_filter)
    logging.getLogger().addHandler(root_handler)

    started = time.monotonic()
    module_name, _, function_name = args.handler.rpartition(".")
    try:
        if args.faults or args.trace:
            # The zip's own engine_core: the hook must sit in the module the handler imports.
            faults = importlib.import_module("engine_core.faults")
            faults.install(FaultHook(args.faults, os.environ.get("AWS_LAMBDA_FUNCTION_NAME", ""), args.trace))
        if not module_name:
            raise ValueError(f"handler {args.handler!r} is not of the form module.function")
        module = importlib.import_module(module_name)
        handler = getattr(module, function_name)
    except ImportError as exc:
        send({"type": "init_error", **_error(exc, "Runtime.ImportModuleError")})
        return 1
    except AttributeError as exc:
        send({"type": "init_error", **_error(exc, "Runtime.HandlerNotFound")})
        return 1
    except Exception as exc:  # noqa: BLE001 - an init failure is reported, like Lambda does
        send({"type": "init_error", **_error(exc)})
        return 1
    send({"type": "ready", "init_ms": round((time.monotonic() - started) * 1000, 1), "pid": os.getpid()})

    while True:
        line = inbox.readline()
        if not line:
            return 0  # the runtime closed the pipe: shut down
        request = json.loads(line)
        request_filter.request_id = request["request_id"]
        context = LambdaContext(request["request_id"], request["deadline_ms"], request["function_arn"])
        try:
            result = handler(request["event"], context)
        except Exception as exc:  # noqa: BLE001 - reported to the caller as a function error
            traceback.print_exc()
            send({"type": "error", "request_id": request["request_id"], **_error(exc)})
            continue
        try:
            payload = json.dumps(result)
        except (TypeError, ValueError) as exc:
            send({"type": "error", "request_id": request["request_id"], **_error(exc, "Runtime.MarshalError")})
            continue
        sys.stdout.flush()
        sys.stderr.flush()
        send({"type": "result", "request_id": request["request_id"], "payload": payload})


if __name__ == "__main__":
    sys.exit(main())
