"""Which definition an execution runs on: the workflow version it is pinned to, judged by what it still
has to run (DESIGN.md "Versions: executions in flight across a deploy").

An execution pins, at start, its workflow's version (``Execution.workflow_version``, on the execution item)
and each step's digest (``pinned_steps``, written once beside the input). Every delivery and operator
action resolves the definition here:

- the pinned version must be deployed (else ``workflow_version_missing``, naming it and what is deployed);
- the same step list (same fingerprint) runs as is;
- a changed list at the same version runs when every step the execution still has to run is unchanged,
  at the same position, and every step it completed still stands where it stood (a sleep that passed may
  be retuned); steps appended after its list are not run by it. It runs on a *view* of the deployed list
  cut to the length it pinned, so everything downstream sees its own list;
- anything else is ``workflow_definition_mismatch``, naming the first step that differs.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple

from .code_step import code_fingerprint
from .errors import ExecutionStateConflictError, UnknownWorkflowError, UnknownWorkflowVersionError
from .model import ErrorInfo, Execution

if TYPE_CHECKING:
    from .registry import Registry
    from .steps import StepDef, WorkflowDef

MISSING_VERSION = "workflow_version_missing"
MISMATCH = "workflow_definition_mismatch"


class PinnedStep(NamedTuple):
    """One step as the execution started with it."""

    name: str
    kind: str
    digest: str


def pins_of(wf: WorkflowDef) -> str | None:
    """What an execution started on ``wf`` keeps beside its input: the list's fingerprint, then each step's
    ``kind#digest#name`` (names hold no ``#`` and no whitespace). None for code-first (the replay checks
    each position against the history instead)."""
    if wf.code is not None or not wf.step_prints:
        return None
    return " ".join([wf.fingerprint, *(f"{s.kind.kind}#{d}#{s.name}" for s, d in zip(wf.steps, wf.step_prints))])


def decode_pins(text: str | None, fingerprint: str) -> list[PinnedStep] | None:
    """The pinned steps, when ``text`` holds them for the list ``fingerprint`` names (pins written for another
    list, after a redrive onto another version, are not this execution's); None otherwise."""
    if not text:
        return None
    head, *entries = text.split(" ")
    if head != fingerprint or not entries:
        return None
    out = []
    for entry in entries:
        parts = entry.split("#")
        if len(parts) != 3:
            return None
        out.append(PinnedStep(name=parts[2], kind=parts[0], digest=parts[1]))
    return out


def _passed(e: Execution, index: int, kind: str) -> bool:
    """The execution is done with this step: it completed, or it is the sleep it began (its wake time is
    already fixed on the execution, so its length no longer matters)."""
    return index < e.current_step or (index == e.current_step and kind == "sleep" and e.attempt >= 1)


def prefix_problem(pins: list[PinnedStep], wf: WorkflowDef, upto: int) -> str | None:
    """Why the steps before ``upto`` do not stand in ``wf`` where they stood in ``pins`` (None: they do). A
    step stands when its digest (name and shape) is the same, or when both are sleeps."""
    for i in range(upto):
        if i >= len(wf.steps):
            return f"it has {len(wf.steps)} steps, and this execution completed {upto}"
        if i >= len(pins):
            return f"this execution's list has no step {i}"
        pin, now, digest = pins[i], wf.steps[i], wf.step_prints[i]
        if digest != pin.digest and not (pin.kind == now.kind.kind == "sleep"):
            return f"step {i} was {pin.name!r} ({pin.kind}) and is now {now.name!r} ({now.kind.kind})"
    return None


def remaining_problem(pins: list[PinnedStep], wf: WorkflowDef, e: Execution) -> str | None:
    """Why ``e`` cannot go on under ``wf`` (None: every step it completed still stands, and every step it
    still has to run is unchanged at its position)."""
    done = sum(1 for i, p in enumerate(pins) if _passed(e, i, p.kind))
    problem = prefix_problem(pins, wf, min(done, len(pins)))
    if problem is not None:
        return problem
    for i in range(done, len(pins)):
        if i >= len(wf.steps):
            return f"it dropped step {i} {pins[i].name!r}, which this execution still has to run"
        change = step_change(pins[i], wf.steps[i], wf.step_prints[i])
        if change is not None:
            return f"step {i} {pins[i].name!r}, which this execution still has to run, {change}"
    return None


_SHAPE = {"fanout": "its branches (a map's over= key, a parallel's branch functions)",
          "event": "the event it waits for", "sleep": "its length"}


def step_change(pin: PinnedStep, step: StepDef, digest: str) -> str | None:
    """How ``step`` (digest ``digest``) differs from the step the execution pinned: None when it does not."""
    if digest == pin.digest:
        return None
    if pin.name != step.name:
        return f"changed (now {step.name!r})"
    if pin.kind != step.kind.kind:
        return f"changed from a {pin.kind} step to a {step.kind.kind} step"
    return f"changed {_SHAPE.get(pin.kind, 'its shape')}"


def started_with(registry: Registry, e: Execution, load_pins: Callable[[], str | None]) -> list[PinnedStep] | None:
    """The step list the step-list execution ``e`` started with: its pinned digests, or its own version's list
    while that is deployed unchanged (None when neither says)."""
    pins = decode_pins(e.pinned_steps if e.pinned_steps is not None else load_pins(), e.fingerprint)
    if pins is not None:
        return pins
    try:
        own = registry.get(e.workflow, e.workflow_version)
    except UnknownWorkflowError:
        return None
    if own.code is not None or own.fingerprint != e.fingerprint:
        return None
    return [PinnedStep(s.name, s.kind.kind, d) for s, d in zip(own.steps, own.step_prints)]


def pinned_step(registry: Registry, e: Execution, index: int, load_pins: Callable[[], str | None]) -> PinnedStep | None:
    """Step ``index`` as the step-list execution ``e`` started with it (None when nothing says)."""
    pins = started_with(registry, e, load_pins)
    return pins[index] if pins is not None and 0 <= index < len(pins) else None


def pinned_view(wf: WorkflowDef, e: Execution, length: int) -> WorkflowDef:
    """``wf`` cut to the ``length`` steps ``e`` pinned, under ``e``'s fingerprint: the list it runs to its end."""
    return dataclasses.replace(wf, steps=wf.steps[:length], step_prints=wf.step_prints[:length],
                               fingerprint=e.fingerprint)


def is_code_first(e: Execution) -> bool:
    """Whether ``e`` runs a code-first function (it carries the fingerprint of one from its start), whether
    or not that function is deployed here."""
    return e.fingerprint == code_fingerprint(e.workflow)


def resolve(registry: Registry, e: Execution, load_pins: Callable[[], str | None] | None = None,
            ) -> tuple[WorkflowDef, None] | tuple[WorkflowDef | None, ErrorInfo]:
    """The definition ``e`` runs on, or why there is none here. ``load_pins`` reads the pinned steps when
    ``e`` came from a read that does not carry them and the deployed list differs."""
    try:
        wf = registry.get(e.workflow, e.workflow_version)
    except UnknownWorkflowError as exc:  # its version, or the whole workflow (UnknownWorkflowVersionError is one)
        return None, missing_version(e, exc)
    if wf.fingerprint == e.fingerprint:
        return wf, None
    text = e.pinned_steps if e.pinned_steps is not None or load_pins is None else load_pins()
    pins = None if wf.code is not None else decode_pins(text, e.fingerprint)
    if pins is None:
        why = "its per-step digests were not kept (it started before executions kept them, or was redriven onto this version)"
    elif e.compensating:
        why = "it is undoing its completed steps, and a changed list cannot say what to undo"
    else:
        why = remaining_problem(pins, wf, e)
        if why is None:
            return pinned_view(wf, e, len(pins)), None
    return wf, ErrorInfo(code=MISMATCH, message=(
        f"workflow {e.workflow!r} version {e.workflow_version} changed its steps since this execution started "
        f"(fingerprint {e.fingerprint} -> {wf.fingerprint}): {why}; running on would run the wrong step. Ship "
        f"a changed step list as a new version (@workflow({e.workflow!r}, version="
        f"{max(registry.versions(e.workflow) + [e.workflow_version]) + 1})) "
        "and keep this one registered until its executions end (loom versions check)"))


def missing_version(e: Execution, exc: Exception, live: bool = False) -> ErrorInfo:
    """``workflow_version_missing`` for ``e``: the failure it is (``live`` False), or, for a view of a live
    execution, what comes and what moves it (its next delivery fails it; ``loom wake`` brings that on, and a
    redrive moves it only once it failed)."""
    v, name = e.workflow_version, e.workflow
    decorator = "@durable" if is_code_first(e) else "@workflow"
    keep = f"keep its {decorator}(..., version={v}) registered"
    if isinstance(exc, UnknownWorkflowVersionError):
        cause, deploy = str(exc), f"Deploy version {v} again beside the newer ones ({keep})"
        onto = " onto a deployed version whose steps before its {} one are the same (loom redrive ID --to-version N)"
    else:
        keep = f"keep its {decorator}({name!r}, version={v}) registered"
        cause, deploy, onto = f"no version of {name!r} is deployed here ({exc})", f"Deploy it again ({keep})", ""
    head = f"this execution started on version {v} of workflow {name!r} and runs to its end on it, but {cause}."
    if not live:
        return ErrorInfo(code=MISSING_VERSION, message=(
            f"{head} {deploy} and redrive it" + (f", or redrive it{onto.format('failed')}" if onto else "")))
    return ErrorInfo(code=MISSING_VERSION, message=(
        f"{head} Its next delivery fails it. {deploy} and it goes on; or fail it now (loom wake ID) and redrive it"
        + (onto.format("current") if onto else " once its workflow is deployed again")))


def cannot_go_on(registry: Registry, e: Execution) -> ErrorInfo | None:
    """Why live ``e`` cannot go on here (its version is not deployed), or None (ended, or its version is)."""
    if e.status.is_terminal:
        return None
    try:
        registry.get(e.workflow, e.workflow_version)
    except UnknownWorkflowError as exc:
        return missing_version(e, exc, live=True)
    return None


def read_pins(store: Any, execution_id: str) -> Callable[[], str | None]:
    """Reads ``execution_id``'s pinned steps (kept beside its input: one Query) when it is called."""
    def read() -> str | None:
        state = store.load_state(execution_id)
        return None if state is None else state.execution.pinned_steps
    return read


def pinned_definition(registry: Registry, e: Execution,
                      load_pins: Callable[[], str | None] | None = None) -> WorkflowDef | None:
    """The definition ``e`` runs on, or None when this deployment cannot run it."""
    wf, problem = resolve(registry, e, load_pins)
    return wf if problem is None else None


def redrive_onto(registry: Registry, e: Execution, to_version: int | None,
                 load_pins: Callable[[], str | None]) -> dict[str, Any]:
    """What a redrive of the FAILED ``e`` changes on it besides the redrive itself: nothing on its own version
    (which must still run it: ``definition_changed`` otherwise), or the version and fingerprint of
    ``to_version``, whose steps before the failed one must stand where ``e``'s stood (``steps_differ``).
    Raises UnknownWorkflowVersionError when ``to_version`` is not deployed here."""
    status = e.status.value
    if to_version is None or to_version == e.workflow_version:
        wf, problem = resolve(registry, e, load_pins)
        if problem is not None:
            remedy = "" if "--to-version" in problem.message else (
                ". Or redrive it onto another deployed version: loom redrive ID --to-version N")
            raise ExecutionStateConflictError("definition_changed", (
                f"execution {e.execution_id} cannot be redriven on its own version: {problem.message}{remedy}"), status)
        return {}
    target = registry.get(e.workflow, to_version)
    try:
        own: WorkflowDef | None = registry.get(e.workflow, e.workflow_version)
    except UnknownWorkflowError:
        own = None
    pins = started_with(registry, e, load_pins)
    code_first = is_code_first(e)  # from its fingerprint: its own version need not be deployed here
    if not code_first and own is None and pins is None:
        raise ExecutionStateConflictError("steps_differ", (
            f"the steps execution {e.execution_id} completed cannot be compared with version {to_version}: "
            f"neither its per-step digests nor version {e.workflow_version} are here. Deploy version "
            f"{e.workflow_version} again and redrive without --to-version"), status)
    if (target.code is not None) != code_first:
        raise ExecutionStateConflictError("steps_differ", (
            f"version {to_version} of workflow {e.workflow!r} and version {e.workflow_version}, which execution "
            f"{e.execution_id} ran on, are not both code-first or both step lists; start a new execution"), status)
    if target.code is not None:
        return {"workflow_version": to_version, "fingerprint": target.fingerprint}  # the replay checks each position
    if pins is None:
        raise ExecutionStateConflictError("steps_differ", (
            f"the steps execution {e.execution_id} completed cannot be compared with version {to_version}: "
            f"neither its per-step digests nor version {e.workflow_version} as it started are here. Deploy "
            f"version {e.workflow_version} again and redrive without --to-version"), status)
    if e.compensating and e.failed_step is not None:  # its undo stopped: what it still undoes, and the context
        # they see (the steps up to where it failed, that step too when it is undone), must be version N's
        upto = e.failed_step + (1 if e.undo_failed_step else 0)
        problem = prefix_problem(pins, target, upto)
        if problem is not None:
            raise ExecutionStateConflictError("steps_differ", (
                f"execution {e.execution_id} stopped while undoing its completed steps (it failed or was cancelled "
                f"at step {e.failed_step}); the steps it undoes must be the same in version {to_version} (compared "
                f"by digest), but {problem}. Redrive it onto a version that keeps them (its own, deployed again), "
                "or start a new execution"), status)
        return {"workflow_version": to_version, "fingerprint": target.fingerprint}
    problem = prefix_problem(pins, target, e.current_step)
    if problem is None and e.current_step >= len(target.steps):
        problem = f"it has {len(target.steps)} steps, so no step {e.current_step} to resume at"
    if problem is not None:
        raise ExecutionStateConflictError("steps_differ", (
            f"execution {e.execution_id} failed at step {e.current_step}; the steps before it must be the same "
            f"in version {to_version} (compared by digest), but {problem}. Redrive it onto a version that "
            "keeps them, or start a new execution"), status)
    return {"workflow_version": to_version, "fingerprint": target.fingerprint}


__all__ = ["MISMATCH", "MISSING_VERSION", "PinnedStep", "cannot_go_on", "decode_pins", "is_code_first",
           "missing_version", "pinned_definition", "pinned_view", "pinned_step", "pins_of", "started_with",
           "prefix_problem", "read_pins", "redrive_onto", "remaining_problem", "resolve", "step_change"]


def moved_by_redrive(store: Any, e: Execution) -> int | None:
    """The version the latest redrive of ``e`` moved it from (``loom redrive --to-version``), if that redrive
    put it on the version it is on now; None when none did (it replays the version it started on)."""
    from .model import OperationRecord

    redrives = [op for op in store.operations(e.execution_id, legacy=e.layout == 1)
                if isinstance(op, OperationRecord) and op.op == "redrive"]
    latest = max(redrives, key=lambda op: op.at, default=None)
    moved = None if latest is None else latest.detail.get("from_version")
    return moved if moved is not None and latest.detail.get("to_version") == e.workflow_version \
        and moved != e.workflow_version else None
