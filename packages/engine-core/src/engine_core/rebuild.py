"""The context a step sees, rebuilt from the stored input and history: the start input merged with
every earlier step's result, in step order. Only the step boundaries are durable, so this is all there
is to restore; ``StepContext`` (``context.py``) is what a step function receives of it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from . import codec
from .frozen import with_fields
from .model import StepRecord, StepStatus
from .versions import is_code_first, pinned_definition

if TYPE_CHECKING:
    from .model import Execution, ExecutionState
    from .registry import Registry
    from .steps import WorkflowDef


def this_run(e: Execution, items: list[Any], written_attr: str) -> list[Any]:
    """The items ``e``'s run wrote. A token re-used after its execution expired starts a new run under the
    same id; what the old run left (history, events, operations, branches) waits for its TTL and is
    never read as this run's. Items from before runs were named count when written after ``e`` began."""
    out = []
    for item in items:
        run = getattr(item, "run", None)
        if run is not None:
            if run == e.run:
                out.append(item)
            continue
        if isinstance(item, StepRecord):
            times = [t for t in (item.started_at, item.finished_at) if t is not None]
        else:
            times = [t for t in (getattr(item, written_attr, None),) if t is not None]
        if not times or max(times) >= e.created_at:
            out.append(item)
    return out


def this_run_state(state: ExecutionState) -> ExecutionState:
    """The state with only this run's history, events and joins (a token re-used after its execution
    expired starts a new run under the same id; what the old run left waits for its TTL)."""
    e = state.execution
    return with_fields(
        state, records=this_run(e, state.records, "finished_at"), events=this_run(e, state.events, "sent_at"),
        operations=this_run(e, state.operations, "at"),
        joins={i: j for i, j in state.joins.items() if j.run is None or j.run == e.run})


def context_of(state: ExecutionState, registry: Registry | None) -> dict[str, Any]:
    """The context as the execution's next step (or, while compensating and after, its failed step)
    saw it. Under a step list that is not deployed here (or changed), every settled task result in
    order: what a status read can still show. A code-first function keeps its results in its own
    variables: its context is its input, deployed or not. Raises when a record it needs is unreadable."""
    e = state.execution
    upto = e.failed_step if e.failed_step is not None else e.current_step
    wf = None if registry is None else pinned_definition(registry, e)
    if wf is not None:
        return rebuild_context(state.input_blob, state.records, wf, upto)
    data = codec.decode(state.input_blob)
    if is_code_first(e):
        return data
    for r in state.records:
        if isinstance(r, StepRecord) and r.step_index < upto and r.status is StepStatus.SUCCEEDED \
                and r.result_blob is not None and r.kind != "compensation":
            data.update(codec.decode(r.result_blob))
    return data


def rebuild_context(input_blob: str, records: list[Any], wf: WorkflowDef, upto: int,
                    records_from: int | None = None,
                    decoded: Mapping[int, tuple[str, Any]] | None = None) -> dict[str, Any]:
    """The context a step sees: the start input merged with every earlier task's result, in order; or,
    from the latest checkpoint before ``upto`` (a record that holds the whole context after its step),
    that context merged with the results after it. ``records_from``: the records are the history from
    that step on (a delivery that read from a checkpoint). ``decoded``: results already decoded, by step
    index, each with the very text it was decoded from (a record whose text is another object is decoded
    again); their values are merged, never changed. Raises ValueError when an item it needs is unreadable
    or missing."""
    by_index: dict[int, StepRecord] = {}
    for r in records:
        if isinstance(r, StepRecord):
            if r.kind != "compensation":
                held = by_index.get(r.step_index)
                # A redrive onto another version whose step at the failed position has another name leaves the
                # failed step's record beside the new one's: the deployed step's own record is the one to read.
                if held is None or held.name == r.name or not _names_its_step(held, wf):
                    by_index[r.step_index] = r
        elif int(r.sort_key.split("#")[1].lstrip("~")) < upto and not r.sort_key.endswith("#compensation"):
            raise ValueError(f"history item {r.sort_key} is unreadable: {r.detail}")
    checkpoint = max((i for i, r in by_index.items() if i < upto and r.context_blob is not None
                      and r.status is StepStatus.SUCCEEDED), default=None)
    if checkpoint is not None:
        data = codec.decode(by_index[checkpoint].context_blob)
        if not isinstance(data, dict):
            raise ValueError(f"the context kept with step {checkpoint} is not an object")
        first = checkpoint + 1
    elif records_from is not None and records_from > 0:
        raise ValueError(f"no checkpoint record at step {records_from} or after, and the history before it was "
                         "not read")
    else:
        data = codec.decode(input_blob)
        if not isinstance(data, dict):
            raise ValueError("the stored input is not an object")
        first = 0
    for s in wf.steps[first:upto]:
        if s.kind.kind == "sleep":
            continue
        r = by_index.get(s.index)
        if r is None or r.status is not StepStatus.SUCCEEDED or r.result_blob is None:
            raise ValueError(f"the result of step {s.index} {s.name!r} is missing from the history")
        known = None if decoded is None else decoded.get(s.index)
        result = known[1] if known is not None and known[0] is r.result_blob else codec.decode(r.result_blob)
        if not isinstance(result, dict):
            raise ValueError(f"the stored result of step {s.name!r} is not an object")
        data.update(result)
    return data


def _names_its_step(r: StepRecord, wf: WorkflowDef) -> bool:
    return r.step_index < len(wf.steps) and wf.steps[r.step_index].name == r.name
