"""Loom's safety caps (``LOOM_MAX_STEPS``, ``LOOM_MAX_TOTAL_ATTEMPTS``): an execution that reaches one ends
FAILED with nothing undone, and goes on where it stopped once the cap is raised and it is redriven. What can
be known before then is refused before anything runs: a step list longer than the steps cap at its start, a
redrive the caps would stop again at once."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .errors import ExecutionStateConflictError, StepCapError
from .model import ErrorInfo, Execution

if TYPE_CHECKING:
    from .steps import WorkflowDef
    from .settings import EngineSettings

_RAISE_ATTEMPTS = "raise LOOM_MAX_TOTAL_ATTEMPTS (the Terraform module's max_total_attempts) for every function"


def _raise_steps(least: int | None = None, first: bool = False) -> str:
    text = (f"raise LOOM_MAX_STEPS{'' if least is None else f' to at least {least}'} (up to 100,000; the "
            "Terraform module's max_steps) for every function")
    return text[0].upper() + text[1:] if first else text


def exceeded(e: Execution, settings: EngineSettings) -> ErrorInfo | None:
    """The failure of an execution that reached a cap (checked before each step claims an attempt)."""
    if e.current_step >= settings.max_steps:
        return ErrorInfo(code="step_cap_exceeded", message=(
            f"execution reached step {e.current_step}, the cap is {settings.max_steps} (LOOM_MAX_STEPS): a loop "
            f"that never ends, or a workflow that needs more: {_raise_steps()} and redrive it (nothing was "
            "undone: it goes on where it stopped)"))
    if e.total_attempts >= settings.max_total_attempts:
        return ErrorInfo(code="attempt_cap_exceeded", message=(
            f"execution used {e.total_attempts} step attempts, the cap is {settings.max_total_attempts} "
            f"(LOOM_MAX_TOTAL_ATTEMPTS): if the retries are expected, {_RAISE_ATTEMPTS} and redrive it (nothing "
            "was undone: it goes on where it stopped)"))
    return None


def _too_long(wf: WorkflowDef, settings: EngineSettings) -> str | None:
    """Why a step list cannot run to its end under the steps cap (a code-first function's length is known
    only as it runs)."""
    if wf.code is not None or len(wf.steps) <= settings.max_steps:
        return None
    which = f"workflow {wf.name!r}" + (f" version {wf.version}" if wf.version != 1 else "")
    return (f"{which} has {len(wf.steps)} steps, more than the {settings.max_steps} an execution may run here "
            f"(LOOM_MAX_STEPS): it would stop FAILED at step {settings.max_steps}. "
            f"{_raise_steps(len(wf.steps), first=True)}")


def refuse_start(wf: WorkflowDef, settings: EngineSettings) -> None:
    """A start that would run the first steps of a step list, then stop at the cap: StepCapError."""
    why = _too_long(wf, settings)
    if why is not None:
        raise StepCapError(f"{why}, then start it")


def refuse_redrive(e: Execution, settings: EngineSettings, onto: WorkflowDef | None) -> None:
    """A redrive the caps would stop again at once (the cap it stopped at not raised yet), or onto a step
    list (``onto``, another version) longer than the steps cap: ExecutionStateConflictError. An undo the
    redrive resumes is not capped."""
    if e.compensating:
        return
    status = e.status.value
    if e.current_step >= settings.max_steps:
        raise ExecutionStateConflictError("over_step_cap", (
            f"execution {e.execution_id} stands at step {e.current_step} and the cap is {settings.max_steps} "
            f"(LOOM_MAX_STEPS): a redrive would stop it again at once. {_raise_steps(first=True)}, then "
            "redrive it"), status)
    if e.total_attempts >= settings.max_total_attempts:
        raise ExecutionStateConflictError("over_attempt_cap", (
            f"execution {e.execution_id} used {e.total_attempts} step attempts and the cap is "
            f"{settings.max_total_attempts} (LOOM_MAX_TOTAL_ATTEMPTS): a redrive would stop it again at once. "
            f"First {_RAISE_ATTEMPTS}, then redrive it"), status)
    why = None if onto is None else _too_long(onto, settings)
    if why is not None:
        raise ExecutionStateConflictError("over_step_cap", f"{why}, then redrive it", status)
