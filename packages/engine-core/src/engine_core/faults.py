"""Named crash points for failure-injection tests: the one seam, and the one list of them.

The engine calls :func:`point` at the moments a crash matters (after a checkpoint, before an
enqueue, ...), and ``_runner.run_body`` calls the two body points around every step, branch and
compensation body: ``step.enter`` (before its first line) and ``step.return`` (its side effects are
done, the engine has not seen the result). By default that does nothing. Only code that is never shipped in a Lambda zip (the
local runtime's bootstrap, tests) can install a hook, through :func:`install`; there is no
environment variable or event field that turns one on in a deployed function.
"""

from __future__ import annotations

from collections.abc import Callable

ENGINE_POINTS = (
    "worker.after_claim",
    "worker.after_record",
    "worker.after_checkpoint",
    "worker.after_enqueue",
    "control.after_create",
    "sweeper.after_claim",
)
BODY_POINTS = ("step.enter", "step.return")
"""Reported with ``execution_id``, ``workflow``, ``step`` (the index), ``step_name``, ``attempt``,
``branch`` (a parallel or map branch, else None) and ``compensation`` (True in a compensation body)."""
POINTS = ENGINE_POINTS + BODY_POINTS

_hook: Callable[[str, dict], None] | None = None


def install(hook: Callable[[str, dict], None] | None) -> None:
    global _hook
    _hook = hook


def point(name: str, **info) -> None:
    if _hook is not None:
        _hook(name, info)
