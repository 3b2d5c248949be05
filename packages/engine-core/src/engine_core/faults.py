"""Named crash points for failure-injection tests.

The engine calls :func:`point` at the moments a crash matters (after a checkpoint, before an
enqueue, ...). By default that does nothing. Only code that is never shipped in a Lambda zip (the
local runtime's bootstrap, tests) can install a hook, through :func:`install`; there is no
environment variable or event field that turns one on in a deployed function.
"""

from __future__ import annotations

from collections.abc import Callable

POINTS = (
    "worker.after_claim",
    "worker.after_record",
    "worker.after_checkpoint",
    "worker.after_enqueue",
    "control.after_create",
    "sweeper.after_claim",
)

_hook: Callable[[str, dict], None] | None = None


def install(hook: Callable[[str, dict], None] | None) -> None:
    global _hook
    _hook = hook


def point(name: str, **info) -> None:
    if _hook is not None:
        _hook(name, info)
