"""``loom mcp``'s stdio: the MCP SDK's transport, with every line a client sends answered.

The SDK's stdio reader drops a line it cannot read as a JSON-RPC message (not JSON, no ``method``, another
``jsonrpc`` version, a string its validation refuses such as a lone surrogate) without a word, so a client
waiting for the reply to its request hangs. Here each such line is answered as JSON-RPC 2.0 says: -32700
(parse error, ``id`` null) for a line that is not JSON, -32600 (invalid request, the request's ``id`` when it
has one) for the rest; an invalid notification (no ``id``) is not answered, as no notification is.

A client that closes stdin right after its requests (``printf ... | loom mcp``) still gets every answer: at
the end of stdin the server waits for the requests in flight to be answered before it stops (a tool call
may already have changed an execution; its answer must not be dropped). ``DRAIN_S`` bounds that wait.

The protocol keeps the process's stdin and stdout to itself while it serves: fd 0 reads the null device
and fd 1 writes to stderr, so a stray ``print`` or a child process cannot corrupt the wire (as the SDK does
for its own streams); both are restored on exit.
"""

from __future__ import annotations

import io
import json
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

from .args import not_json_constant

PARSE_ERROR, INVALID_REQUEST = -32700, -32600
DRAIN_S = 300.0
"""At the end of stdin, how long the requests in flight may take to be answered (a tool call's HTTP request
ends well before: its timeout and retries are the client's)."""
SKIP = object()
"""A line to pass over without an answer: blank, or an invalid notification."""


def problem(line: str, validate: Callable[[str], Any]) -> tuple[int, Any, str] | object | None:
    """None when the SDK reads ``line`` (``validate``: its JSON-RPC message adapter); else the error to
    answer with, as ``(code, id, message)``, or ``SKIP``."""
    if not line.strip():
        return SKIP
    if "NaN" in line or "Infinity" in line:  # the SDK's parser takes them; JSON has neither (one look otherwise)
        try:
            json.loads(line, parse_constant=not_json_constant)
        except ValueError as exc:
            return PARSE_ERROR, None, f"Parse error: the line is not JSON ({exc})"
    try:
        validate(line)
    except Exception as exc:  # pydantic's ValidationError, whatever the SDK version raises
        refused = exc
    else:
        return _bad_id(line)
    try:
        doc = json.loads(line)
    except ValueError as exc:
        return PARSE_ERROR, None, f"Parse error: the line is not JSON ({exc})"
    request_id = doc.get("id") if isinstance(doc, dict) else None
    if isinstance(doc, dict) and "id" not in doc and isinstance(doc.get("method"), str):
        return SKIP
    if isinstance(request_id, bool) or not isinstance(request_id, (str, int)):
        request_id = None
    errors = getattr(refused, "errors", None)
    first = errors()[0].get("msg", "") if callable(errors) and errors() else str(refused)
    return INVALID_REQUEST, request_id, (f"Invalid Request: not a JSON-RPC 2.0 request, response or notification "
                                         f"this server reads ({str(first)[:200]})")


def _bad_id(line: str) -> tuple[int, Any, str] | None:
    """A line the SDK reads as a notification because its ``id`` is no string or whole number (1.5, an
    object): JSON-RPC's invalid request, ``id`` null. None for every other line (the usual case: one look)."""
    if '"id"' not in line:
        return None
    try:
        doc = json.loads(line)
    except ValueError:
        return None
    request_id = doc.get("id", 0) if isinstance(doc, dict) else 0
    if request_id is None or (isinstance(request_id, (str, int)) and not isinstance(request_id, bool)):
        return None
    return INVALID_REQUEST, None, (f"Invalid Request: the id must be a string or a whole number, got "
                                   f"{json.dumps(request_id)[:100]}")


def _key(request_id: Any) -> tuple[str, Any]:
    return type(request_id).__name__, request_id


class InFlight:
    """The requests read and not answered yet, by id: what the end of stdin waits for."""

    def __init__(self) -> None:
        self.ids: set[tuple[str, Any]] = set()
        self._written: list[tuple[str, Any]] = []

    def read(self, line: str) -> None:
        """A line the SDK reads: a request is in flight until its answer; a cancel notification ends one."""
        doc = json.loads(line)
        if not isinstance(doc, dict) or not isinstance(doc.get("method"), str):
            return
        if "id" in doc:
            self.ids.add(_key(doc["id"]))
        elif doc["method"] == "notifications/cancelled" and isinstance(doc.get("params"), dict):
            self.ids.discard(_key(doc["params"].get("requestId")))

    def wrote(self, text: str) -> None:
        try:
            doc = json.loads(text)
        except ValueError:
            return
        if isinstance(doc, dict) and "id" in doc and ("result" in doc or "error" in doc):
            self._written.append(_key(doc["id"]))

    def flushed(self) -> None:
        """What was written is on the wire now: those requests are answered."""
        self.ids.difference_update(self._written)
        self._written.clear()


class _TrackedWriter:
    """The SDK's stdout: each answer written and flushed ends its request's flight."""

    def __init__(self, inner: Any, flight: InFlight):
        self.inner, self.flight = inner, flight

    async def write(self, text: str) -> Any:
        self.flight.wrote(text)
        return await self.inner.write(text)

    async def flush(self) -> None:
        await self.inner.flush()
        self.flight.flushed()


class _AnsweredLines:
    """The lines of ``source`` the SDK can read; every other one is answered through ``answer`` first. At
    the end of ``source``, the requests in ``flight`` are answered (or ``DRAIN_S`` passed) before it ends."""

    def __init__(self, source: Any, validate: Callable[[str], Any],
                 answer: Callable[[int, Any, str], Awaitable[None]], flight: InFlight | None = None):
        self.source, self.validate, self.answer = source, validate, answer
        self.flight = flight or InFlight()

    def __aiter__(self) -> _AnsweredLines:
        return self

    async def __anext__(self) -> str:
        while True:
            line = await self.source.readline()
            if not line:
                await self._drain()
                raise StopAsyncIteration
            found = problem(line, self.validate)
            if found is None:
                self.flight.read(line)
                return line
            if found is not SKIP:
                await self.answer(*found)

    async def _drain(self) -> None:
        import anyio

        with anyio.move_on_after(DRAIN_S):
            while self.flight.ids:
                await anyio.sleep(0.01)


@asynccontextmanager
async def checked_stdio_server() -> AsyncIterator[tuple[Any, Any]]:
    """``mcp.server.stdio.stdio_server()``, every line answered (see the module docstring)."""
    import anyio
    import mcp.types as types
    from mcp.server.stdio import stdio_server
    from mcp.shared.message import SessionMessage

    saved = os.dup(0), os.dup(1)
    wire_in, wire_out = os.dup(0), os.dup(1)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.dup2(2, 1)
    reader = anyio.wrap_file(io.TextIOWrapper(open(wire_in, "rb", buffering=0), encoding="utf-8", errors="replace"))
    writer = anyio.wrap_file(io.TextIOWrapper(open(wire_out, "wb", buffering=0), encoding="utf-8"))
    ready = anyio.Event()
    streams: dict[str, Any] = {}

    async def answer(code: int, request_id: Any, message: str) -> None:
        await ready.wait()
        error = types.JSONRPCError(jsonrpc="2.0", id=request_id, error=types.ErrorData(code=code, message=message))
        await streams["write"].send(SessionMessage(error))

    flight = InFlight()
    lines = _AnsweredLines(reader, lambda line: types.jsonrpc_message_adapter.validate_json(line, by_name=False),
                           answer, flight)
    try:
        async with stdio_server(stdin=lines, stdout=_TrackedWriter(writer, flight)) as (read_stream, write_stream):
            streams["write"] = write_stream
            ready.set()
            yield read_stream, write_stream
    finally:
        os.dup2(saved[0], 0)
        os.dup2(saved[1], 1)
        for fd in saved:
            os.close(fd)


__all__ = ["DRAIN_S", "INVALID_REQUEST", "PARSE_ERROR", "InFlight", "checked_stdio_server", "problem"]
