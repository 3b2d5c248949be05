"""Requests per step through the local runtime (engineer D's ``loom_local``): pending stub."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def measure(progress: Callable[[str], None] = print, quick: bool = False) -> dict[str, Any]:
    reason = "the local runtime is not wired into this bench yet."
    progress(f"  local: pending: {reason}")
    return {"status": "pending", "reason": reason}
