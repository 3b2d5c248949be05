"""What the checker knows of code-first executions (``code_first.py``), beside the step-list rules of
``checks.py``.

A code-first delivery writes a settled step's record at once and moves on only when the function makes
its next call (or returns), so a worker that dies in between leaves a recorded result and an execution
still at that position. The next delivery's replay returns the record and moves on without running the
step again. So, for a code-first execution:

- a position is identified by its name and occurrence: each history record's name is the one the
  function calls there;
- a task position may be advanced past by another delivery than the one whose body succeeded, but only
  after a SUCCEEDED record of it (written by a claimer whose body of that attempt succeeded, which the
  step-list rules check) and with that record's result;
- once a position's result is recorded, it is never claimed again (a replay returns the record; a body
  runs only under its own claim);
- the function's return value (the ``return`` record, one position past its last call) is the list of
  its steps' results, written by the operation that completed the execution, before it did.
"""

from __future__ import annotations

from engine_core import codec
from engine_core.model import StepStatus

from .code_first import expected_results, expected_return
from .workflows import step_result

RETURN_KIND = "return"


def expected_result(eid: str, wf, index: int):
    """What a successful body at ``index`` returns (either authoring style)."""
    if wf.code:
        return expected_results(eid, wf).get(index)
    return step_result(eid, wf.steps[index])


def check_names(v, tag: str, wf, records: dict) -> None:
    """Each recorded position holds the call the function makes there (name and occurrence)."""
    for index, r in records.items():
        if index < len(wf.steps) and r.name != wf.steps[index].name:
            seen = sum(1 for s in wf.steps[:index] if s.name == r.name)
            v(f"{tag}: position {index} recorded as {r.name!r} (occurrence {seen + 1}), the function calls "
              f"{wf.steps[index].name!r} there")


def check_advance(sim, tag: str, eid: str, wf, index: int, c, puts: list, records: dict) -> None:
    """A code-first task position was advanced past by commit ``c``: after its recorded result."""
    v = sim.violation
    done = [p for p in puts if p.step == index and p.status == "SUCCEEDED" and p.kind != RETURN_KIND
            and p.seq < c.seq]
    if not done:
        v(f"{tag}: advanced past position {index} (op {c.op_id}) before any SUCCEEDED record of it")
        return
    if c.op_id != done[-1].op_id:
        sim.stat("code.advanced_by_replay")
    r = records.get(index)
    if r is None or r.status is not StepStatus.SUCCEEDED:
        v(f"{tag}: position {index} was passed, but its history record is "
          f"{None if r is None else r.status.value}")
    elif r.result_blob is None or codec.decode(r.result_blob) != expected_result(eid, wf, index):
        v(f"{tag}: position {index} recorded result {r.result_blob!r}, not what its body returned")


def check_recorded_once(sim, tag: str, eid: str, wf, claims: dict, puts: list) -> None:
    """Once a position's result is recorded, nothing claims it again. (A body may still start later under a
    claim made before: a worker stopped past its lease, which the lease rules cover; every body runs under
    its own claim, which checks.py checks.)"""
    v = sim.violation
    for p in puts:
        if p.status != "SUCCEEDED" or p.kind == RETURN_KIND or p.step >= len(wf.steps) \
                or wf.steps[p.step].kind == "sleep":
            continue
        later = [cl for cl in claims.get(p.step, []) if cl.seq > p.seq]
        if later:
            v(f"{tag}: position {p.step} was claimed again (attempt {later[0].attempt}, op {later[0].op_id}) after "
              f"attempt {p.attempts} recorded its result: a recorded step ran twice")


def check_return(sim, tag: str, eid: str, wf, e, commits: list, puts: list, returned) -> None:
    """The return record: on COMPLETED only, holding every step's result, by the completing operation."""
    v = sim.violation
    writes = [p for p in puts if p.kind == RETURN_KIND]
    for p in writes:
        if p.step != len(wf.steps):
            v(f"{tag}: the return value recorded at position {p.step}, the function makes {len(wf.steps)} calls")
    completed = next((c for c in commits if c.new_status == "COMPLETED"), None)
    if completed is None:
        if returned is not None:
            # A worker that recorded the return value, then lost its commit (its claim ran out while it was
            # stopped, or it died): the record stays, as a lost commit's step records do; nothing reads it
            # on an execution that did not complete (the API shows a result only for COMPLETED).
            leftover = [p for p in writes if not any(c.op_id == p.op_id and c.seq > p.seq for c in commits)]
            if leftover and len(leftover) == len(writes):
                sim.stat("code.return_recorded_by_a_lost_commit")
            else:
                v(f"{tag}: {e.status.value}, but the history holds a return value")
        return
    sim.stat("code.completed")
    if not any(p.op_id == completed.op_id and p.seq < completed.seq for p in writes):
        v(f"{tag}: COMPLETED by op {completed.op_id}, which did not record the return value first")
    want = expected_return(eid, wf)
    got = codec.decode(returned.result_blob) if returned is not None and returned.result_blob else None
    if got != want:
        v(f"{tag}: COMPLETED returning {got!r}, the function's steps returned {want!r}")
