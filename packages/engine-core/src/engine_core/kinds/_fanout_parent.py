"""The fan-out step's own deliveries (the parallel and map kind, ``fanout.py``): begin a generation,
reconcile it when its lease runs out, launch lanes, and fan in.

- **Fan-out** (the step's own delivery, first time in a generation): the join item (``JOIN#<nnn>``:
  total, done, generation, window) is written, then the first ``max_concurrency`` branch items (each
  PENDING with a message lease), then the execution commits (``transitions.fanned_out``: unclaimed,
  leased for the reconcile period), then one message per PENDING branch is sent.
- **Lanes** keep ``max_concurrency`` (N): branch b runs in lane b % N, and only the completion of b
  launches b + N. Every launch is a conditional create (or a version-checked reset), so a lane holds one
  open branch however many deliveries, sweeps and reconciles race. A branch of an older generation (a
  redrive began a new one) that an attempt still holds keeps its lane until its lease has run out: a
  body never runs twice at once.
- **Reconcile**: when the step's lease runs out the sweeper re-drives the step, and its delivery reads
  every branch once (one Query of the branch partition): open branches whose lease or retry time passed
  are re-driven, missing launches are made, a fan-in that was missed happens, and the step is leased
  again. Liveness never depends on a branch message: lost, dead-lettered, or its worker killed.
- **Fan-in** reads every branch (one Query), writes the step's record (``kind="fanout"``, the results
  in branch order under the step's name) and advances through the engine's one advance, conditional on
  the execution's version: of two fan-ins only one moves on.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from .. import codec, faults, transitions
from ..errors import BranchConflictError, NonSerializableResultError, ResultTooLargeError
from ..model import Branch, BranchStatus, Join, StepRecord, StepStatus
from ..outcome import Outcome
from ..protocol import StepOps
from ..steps import MAX_BRANCHES


def of_run(b: Branch, e: Any) -> bool:
    """Written by this run of the execution (not by an earlier one under the same id)."""
    return b.run == e.run if b.run is not None else b.updated_at >= e.created_at


def item_ttl(op: StepOps, now: dt.datetime) -> dt.datetime:
    """The TTL of a join or branch item written now. Those writes are not conditioned on the execution (its
    version moves with every reconcile), so one may land after a re-stamp of every item that this delivery did
    not read: the sweeper's re-drive of the step re-stamps to its new lease's horizon, and that lease doubles
    with each re-send of a message nobody claimed (``transitions.redriven``). At most one re-drive falls within
    a delivery (the next is due a lease later), so the item carries at least the horizon of the re-drive that
    could come next after the execution this delivery read, and no less than any item written now."""
    e = op.execution
    lease = op.lease_s(op.step.index) * 2 ** min(e.resends, op.settings.max_resend_doublings)
    return max(op.item_expiry(now), op.stamp_horizon(now + dt.timedelta(seconds=lease)))


def running(known: dict[int, Branch], now: dt.datetime) -> list[Branch]:
    """Branches an attempt holds inside its lease: their bodies may be running now."""
    return [b for b in known.values()
            if b.status is BranchStatus.RUNNING and b.next_wake_at is not None and b.next_wake_at > now]


class FanOut:
    """One delivery's work on a fan-out step: begin, reconcile, launch and fan in."""

    def __init__(self, op: StepOps):
        self.op = op
        self.spec = op.step.kind
        self.index = op.step.index

    @property
    def e(self) -> Any:
        return self.op.execution

    @property
    def eid(self) -> str:
        return self.op.execution.execution_id

    @property
    def lease_s(self) -> float:
        return self.op.lease_s(self.index)

    def fail(self, code: str, message: str) -> Outcome:
        return self.op.fail(self.op.error(code, message))

    # -- the step's own delivery -------------------------------------------------------------------
    def deliver(self) -> Outcome:
        total, items = self.spec.items(self.op.data or {})
        if total is None:
            return self.fail(*items)
        if total == 0:
            return self.fan_in({}, Join(step_index=self.index, total=0, generation=self.e.version, max_concurrency=1,
                                        started_at=self.op.now(), run=self.e.run))
        join = self.op.joins.get(self.index) if self.e.attempt >= 1 else None
        if join is None or join.total != total or (join.run is not None and join.run != self.e.run):
            return self.begin(total)
        return self.reconcile(join)

    def read(self) -> dict[int, Branch] | Outcome:
        """Every branch of this run, by number (one Query of the branch partition)."""
        known: dict[int, Branch] = {}
        for b in self.op.items.branches(self.index):
            if not isinstance(b, Branch):
                return self.fail("corrupt_state", f"branch item {b.sort_key} is unreadable: {b.detail}")
            if of_run(b, self.e):
                known[b.branch] = b
        return known

    def begin(self, total: int) -> Outcome:
        """A new generation (the first time, or after a redrive): branches that succeeded are kept."""
        op = self.op
        now, generation, window = op.now(), self.e.version, self.spec.window(total)
        known = self.read()
        if not isinstance(known, dict):
            return known
        done = sum(1 for b in known.values() if b.status is BranchStatus.SUCCEEDED and b.branch < total)
        if done < total and (late := op.branch_room(op.timeout_s)) is not None:  # what is left to run never could
            return op.fail(late)
        join = Join(step_index=self.index, total=total, done=done, generation=generation, max_concurrency=window,
                    started_at=now, expires_at=item_ttl(op, now), run=self.e.run)
        if not op.items.put_join(join):
            join = op.items.get_join(self.index) or join  # a racing copy began first: same launches
        if done == total:
            return self.fan_in(known, join)
        launched = [self.launch(lane, join, known)[0] for lane in range(window)]
        outcome = op.commit(transitions.fanned_out(self.e, now, self.lease_s))
        if outcome is not None:
            return outcome  # a copy of this delivery began first; it sends the messages
        faults.point("worker.after_checkpoint", execution_id=self.eid, step=self.index, fanout=True)
        for b in launched:
            if b is not None and b.status is BranchStatus.PENDING:
                op.items.send_branch(b)
        op.log("fanned out", branches=total, max_concurrency=window, already_done=done)
        return Outcome("fanned_out", self.eid, self.index, f"{total} branches, {window} at a time")

    def reconcile(self, join: Join) -> Outcome:
        """The step's lease ran out: re-drive what stalled, launch what is missing, fan in if it was missed."""
        op = self.op
        now = op.now()
        known = self.read()
        if not isinstance(known, dict):
            return known
        if all(b in known and known[b].status is BranchStatus.SUCCEEDED for b in range(join.total)):
            return self.fan_in(known, join)
        failed = [b for b in known.values() if b.generation == join.generation and b.status is BranchStatus.FAILED]
        if failed:  # the branch's delivery died between failing it and failing the step
            return op.fail(failed[0].error or op.error("step_error", f"branch {failed[0].branch} failed"))
        if (late := op.branch_room(op.timeout_s)) is not None:  # what is left to run never could
            return op.fail(late)
        redriven = queued = 0
        for b in list(known.values()):
            if (b.generation == join.generation and b.status.is_open and b.next_wake_at is not None
                    and b.next_wake_at <= now):
                if self._message_still_queued(b):
                    queued += 1  # behind a queue backlog: another copy would only be stale
                    continue
                fresh = b.model_copy(update={"status": BranchStatus.PENDING, "version": b.version + 1, "updated_at": now,
                                             "next_wake_at": now + dt.timedelta(seconds=self.lease_s),
                                             "attempt_started_at": None, "expires_at": item_ttl(op, now)})
                try:
                    op.items.update_branch(fresh, b.version)
                except BranchConflictError:
                    continue  # it moved meanwhile: someone is on it
                known[b.branch] = fresh
                op.items.send_branch(fresh)
                redriven += 1
        for lane in range(join.max_concurrency):
            b, wrote = self.launch(lane, join, known)
            if wrote and b is not None:
                op.items.send_branch(b)
                redriven += 1
        outcome = op.commit(transitions.fanned_out(self.e, now, self.lease_s))
        if outcome is not None:
            return outcome
        op.metric("BranchesRedriven", "Count", redriven)
        op.log("fan-out reconciled", branches_redriven=redriven, branches_behind_backlog=queued)
        return Outcome("reconciled", self.eid, self.index, f"{redriven} branches re-driven"
                       + (f", {queued} left behind a queue backlog" if queued else ""))

    def _message_still_queued(self, b: Branch) -> bool:
        """A branch whose message was sent and not claimed while the workers' backlog mark shows they have not
        reached it yet (``backlog.still_queued``): PENDING, its message visible since ``updated_at``; or waiting
        for its retry, its message sent to become visible at the retry time (``next_wake_at`` after
        ``updated_at``). A branch released without a body (RETRY due at ``updated_at``) has no message on its
        way, and is sent again."""
        if b.status is BranchStatus.PENDING:
            return self.op.items.message_still_queued(b.updated_at)
        if b.status is BranchStatus.RETRY and b.next_wake_at is not None and b.next_wake_at > b.updated_at:
            return self.op.items.message_still_queued(b.next_wake_at)
        return False

    def launch(self, start: int, join: Join, known: dict[int, Branch] | None = None) -> tuple[Branch | None, bool]:
        """Make sure the lane of ``start`` has its open branch in this generation: walk past branches
        that already succeeded, create the first missing one or reset one left by an older generation
        (once no attempt holds it). Returns that branch (None when the lane is finished) and whether this
        call wrote it."""
        op, b, now = self.op, start, self.op.now()
        for _ in range(3 * MAX_BRANCHES):  # bounded: each turn moves on or re-reads after a lost race
            if b >= join.total:
                return None, False
            current = None if known is None else known.get(b)
            fresh = Branch(step_index=self.index, branch=b, status=BranchStatus.PENDING, version=1, updated_at=now,
                           generation=join.generation, next_wake_at=now + dt.timedelta(seconds=self.lease_s),
                           expires_at=item_ttl(op, now), run=self.e.run)
            if current is None:
                try:
                    op.items.create_branch(fresh)
                    return fresh, True
                except BranchConflictError as lost:
                    if lost.current is None:
                        return None, False  # there but unreadable: the reconcile fails the step on it
                    current = lost.current
            mine = of_run(current, self.e)
            if current.status is BranchStatus.SUCCEEDED and mine:
                b += join.max_concurrency
                continue
            if mine and current.generation == join.generation:
                return current, False  # launched already (this lane's open branch)
            if mine and current.generation > join.generation:
                return None, False  # a newer fan-out of this step owns it: this writer read an older state
            if mine and running({b: current}, now):
                # An attempt of an older generation (before a redrive) holds it: its body may be running.
                # The lane waits for that lease; the reconcile resets the branch after it.
                return current, False
            # A reset keeps what the branch's earlier attempts spent (the fan-in adds it to the execution's).
            reset = fresh.model_copy(update={"version": current.version + 1, "ledger": current.ledger}) if mine else fresh
            try:
                if mine:
                    op.items.update_branch(reset, current.version)
                else:
                    op.items.create_branch(reset)  # an earlier run's item: replaced
                return reset, True
            except BranchConflictError as lost:
                known = {**(known or {}), b: lost.current} if lost.current is not None else None
        return None, False

    # -- fan-in --------------------------------------------------------------------------------------
    def fan_in(self, known: dict[int, Branch], join: Join) -> Outcome:
        op, step = self.op, self.op.step
        try:
            results = [codec.decode(known[b].result_blob) for b in range(join.total)]
        except Exception as exc:
            return self.fail("corrupt_state", f"a branch result is unreadable: {exc}")
        try:
            blob, merged, bound = op.merge({step.name: results},
                                           f"result of step {step.name!r} ({join.total} branch results)")
        except (NonSerializableResultError, ResultTooLargeError) as exc:
            return self.fail(exc.code, str(exc))
        now = op.now()
        # A redrive's generation began later than the branches it kept: the step began with the first of them.
        began = min([join.started_at, *(b.attempt_started_at for b in known.values() if b.attempt_started_at)])
        record = StepRecord(step_index=step.index, name=step.name, status=StepStatus.SUCCEEDED, attempts=join.total,
                            version=self.e.version, started_at=began, finished_at=now, result_blob=blob,
                            expires_at=op.item_expiry(now), kind="fanout", run=self.e.run)
        op.metric("FanIns", "Count", 1)
        op.log("fanned in", branches=join.total)
        op.items.include_costs(known[b] for b in range(join.total))
        return op.settle(record, merged, bound)
