"""What processing one message did (``Outcome``), and the keys every engine log line carries."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    from .model import Execution
    from .registry import StepDef


class Outcome(NamedTuple):
    """What processing one message did. Every kind but a raised error means: acknowledge the message."""

    kind: str
    """advanced, completed, failed, retry_scheduled, slept, early, stale, duplicate, conflict, superseded,
    missing, terminal, corrupt, exhausted (a chain step); for parallel and map steps also fanned_out,
    reconciled and branch_succeeded; ``chained`` is internal."""
    execution_id: str
    step: int | None = None
    detail: str = ""
    steps_run: int = 0
    """Steps whose bodies ran to a commit in this delivery (more than one when chained)."""


def log_fields(e: Execution, step: StepDef | None = None, attempt: int | None = None) -> dict[str, Any]:
    """The keys every engine log line carries (None where a key does not apply)."""
    # revision: the execution record's (what each commit bumps); workflow_version: the version it runs on
    return {"execution_id": e.execution_id, "workflow": e.workflow, "workflow_version": e.workflow_version,
            "revision": e.version,
            "step": None if step is None else step.name,
            "step_index": e.current_step if step is None else step.index, "attempt": attempt}
