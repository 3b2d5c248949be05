"""Run a deployed function's handler the way Lambda does: isolated processes, warm reuse, a hard timeout.

One :class:`Environment` is one process (a Lambda execution environment): it imports the handler
once (init) and then serves invocations one at a time. A :class:`Function` keeps a pool of them, up to
its concurrency, spawning new ones (cold starts) when all are busy. An invocation that outlives the
function's timeout gets its process killed, as Lambda does; so does one whose process dies. The next
invocation then starts a fresh process. Lambda's payload limits hold (:mod:`loom_local.limits`): a
request over 6 MB is refused before any process sees it, a response over 6 MB fails the invocation.

With a :class:`~loom_local.calls.CallLog`, what the Lambda service does under the function's role is
recorded as the role's calls: a log stream created and written by each execution environment.
"""

from __future__ import annotations

import itertools
import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .calls import CallLog
from .invocations import InvocationLog
from .limits import LAMBDA_REQUEST_MAX_BYTES, LAMBDA_RESPONSE_MAX_BYTES, REQUEST_TOO_LARGE, RESPONSE_TOO_LARGE, payload_bytes
from .logs import LogSink

BOOTSTRAP = Path(__file__).with_name("_bootstrap.py")
INIT_TIMEOUT_S = 10.0
"""Lambda gives an on-demand function's init phase 10 seconds."""

Observer = Callable[[str, dict[str, Any]], None]


@dataclass(frozen=True)
class FunctionSpec:
    """A deployed function's configuration, as read from the emulator, plus where its code is."""

    name: str
    arn: str
    handler: str
    timeout_s: float
    memory_mb: int
    code_dir: Path
    environment: dict[str, str]
    """The process environment: the deployed variables plus what the Lambda service injects."""
    role: str = ""
    """worker, sweeper or control-plane (how the runtime found it)."""


@dataclass
class InvokeResult:
    request_id: str
    status: str
    """ok, function_error, timeout, crashed, init_error, request_too_large."""
    payload: Any = None
    error: dict[str, Any] | None = None
    duration_ms: float = 0.0
    pid: int | None = None
    cold: bool = False

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def describe(self) -> str:
        if self.ok:
            return "ok"
        err = self.error or {}
        return f"{self.status}: {err.get('errorType', '')}: {err.get('errorMessage', '')}".strip()


class _Lines:
    """Reads newline-delimited messages from a pipe with a deadline."""

    def __init__(self, fd: int):
        self.fd, self.buf = fd, b""

    def read(self, deadline: float) -> bytes | None:
        """One line; None at end of file, or once the pipe was closed under the reader (the function's
        processes are being stopped). Raises TimeoutError at the deadline (time.monotonic)."""
        while b"\n" not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError
            try:
                ready, _, _ = select.select([self.fd], [], [], min(left, 0.5))
                chunk = os.read(self.fd, 1 << 16) if ready else None
            except (OSError, ValueError):  # closed by close() while this thread waited on it
                return None
            if chunk is None:
                continue
            if not chunk:
                return None
            self.buf += chunk
        line, _, self.buf = self.buf.partition(b"\n")
        return line


class Environment:
    """One execution environment: a ``python -I -S -B _bootstrap.py`` process running the zip's handler."""

    _numbers = itertools.count(1)

    def __init__(self, spec: FunctionSpec, python: str, runtime_libs: Path, fault_dir: Path | None, logs: LogSink,
                 trace: Path | None = None):
        self.spec, self.logs = spec, logs
        self.number = next(self._numbers)
        to_child_r, self._to_child = os.pipe()
        from_child, from_child_w = os.pipe()
        cmd = [python, "-I", "-S", "-B", str(BOOTSTRAP), "--task-root", str(spec.code_dir),
               "--runtime-libs", str(runtime_libs), "--handler", spec.handler,
               "--faults", str(fault_dir or ""), "--trace", str(trace or ""), "--in-fd", str(to_child_r),
               "--out-fd", str(from_child_w), "--parent", str(os.getpid())]
        try:
            self.proc = subprocess.Popen(
                cmd, env=spec.environment, cwd=str(spec.code_dir), stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, pass_fds=(to_child_r, from_child_w),
                start_new_session=True,  # Ctrl-C in the terminal reaches the runtime only; it stops us
            )
        finally:
            os.close(to_child_r)
            os.close(from_child_w)
        self.pid = self.proc.pid
        self._from_child = from_child
        self._lines = _Lines(from_child)
        self.ready = False
        self.dead = False
        self.invocations = 0
        for stream in (self.proc.stdout, self.proc.stderr):
            threading.Thread(target=self._pump, args=(stream,), daemon=True,
                             name=f"log-{spec.name}-{self.pid}").start()

    def _pump(self, stream) -> None:
        for raw in iter(stream.readline, b""):
            self.logs.write(self.spec.name, self.pid, raw.decode("utf-8", "replace").rstrip("\n"))
        stream.close()

    def init(self, deadline: float) -> dict[str, Any] | None:
        """Wait for the handler import. Returns None when ready, else the init error."""
        try:
            line = self._lines.read(deadline)
        except TimeoutError:
            self.kill()
            return {"errorType": "Runtime.InitTimeout", "errorMessage": (
                f"init of {self.spec.handler} did not finish within {INIT_TIMEOUT_S:g} s")}
        if line is None:
            return {"errorType": "Runtime.ExitError", "errorMessage": f"process exited during init ({self._exit()})"}
        msg = json.loads(line)
        if msg.get("type") != "ready":
            self.kill()
            return {k: msg.get(k) for k in ("errorType", "errorMessage", "stackTrace")}
        self.ready = True
        return None

    def invoke(self, request_id: str, event: Any, timeout_s: float) -> tuple[str, dict[str, Any]]:
        deadline_wall_ms = int((time.time() + timeout_s) * 1000)
        deadline = time.monotonic() + timeout_s
        request = {"type": "invoke", "request_id": request_id, "event": event, "deadline_ms": deadline_wall_ms,
                   "function_arn": self.spec.arn}
        self.invocations += 1
        try:
            os.write(self._to_child, json.dumps(request, separators=(",", ":")).encode() + b"\n")
        except (BrokenPipeError, OSError):
            return "crashed", {"errorType": "Runtime.ExitError", "errorMessage": f"process gone ({self._exit()})"}
        while True:
            try:
                line = self._lines.read(deadline)
            except TimeoutError:
                self.kill()
                return "timeout", {"errorType": "Sandbox.Timedout",
                                   "errorMessage": f"Task timed out after {timeout_s:.2f} seconds"}
            if line is None:
                return "crashed", {"errorType": "Runtime.ExitError",
                                   "errorMessage": f"RequestId: {request_id} Error: Runtime exited ({self._exit()})"}
            msg = json.loads(line)
            if msg.get("request_id") != request_id:
                continue
            if msg["type"] == "result":
                if len(msg["payload"].encode("utf-8")) > LAMBDA_RESPONSE_MAX_BYTES:
                    return "function_error", dict(RESPONSE_TOO_LARGE)
                return "ok", {"payload": json.loads(msg["payload"])}
            return "function_error", {k: msg.get(k) for k in ("errorType", "errorMessage", "stackTrace")}

    def _exit(self) -> str:
        self.dead = True
        try:
            code = self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.kill()
            code = self.proc.wait()
        if code < 0:
            try:
                return f"signal: {signal.Signals(-code).name}"
            except ValueError:
                return f"signal {-code}"
        return f"exit status {code}"

    def kill(self) -> None:
        self.dead = True
        if self.proc.poll() is None:
            try:
                os.kill(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass

    def close(self) -> None:
        """Stop the process (SIGKILL, as Lambda does at shutdown after its grace period) and free the pipes."""
        self.kill()
        for fd in (self._to_child, self._from_child):
            try:
                os.close(fd)
            except OSError:
                pass


@dataclass
class Function:
    """A deployed function and its pool of execution environments."""

    spec: FunctionSpec
    runtime_libs: Path
    logs: LogSink
    fault_dir: Path | None = None
    max_concurrency: int = 2
    python: str = sys.executable
    observer: Observer | None = None
    calls: CallLog | None = None
    principal: str = ""
    """Whose calls the Lambda service's own actions are recorded as (the function's role)."""
    invocations: InvocationLog | None = None
    """Where each invocation's start (pid, deadline) and end (status) are recorded."""
    trace: Path | None = None
    """Where the function's processes record each step body they start (``steps.jsonl``)."""
    _idle: list[Environment] = field(default_factory=list)
    _all: set[Environment] = field(default_factory=set)
    _cond: threading.Condition = field(default_factory=threading.Condition)
    _closed: bool = False

    def _notify(self, kind: str, **details: Any) -> None:
        if self.observer is not None:
            try:
                self.observer(kind, {"function": self.spec.name, "role": self.spec.role, **details})
            except Exception:  # noqa: BLE001 - an observer must never break an invocation
                pass

    def _record(self, kind: str, **fields: Any) -> None:
        if self.invocations is not None:
            self.invocations.write(kind, **fields)

    def pids(self) -> list[int]:
        with self._cond:
            return sorted(e.pid for e in self._all if not e.dead)

    def _acquire(self) -> tuple[Environment, bool]:
        with self._cond:
            while True:
                if self._closed:
                    raise RuntimeError(f"function {self.spec.name} is shut down")
                while self._idle:
                    env = self._idle.pop()
                    if not env.dead and env.proc.poll() is None and env.spec is self.spec:
                        return env, False
                    self._discard(env)
                if len(self._all) < self.max_concurrency:
                    break
                self._cond.wait(0.5)
            env = Environment(self.spec, self.python, self.runtime_libs, self.fault_dir, self.logs, self.trace)
            self._all.add(env)
        return env, True

    def _discard(self, env: Environment) -> None:
        self._all.discard(env)
        env.close()
        self._cond.notify_all()

    def update_code(self, spec: FunctionSpec) -> None:
        """UpdateFunctionCode: every invocation from now on runs ``spec`` in a new environment; one in flight
        finishes on the code it started with, and its environment is shut down when it returns."""
        with self._cond:
            self.spec = spec
            stale, self._idle = [e for e in self._idle if e.spec is not spec], [e for e in self._idle if e.spec is spec]
            for env in stale:
                self._discard(env)
        self._notify("code_updated", code_dir=str(spec.code_dir))

    def _release(self, env: Environment) -> None:
        with self._cond:
            if env.dead or self._closed or env.spec is not self.spec:
                self._discard(env)
            else:
                self._idle.append(env)
                self._cond.notify_all()

    def _record_log_writes(self, env: Environment) -> None:
        if self.calls is None or not self.principal:
            return
        group = self.spec.environment.get("AWS_LAMBDA_LOG_GROUP_NAME") or f"/aws/lambda/{self.spec.name}"
        stream = f"{self.spec.environment.get('AWS_LAMBDA_LOG_STREAM_NAME', 'local')}/{env.number}"
        for operation in ("CreateLogStream", "PutLogEvents"):
            self.calls.record(self.principal, "logs", operation, {"logGroupName": group, "logStreamName": stream})

    def invoke(self, event: Any, request_id: str | None = None) -> InvokeResult:
        request_id = request_id or str(uuid.uuid4())
        if payload_bytes(event) > LAMBDA_REQUEST_MAX_BYTES:  # Lambda refuses it before any environment sees it
            self._notify("request_too_large", request_id=request_id, error=REQUEST_TOO_LARGE)
            return InvokeResult(request_id, "request_too_large", error=dict(REQUEST_TOO_LARGE))
        env, cold = self._acquire()
        started = time.monotonic()
        try:
            if cold:
                self._notify("cold_start", pid=env.pid, environment=env.number)
                self._record_log_writes(env)
                init_error = env.init(time.monotonic() + INIT_TIMEOUT_S)
                if init_error is not None:
                    env.dead = True
                    self.logs.write(self.spec.name, env.pid, f"INIT_REPORT Init Error: {init_error.get('errorType')}: "
                                                             f"{init_error.get('errorMessage')}")
                    self._notify("init_error", pid=env.pid, error=init_error)
                    self._record("end", request_id=request_id, pid=env.pid, status="init_error", duration_ms=round(
                        (time.monotonic() - started) * 1000, 1), error=init_error.get("errorType"))
                    return InvokeResult(request_id, "init_error", error=init_error, pid=env.pid, cold=True)
            self.logs.write(self.spec.name, env.pid, f"START RequestId: {request_id} Version: $LATEST")
            self._notify("invoke", pid=env.pid, request_id=request_id, cold=cold)
            self._record("start", request_id=request_id, function=self.spec.name, role=self.spec.role, pid=env.pid,
                         cold=cold, deadline_at=time.time() + self.spec.timeout_s)
            status, body = env.invoke(request_id, event, self.spec.timeout_s)
            duration = (time.monotonic() - started) * 1000
            self._record("end", request_id=request_id, pid=env.pid, status=status, duration_ms=round(duration, 1),
                         error=None if status == "ok" else body.get("errorType"))
            self.logs.write(self.spec.name, env.pid, f"END RequestId: {request_id}")
            self.logs.write(self.spec.name, env.pid, f"REPORT RequestId: {request_id}\tDuration: {duration:.2f} ms\t"
                                                     f"Status: {status}")
            if status == "ok":
                result = InvokeResult(request_id, status, payload=body["payload"], duration_ms=duration,
                                      pid=env.pid, cold=cold)
            else:
                result = InvokeResult(request_id, status, error=body, duration_ms=duration, pid=env.pid, cold=cold)
                if status in ("timeout", "crashed"):
                    self.logs.write(self.spec.name, env.pid, f"{request_id} {body.get('errorMessage')}")
                self._notify(status, pid=env.pid, request_id=request_id, error=body)
            return result
        finally:
            self._release(env)

    def close(self) -> None:
        with self._cond:
            self._closed = True
            envs = list(self._all)
            self._idle.clear()
            self._all.clear()
            self._cond.notify_all()
        for env in envs:
            env.close()
