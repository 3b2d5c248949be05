"""What each invocation held and how it ended, one JSON line per fact, for reports that attribute a kill.

A SIGKILLed worker invocation leaves no log of its own after the kill, and its batch's messages come
back only after the visibility timeout: without a record of what it held, a report cannot tell which
executions a kill interrupted. The runtime writes ``<run>/logs/invocations.jsonl``:

    {"at": 1764620000.12, "kind": "start", "request_id": "...", "function": "loom-local-worker",
     "role": "worker", "pid": 4242, "cold": false, "deadline_at": 1764620020.12}
    {"at": ..., "kind": "held", "request_id": "...", "messages": [{"message_id": "...", "receive_count": 1,
     "execution_id": "...", "step": 2, "version": 7, "branch": null, "body": "{...}"}]}
    {"at": ..., "kind": "end", "request_id": "...", "pid": 4242, "status": "crashed", "duration_ms": 812.5,
     "error": "Runtime.ExitError"}

``start`` and ``end`` come from every function (worker, sweeper, control plane), ``held`` from the
SQS event source mapping, written before the invocation starts. An invocation whose cold start failed
(``init_error``: the handler's import failed or outlasted Lambda's 10 s) has an ``end`` and no ``start``. ``deadline_at`` is the invocation's
own deadline (epoch seconds): after it, nothing the invocation began can write. The step bodies the
functions start are recorded beside it, in ``steps.jsonl`` (see ``_bootstrap.py``).
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

FILE = "invocations.jsonl"
STEPS_FILE = "steps.jsonl"
"""Each step, branch and compensation body a function process started (the ``step.enter`` point)."""


def held_message(record: dict[str, Any]) -> dict[str, Any]:
    """One message of a batch as the invocation record keeps it: ids, receive count, what it carries."""
    try:
        body = json.loads(record.get("body") or "")
    except ValueError:
        body = None
    step = body if isinstance(body, dict) and "execution_id" in body else {}
    return {"message_id": record["messageId"],
            "receive_count": int((record.get("attributes") or {}).get("ApproximateReceiveCount", "1")),
            "execution_id": step.get("execution_id"), "step": step.get("step"), "version": step.get("version"),
            "branch": step.get("branch"), "body": record.get("body", "")}


class InvocationLog:
    """Appends the runtime's invocation facts to one file (thread-safe; each line written whole)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._file = open(self.path, "a", encoding="utf-8")

    def write(self, kind: str, **fields: Any) -> None:
        line = json.dumps({"at": time.time(), "kind": kind, **fields}, default=str, separators=(",", ":"))
        with self._lock:
            if self._file.closed:
                return  # the stack is stopping: a late end of a killed invocation is not worth an error
            self._file.write(line + "\n")
            self._file.flush()

    def close(self) -> None:
        with self._lock:
            self._file.close()


def read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    """Every whole JSON line of ``path`` (a line cut short by a kill is skipped); [] when it does not exist."""
    out = []
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    for line in text.splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return out
