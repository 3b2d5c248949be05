"""A branch's delivery (the parallel and map kind, ``fanout.py``): claim the branch, run its body,
record the outcome on the branch item only, and follow up (launch the lane's next branch, fan in).

Branches never check the execution's version (the fan-out's reconciles change it), only that the
execution is live at this step, not compensating and not being cancelled, and that the branch is at the
message's ``branch_version``. A success is one atomic write that sets the branch SUCCEEDED and counts it
on the join item, so it is recorded and counted once. A final failure fails the step.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from .. import codec, faults
from .._runner import BodyOutcome, truncate
from ..context import StepContext
from ..errors import BranchConflictError, InsufficientTimeError, NonSerializableResultError, ResultTooLargeError
from ..model import Branch, BranchStatus, ErrorInfo, Join, Status, StepMessage
from ..outcome import Outcome
from ..protocol import StepOps
from ..retries import backoff_s
from ._fanout_parent import FanOut, item_ttl, of_run, running

_PARENT_RETRIES = 5


def deliver(op: StepOps, message: StepMessage) -> Outcome:
    """Run one branch (``message.branch``) of the parallel or map step at ``message.step``. Raises only
    InsufficientTimeError, before any write, to ask for redelivery."""
    e, eid, index, b = op.execution, message.execution_id, message.step, message.branch
    assert b is not None

    def stale(why: str) -> Outcome:
        return Outcome("stale", eid, index, f"branch {b}: {why}")

    if e.compensating or e.current_step != index or e.status is not Status.RUNNING:
        return stale(f"the execution is at step {e.current_step} ({e.status.value})")
    if e.cancel_requested:
        return stale("the execution is being cancelled: no new branch body starts")
    join = op.joins.get(index)
    if join is None or b >= join.total:
        return stale("no such branch in this fan-out")
    if op.data is None:
        return stale("unreadable context (the step's own delivery fails it)")
    branch = op.items.get_branch(index, b)
    if not isinstance(branch, Branch):
        return stale("missing or unreadable")
    fan = FanOut(op)
    if not of_run(branch, e):
        return stale("written by an earlier run under this id")
    if e.attempt < 1:  # redriven, and the new generation has not begun: it decides what runs again
        return stale("the fan-out has not begun in this generation")
    if branch.status is BranchStatus.SUCCEEDED:
        return after_completion(fan, join, branch)  # a crash may have come between its completion and this
    if branch.version != message.branch_version or branch.status in (BranchStatus.RUNNING, BranchStatus.FAILED):
        return stale(f"it is at v{branch.version} {branch.status.value}")
    if branch.generation != join.generation:
        # Redriven since: an older generation's message must not spend fresh attempts or fail the step again.
        return stale(f"of generation {branch.generation}, not the fan-out's current one")
    now = op.now()
    if branch.status is BranchStatus.RETRY and branch.next_wake_at is not None:
        wait_s = (branch.next_wake_at - now).total_seconds()
        if wait_s > op.settings.early_tolerance_s:
            op.items.send_branch(branch, branch.next_wake_at)
            return Outcome("early", eid, index, f"branch {b} due in {wait_s:.1f} s")
    total, items = fan.spec.items(op.data)
    if total is None or total != join.total:
        return stale("the map's input does not match the fan-out (the step's own delivery fails it)")
    timeout = op.timeout_s
    try:
        op.check_time(timeout)  # before any write: a claimed-then-abandoned branch would hold its lane
    except InsufficientTimeError:
        if (never := op.branch_room(timeout)) is None:
            raise  # a fresh delivery may have the time: put the message back
        return _failed(fan, branch, never)  # no delivery can: the step fails now, not at its next reconcile
    policy = op.wf.policy_for(index)
    if branch.attempt >= policy.max_attempts:
        return _failed(fan, branch, op.error("attempts_exhausted", (
            f"branch {b}: started {branch.attempt} times without finishing {policy.max_attempts} attempts cleanly: "
            "earlier attempts crashed or ran past the timeout")))
    deadline = op.deadline()
    expiry = now + dt.timedelta(seconds=timeout + op.settings.time_margin_ms / 1000)
    if deadline is not None:
        expiry = max(expiry, deadline + dt.timedelta(seconds=op.settings.time_margin_ms / 1000))
    claimed = branch.model_copy(update={
        "status": BranchStatus.RUNNING, "version": branch.version + 1, "attempt": branch.attempt + 1, "updated_at": now,
        "attempt_started_at": now, "next_wake_at": expiry, "expires_at": item_ttl(op, now)})
    try:
        claimed = op.items.update_branch(claimed, branch.version)
    except BranchConflictError:
        return stale("another delivery claimed it first")
    # A branch's claim is not conditioned on the execution item (its version moves with every reconcile),
    # so look once more: a cancel or a failure that landed since this delivery's read must not start a
    # new body. One that lands after this read finds the body in flight, which may finish.
    now_e = op.items.load_execution()
    if now_e is None or now_e.status is not Status.RUNNING or now_e.compensating or now_e.current_step != index \
            or now_e.cancel_requested:
        now = op.now()  # due when written (no message on its way: the reconcile sends it again)
        released = claimed.model_copy(update={"status": BranchStatus.RETRY, "version": claimed.version + 1,
                                              "attempt_started_at": None, "next_wake_at": now, "updated_at": now})
        try:
            op.items.update_branch(released, claimed.version)  # no body ran: the lane is free again at once
        except BranchConflictError:
            pass
        if now_e is not None and now_e.cancel_requested:
            return _after_cancel(fan, now_e) or stale("the execution is being cancelled")
        return stale("the execution moved on while the branch was being claimed")
    step = op.step
    faults.point("worker.after_claim", execution_id=eid, step=index, attempt=claimed.attempt, branch=b)
    ctx = StepContext(execution_id=eid, workflow=e.workflow, step_index=index, step_name=step.name,
                      attempt=claimed.attempt, data=op.data, branch=b, item=None if items is None else items[b],
                      _tokens=op.callback_token)
    body = op.run_body(fan.spec.body(b), ctx, timeout)
    op.metric("BranchDuration", "Milliseconds", body.duration_ms)
    if body.ok:
        return _succeeded(fan, join, claimed, body.result)
    return _attempt_failed(fan, claimed, body)


def _succeeded(fan: FanOut, join: Join, claimed: Branch, result: Any) -> Outcome:
    op, b = fan.op, claimed.branch
    try:
        blob, _ = codec.roundtrip(result, "result")
        op.check_size(f"result of branch {b} of step {op.step.name!r}", blob)
    except (NonSerializableResultError, ResultTooLargeError) as exc:
        return _failed(fan, claimed, op.error(exc.code, f"branch {b}: {exc}"))
    now = op.now()
    done = claimed.model_copy(update={"status": BranchStatus.SUCCEEDED, "version": claimed.version + 1, "updated_at": now,
                                      "next_wake_at": None, "finished_at": now, "result_blob": blob, "error": None,
                                      "expires_at": item_ttl(op, now)})
    try:
        done = op.items.complete_branch(done, claimed.version)
    except BranchConflictError as lost:
        adopted = _adopted(fan, claimed, done, lost)
        if adopted is None:
            return Outcome("superseded", fan.eid, fan.index, str(lost))
        done, join = adopted
    op.metric("BranchesSucceeded", "Count", 1)
    faults.point("worker.after_record", execution_id=fan.eid, step=fan.index, branch=b)
    return after_completion(fan, join, done)


def _adopted(fan: FanOut, claimed: Branch, done: Branch, lost: BranchConflictError) -> tuple[Branch, Join] | None:
    """A redrive began a new generation while this attempt held its branch: the new generation left the
    branch to it (its lane waits for the attempt), so the success is the new generation's, counted on its
    join, instead of thrown away for the body to run again once the lease ran out. None when the branch
    moved meanwhile (reset, or completed by another delivery) or the join is not a newer generation's."""
    # DynamoDB's refusal names no item when only the join's condition failed: read the branch.
    current = lost.current or fan.op.items.get_branch(fan.index, claimed.branch)
    if not isinstance(current, Branch) or current.version != claimed.version or current.status is not BranchStatus.RUNNING:
        return None
    join = fan.op.items.get_join(fan.index)
    if join is None or join.generation <= claimed.generation:
        return None
    mine = done.model_copy(update={"generation": join.generation})
    try:
        mine = fan.op.items.complete_branch(mine, claimed.version)  # the store still checks the run and the version
    except BranchConflictError:
        return None
    return mine, join


def after_completion(fan: FanOut, join: Join, done: Branch) -> Outcome:
    """Launch the lane's next branch, then fan in if every branch is counted. Done again by any later
    delivery that finds the branch SUCCEEDED, and by the reconcile, so a crash in between loses nothing."""
    op = fan.op
    current = op.items.load_execution()
    if current is not None and current.cancel_requested:
        return _after_cancel(fan, current) or Outcome("branch_succeeded", fan.eid, fan.index,
                                                      f"branch {done.branch} (a cancel waits for the others)")
    if done.generation == join.generation:
        nxt, _ = fan.launch(done.branch + join.max_concurrency, join)
        if nxt is not None and nxt.status is BranchStatus.PENDING:
            # Sent again when a crash came between its launch and its message: a copy is stale at its claim.
            op.items.send_branch(nxt)
    counted = op.items.get_join(fan.index)
    if counted is None or counted.generation != join.generation or counted.done < counted.total:
        return Outcome("branch_succeeded", fan.eid, fan.index, f"branch {done.branch}")
    known = fan.read()
    if not isinstance(known, dict):
        return known
    if not all(b in known and known[b].status is BranchStatus.SUCCEEDED for b in range(join.total)):
        return Outcome("branch_succeeded", fan.eid, fan.index, f"branch {done.branch} (the count ran ahead)")
    outcome = Outcome("duplicate", fan.eid, fan.index, "the step already ended")
    for _ in range(_PARENT_RETRIES):
        outcome = fan.fan_in(known, counted)
        if outcome.kind == "chained":
            return op.resume()
        if outcome.kind not in ("conflict", "superseded"):
            return outcome
        # The execution moved on since this delivery read it: a reconcile changed its version (conflict), or,
        # for an attempt held through a redrive, the failure this delivery never saw wrote the step's record at
        # the version it read (superseded). Read it again: the fan-in is this delivery's to make.
        if not op.reload():
            return Outcome("duplicate", fan.eid, fan.index, "the step already ended")
        fan = FanOut(op)
    return outcome


def _after_cancel(fan: FanOut, current: Any) -> Outcome | None:
    """A cancel was requested while branches ran: when none is held by an attempt any more, it takes
    effect now (compensating the earlier steps, or CANCELLED). None while others still run."""
    op = fan.op
    if current.current_step != fan.index or current.compensating or current.status.is_terminal:
        return None
    known = fan.read()
    if not isinstance(known, dict) or running(known, op.now()):
        return None
    if not op.reload():
        return None
    return op.finish_cancel(undo_current=False)


def _attempt_failed(fan: FanOut, claimed: Branch, body: BodyOutcome) -> Outcome:
    op = fan.op
    policy = op.wf.policy_for(fan.index)
    b, attempt = claimed.branch, claimed.attempt
    message = f"branch {b}: {body.error_message or ''}"
    if not body.retryable or attempt >= policy.max_attempts:
        if body.retryable:
            message = f"{message} (attempt {attempt} of {policy.max_attempts})"
        return _failed(fan, claimed, op.error(body.error_code or "step_error", message, retryable=body.retryable,
                                              kind=body.error_type))
    now = op.now()
    retry_at = now + dt.timedelta(seconds=backoff_s(policy, attempt, seed=f"{fan.eid}:{fan.index}:{b}"))
    error = op.error(body.error_code or "step_error", message, retryable=True, kind=body.error_type)
    retrying = claimed.model_copy(update={"status": BranchStatus.RETRY, "version": claimed.version + 1, "updated_at": now,
                                          "next_wake_at": retry_at, "attempt_started_at": None, "error": error,
                                          "finished_at": now, "expires_at": item_ttl(op, now)})
    try:
        retrying = op.items.update_branch(retrying, claimed.version)
    except BranchConflictError as lost:
        return Outcome("superseded", fan.eid, fan.index, str(lost))
    op.metric("BranchesRetried", "Count", 1)
    current = op.items.load_execution()
    if current is not None and current.cancel_requested:
        return _after_cancel(fan, current) or Outcome("retry_scheduled", fan.eid, fan.index,
                                                      f"branch {b}: not retried, a cancel was requested")
    op.items.send_branch(retrying, retry_at)
    return Outcome("retry_scheduled", fan.eid, fan.index, f"branch {b} retries at {retry_at.isoformat()}")


def _failed(fan: FanOut, branch: Branch, error: ErrorInfo) -> Outcome:
    """The branch failed for good: so does the step (the other branches' attempts may finish; nothing
    after the step runs). The step's failure is a conditional commit: re-read and retried on a race."""
    op = fan.op
    now = op.now()
    failed = branch.model_copy(update={"status": BranchStatus.FAILED, "version": branch.version + 1,
                                       "next_wake_at": None, "updated_at": now,  # its attempt's start stays
                                       "finished_at": now, "expires_at": item_ttl(op, now),
                                       "error": error.model_copy(update={"message": truncate(error.message)})})
    try:
        failed = op.items.update_branch(failed, branch.version)
    except BranchConflictError as lost:
        return Outcome("superseded", fan.eid, fan.index, str(lost))
    op.metric("BranchesFailed", "Count", 1)
    outcome = Outcome("duplicate", fan.eid, fan.index, "the step already ended")
    for _ in range(_PARENT_RETRIES):
        if op.execution.cancel_requested:
            return _after_cancel(fan, op.execution) or Outcome("branch_failed", fan.eid, fan.index,
                                                               "a cancel waits for the other branches")
        join = op.joins.get(fan.index)
        outcome = op.fail(failed.error, None if join is None else join.started_at)
        if outcome.kind == "cancel_requested":  # a cancel landed while this branch ran: it waits for the others
            return _after_cancel(fan, op.execution) or Outcome("branch_failed", fan.eid, fan.index,
                                                               "a cancel waits for the other branches")
        if outcome.kind != "conflict":
            return outcome
        if not op.reload():
            return Outcome("duplicate", fan.eid, fan.index, "the step already ended")
        fan = FanOut(op)
    return outcome
