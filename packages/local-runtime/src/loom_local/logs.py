"""Where function output goes: one log file per function (like a CloudWatch log group), optionally echoed."""

from __future__ import annotations

import datetime as dt
import threading
from pathlib import Path
from typing import TextIO


class LogSink:
    """Appends ``<UTC time> <pid> <line>`` to ``<dir>/<function>.log``; echoes to ``echo`` with a prefix."""

    def __init__(self, directory: str | Path, echo: TextIO | None = None):
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.echo = echo
        self._lock = threading.Lock()
        self._files: dict[str, TextIO] = {}

    def path(self, function: str) -> Path:
        return self.dir / f"{function}.log"

    def write(self, function: str, pid: int | None, line: str) -> None:
        stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        with self._lock:
            f = self._files.get(function)
            if f is None:
                f = self._files[function] = open(self.path(function), "a", encoding="utf-8")
            f.write(f"{stamp} {pid or '-'} {line}\n")
            f.flush()
            if self.echo is not None:
                try:
                    self.echo.write(f"[{function} {pid or '-'}] {line}\n")
                    self.echo.flush()
                except (OSError, ValueError):
                    pass

    def close(self) -> None:
        with self._lock:
            for f in self._files.values():
                f.close()
            self._files.clear()

