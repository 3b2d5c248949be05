"""Where a code-first call finds its execution: a ``ContextVar`` per thread and asyncio task.

``RUN`` holds the run of the function the worker is replaying (``replay.Replay``); ``BODY`` the step
context while one of its step bodies runs. A thread the function starts has neither, and a durable call
there is refused with a clear error.
"""

from __future__ import annotations

from contextvars import ContextVar
from typing import Any

RUN: ContextVar[Any] = ContextVar("loom_durable_run", default=None)
BODY: ContextVar[Any] = ContextVar("loom_durable_body", default=None)
