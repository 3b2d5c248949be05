"""The composition simulation's invariants (issues 12 and 19), checked after every seed, for each run of
each execution id on its own, from what really happened: the store proxy's record of every successful
commit (the execution item as stored before and after), history write, branch / join / event write, the
bodies' journal, and what the store held of the run (``composition_runs.RunView``). Nothing is accepted
because the engine returned it. The checks made after every operation (a due-index key for every live
execution, a WAITING one keyed at its timeout; no item of a live run expired) are in ``composition.py`` and
``composition_lifecycle.py``; those made as things happen (a join counting a completion twice, an event
stored twice, a wait timing out over a kept event or taking another run's, a lane over its limit, two
bodies of one step at once, a body seeing another run's data) in ``composition_observe.py``.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any

from engine_core import codec
from engine_core.engine import rebuild_context
from engine_core.model import BranchStatus, StepStatus

from .composition_config import TERMINAL
from .composition_workflows import branch_result, event_data, task_result

if TYPE_CHECKING:
    from .composition import CompositionSim
    from .composition_runs import RunInfo, RunView
    from .composition_workflows import CWorkflow


def check_composition(sim: CompositionSim) -> None:
    for info, view in sim.runs.views(sim.inner):
        if view is None:
            sim.violation(f"{info.execution_id[:8]}: nothing was kept of its run {info.run} (the simulation lost it)")
            continue
        Checker(sim, info, view, sim.all_specs[info.fingerprint]).run()
    if sim.live():
        sim.violation(f"executions {[e[:8] for e in sim.live()]} still live at the end")
    for m in sorted(sim.queue.messages):
        sim.violation(f"message #{m} still queued after the drain")


class Checker:
    """The invariants of one run: only its own commits, writes, bodies and items count."""

    def __init__(self, sim: CompositionSim, info: RunInfo, view: RunView, wf: CWorkflow):
        self.sim, self.info, self.view, self.wf = sim, info, view, wf
        self.eid, self.run_id = info.execution_id, info.run
        runs = sim.runs.runs[self.eid]
        self.short = self.eid[:8] if len(runs) == 1 else f"{self.eid[:8]} run {runs.index(info) + 1}"
        self.commits = [c for c in sim.commits.get(self.eid, []) if c.after.get("created_at") == self.run_id]
        self.writes = [w for w in sim.writes.get(self.eid, []) if w.run == self.run_id]
        self.bodies = [b for b in sim.journal if b.execution_id == self.eid and b.run == self.run_id]
        self.final = view.final
        self.records = view.records
        goes_on = sim.goes_on_here(info.fingerprint, self.eid, self.run_id)
        self.gone = None if goes_on else sim.undeployed.get(info.fingerprint)
        """When a redeploy replaced this run's definition (a sequence number), if it did with one it cannot go
        on under (a same-version redeploy that keeps every step of its list where it stood is one it can)."""
        e = self.final
        if self.gone is None and e is not None and not sim.deployed(info.fingerprint) and e.compensating \
                and e.status.value == "FAILED" and e.error is not None and e.error.code == "workflow_definition_mismatch":
            # Even that one cannot carry an undo: while compensating, a changed list cannot say what to undo
            # (DESIGN.md, versions), so it ended FAILED still compensating, for a redrive once it is deployed.
            self.gone = sim.undeployed.get(info.fingerprint)

    def v(self, text: str) -> None:
        self.sim.violation(f"{self.short} ({self.wf.name}): {text}")

    def run(self) -> None:
        self.versions()
        self.advances()
        self.branches()
        self.events()
        self.compensation()
        self.outcome()
        self.ledger()
        if self.wf.code:  # what code-first runs reached (test_sim_composition.py requires each)
            e = self.final
            self.sim.stat(f"code.ending.{e.status.value}" + (".compensated" if e.compensated else ""))
            if any(c.after.get("redrives") for c in self.commits):
                self.sim.stat("code.redriven")
            if any(b.kind == "undo" for b in self.bodies):
                self.sim.stat("code.undo_ran")

    def ledger(self) -> None:
        """The cost ledger never claims more than the deliveries did: at most their store calls (plus the
        finalize an ending counts in advance, which a crash may leave to the sweeper) and their messages.
        A fan-in that added its branches' ledgers twice, or a branch's carried twice, would exceed them."""
        led = self.final.ledger
        if led is None:
            return
        calls, messages = self.sim.delivered_calls[self.eid], self.sim.delivered_messages[self.eid]
        if led.requests > calls + 1 or led.messages > messages:
            self.v(f"its ledger claims {led.requests} requests and {led.messages} messages; the deliveries of "
                   f"its id made {calls} store calls from {messages} messages")
        self.sim.stat("ledger.checked" + (".fanout" if any(s.kind in ("parallel", "map") for s in self.wf.steps)
                                          else ""))

    # -- shared ------------------------------------------------------------------------------------------
    def versions(self) -> None:
        """Every commit goes from v to v+1 as stored, and none twice from one v (the guard under everything)."""
        seen = set()
        for c in self.commits:
            if c.before.get("version") is not None and c.after.get("version") != c.before.get("version") + 1:
                self.v(f"commit by op {c.op_id} moved v{c.before.get('version')} -> v{c.after.get('version')}")
            if c.expected_version in seen:
                self.v(f"two successful commits from v{c.expected_version}")
            seen.add(c.expected_version)
            redrive = (c.before.get("status") == "FAILED" and c.op_kind == "redrive"
                       and c.after.get("redrives") == (c.before.get("redrives") or 0) + 1)
            if c.before.get("status") in TERMINAL and not redrive:
                self.v(f"commit by op {c.op_id} changed an ended execution ({c.before.get('status')})")

    def advance_commits(self, index: int) -> list:
        """Commits that moved the execution past step ``index`` in the forward direction."""
        return [c for c in self.commits if not c.before.get("compensating") and not c.after.get("compensating")
                and c.before.get("current_step") == index and c.after.get("current_step") == index + 1
                and c.after.get("status") not in ("CANCELLED",)]

    def advances(self) -> None:
        for s in self.wf.steps:
            n = len(self.advance_commits(s.index))
            if n > 1:
                self.v(f"advanced past step {s.index} ({s.kind}) {n} times")
        if self.final.status.value == "COMPLETED":
            for s in self.wf.steps:
                if len(self.advance_commits(s.index)) != 1:
                    self.v(f"COMPLETED but step {s.index} was advanced past {len(self.advance_commits(s.index))} times")

    def state_at(self, seq: int) -> dict | None:
        """The execution item as stored just before the event numbered ``seq``."""
        before = [c for c in self.commits if c.seq < seq]
        return before[-1].after if before else None

    def puts(self, index: int, kind: str, status: str | None = None) -> list:
        return [w for w in self.writes if w.what == "put_step" and w.record.step_index == index
                and w.record.kind == kind and (status is None or w.record.status.value == status)]

    # -- branches ------------------------------------------------------------------------------------------
    def branches(self) -> None:
        for s in self.wf.steps:
            if s.kind not in ("parallel", "map"):
                continue
            i = s.index
            # every branch write is conditional on the version its writer read: as stored, each branch's
            # writes form one chain v1, v2, ... (two writes of one version: a condition did not hold)
            chains: dict[int, list] = {}
            for w in self.writes:
                if w.what in ("create_branch", "update_branch", "complete_branch") and w.step == i:
                    chains.setdefault(w.branch.branch, []).append(w)
            for b, ws in sorted(chains.items()):
                versions = [w.branch.version for w in ws]
                if versions[0] != 1 or any(y != x + 1 for x, y in zip(versions, versions[1:])):
                    self.v(f"step {i} branch {b}: its writes went through versions {versions}, not one chain")
                    break
                # a fan-out's generation is the execution version it began at: a branch never goes back
                # to an older one (a stale fan-out resetting a newer generation's branch breaks its fence)
                for x, y in zip(ws, ws[1:]):
                    if y.branch.generation < x.branch.generation:
                        self.v(f"step {i} branch {b}: op {y.op_id} ({y.what}) moved it from generation "
                               f"{x.branch.generation} ({x.branch.status.value}) back to generation "
                               f"{y.branch.generation} ({y.branch.status.value})")
                        break
            # every branch body runs under its own operation's claim of that attempt, one body per claim
            claims = {(w.branch.branch, w.branch.version): w for ws in chains.values() for w in ws
                      if w.branch.status is BranchStatus.RUNNING}
            used: Counter = Counter()
            for body in self.bodies:
                if body.kind != "branch" or body.step != i:
                    continue
                mine = [w for w in claims.values() if w.branch.branch == body.branch and w.op_id == body.op_id
                        and w.branch.attempt == body.attempt and w.seq < body.seq]
                if not mine:
                    self.v(f"step {i} branch {body.branch}: body attempt {body.attempt} (op {body.op_id}) ran without "
                           "that operation claiming it")
                else:
                    used[(body.branch, mine[-1].branch.version)] += 1
            # a branch attempt that starts after its execution ended or began compensating (its delivery
            # read the execution before): allowed by the design's "in-flight attempts may finish"; counted
            late = [w for w in claims.values() if (self.state_at(w.seq) or {}).get("status") in TERMINAL
                    or (self.state_at(w.seq) or {}).get("compensating")]
            if late:
                self.sim.stat("branches.claimed_after_the_execution_stopped", len(late))
            for (b, version), n in sorted(used.items()):
                if n > 1:
                    self.v(f"step {i} branch {b}: {n} bodies ran under the one claim v{version}")
            completions = [w for w in self.writes if w.what == "complete_branch" and w.step == i]
            per = Counter(w.branch.branch for w in completions)
            for b, n in sorted(per.items()):
                if n > 1:
                    gens = [w.branch.generation for w in completions if w.branch.branch == b]
                    self.v(f"step {i} branch {b}: its SUCCEEDED completion was applied {n} times (generations {gens})")
            stored = {b.branch: b for b in self.view.branches_of(i)}
            join = self.view.joins.get(i)
            if join is not None:
                succeeded = sum(1 for b in stored.values() if b.status is BranchStatus.SUCCEEDED and b.branch < join.total)
                if join.done > succeeded:
                    self.v(f"step {i}: the join counts {join.done} done but only {succeeded} branch items SUCCEEDED")
            # every completion was made by an op whose branch body of that attempt succeeded
            for w in completions:
                ok = [b for b in self.bodies if b.kind == "branch" and b.step == i and b.branch == w.branch.branch
                      and b.attempt == w.branch.attempt and b.op_id == w.op_id and b.end == "ok" and b.end_seq < w.seq]
                if not ok:
                    self.v(f"step {i} branch {w.branch.branch}: completion (attempt {w.branch.attempt}, op {w.op_id}) "
                           "without a successful body of that attempt in that operation")
                elif codec.decode(w.branch.result_blob) != branch_result(self.eid, i, w.branch.branch,
                                                                           _item(self, s, w.branch.branch), self.run_id):
                    self.v(f"step {i} branch {w.branch.branch}: recorded a result its body did not return")
            # the fan-in: the step's SUCCEEDED record (kind fanout) and the advance past it, once
            fan_ins = self.puts(i, "fanout", "SUCCEEDED")
            advanced = self.advance_commits(i)
            if advanced:
                adv = advanced[0]
                late = [w for w in fan_ins if w.seq > adv.seq]
                if late:
                    self.v(f"step {i}: fan-in record written again (op {late[0].op_id}) after the step was advanced past")
                # (a code-first fan-in is passed by the write that waits for the function's next call: a later
                # delivery's replay, when the one that wrote it died in between)
                mine = [w for w in fan_ins if (w.op_id == adv.op_id or self.wf.code) and w.seq < adv.seq]
                if not mine:
                    self.v(f"step {i}: advanced past (op {adv.op_id}) without that operation writing the fan-in record")
                else:
                    total = mine[-1].record.attempts
                    missing = [b for b in range(total) if b not in stored or stored[b].status is not BranchStatus.SUCCEEDED]
                    if missing:
                        self.v(f"step {i}: fanned in while branches {missing} had not succeeded")
                    before = [b for b in range(total) if not any(w.branch.branch == b and w.seq < adv.seq
                                                                  for w in completions)]
                    if before:
                        self.v(f"step {i}: fanned in before branches {before} were recorded SUCCEEDED")
            elif fan_ins and self.final.status.value == "COMPLETED":
                self.v(f"step {i}: COMPLETED without the fan-in advancing")
            # a branch body ran only while its branch was launched in this run
            for b in self.bodies:
                if b.kind == "branch" and b.step == i and b.branch not in stored:
                    self.v(f"step {i}: a body ran for branch {b.branch}, which has no item")

    # -- events --------------------------------------------------------------------------------------------
    def events(self) -> None:
        puts = [w for w in self.writes if w.what == "put_event"]
        per = Counter((w.record.name, w.record.event_id) for w in puts)
        for key, n in sorted(per.items()):
            if n > 1:
                self.v(f"event {key[0]}#{key[1]} stored {n} times")
        stored = {(e.name, e.event_id): e for e in self.view.events}
        for w in puts:
            first = [p for p in puts if (p.record.name, p.record.event_id) == (w.record.name, w.record.event_id)][0]
            kept = stored.get((w.record.name, w.record.event_id))
            if kept is None or kept.data != first.record.data:
                self.v(f"event {w.record.name}#{w.record.event_id}: the kept item is not what was first sent")
        consumed: dict[str, int] = {}
        for s in self.wf.steps:
            if s.kind != "wait":
                continue
            i = s.index
            wins = self.puts(i, "event", "SUCCEEDED")
            advanced = self.advance_commits(i)
            if not advanced:
                continue
            adv = advanced[0]
            mine = [w for w in wins if (w.op_id == adv.op_id or self.wf.code) and w.seq < adv.seq]
            if not mine:
                self.v(f"step {i}: the wait was advanced past (op {adv.op_id}) without that operation recording it")
                continue
            rec = mine[-1].record
            late = [w for w in wins if w.seq > adv.seq]
            if late:
                self.v(f"step {i}: wait record written again (op {late[0].op_id}) after the step was advanced past")
            if rec.event_id is None:
                if all(default is None for default in self.wait_defaults(i, mine[-1].seq)):
                    self.v(f"step {i}: wait settled without an event and without a default")
                continue
            if (s.event, rec.event_id) not in stored:
                self.v(f"step {i}: the wait consumed event {rec.event_id}, which was never stored")
            if rec.event_id in consumed:
                self.v(f"event {s.event}#{rec.event_id} consumed by step {consumed[rec.event_id]} and again by step {i}")
            consumed[rec.event_id] = i
            key = s.event if self.wf.code else s.name  # a code-first wait's position is named by its event
            if codec.decode(rec.result_blob) != {key: event_data(s.event, rec.event_id, self.run_id)}:
                self.v(f"step {i}: the wait recorded data that is not its event's (under the wait's name)")

    # -- compensation ----------------------------------------------------------------------------------------
    def compensation(self) -> None:
        # (a redeploy's mismatch that ends a compensating execution is not a compensation moving on)
        moves = [c for c in self.commits if c.before.get("compensating") and not _mismatch(c.after)
                 and (c.after.get("current_step") != c.before.get("current_step") or c.after.get("status") in TERMINAL)]
        done_order: list[int] = []
        for c in moves:
            j = c.before.get("current_step")
            if c.after.get("status") == "COMPENSATION_FAILED":
                continue
            done_order.append(j)
            mine = [w for w in self.puts(j, "compensation", "SUCCEEDED") if w.op_id == c.op_id and w.seq < c.seq]
            if not mine:
                self.v(f"compensation of step {j} moved on (op {c.op_id}) without that operation recording it")
            late = [w for w in self.puts(j, "compensation", "SUCCEEDED") if w.seq > c.seq]
            if late:
                self.v(f"compensation of step {j} recorded again (op {late[0].op_id}) after it moved on")
            else:
                ok = [b for b in self.bodies if b.kind == "undo" and b.step == j and b.end == "ok" and mine
                      and b.op_id == mine[-1].op_id and b.attempt == mine[-1].record.attempts and b.end_seq < mine[-1].seq]
                if mine and not ok:
                    self.v(f"compensation of step {j} recorded without a successful undo body of that attempt")
                elif ok:
                    did = [b for b in self.bodies if b.kind == "task" and b.step == j and b.end in ("ok", "dead")
                           and b.end_seq < ok[-1].seq]
                    caught = self.final.undo_failed_step and self.final.failed_step == j
                    if not did and not caught:
                        self.v(f"compensation of step {j} succeeded without starting after a run of step {j} that "
                               "succeeded (or died without reporting)")
        counts = Counter(done_order)
        for j, n in sorted(counts.items()):
            if n > 1:
                self.v(f"compensation of step {j} completed {n} times")
        if any(a <= b for a, b in zip(done_order, done_order[1:])):
            self.v(f"compensations completed in the order {done_order}, not strictly descending")
        started = [c for c in self.commits if c.after.get("compensating") and not c.before.get("compensating")]
        failed_step = started[0].after.get("failed_step") if started else None
        # A cancel that caught the step mid-attempt (its success recorded, or an attempt died) undoes it too.
        undo_failed = bool(started and started[0].after.get("undo_failed_step"))
        for j in done_order:
            if failed_step is not None and (j > failed_step or (j == failed_step and not undo_failed)):
                self.v(f"compensation of step {j} ran although the failure was at step {failed_step}")
        for b in self.bodies:
            if b.kind != "undo":
                continue
            past = [c for c in self.advance_commits(b.step) if c.seq < b.seq]
            if not past and not (undo_failed and b.step == failed_step):
                self.v(f"compensation body of step {b.step} ran although step {b.step} never completed")
        self._compensation_ending(done_order, started)

    def recorded_success(self, index: int) -> bool:
        return any(r.step_index == index and r.kind == "task" and r.status is StepStatus.SUCCEEDED for r in self.records)

    def completed_compensable(self, below: int, wf=None) -> list[int]:
        return [s.index for s in (wf or self.wf).steps if s.kind == "task" and s.undo and s.index < below
                and self.advance_commits(s.index)]

    def wait_defaults(self, i: int, settled_seq: int) -> list:
        """The defaults the wait at ``i`` may have settled with at ``settled_seq``: its own list's, and, when a
        same-version redeploy it goes on under replaced that list before then, the deployed list's too
        (docs/workflows.md: a wait's ``default=`` is not in the digest, so an execution in flight runs the new
        one; the delivery may have read either)."""
        own = self.wf.steps[i].default
        replaced = self.sim.undeployed.get(self.info.fingerprint)
        if replaced is None or settled_seq < replaced or self.wf.code \
                or not self.sim.goes_on_here(self.info.fingerprint, self.eid, self.run_id):
            return [own]
        new = self.sim.specs[self.wf.name].steps
        return [own, new[i].default] if i < len(new) and new[i].kind == "wait" else [own]

    def undo_definition(self, endings: list):
        """The list whose compensations its ending undid: its own, or, when a same-version redeploy it goes on
        under replaced it before it ended, the new one (docs/workflows.md: a compensation is not in the digest,
        so an old execution's undo is the new compensation, or none)."""
        replaced = self.sim.undeployed.get(self.info.fingerprint)
        if replaced is None or not endings or endings[-1].seq < replaced or self.wf.code \
                or not self.sim.goes_on_here(self.info.fingerprint, self.eid, self.run_id):
            return self.wf
        return self.sim.specs[self.wf.name]

    def _compensation_ending(self, done_order: list[int], started: list) -> None:
        e = self.final
        status = e.status.value
        endings = [c for c in self.commits if c.after.get("status") in TERMINAL and c.before.get("status") not in TERMINAL]
        if self.gone is not None and endings and endings[-1].seq > self.gone:
            # Its step list was replaced while it lived: nothing can say what its steps were, or what to undo.
            code = e.error.code if e.error is not None else None
            self.sim.stat(f"redeploy.ended_a_run_of_the_old_definition.{status}")
            if not ((status == "FAILED" and code == "workflow_definition_mismatch")
                    or (status == "CANCELLED" and not e.compensated)):
                self.v(f"ended {status} ({code}) after its definition was replaced: only FAILED "
                       "workflow_definition_mismatch (or an uncompensated cancel) can end it then")
            owed = self.completed_compensable(e.current_step + 1)
            if status == "CANCELLED" and owed:
                # a cancel that cannot undo what completed is refused (definition_changed): ending CANCELLED
                # would leave those steps done for good
                self.v(f"ended CANCELLED after its definition was replaced, leaving compensable steps {owed} done")
            return
        failed_at = e.failed_step if e.failed_step is not None else e.current_step
        wf = self.undo_definition(endings)
        if wf is not self.wf:
            self.sim.stat("redeploy.ended_on_the_new_compensations")
        owed = self.completed_compensable(failed_at, wf) if status in ("FAILED", "CANCELLED", "COMPENSATION_FAILED") else []
        spec = wf.steps[failed_at] if failed_at < len(wf.steps) else None
        caught = spec is not None and spec.kind == "task" and spec.undo and status in ("CANCELLED", "COMPENSATION_FAILED")
        if caught and (e.undo_failed_step or self.recorded_success(failed_at)):
            owed.append(failed_at)  # every recorded compensable success is undone, the cancelled step's too
            if not e.undo_failed_step:
                self.v(f"ended {status} with a recorded success of step {failed_at}, but compensation left it out")
        records = {r.step_index: r for r in self.records if r.kind == "compensation"}
        if status in ("FAILED", "CANCELLED"):
            if owed and e.compensated is not True:
                self.v(f"ended {status} without compensating its completed steps {owed} (compensated={e.compensated})")
            if e.compensated:
                missing = [j for j in owed if j not in records or records[j].status is not StepStatus.SUCCEEDED]
                if missing:
                    self.v(f"ended {status} compensated=True, but steps {missing} have no SUCCEEDED compensation record")
                if sorted(done_order, reverse=True) != sorted(owed, reverse=True):
                    self.v(f"ended {status} compensated=True; undid {done_order}, owed {sorted(owed, reverse=True)}")
        if status == "COMPENSATION_FAILED":
            err = e.compensation_error
            j = None if err is None else err.step_index
            if j is None:
                self.v("COMPENSATION_FAILED without naming a step")
                return
            undo = [b for b in self.bodies if b.kind == "undo" and b.step == j]
            policy = wf.undo_policy(j)
            claims = [c for c in self.commits if c.after.get("compensating") and c.after.get("current_step") == j
                      and c.after.get("attempt_started_at") and (c.before.get("attempt_started_at") is None
                                                                or c.before.get("current_step") != j)]
            permanent = any(b.end == "permanent" for b in undo)
            if not permanent and len(claims) < policy.max_attempts:
                self.v(f"COMPENSATION_FAILED naming step {j} ({err.code}), but its compensation was claimed "
                       f"{len(claims)} times of {policy.max_attempts} and never failed permanently")
            if err.code == "permanent_error" and not permanent:
                self.v(f"COMPENSATION_FAILED permanent_error at step {j} without a permanent failure of its body")
            later = [k for k in owed if k > j]
            missing = [k for k in later if k not in done_order]
            if missing:
                self.v(f"COMPENSATION_FAILED at step {j} before the later steps {missing} were undone")

    # -- the ending ------------------------------------------------------------------------------------------
    def outcome(self) -> None:
        e = self.final
        if e.status.value != "COMPLETED":
            return
        try:
            ctx = rebuild_context(self.view.input_blob, self.records, self.wf.definition, len(self.wf.steps))
            if self.wf.code:  # what a function made is its return value (composition_code.py)
                ret = next((r for r in self.records if r.kind == "return"), None)
                ctx = {**ctx, **(codec.decode(ret.result_blob) if ret is not None and ret.result_blob else {})}
        except Exception as exc:
            self.v(f"COMPLETED but its context cannot be rebuilt: {exc}")
            return
        items = codec.decode(self.view.input_blob).get("items", [])
        for s in self.wf.steps:
            if s.kind == "task":
                want = task_result(self.eid, s, self.run_id)
                if any(ctx.get(k) != val for k, val in want.items()):
                    self.v(f"COMPLETED context has {s.name}={ctx.get(s.name)!r}, expected {want[s.name]!r}")
            elif s.kind in ("parallel", "map"):
                n = s.branches if s.kind == "parallel" else len(items)
                want = [branch_result(self.eid, s.index, b, None if s.kind == "parallel" else items[b], self.run_id)
                        for b in range(n)]
                if ctx.get(s.name) != want:
                    self.v(f"COMPLETED context {s.name} = {ctx.get(s.name)!r}, not the branch results in order {want!r}")
            elif s.kind == "wait":
                rec = next((r for r in self.records if r.step_index == s.index and r.kind == "event"), None)
                if rec is None or rec.status is not StepStatus.SUCCEEDED:
                    self.v(f"COMPLETED without a SUCCEEDED record of wait step {s.index}")
                    continue
                # Each wait's data lands under its own name: no event replaces another key.
                settled = [w.seq for w in self.puts(s.index, "event", "SUCCEEDED")]
                wants = [event_data(s.event, rec.event_id, self.run_id)] if rec.event_id else \
                    self.wait_defaults(s.index, settled[-1] if settled else 0)
                want = wants[-1]
                if ctx.get(s.name) not in wants:
                    self.v(f"COMPLETED context {s.name}={ctx.get(s.name)!r}, but the wait consumed "
                           f"{rec.event_id or 'its default'} ({want!r})")


def _mismatch(attrs: dict) -> bool:
    """The execution item ended FAILED ``workflow_definition_mismatch`` (its step list was replaced)."""
    error = attrs.get("error")
    return attrs.get("status") == "FAILED" and isinstance(error, str) and '"workflow_definition_mismatch"' in error


def _item(checker: Checker, s, b: int) -> Any:
    if s.kind != "map":
        return None
    items = codec.decode(checker.view.input_blob).get("items", []) if checker.view.input_blob else []
    return items[b] if b < len(items) else None
