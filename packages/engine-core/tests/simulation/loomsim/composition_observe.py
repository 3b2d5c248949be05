"""What the composition simulation observes: the journal of body runs and the store's successful writes
(creates, history records, branches, joins, events), recorded by a store proxy as they happen, each with the
run it belongs to; and the checks made as they happen."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any, Callable

from engine_core import callbacks, codec
from engine_core.adapters import _items as items
from engine_core.clock import format_ts, parse_ts
from engine_core.model import Branch, StepRecord

from .composition_workflows import CSpec, CWorkflow, is_misfit, run_tags
from .world import Op, OpPlan, SimulatedCrash, StoreProxy


LAMBDA_TIMEOUT_S = {"start": 10.0, "event": 10.0, "callback": 10.0, "cancel": 10.0, "redrive": 10.0, "wake": 10.0,
                    "sweep": 55.0}
"""The Lambda timeouts (Terraform ``control_plane_timeout_s``, default 10 s; ``sweeper_timeout_s``, 55 s): a
start, an operator's action or a sweep stopped longer than that was killed, and writes nothing after (the
deliveries have theirs, ``CompConfig.invocation_s``). Without one, a sweep stopped for hours would commit
over an execution TTL deleted meanwhile, which no deployment can do."""


@dataclass
class BodyEntry:
    """One body run, as the body itself saw it (the journal)."""

    seq: int
    kind: str  # task | branch | undo
    execution_id: str
    step: int
    branch: int | None
    attempt: int
    op_id: int
    at: dt.datetime
    deadline: dt.datetime | None
    run: str | None = None
    """The run of the claim it runs under (the run its operation wrote for)."""
    fingerprint: str = ""
    """The definition whose step this body is."""
    timeout_s: float = 0.0
    end: str = "unfinished"
    """ok, raised, permanent, overran; unfinished while it runs; dead when its operation ended inside it."""
    end_seq: int | None = None

    def running_at(self, seq: int, now: dt.datetime) -> bool:
        """Still running when the event numbered ``seq`` happened at ``now``: started before, not ended
        before, and its invocation's time not used up (at its deadline Lambda has ended it; a claim's
        lease is at least that deadline plus the margin, which may be 0)."""
        if self.seq >= seq or (self.end_seq is not None and self.end_seq < seq):
            return False
        return self.deadline is None or now < self.deadline


@dataclass(frozen=True)
class Write:
    """A successful store write (history record, branch, join, event), as the store proxy saw it."""

    seq: int
    what: str  # put_step | create_branch | update_branch | complete_branch | put_join | put_event
    execution_id: str
    op_id: int
    at: dt.datetime
    step: int | None = None
    record: Any = None
    branch: Any = None
    before: dict | None = None
    after: dict | None = None
    run: str | None = None
    """The run the written item names."""


class CompStoreProxy(StoreProxy):
    """The base proxy plus observations of the new kinds' writes, and of creates with what they replaced."""

    def create(self, execution, input_blob, replace_version=None):
        def call():
            eid = execution.execution_id
            before = self.inner.metas.get(eid)
            before = None if before is None else dict(before)
            if before is not None:
                self.sim.runs.archive(self.inner, eid)  # a newer run may replace it now: keep what it held
            self.inner.create(execution, input_blob, replace_version)
            self.sim.observe_create(execution, input_blob, before)
        return self.sim.call("create", call)

    def _observed(self, name: str, fn: Callable[[], Any], record: Callable[[Any, Any], None]) -> Any:
        def call():
            before = self.sim.snapshot_for(name)
            result = fn()
            record(result, before)
            return result
        return self.sim.call(name, call)

    def stored_branch(self, execution_id, branch):
        """The branch as the store holds it after a write (what a broken store really wrote)."""
        stored = self.inner._branch(execution_id, branch.step_index, branch.branch)
        return stored if isinstance(stored, Branch) else branch

    def create_branch(self, execution_id, branch):
        return self._observed("create_branch", lambda: self.inner.create_branch(execution_id, branch),
                              lambda r, b: self.sim.observe_write("create_branch", execution_id, step=branch.step_index,
                                                                  branch=self.stored_branch(execution_id, branch)))

    def update_branch(self, execution_id, branch, expected_version):
        return self._observed("update_branch", lambda: self.inner.update_branch(execution_id, branch, expected_version),
                              lambda r, b: self.sim.observe_write("update_branch", execution_id, step=branch.step_index,
                                                                  branch=self.stored_branch(execution_id, branch)))

    def complete_branch(self, execution_id, branch, expected_version):
        def before():
            return dict(self.inner.joins.get(execution_id, {}).get(branch.step_index) or {})

        def call():
            old = before()
            self.inner.complete_branch(execution_id, branch, expected_version)
            self.sim.observe_write("complete_branch", execution_id, step=branch.step_index,
                                   branch=self.stored_branch(execution_id, branch), before=old, after=before())
        return self.sim.call("complete_branch", call)

    def put_join(self, execution_id, join):
        def call():
            applied = self.inner.put_join(execution_id, join)
            if applied:
                self.sim.observe_write("put_join", execution_id, step=join.step_index, record=join)
            return applied
        return self.sim.call("put_join", call)

    def put_event(self, execution_id, record, legacy=False):
        def call():
            stored = self.inner.events.get(execution_id, {}).get(items.event_sort_key(record.name, record.event_id))
            existed = stored is not None and stored.get("run") == record.run
            applied = self.inner.put_event(execution_id, record, legacy=legacy)
            if applied:
                self.sim.observe_write("put_event", execution_id, record=record, before={"existed": existed})
            return applied
        return self.sim.call("put_event", call)


class Observing:
    """The composition simulation's observation hooks (a mixin of ``CompositionSim``): the store proxy reports
    every successful write here, and every body reports its start and end; the checks made as things happen
    (a join counting a completion twice, an event stored twice, a wait timing out over a kept event, a lane
    over its limit, a body beside another body of its step) are here too."""

    # -- observation hooks ----------------------------------------------------------------------------
    def snapshot_for(self, name: str) -> None:
        return None

    def observe_write(self, what: str, eid: str, *, step: int | None = None, record: Any = None, branch: Any = None,
                      before: dict | None = None, after: dict | None = None) -> None:
        op = self.op
        run = branch.run if branch is not None else getattr(record, "run", None)
        w = Write(self._next_seq(), what, eid, op.id if op else 0, self.clock.now(), step, record, branch, before, after,
                  run)
        self.writes.setdefault(eid, []).append(w)
        self.stat(f"writes.{what}")
        if op is not None and branch is not None:
            self.op_runs[(op.id, eid)] = run
        if branch is not None and branch.next_wake_at is not None and branch.status.value == "RETRY":
            self.note_long_timer(format_ts(branch.next_wake_at))
        if what == "put_event" and isinstance(record.data, dict) and record.data.get("run") != run:
            self.violation(f"{eid[:8]}: event {record.name}#{record.event_id} sent to run {record.data.get('run')} "
                           f"was written under run {run}")
        if what == "complete_branch":
            self._check_join_count(eid, branch.step_index)
        if what == "put_event" and before and before.get("existed"):
            self.violation(f"{eid[:8]}: event {record.name}#{record.event_id} was stored again over the same id "
                           "(a repeated send must be applied once)")
        detail = ""
        if branch is not None:
            detail = f" s{branch.step_index} b{branch.branch} v{branch.version} {branch.status.value} g{branch.generation}"
        elif record is not None and hasattr(record, "event_id"):
            detail = f" {record.name}#{record.event_id}"
        elif record is not None:
            detail = f" s{record.step_index} g{record.generation} done={record.done}/{record.total}"
        self.log(f"    store: {eid[:8]} {what}{detail}")

    def observe_put(self, eid: str, record: StepRecord, before: dict | None) -> None:
        op = self.op
        w = Write(self._next_seq(), "put_step", eid, op.id if op else 0, self.clock.now(), record.step_index, record,
                  before=before, run=record.run)
        self.writes.setdefault(eid, []).append(w)
        if record.kind == "event" and record.error is not None and record.error.code == "event_timeout":
            self._check_timeout(eid, record, op)
        if record.kind == "event" and record.event_id is None and record.error is None or \
                record.kind == "event" and record.error is not None and record.error.code == "event_timeout":
            self._check_timed_out_when_due(eid, record)
        if record.kind == "event" and record.error is not None and record.error.code == "invalid_event":
            self.violation(f"{eid[:8]} step {record.step_index}: the wait failed invalid_event ({record.error.message[:80]}): "
                           "an event whose data its model refuses must be passed over, not end the wait")
        if record.kind == "event" and record.event_id is not None and record.status.value == "SUCCEEDED":
            self._check_wait_record(eid, record)
        self.log(f"    store: {eid[:8]} put s{record.step_index} {record.kind} attempt {record.attempts} "
                 f"{record.status.value}{' final' if record.is_final else ''}"
                 f"{f' event {record.event_id}' if record.event_id else ''}")

    def _check_join_count(self, eid: str, index: int) -> None:
        """The join counts each completion once: its ``done`` equals what its generation began with plus
        the completions of that generation observed since."""
        join = self.inner.joins.get(eid, {}).get(index)
        if join is None:
            return
        run = join.get("run")
        began = [w for w in self.writes.get(eid, ()) if w.what == "put_join" and w.step == index and w.run == run
                 and w.record.generation == join.get("generation")]
        if not began:
            return
        start = began[-1]
        counted = [w for w in self.writes[eid] if w.what == "complete_branch" and w.step == index and w.seq > start.seq
                   and w.run == run and w.branch.generation == join.get("generation")]
        expected = start.record.done + len(counted)
        if join.get("done") != expected:
            self.violation(f"{eid[:8]} step {index}: the join of generation {join.get('generation')} counts "
                           f"done={join.get('done')}, but it began at {start.record.done} and {len(counted)} "
                           "completions of that generation were recorded (a completion counted twice or not at all)")

    def _check_timeout(self, eid: str, record: StepRecord, op: Op | None) -> None:
        """A wait times out only if no event of its name was kept, unconsumed by another step, from
        before the delivery that decided the timeout began; or an operator woke it (its wake is what was
        answered: an event sent meanwhile stays kept for a later wait, not lost)."""
        if self.inner.metas.get(eid, {}).get("wait_woken"):
            return
        began = self.op_start_seq.get(op.id, 0) if op else 0
        read = [c.after for c in self.commits.get(eid, ()) if c.seq < began]
        if read and read[-1].get("wait_woken") and read[-1].get("current_step") == record.step_index:
            return  # the delivery began on a woken wait: a commit since (a cancel) cleared the flag it read
        info = self.runs.info(eid, record.run)
        wf = self.all_specs.get(info.fingerprint) if info is not None else None
        if wf is None:
            return
        name = wf.steps[record.step_index].event
        consumed = {r.event_id for r in self.inner._records(eid)
                    if isinstance(r, StepRecord) and r.kind == "event" and r.event_id and r.step_index != record.step_index
                    and r.status.value == "SUCCEEDED" and r.run == record.run}
        # callback ids are each one wait's own: another wait's callback event was never this wait's to take
        sent_before = [w.record.event_id for w in self.writes.get(eid, ()) if w.what == "put_event"
                       and w.run == record.run and w.record.name == name and w.seq < began
                       and w.record.event_id not in consumed and not is_misfit(w.record.event_id)
                       and callbacks.is_for_step(w.record.event_id, record.step_index)]
        if sent_before:
            self.violation(f"{eid[:8]} step {record.step_index}: wait {name!r} recorded event_timeout (attempt "
                           f"{record.attempts}) although event(s) {sent_before} of that name were kept, consumed by "
                           "no other step, before the delivery began: an event was lost")

    def _check_timed_out_when_due(self, eid: str, record: StepRecord) -> None:
        """A wait times out (its default, or ``event_timeout``) once its period's timeout has passed, or after an
        operator woke it: never because an event woke it whose data its model refused."""
        info = self.runs.info(eid, record.run)
        wf = self.all_specs.get(info.fingerprint) if info is not None else None
        if wf is None or record.started_at is None or record.finished_at is None:
            return
        # The period's timeout as its WAITING commit set it, which ``observe_commit`` checked against the declared
        # timeout (under a compatible same-version redeploy, the deployed list's: timeouts may differ there)
        timeout_at = self.waiting_timeouts.get(eid)
        due = parse_ts(timeout_at) if timeout_at else \
            record.started_at + dt.timedelta(seconds=wf.steps[record.step_index].wait_timeout)
        woken = [t for t in self.event_wakes.get(eid, ()) if record.started_at <= t <= record.finished_at]
        if record.finished_at < due and not woken:
            self.violation(f"{eid[:8]} step {record.step_index}: the wait timed out at {record.finished_at:%H:%M:%S}, "
                           f"before its timeout ({due:%H:%M:%S}, waiting since {record.started_at:%H:%M:%S}), and no "
                           "operator woke it")

    def _check_wait_record(self, eid: str, record: StepRecord) -> None:
        """A wait of a run takes only an event sent to that run, and a callback's only for its own step."""
        data = codec.decode(record.result_blob) if record.result_blob else {}
        value = data.get(record.name) if isinstance(data, dict) else None
        sent_to = value.get("run") if isinstance(value, dict) else None
        if sent_to != record.run:
            self.violation(f"{eid[:8]} step {record.step_index}: the wait of run {record.run} consumed event "
                           f"{record.event_id}, sent to run {sent_to}")
        if is_misfit(record.event_id):
            self.violation(f"{eid[:8]} step {record.step_index}: the wait consumed {record.event_id}, whose data its "
                           "model refuses (it must be passed over)")
        if not callbacks.is_for_step(record.event_id, record.step_index):
            self.violation(f"{eid[:8]} step {record.step_index}: the wait consumed {record.event_id}, the callback "
                           "event of another wait")
        elif callbacks.is_reserved(record.event_id):
            self.stat("callback.consumed_by_its_wait")

    # -- bodies ---------------------------------------------------------------------------------------
    def recorded_success(self, execution_id: str, index: int, run: str | None) -> bool:
        """The store holds a SUCCEEDED task record of step ``index`` written by ``run``."""
        for key, item in self.inner.steps.get(execution_id, {}).items():
            if key.startswith(f"STEP#{index:03d}#") and not key.endswith("#compensation") \
                    and item.get("status") == "SUCCEEDED" and item.get("run") == run:
                return True
        return False

    def body_run(self, eid: str) -> str | None:
        """The run a body starting now belongs to: the run its operation claimed it for."""
        op = self.op
        run = self.op_runs.get((op.id, eid)) if op is not None else None
        return run or self.inner.metas.get(eid, {}).get("created_at")

    def _goes_on_under(self, started: str, now: str, passed: frozenset[int] = frozenset()) -> bool:
        """The contract of a same-version redeploy (DESIGN.md, versions): a run goes on under a new definition
        when each step of the list it started on has the same digest (name and shape) at its position in the
        new one, or is a sleep the run had passed or begun (``passed``: its wake time is fixed, a retuned length
        no longer matters) where the new list has a sleep too; retries, timeouts, concurrency and appended steps
        may differ."""
        old, new = self.all_specs.get(started), self.all_specs.get(now)
        if old is None or new is None:
            return False
        before, after = old.definition.step_prints, new.definition.step_prints
        if len(after) < len(before):
            return False
        return all(a == b or (i in passed and old.steps[i].kind == "sleep" and new.steps[i].kind == "sleep")
                   for i, (b, a) in enumerate(zip(before, after)))

    def passed_positions(self, eid: str, run: str | None, fingerprint: str | None) -> frozenset[int]:
        """The positions ``run`` of ``eid`` was done with when a redeploy replaced ``fingerprint``, as the engine
        judges a sleep (``versions._passed``): below its position then, or the sleep it was at and had begun."""
        replaced = self.undeployed.get(fingerprint or "")
        last = None
        for c in self.commits.get(eid, ()):
            if c.after.get("created_at") == run and (replaced is None or c.seq < replaced):
                last = c.after
        if last is None:
            return frozenset()
        at = int(last.get("current_step") or 0)
        return frozenset(range(at + (1 if int(last.get("attempt") or 0) >= 1 else 0)))

    def goes_on_here(self, fingerprint: str | None, eid: str | None = None, run: str | None = None) -> bool:
        """A run started on ``fingerprint`` can go on with what is deployed now: it is deployed, or (a step list)
        the same-version redeploy of its workflow keeps every step of its list where it stood (for run ``run``
        of ``eid``: a sleep it had begun may be retuned)."""
        if self.deployed(fingerprint):
            return True
        old = self.all_specs.get(fingerprint or "")
        new = None if old is None or old.code else self.specs.get(old.name)
        passed = frozenset() if eid is None else self.passed_positions(eid, run, fingerprint)
        return new is not None and self._goes_on_under(fingerprint or "", new.definition.fingerprint, passed)

    def _check_context(self, entry: BodyEntry, ctx) -> None:
        """A body sees only its own run: its input, results and events (each names the run it was made for)."""
        info = self.runs.info(entry.execution_id, entry.run)
        where = f"{entry.execution_id[:8]} step {entry.step} ({entry.kind} attempt {entry.attempt}, run {entry.run})"
        if info is None:
            self.violation(f"{where}: a body ran under a run that was never created")
            return
        if info.fingerprint != entry.fingerprint:
            passed = self.passed_positions(entry.execution_id, entry.run, info.fingerprint)
            if self._goes_on_under(info.fingerprint, entry.fingerprint, passed):
                self.stat("body.on_a_compatible_redeploy")  # every step of the run's list stands in the new one
            else:
                self.violation(f"{where}: a body of definition {entry.fingerprint[:8]} ran in a run started on "
                               f"{info.fingerprint[:8]}: a changed definition ran its steps")
        foreign = (run_tags(dict(ctx.data)) | run_tags(getattr(ctx, "result", None))) - {entry.run}
        if foreign:
            self.violation(f"{where}: its context holds data of run(s) {sorted(foreign)}")
        if ctx.get("inc") != info.incarnation:
            self.violation(f"{where}: its context holds the input of start {ctx.get('inc')}, not of its run's "
                           f"({info.incarnation})")

    def on_cbody(self, kind: str, ctx, wf: CWorkflow, s: CSpec) -> BodyEntry:
        op = self.op
        entry = BodyEntry(self._next_seq(), kind, ctx.execution_id, s.index, ctx.branch if kind == "branch" else None,
                          ctx.attempt, op.id if op else 0, self.clock.now(), op.deadline if op else None,
                          self.body_run(ctx.execution_id), wf.definition.fingerprint, wf.timeout(s.index))
        self.journal.append(entry)
        self._check_context(entry, ctx)
        self.stat(f"bodies.{kind}")
        self.log(f"    body {kind} {wf.name}.{s.name}{'' if entry.branch is None else f' b{entry.branch}'} "
                 f"attempt {ctx.attempt}")
        self._check_body_start(entry, wf)
        if op is None:
            return entry
        op.bodies += 1
        timeout = wf.timeout(s.index)
        p = op.plan
        here = self.faults_on and op.bodies == p.body_at
        if here and p.body_overrun:
            self.stat("body.overrun")
            self.log("  ** body runs past its budget")
            self.advance(timeout * self.rng.uniform(1.01, 1.5))
        elif self.config.body_time:
            self.advance(timeout * self.config.body_time * self.rng.random())
        if not here:
            return entry
        if p.body_pause:
            self.stat(f"pause.body.{kind}")
            self.paused_in = (kind, s.undo)
            try:
                self.pause(op, f"inside {kind} body {s.name}")
            finally:
                self.paused_in = None
        if p.body_crash:
            self.stat(f"crash.body.{kind}")
            raise SimulatedCrash(op.id, f"{kind} body {s.name}")
        self.check_deadline(op, f"{kind} body {s.name}")
        return entry

    def on_cbody_end(self, entry: BodyEntry, end: str) -> None:
        if end == "ok" and (self.clock.now() - entry.at).total_seconds() > entry.timeout_s:
            end = "overran"
        entry.end, entry.end_seq = end, self._next_seq()

    def _check_body_start(self, entry: BodyEntry, wf: CWorkflow) -> None:
        """Checked as each body starts, from the journal: no two bodies of one (run, step, branch) at once
        (a task's attempts, also across a redrive; its compensation and its bodies, also across a cancel
        request), a lane's limit, a compensation only after the step it undoes."""
        now, eid, i = self.clock.now(), entry.execution_id, entry.step
        running = [b for b in self.journal if b is not entry and b.execution_id == eid and b.step == i
                   and b.run == entry.run and b.running_at(entry.seq, now)]
        if any(c.op_kind == "redrive" and c.before.get("current_step") == i and c.after.get("created_at") == entry.run
               for c in self.commits.get(eid, ())):
            self.stat(f"bodies.{entry.kind}_after_a_redrive")  # the overlap checks below span generations
        if entry.kind == "branch":
            siblings = [b for b in running if b.kind == "branch"]
            join = self.inner.joins.get(eid, {}).get(i)
            window = wf.window(i, join["total"]) if join else 1
            if siblings:
                self.stat(f"branches.running_at_once.{min(len(siblings) + 1, 3)}")
                if len(siblings) + 1 == window:
                    self.stat("branches.running_at_the_limit")
            if len(siblings) + 1 > window:
                self.violation(f"{eid[:8]} step {i}: {len(siblings) + 1} branch bodies running at once "
                               f"(branches {sorted(b.branch for b in siblings)} and {entry.branch}), max_concurrency "
                               f"allows {window}")
            same = [b for b in siblings if b.branch == entry.branch]
            if same:
                self.violation(f"{eid[:8]} step {i} branch {entry.branch}: attempt {entry.attempt} started while "
                               f"attempt {same[0].attempt} (op {same[0].op_id}) still ran")
        elif entry.kind == "undo":
            tasks = [b for b in running if b.kind == "task"]
            if tasks:
                self.violation(f"{eid[:8]} step {i}: its compensation started while a body of the step it undoes "
                               f"(attempt {tasks[0].attempt}, op {tasks[0].op_id}) still ran")
            undos = [b for b in running if b.kind == "undo"]
            if undos:
                self.violation(f"{eid[:8]} step {i}: compensation attempt {entry.attempt} started while its attempt "
                               f"{undos[0].attempt} (op {undos[0].op_id}) still ran")
            # A step is undone once a body of it succeeded, or (a cancel that caught it mid-attempt) once a
            # body of it ended without reporting: its effect is unknown. Never one that only failed cleanly.
            done = [b for b in self.journal if b.kind == "task" and b.execution_id == eid and b.step == i
                    and b.run == entry.run and b.end in ("ok", "dead") and b.end_seq is not None
                    and b.end_seq < entry.seq]
            meta = self.inner.metas.get(eid, {})
            caught = meta.get("undo_failed_step") and meta.get("failed_step") == i  # its attempt was cut short
            if caught and meta.get("cancelled_by"):
                self.stat("bodies.undo_of_a_step_a_cancel_caught")
            if not done and not caught:
                self.violation(f"{eid[:8]} step {i}: its compensation (attempt {entry.attempt}) started before any "
                               "body of the step it undoes had succeeded (or died without reporting)")
        elif entry.kind == "task":
            same = [b for b in running if b.kind in ("task", "undo")]
            if same:
                what = "attempt" if same[0].kind == "task" else "its compensation's attempt"
                self.violation(f"{eid[:8]} step {i}: task attempt {entry.attempt} started while {what} "
                               f"{same[0].attempt} (op {same[0].op_id}) still ran")

    # -- operations -----------------------------------------------------------------------------------
    def run_op(self, kind: str, label: str, plan: OpPlan, fn, mid=None, message=None, deadline_s=None) -> Op:
        if deadline_s is None:
            deadline_s = LAMBDA_TIMEOUT_S.get(kind)  # a stopped invocation is dead from its timeout on
        self.op_start_seq[self._op_ids + 1] = self._next_seq()
        op = super().run_op(kind, label, plan, fn, mid=mid, message=message, deadline_s=deadline_s)
        end = self._next_seq()
        for entry in self.journal:
            if entry.op_id == op.id and entry.end_seq is None:
                entry.end, entry.end_seq = "dead", end
        return op
