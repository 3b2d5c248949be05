"""Parallel and map steps: one step whose branches run as separate deliveries (fan-out), completing
once when every branch succeeded (fan-in).

- **Fan-out** (the step's own delivery, first time in a generation): the join item (``JOIN#<nnn>``:
  total, done, generation, window) is written, then the first ``max_concurrency`` branch items (each
  PENDING with a message lease), then the execution commits (``transitions.fanned_out``: unclaimed,
  leased for the reconcile period), then one message per PENDING branch is sent.
- **Lanes** keep ``max_concurrency`` (N): branch b runs in lane b % N, and only the completion of b
  launches b + N. Every launch is a conditional create (or a version-checked reset), so a lane holds
  one open branch however many deliveries, sweeps and reconciles race.
- **A branch delivery** (``process_branch``) claims its branch (version-checked, attempt counted,
  leased), runs the body, and records the outcome on the branch item only. A success is one atomic
  write that sets the branch SUCCEEDED and counts it on the join item, so it is recorded and counted
  once; then the lane's next branch is launched and the join is read: when every branch is counted,
  the delivery fans in. A final failure fails the step (``StepRun.fail``).
- **Reconcile**: when the step's lease runs out the sweeper re-drives the step, and its delivery
  reads every branch once (one Query of the branch partition): open branches whose lease or retry time
  passed are re-driven, missing launches are made, a fan-in that was missed happens, and the step is
  leased again. Liveness never depends on a branch message: lost, dead-lettered, or its worker killed.
- **Fan-in** reads every branch (one Query), writes the step's record (``kind="fanout"``, the results
  in branch order under the step's name) and advances through the engine's one advance, conditional on
  the execution's version: of two fan-ins only one moves on.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .. import codec, faults, transitions
from .._runner import BodyOutcome, run_body, truncate
from ..clock import monotonic_ms
from ..context import StepContext
from ..errors import BranchConflictError, NonSerializableResultError, ResultTooLargeError
from ..model import Branch, BranchStatus, ErrorInfo, Join, Status, StepMessage, StepRecord, StepStatus
from ..retries import backoff_s

if TYPE_CHECKING:
    from ..engine import Engine
    from ..outcome import Outcome
    from ..step_run import StepRun
    from ..model import ExecutionState

MAX_BRANCHES = 1000
"""Mirrors ``registry.MAX_BRANCHES`` (the registry imports this package, so it cannot be imported here)."""
_PARENT_RETRIES = 5


@dataclass(frozen=True)
class FanOutKind:
    fns: tuple[Callable[..., Any], ...]
    over: str | None = None
    """map: the context key holding the list; None: parallel (one branch per function)."""
    max_concurrency: int | None = None
    kind = "fanout"

    def shape(self) -> list[Any]:
        if self.over is not None:
            return ["map", self.over]
        return ["parallel", [getattr(fn, "__name__", "?") for fn in self.fns]]

    def describe(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": "map" if self.over is not None else "parallel",
                               "max_concurrency": self.max_concurrency}
        if self.over is not None:
            out["over"] = self.over
            out["branch"] = getattr(self.fns[0], "__name__", "?")
        else:
            out["branches"] = [getattr(fn, "__name__", "?") for fn in self.fns]
        return out

    def needs_invocation_time(self) -> bool:
        return False

    def run(self, run: StepRun) -> Outcome:
        return _FanOut(run, self).deliver()

    # -- what a branch runs ----------------------------------------------------------------------
    def items(self, data: dict[str, Any]) -> tuple[int, list[Any] | None] | tuple[None, tuple[str, str]]:
        """(branch count, the map's list) or (None, (error code, message)) when a map's input is unusable."""
        if self.over is None:
            return len(self.fns), None
        value = data.get(self.over)
        if not isinstance(value, list):
            what = "missing" if self.over not in data else f"a {type(value).__name__}"
            return None, ("invalid_map_input", f"map over {self.over!r}: the context value is {what}, not a list")
        if len(value) > MAX_BRANCHES:
            return None, ("too_many_items", f"map over {self.over!r}: {len(value)} items; at most {MAX_BRANCHES}")
        return len(value), value

    def window(self, total: int) -> int:
        return max(1, min(self.max_concurrency or total, total))

    def body(self, branch: int) -> Callable[..., Any]:
        return self.fns[0] if self.over is not None else self.fns[branch]


class _FanOut:
    """One delivery's work on a fan-out step: begin, reconcile, launch and fan in."""

    def __init__(self, run: StepRun, kind: FanOutKind):
        self.run, self.kind = run, kind
        self.engine, self.life = run.engine, run.life
        self.store = run.engine.store
        self.e = run.execution
        self.eid, self.step = self.e.execution_id, run.step
        self.index = self.step.index

    @property
    def lease_s(self) -> float:
        return self.life.lease_s(self.e.workflow, self.index)

    def _fail(self, code: str, message: str) -> Outcome:
        return self.run.fail(self.run._error(code, message))

    # -- the step's own delivery -------------------------------------------------------------------
    def deliver(self) -> Outcome:
        total, items = self.kind.items(self.run.data)
        if total is None:
            return self._fail(*items)
        if total == 0:
            return self.fan_in({}, Join(step_index=self.index, total=0, generation=self.e.version, max_concurrency=1,
                                        started_at=self.run.now()))
        join = self.store.get_join(self.eid, self.index) if self.e.attempt >= 1 else None
        if join is None or join.total != total:
            return self.begin(total)
        return self.reconcile(join)

    def of_run(self, b: Branch) -> bool:
        """Written by this run (not by an earlier one under the same id, waiting for its TTL)."""
        return b.updated_at >= self.e.created_at

    def _read(self) -> dict[int, Branch] | Outcome:
        """Every branch of this run, by number (one Query of the branch partition)."""
        known: dict[int, Branch] = {}
        for b in self.store.branches(self.eid, self.index):
            if not isinstance(b, Branch):
                return self._fail("corrupt_state", f"branch item {b.sort_key} is unreadable: {b.detail}")
            if self.of_run(b):
                known[b.branch] = b
        return known

    def begin(self, total: int) -> Outcome:
        """A new generation (the first time, or after a redrive): branches that succeeded are kept."""
        now, generation, window = self.run.now(), self.e.version, self.kind.window(total)
        known = self._read()
        if not isinstance(known, dict):
            return known
        done = sum(1 for b in known.values() if b.status is BranchStatus.SUCCEEDED and b.branch < total)
        join = Join(step_index=self.index, total=total, done=done, generation=generation, max_concurrency=window,
                    started_at=now, expires_at=self.life.history_expiry(now))
        if not self.store.put_join(self.eid, join):
            join = self.store.get_join(self.eid, self.index) or join  # a racing copy began first: same launches
        if done == total:
            return self.fan_in(known, join)
        launched = [self.launch(lane, join, known)[0] for lane in range(window)]
        new = transitions.fanned_out(self.e, now, self.lease_s)
        outcome = self.engine.commit(new, self.e)
        if outcome is not None:
            return outcome  # a copy of this delivery began first; it sends the messages
        self.run.execution = self.e = new
        faults.point("worker.after_checkpoint", execution_id=self.eid, step=self.index, fanout=True)
        for b in launched:
            if b is not None and b.status is BranchStatus.PENDING:
                send_branch(self.life, self.e, b)
        self.run.log("fanned out", branches=total, max_concurrency=window, already_done=done)
        from ..outcome import Outcome
        return Outcome("fanned_out", self.eid, self.index, f"{total} branches, {window} at a time")

    def reconcile(self, join: Join) -> Outcome:
        """The step's lease ran out: re-drive what stalled, launch what is missing, fan in if it was missed."""
        now = self.run.now()
        known = self._read()
        if not isinstance(known, dict):
            return known
        if all(b in known and known[b].status is BranchStatus.SUCCEEDED for b in range(join.total)):
            return self.fan_in(known, join)
        failed = [b for b in known.values() if b.generation == join.generation and b.status is BranchStatus.FAILED]
        if failed:  # the branch's delivery died between failing it and failing the step
            return self.run.fail(failed[0].error or self.run._error("step_error", f"branch {failed[0].branch} failed"))
        redriven = 0
        for b in list(known.values()):
            if (b.generation == join.generation and b.status.is_open and b.next_wake_at is not None
                    and b.next_wake_at <= now):
                fresh = b.model_copy(update={"status": BranchStatus.PENDING, "version": b.version + 1, "updated_at": now,
                                             "next_wake_at": now + dt.timedelta(seconds=self.lease_s),
                                             "attempt_started_at": None})
                try:
                    self.store.update_branch(self.eid, fresh, b.version)
                except BranchConflictError:
                    continue  # it moved meanwhile: someone is on it
                known[b.branch] = fresh
                send_branch(self.life, self.e, fresh)
                redriven += 1
        for lane in range(join.max_concurrency):
            b, wrote = self.launch(lane, join, known)
            if wrote and b is not None:
                send_branch(self.life, self.e, b)
                redriven += 1
        new = transitions.fanned_out(self.e, now, self.lease_s)
        outcome = self.engine.commit(new, self.e)
        if outcome is not None:
            return outcome
        self.run.execution = self.e = new
        self.run.metric("BranchesRedriven", "Count", redriven)
        self.run.log("fan-out reconciled", branches_redriven=redriven)
        from ..outcome import Outcome
        return Outcome("reconciled", self.eid, self.index, f"{redriven} branches re-driven")

    def launch(self, start: int, join: Join, known: dict[int, Branch] | None = None) -> tuple[Branch | None, bool]:
        """Make sure the lane of ``start`` has its open branch in this generation: walk past branches
        that already succeeded, create the first missing one or reset one left by an older generation.
        Returns that branch (None when the lane is finished) and whether this call wrote it."""
        b, now = start, self.run.now()
        for _ in range(3 * MAX_BRANCHES):  # bounded: each turn moves on or re-reads after a lost race
            if b >= join.total:
                return None, False
            current = None if known is None else known.get(b)
            if current is None:
                new = Branch(step_index=self.index, branch=b, status=BranchStatus.PENDING, version=1, updated_at=now,
                             generation=join.generation, next_wake_at=now + dt.timedelta(seconds=self.lease_s),
                             expires_at=self.life.history_expiry(now))
                try:
                    self.store.create_branch(self.eid, new)
                    return new, True
                except BranchConflictError as lost:
                    if lost.current is None:
                        return None, False  # there but unreadable: the reconcile fails the step on it
                    current = lost.current
            if current.status is BranchStatus.SUCCEEDED and self.of_run(current):
                b += join.max_concurrency
                continue
            if current.generation == join.generation and self.of_run(current):
                return current, False  # launched already (this lane's open branch)
            if current.generation > join.generation and self.of_run(current):
                return None, False  # a newer fan-out of this step owns it: this writer read an older state
            reset = Branch(step_index=self.index, branch=b, status=BranchStatus.PENDING, version=current.version + 1,
                           updated_at=now,
                           generation=join.generation, next_wake_at=now + dt.timedelta(seconds=self.lease_s),
                           expires_at=self.life.history_expiry(now))
            try:
                self.store.update_branch(self.eid, reset, current.version)
                return reset, True
            except BranchConflictError as lost:
                known = {**(known or {}), b: lost.current} if lost.current is not None else None
        return None, False

    # -- fan-in --------------------------------------------------------------------------------------
    def fan_in(self, known: dict[int, Branch], join: Join) -> Outcome:
        run, step = self.run, self.step
        try:
            results = [codec.decode(known[b].result_blob) for b in range(join.total)]
        except Exception as exc:
            return self._fail("corrupt_state", f"a branch result is unreadable: {exc}")
        try:
            blob, decoded = codec.roundtrip({step.name: results}, "result")
            self.engine._check_size(f"result of step {step.name!r} ({join.total} branch results)", blob)
            bound = run.context_bound + len(blob.encode("utf-8"))
            if bound > run.settings.item_budget_bytes:
                self.engine._check_size("context after merging this result",
                                        codec.encode({**run.data, **decoded}, "context"))
        except (NonSerializableResultError, ResultTooLargeError) as exc:
            return self._fail(exc.code, str(exc))
        now = run.now()
        record = StepRecord(step_index=step.index, name=step.name, status=StepStatus.SUCCEEDED, attempts=join.total,
                            version=self.e.version, started_at=join.started_at, finished_at=now, result_blob=blob,
                            expires_at=self.life.history_expiry(now), kind="fanout")
        run.metric("FanIns", "Count", 1)
        run.log("fanned in", branches=join.total)
        return run.complete_step(record, decoded)


def send_branch(life: Any, e: Any, b: Branch, wake_at: dt.datetime | None = None) -> None:
    """The message for branch ``b`` (delayed until ``wake_at`` when SQS can; a longer wait is the reconcile's)."""
    delay = 0.0 if wake_at is None else (wake_at - life.clock.now()).total_seconds()
    if delay > life.settings.max_queue_delay_s:
        return
    life.queue.send(StepMessage(execution_id=e.execution_id, step=b.step_index, version=e.version, branch=b.branch,
                                branch_version=b.version), delay_s=max(0, math.ceil(delay)))


# -- a branch's delivery ---------------------------------------------------------------------------------
def process_branch(engine: Engine, state: ExecutionState, message: StepMessage,
                   remaining_ms: Callable[[], int] | None = None, yield_after_ms: float | None = None) -> Outcome:
    """Run one branch of a parallel or map step (``message.branch``), from a loaded live execution.

    Branches never check the execution's version (the fan-out's reconciles change it), only that the
    execution is live at this step and not compensating, and that the branch is at the message's
    ``branch_version``. Raises only InsufficientTimeError, before any write, to ask for redelivery."""
    from ..outcome import Outcome
    from ..step_run import StepRun

    e, eid, index, b = state.execution, message.execution_id, message.step, message.branch
    assert b is not None

    def stale(why: str) -> Outcome:
        return Outcome("stale", eid, index, f"branch {b}: {why}")

    if e.compensating or e.current_step != index or e.status is not Status.RUNNING:
        return stale(f"the execution is at step {e.current_step} ({e.status.value})")
    wf, problem = engine._definition(e)
    if problem is not None or index >= len(wf.steps) or not isinstance(wf.steps[index].kind, FanOutKind):
        return stale("not a fan-out step of this definition")
    kind: FanOutKind = wf.steps[index].kind
    join = state.joins.get(index)
    if join is None or b >= join.total:
        return stale("no such branch in this fan-out")
    run = StepRun(engine, wf, e, state.records, state.input_blob, remaining_ms, yield_after_ms, events=state.events)
    if run.data is None:
        return stale("unreadable context (the step's own delivery fails it)")
    branch = engine.store.get_branch(eid, index, b)
    if not isinstance(branch, Branch):
        return stale("missing or unreadable")
    fan = _FanOut(run, kind)
    if not fan.of_run(branch):
        return stale("written by an earlier run under this id")
    if e.attempt < 1:  # redriven, and the new generation has not begun: it decides what runs again
        return stale("the fan-out has not begun in this generation")
    if branch.status is BranchStatus.SUCCEEDED:
        return _after_completion(fan, join, branch)  # a crash may have come between its completion and this
    if branch.version != message.branch_version or branch.status in (BranchStatus.RUNNING, BranchStatus.FAILED):
        return stale(f"it is at v{branch.version} {branch.status.value}")
    if branch.generation != join.generation:
        # Redriven since: an older generation's message must not spend fresh attempts or fail the step again.
        return stale(f"of generation {branch.generation}, not the fan-out's current one")
    now = run.now()
    if branch.status is BranchStatus.RETRY and branch.next_wake_at is not None:
        wait_s = (branch.next_wake_at - now).total_seconds()
        if wait_s > engine.settings.early_tolerance_s:
            send_branch(engine.life, e, branch, branch.next_wake_at)
            return Outcome("early", eid, index, f"branch {b} due in {wait_s:.1f} s")
    total, items = kind.items(run.data)
    if total is None or total != join.total:
        return stale("the map's input does not match the fan-out (the step's own delivery fails it)")
    timeout = run.timeout_s
    run._check_time(timeout)  # before any write: a claimed-then-abandoned branch would hold its lane
    policy = wf.policy_for(index)
    if branch.attempt >= policy.max_attempts:
        return _branch_failed(fan, branch, run._error("attempts_exhausted", (
            f"branch {b}: started {branch.attempt} times without finishing {policy.max_attempts} attempts cleanly: "
            "earlier attempts crashed or ran past the timeout")))
    deadline = run._deadline()
    claimed = branch.model_copy(update={
        "status": BranchStatus.RUNNING, "version": branch.version + 1, "attempt": branch.attempt + 1, "updated_at": now,
        "attempt_started_at": now, "next_wake_at": transitions.claim_expiry(now, timeout, engine.life.margin_s, deadline)})
    try:
        engine.store.update_branch(eid, claimed, branch.version)
    except BranchConflictError:
        return stale("another delivery claimed it first")
    # A branch's claim is not conditioned on the execution item (its version moves with every reconcile),
    # so look once more: a cancel or a failure that landed since this delivery's read must not start a
    # new body. One that lands after this read finds the body in flight, which may finish.
    now_e = engine.store.load(eid)
    if now_e is None or now_e.status is not Status.RUNNING or now_e.compensating or now_e.current_step != index:
        return stale("the execution moved on while the branch was being claimed")
    step = wf.steps[index]
    faults.point("worker.after_claim", execution_id=eid, step=index, attempt=claimed.attempt, branch=b)
    ctx = StepContext(execution_id=eid, workflow=e.workflow, step_index=index, step_name=step.name,
                      attempt=claimed.attempt, data=run.data, branch=b, item=None if items is None else items[b],
                      _tokens=run.callback_token)
    body = run_body(kind.body(b), ctx, timeout, monotonic_ms)
    run.metric("BranchDuration", "Milliseconds", body.duration_ms)
    if body.ok:
        return _branch_succeeded(fan, join, claimed, body.result)
    return _attempt_failed(fan, claimed, body)


def _branch_succeeded(fan: _FanOut, join: Join, claimed: Branch, result: Any) -> Outcome:
    from ..outcome import Outcome

    engine, b = fan.engine, claimed.branch
    try:
        blob, _ = codec.roundtrip(result, "result")
        engine._check_size(f"result of branch {b} of step {fan.step.name!r}", blob)
    except (NonSerializableResultError, ResultTooLargeError) as exc:
        return _branch_failed(fan, claimed, fan.run._error(exc.code, f"branch {b}: {exc}"))
    now = fan.run.now()
    done = claimed.model_copy(update={"status": BranchStatus.SUCCEEDED, "version": claimed.version + 1, "updated_at": now,
                                      "next_wake_at": None, "finished_at": now, "result_blob": blob, "error": None})
    try:
        engine.store.complete_branch(fan.eid, done, claimed.version)
    except BranchConflictError as lost:
        return Outcome("superseded", fan.eid, fan.index, str(lost))
    fan.run.metric("BranchesSucceeded", "Count", 1)
    faults.point("worker.after_record", execution_id=fan.eid, step=fan.index, branch=b)
    return _after_completion(fan, join, done)


def _after_completion(fan: _FanOut, join: Join, done: Branch) -> Outcome:
    """Launch the lane's next branch, then fan in if every branch is counted. Done again by any later
    delivery that finds the branch SUCCEEDED, and by the reconcile, so a crash in between loses nothing."""
    from ..outcome import Outcome

    if done.generation == join.generation:
        nxt, _ = fan.launch(done.branch + join.max_concurrency, join)
        if nxt is not None and nxt.status is BranchStatus.PENDING:
            # Sent again when a crash came between its launch and its message: a copy is stale at its claim.
            send_branch(fan.life, fan.e, nxt)
    counted = fan.store.get_join(fan.eid, fan.index)
    if counted is None or counted.generation != join.generation or counted.done < counted.total:
        return Outcome("branch_succeeded", fan.eid, fan.index, f"branch {done.branch}")
    known = fan._read()
    if not isinstance(known, dict):
        return known
    if not all(b in known and known[b].status is BranchStatus.SUCCEEDED for b in range(join.total)):
        return Outcome("branch_succeeded", fan.eid, fan.index, f"branch {done.branch} (the count ran ahead)")
    for _ in range(_PARENT_RETRIES):
        outcome = fan.fan_in(known, counted)
        if outcome.kind == "chained":
            return fan.run.loop()
        if outcome.kind != "conflict":
            return outcome
        # A reconcile moved the execution's version since this delivery read it: read it again.
        fresh = _reread(fan)
        if fresh is None:
            return Outcome("duplicate", fan.eid, fan.index, "the step already ended")
        fan = fresh
    return outcome


def _reread(fan: _FanOut) -> _FanOut | None:
    """The same fan-out on a fresh read of the execution; None when it is no longer at this step."""
    from ..step_run import StepRun

    state = fan.store.load_state(fan.eid)
    if state is None:
        return None
    e = state.execution
    if e.status.is_terminal or e.compensating or e.current_step != fan.index:
        return None
    run = fan.run
    return _FanOut(StepRun(fan.engine, run.wf, e, state.records, state.input_blob, run.remaining_ms,
                           run.yield_after_ms, events=state.events), fan.kind)


def _attempt_failed(fan: _FanOut, claimed: Branch, body: BodyOutcome) -> Outcome:
    from ..outcome import Outcome

    policy = fan.run.wf.policy_for(fan.index)
    b, attempt = claimed.branch, claimed.attempt
    message = f"branch {b}: {body.error_message or ''}"
    if not body.retryable or attempt >= policy.max_attempts:
        if body.retryable:
            message = f"{message} (attempt {attempt} of {policy.max_attempts})"
        return _branch_failed(fan, claimed, fan.run._error(body.error_code or "step_error", message,
                                                           retryable=body.retryable, kind=body.error_type))
    now = fan.run.now()
    retry_at = now + dt.timedelta(seconds=backoff_s(policy, attempt, seed=f"{fan.eid}:{fan.index}:{b}"))
    error = fan.run._error(body.error_code or "step_error", message, retryable=True, kind=body.error_type)
    retrying = claimed.model_copy(update={"status": BranchStatus.RETRY, "version": claimed.version + 1, "updated_at": now,
                                          "next_wake_at": retry_at, "attempt_started_at": None, "error": error,
                                          "finished_at": now})
    try:
        fan.store.update_branch(fan.eid, retrying, claimed.version)
    except BranchConflictError as lost:
        return Outcome("superseded", fan.eid, fan.index, str(lost))
    fan.run.metric("BranchesRetried", "Count", 1)
    send_branch(fan.life, fan.e, retrying, retry_at)
    return Outcome("retry_scheduled", fan.eid, fan.index, f"branch {b} retries at {retry_at.isoformat()}")


def _branch_failed(fan: _FanOut, branch: Branch, error: ErrorInfo) -> Outcome:
    """The branch failed for good: so does the step (the other branches' attempts may finish; nothing
    after the step runs). The step's failure is a conditional commit: re-read and retried on a race."""
    from ..outcome import Outcome

    now = fan.run.now()
    failed = branch.model_copy(update={"status": BranchStatus.FAILED, "version": branch.version + 1,
                                       "next_wake_at": None, "attempt_started_at": None, "updated_at": now,
                                       "finished_at": now, "error": error.model_copy(
                                           update={"message": truncate(error.message)})})
    try:
        fan.store.update_branch(fan.eid, failed, branch.version)
    except BranchConflictError as lost:
        return Outcome("superseded", fan.eid, fan.index, str(lost))
    fan.run.metric("BranchesFailed", "Count", 1)
    for _ in range(_PARENT_RETRIES):
        outcome = fan.run.fail(failed.error)
        if outcome.kind != "conflict":
            return outcome
        fresh = _reread(fan)
        if fresh is None:
            return Outcome("duplicate", fan.eid, fan.index, "the step already ended")
        fan = fresh
    return outcome
