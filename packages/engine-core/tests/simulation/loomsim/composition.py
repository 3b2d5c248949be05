"""The composition simulation: the step kinds of issue 12 (``parallel``, ``map_``, ``wait_for_event`` and
``step(fn, compensate=undo)``) under the same seeded scheduler, faults and queue as the main simulation.

The main simulation (``sim.py`` + ``checks.py``) is strict about task and sleep workflows (``current_step``
only moves forward, every claim is a task's, ...), which compensation and fan-out break on purpose. This
companion reuses its machinery (``Simulation``'s fault point ``call``, ``run_op``, ``deliver``, ``sweep``,
``pause``/``takeover``, the ``SimQueue`` and the proxies) and adds what the new kinds need:

- workflows generated per seed on a fresh ``engine_core.Registry`` (``composition_workflows.py``) mixing
  tasks (some with a compensation, some failing), ``parallel`` and ``map_`` steps (branches failing their
  first attempts or for good, a ``max_concurrency``), ``wait_for_event`` steps (timeouts, retries, defaults;
  two waits of one name), sleeps, and sagas that fail after their compensable steps;
- operations: deliveries (also of branch messages; also two copies of one message at once), duplicated /
  lost messages, sweeps, clock moves, ``engine.operator.send_event`` (twice with one ``event_id``, before
  the wait, inside a pause around the wait's commit), ``engine.operator.cancel`` (also while a worker of
  the execution is stopped) and ``engine.operator.redrive``, each under a fault plan that crashes, fails or
  pauses at any store or queue call or engine fault point (``worker.after_claim``/``after_record``/
  ``after_checkpoint``/``after_enqueue`` and ``step.enter``/``step.return`` of tasks, branches, waits,
  fan-outs and compensations, ``sweeper.after_claim``) or inside a body;
- a journal of every body (task, branch, compensation: which step and branch, attempt, operation, start
  and end in one sequence with the store's writes, how it ended), and a store proxy recording every
  successful commit, history write, branch write, join write and event write;
- a quiet phase (faults off, in-order delivery, scheduled sweeps, and the events a wait still needs are
  sent) in which every execution must end.

Every delivery carries an invocation deadline, as on Lambda: a stopped worker is dead from it on, which is
what makes "at most max_concurrency branch bodies at once" a property of the engine (without a deadline
an in-process zombie may outlive its lease; DESIGN.md, "History written once per writer").

The checks are in ``composition_checks.py``; the liveness check runs after every operation.
"""

from __future__ import annotations

import datetime as dt
import math
import random
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Any, Callable

from engine_core import Engine, EngineSettings, ManualClock, Registry, Sweeper
from engine_core.clock import parse_ts
from engine_core.errors import EngineError, StorageError
from engine_core.model import Branch, StepRecord
from engine_core.adapters import _items as items
from engine_core.adapters.memory import MemoryStore

from .composition_workflows import CSpec, CWorkflow, event_data, generate, register
from .sim import START, SWEEP_INTERVAL_S, FaultMix, Op, OpPlan, PlannedStart, Simulation
from .world import QueueProxy, SimQueue, SimulatedCrash, StoreProxy, due_key

TERMINAL = ("COMPLETED", "FAILED", "CANCELLED", "COMPENSATION_FAILED")
_WORKER_POINTS = ("worker.after_claim", "worker.after_record", "worker.after_checkpoint", "worker.after_enqueue",
                  "step.enter", "step.return")
_CONTEXTS = ("task", "branch", "compensation", "wait", "fanout")
# An engine fault point is named with what it is in (``worker.after_record:compensation``,
# ``step.return:branch``, ``worker.after_checkpoint:wait``), so a plan can aim at one kind's point.
POINTS = tuple(f"{p}:{c}" for p in _WORKER_POINTS for c in _CONTEXTS
               if not (p.startswith("step.") and c in ("wait", "fanout")))
TARGETS = {
    "deliver": ("load_state", "put_step", "commit", "send", "create_branch", "update_branch", "complete_branch",
                "get_join", "put_join", "branches", "get_branch", "list_events", "finalize", "ack") + POINTS,
    "sweep": ("query_due", "load", "commit", "send", "sweeper.after_claim"),
    "start": ("create", "send", "control.after_create"),
    "event": ("load", "put_event", "commit", "send"),
    "cancel": ("load", "history", "commit", "put_operation", "send", "finalize"),
    "redrive": ("load", "history", "commit", "put_operation", "send"),
}
HINT_CALLS = {
    "task": ("put_step", "commit", "send"),
    "compensation": ("put_step", "commit", "send", "finalize"),
    "wait": ("put_step", "commit", "list_events", "send"),
    "fanout": ("put_join", "create_branch", "update_branch", "branches", "commit", "put_step", "send"),
    "branch": ("get_branch", "update_branch", "complete_branch", "get_join", "create_branch", "branches", "put_step",
               "commit", "send"),
}
RACES = ("update_branch", "update_branch", "complete_branch", "get_branch", "commit", "put_step", "list_events",
         "put_join", "create_branch")
REPEATING = ("put_step", "commit", "update_branch", "complete_branch", "send") + POINTS


# -- configuration ------------------------------------------------------------------------------------
@dataclass
class CompConfig:
    seed: int
    settings: EngineSettings
    visibility_s: float
    max_receives: int
    page_size: int
    fault_ops: int
    n_execs: int
    workflows: list[CWorkflow]
    fx: FaultMix
    profile: str = "mixed"
    invocation_s: float = 900.0
    body_time: float = 0.0
    event_rate: float = 0.08
    cancel_rate: float = 0.01
    redrive_rate: float = 0.02
    deadline_rate: float = 1.0
    """Every delivery has an invocation deadline (see the module docstring)."""

    def describe(self) -> str:
        s = self.settings
        lines = [
            f"composition seed {self.seed}: {self.n_execs} executions, {self.fault_ops} fault-phase operations",
            f"  settings: shards={s.shards} lease_s={s.lease_s:g} max_queue_delay_s={s.max_queue_delay_s} "
            f"time_margin_ms={s.time_margin_ms} sweep_max_items={s.sweep_max_items} "
            f"max_chain_steps={s.max_chain_steps} index_slack_s={s.index_slack_s:g}",
            f"  invocations {self.invocation_s:g}s; bodies take up to {self.body_time:.0%} of their budget; "
            f"events on {self.event_rate:.0%} of operations, cancels on {self.cancel_rate:.0%}",
            f"  queue: visibility={self.visibility_s:g}s max_receives={self.max_receives}; sweeper page_size={self.page_size}",
            f"  faults ({self.profile}): {self.fx.describe() or 'none'}",
        ]
        lines += [f"  {wf.describe()}" for wf in self.workflows]
        return "\n".join(lines)


PROFILES = ("mixed", "sigstop", "crashy", "lossy")


def make_config(seed: int, **overrides: Any) -> CompConfig:
    rng = random.Random(f"loomsim-composition-config:{seed}")

    def rate(hi: float, off: float = 0.2) -> float:
        return 0.0 if rng.random() < off else round(rng.uniform(0, hi), 3)

    settings = EngineSettings(
        shards=rng.choice([1, 1, 2]), lease_s=rng.choice([60.0, 120.0, 300.0, 900.0]),
        max_queue_delay_s=rng.choice([900, 900, 60, 0]), time_margin_ms=rng.choice([0, 3000]),
        sweep_max_items=rng.choice([3, 500, 500]), max_chain_steps=rng.choice([1, 2, 100, 100]),
        index_slack_s=rng.choice([0.0, 30.0, 300.0]), history_grace_s=rng.choice([86400.0, 0.0]),
        checkpoint_records=random.Random(f"loomsim-checkpoint:{seed}").choice([1, 2, 3, 100]))
    profile = rng.choices(PROFILES, weights=[55, 15, 20, 10])[0]
    u = rng.uniform
    if profile == "mixed":
        fx = FaultMix(crash=rate(0.3), error=rate(0.08), pause=rate(0.2), body_crash=rate(0.2), body_pause=rate(0.15),
                      body_overrun=rate(0.05, 0.5), lose_ack=rate(0.05, 0.5), dup=rate(0.3), drop=rate(0.15),
                      extra_delay=rng.choice([0.0, 5.0, 120.0]), stale=rate(0.5), tick_skip=rate(0.2, 0.5),
                      tick_double=rate(0.2, 0.5))
    elif profile == "sigstop":
        fx = FaultMix(crash=u(0.1, 0.3), pause=u(0.1, 0.3), body_pause=u(0.2, 0.5), dup=rate(0.2), stale=rate(0.3),
                      body_crash=rate(0.05))
    elif profile == "crashy":
        fx = FaultMix(crash=u(0.25, 0.5), error=u(0.0, 0.1), body_crash=u(0.1, 0.3), lose_ack=rate(0.1),
                      pause=rate(0.1))
    else:
        fx = FaultMix(drop=u(0.1, 0.3), dup=u(0.2, 0.5), extra_delay=120.0, lose_ack=u(0.0, 0.1),
                      tick_skip=u(0.1, 0.4), tick_double=u(0.1, 0.4), crash=rate(0.1))
    fx = FaultMix(**{k: round(v, 3) for k, v in fx.__dict__.items()})
    workflows = [generate(rng, 0, reliable=True)] + [generate(rng, i) for i in range(1, rng.randint(2, 4))]
    need = max(wf.timeout(i) for wf in workflows for i in range(len(wf.steps))) + settings.time_margin_ms / 1000
    config = CompConfig(seed=seed, settings=settings, visibility_s=rng.choice([30.0, 120.0, 360.0]),
                        max_receives=rng.choice([3, 5, 10]), page_size=rng.choice([1, 100]),
                        fault_ops=rng.randint(60, 140), n_execs=rng.randint(2, 5), workflows=workflows, fx=fx,
                        profile=profile, invocation_s=round(need * rng.choice([1.0, 1.5, 3.0]) + 1.0, 3),
                        body_time=rng.choice([0.0, 0.1, 0.5]), event_rate=rng.choice([0.04, 0.08, 0.15]),
                        cancel_rate=rng.choice([0.0, 0.004, 0.01, 0.02]), redrive_rate=rng.choice([0.0, 0.02, 0.05]))
    for key, value in overrides.items():
        setattr(config, key, value)
    return config


# -- observations ---------------------------------------------------------------------------------------
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


class CompStoreProxy(StoreProxy):
    """The base proxy plus observations of the new kinds' writes."""

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
            existed = items.event_sort_key(record.name, record.event_id) in self.inner.events.get(execution_id, {})
            applied = self.inner.put_event(execution_id, record, legacy=legacy)
            if applied:
                self.sim.observe_write("put_event", execution_id, record=record, before={"existed": existed})
            return applied
        return self.sim.call("put_event", call)


# -- the simulation -------------------------------------------------------------------------------------
class CompositionSim(Simulation):
    """``Simulation``'s scheduler and fault machinery over composition workflows (see the module docstring).
    Only the parts that know about workflows are replaced; ``call``, ``deliver``, ``sweep``, ``start``,
    ``takeover``, ``maybe_tick`` and the observation of commits are the main simulation's."""

    def __init__(self, config: CompConfig, store_factory: Callable[..., MemoryStore] = MemoryStore,
                 tracing: bool = False):  # noqa: D107 -- deliberately not calling Simulation.__init__
        self.config = config
        self.rng = random.Random(f"loomsim-composition:{config.seed}")
        self.fx = config.fx
        self.settings = config.settings
        self.clock = ManualClock(START)
        self.inner = store_factory(shards=config.settings.shards)
        self.queue = SimQueue(self, config.visibility_s, config.max_receives)
        self.store = CompStoreProxy(self.inner, self)
        self.qproxy = QueueProxy(self.queue, self)
        self.registry = Registry()
        self.specs: dict[str, CWorkflow] = {}
        for wf in config.workflows:
            register(wf, self.registry, self)
            self.specs[wf.name] = wf
        self.engine = Engine(self.store, self.qproxy, self.registry, self.clock, self.settings)
        self.sweeper = Sweeper(self.store, self.qproxy, self.clock, self.settings, self.registry,
                               page_size=config.page_size)
        self.tracing = tracing
        self.trace: list[str] = []
        self.stats: Counter = Counter()
        self.violations: list[str] = []
        self.known: list[str] = []
        self.ops: list[Op] = []
        self._op_ids = 0
        self._seq = 0
        self.faults_on = True
        self.max_depth = 2
        self.snapshots: deque = deque(maxlen=8)
        self.next_tick = START + dt.timedelta(seconds=SWEEP_INTERVAL_S)
        self.commits: dict[str, list] = {}
        self.puts: dict[str, list] = {}
        self.bodies: dict = {}
        self.creates: Counter = Counter()
        self.inputs: dict[str, str] = {}
        self.op_deadlines: dict[int, Any] = {}
        self.fault_stats: Counter = Counter()
        self.quiet_sweeps = 0
        self.liveness_bound = 0
        # composition observations
        self.journal: list[BodyEntry] = []
        self.writes: dict[str, list[Write]] = {}
        self.op_start_seq: dict[int, int] = {}
        self.event_sends: list[tuple[str, str, str, str]] = []
        """(execution, name, event_id, outcome) of every send_event that returned."""
        self.waiting_timeouts: dict[str, str] = {}
        rng = self.rng
        self.planned = [
            PlannedStart(i, (rng.choice(config.workflows) if i else config.workflows[0]).name,
                         self._input(rng), f"comp-{config.seed}-{i}", at_op=rng.randrange(max(1, config.fault_ops // 2)))
            for i in range(config.n_execs)
        ]
        self.planned.sort(key=lambda p: (p.at_op, p.index))

    @staticmethod
    def _input(rng: random.Random) -> dict:
        return {"items": [f"i{k}" for k in range(rng.choice([0, 1, 2, 3, 5, 6]))]}

    # -- observation hooks ----------------------------------------------------------------------------
    def snapshot_for(self, name: str) -> None:
        return None

    def observe_write(self, what: str, eid: str, *, step: int | None = None, record: Any = None, branch: Any = None,
                      before: dict | None = None, after: dict | None = None) -> None:
        op = self.op
        w = Write(self._next_seq(), what, eid, op.id if op else 0, self.clock.now(), step, record, branch, before, after)
        self.writes.setdefault(eid, []).append(w)
        self.stat(f"writes.{what}")
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
                  before=before)
        self.writes.setdefault(eid, []).append(w)
        if record.kind == "event" and record.error is not None and record.error.code == "event_timeout":
            self._check_timeout(eid, record, op)
        self.log(f"    store: {eid[:8]} put s{record.step_index} {record.kind} attempt {record.attempts} "
                 f"{record.status.value}{' final' if record.is_final else ''}"
                 f"{f' event {record.event_id}' if record.event_id else ''}")

    def _check_join_count(self, eid: str, index: int) -> None:
        """The join counts each completion once: its ``done`` equals what its generation began with plus
        the completions of that generation observed since."""
        join = self.inner.joins.get(eid, {}).get(index)
        if join is None:
            return
        began = [w for w in self.writes.get(eid, ()) if w.what == "put_join" and w.step == index
                 and w.record.generation == join.get("generation")]
        if not began:
            return
        start = began[-1]
        counted = [w for w in self.writes[eid] if w.what == "complete_branch" and w.step == index and w.seq > start.seq
                   and w.branch.generation == join.get("generation")]
        expected = start.record.done + len(counted)
        if join.get("done") != expected:
            self.violation(f"{eid[:8]} step {index}: the join of generation {join.get('generation')} counts "
                           f"done={join.get('done')}, but it began at {start.record.done} and {len(counted)} "
                           "completions of that generation were recorded (a completion counted twice or not at all)")

    def _check_timeout(self, eid: str, record: StepRecord, op: Op | None) -> None:
        """A wait times out only if no event of its name was kept, unconsumed by another step, from
        before the delivery that decided the timeout began."""
        wf = self.specs[self.inner.metas[eid]["workflow"]]
        name = wf.steps[record.step_index].event
        began = self.op_start_seq.get(op.id, 0) if op else 0
        consumed = {r.event_id for r in self.inner._records(eid)
                    if isinstance(r, StepRecord) and r.kind == "event" and r.event_id and r.step_index != record.step_index
                    and r.status.value == "SUCCEEDED"}
        sent_before = [w.record.event_id for w in self.writes.get(eid, ()) if w.what == "put_event"
                       and w.record.name == name and w.seq < began and w.record.event_id not in consumed]
        if sent_before:
            self.violation(f"{eid[:8]} step {record.step_index}: wait {name!r} recorded event_timeout (attempt "
                           f"{record.attempts}) although event(s) {sent_before} of that name were kept, consumed by "
                           "no other step, before the delivery began: an event was lost")

    # -- bodies ---------------------------------------------------------------------------------------
    def recorded_success(self, execution_id: str, index: int) -> bool:
        """The store holds a SUCCEEDED task record of step ``index`` for the execution's current run."""
        meta = self.inner.metas.get(execution_id, {})
        for key, item in self.inner.steps.get(execution_id, {}).items():
            if key.startswith(f"STEP#{index:03d}#") and not key.endswith("#compensation") \
                    and item.get("status") == "SUCCEEDED" and item.get("run") in (None, meta.get("created_at")):
                return True
        return False

    def on_cbody(self, kind: str, ctx, wf: CWorkflow, s: CSpec) -> BodyEntry:
        op = self.op
        entry = BodyEntry(self._next_seq(), kind, ctx.execution_id, s.index, ctx.branch if kind == "branch" else None,
                          ctx.attempt, op.id if op else 0, self.clock.now(), op.deadline if op else None)
        self.journal.append(entry)
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
            self.pause(op, f"inside {kind} body {s.name}")
        if p.body_crash:
            self.stat(f"crash.body.{kind}")
            raise SimulatedCrash(op.id, f"{kind} body {s.name}")
        self.check_deadline(op, f"{kind} body {s.name}")
        return entry

    def on_cbody_end(self, entry: BodyEntry, end: str) -> None:
        wf = self.specs[self.inner.metas[entry.execution_id]["workflow"]]
        timeout = wf.timeout(entry.step)
        if end == "ok" and (self.clock.now() - entry.at).total_seconds() > timeout:
            end = "overran"
        entry.end, entry.end_seq = end, self._next_seq()

    def _check_body_start(self, entry: BodyEntry, wf: CWorkflow) -> None:
        """Checked as each body starts, from the journal: a lane's limit, one attempt per branch at a
        time, a compensation only after the step it undoes (and never beside one of its bodies)."""
        now, eid, i = self.clock.now(), entry.execution_id, entry.step
        running = [b for b in self.journal if b is not entry and b.execution_id == eid and b.step == i
                   and b.running_at(entry.seq, now)]
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
            # A step is undone once a body of it succeeded, or (a cancel that caught it mid-attempt) once a
            # body of it ended without reporting: its effect is unknown. Never one that only failed cleanly.
            done = [b for b in self.journal if b.kind == "task" and b.execution_id == eid and b.step == i
                    and b.end in ("ok", "dead") and b.end_seq is not None and b.end_seq < entry.seq]
            meta = self.inner.metas.get(eid, {})
            caught = meta.get("undo_failed_step") and meta.get("failed_step") == i  # its attempt was cut short
            if not done and not caught:
                self.violation(f"{eid[:8]} step {i}: its compensation (attempt {entry.attempt}) started before any "
                               "body of the step it undoes had succeeded (or died without reporting)")
        elif entry.kind == "task":
            same = [b for b in running if b.kind == "task"]
            if same:
                self.violation(f"{eid[:8]} step {i}: task attempt {entry.attempt} started while attempt "
                               f"{same[0].attempt} (op {same[0].op_id}) still ran")

    # -- operations -----------------------------------------------------------------------------------
    def run_op(self, kind: str, label: str, plan: OpPlan, fn, mid=None, message=None, deadline_s=None) -> Op:
        self.op_start_seq[self._op_ids + 1] = self._next_seq()
        op = super().run_op(kind, label, plan, fn, mid=mid, message=message, deadline_s=deadline_s)
        end = self._next_seq()
        for entry in self.journal:
            if entry.op_id == op.id and entry.end_seq is None:
                entry.end, entry.end_seq = "dead", end
        return op

    def plan(self, kind: str) -> OpPlan:
        if not self.faults_on:
            return OpPlan()
        if kind == "deliver" and self.forced_plan is not None:
            p, self.forced_plan = self.forced_plan, None
            return p
        rng, fx, p = self.rng, self.fx, OpPlan()
        crash = fx.crash
        if kind == "deliver" and crash and self.hint in ("compensation", "wait"):
            crash = max(crash, 0.5)  # rarer deliveries: aim at them more often
        if rng.random() < crash:
            p.crash_after = rng.random() < 0.7
            if rng.random() < 0.4:
                p.crash_at = rng.randint(1, 14 if kind == "deliver" else 6)
            else:
                hint = self.hint if kind == "deliver" else None
                if hint is not None and rng.random() < (0.8 if hint in ("compensation", "wait") else 0.5):
                    aim = tuple(pt for pt in POINTS if pt.endswith(":" + hint)) + HINT_CALLS[hint]
                else:
                    aim = POINTS if kind == "deliver" and rng.random() < 0.5 else TARGETS[kind]
                p.crash_on = rng.choice(aim)
                if p.crash_on in REPEATING:
                    p.crash_nth = rng.choice([1, 1, 1, 2, 2, 3])
        if rng.random() < fx.error:
            p.error_at, p.error_after = rng.randint(1, 10), rng.random() < 0.5
        if len(self.ops) < self.max_depth and rng.random() < fx.pause:
            if rng.random() < 0.5:
                p.pause_at = rng.randint(1, 10)
            else:  # often at the races that matter most: a branch's claim and completion, a wait's commit
                aim = RACES if kind == "deliver" and rng.random() < 0.5 else TARGETS[kind]
                p.pause_on = rng.choice(aim)
                p.pause_nth = rng.choice([1, 1, 2])
            p.pause_after = rng.random() < 0.5
        if kind == "deliver":
            p.body_at = rng.choice([1, 1, 2])
            p.body_crash = rng.random() < fx.body_crash
            p.body_pause = len(self.ops) < self.max_depth and rng.random() < fx.body_pause
            p.body_overrun = rng.random() < fx.body_overrun
            p.lose_ack = rng.random() < fx.lose_ack
        return p

    def pause(self, op: Op, where: str) -> None:
        """As the main simulation's, and sometimes an event for the stopped worker's execution is sent
        meanwhile (around a wait's WAITING commit, its look for the event, its record)."""
        if self.concurrent_copy is not None:  # the other copy runs now, in another worker
            mid, self.concurrent_copy = self.concurrent_copy, None
            copy = self.queue.messages.get(mid)
            if copy is not None:
                self.stat("concurrent_copies.raced")
                self.log(f"  ~~ {op.kind} op {op.id} paused {where}; a copy of its message runs meanwhile")
                self.deliver(copy)
                return
        eid = op.message.execution_id if op.message is not None else None
        if (eid is not None and op.message.branch is not None and len(self.ops) <= self.max_depth
                and self.rng.random() < 0.6):
            # other workers run this fan-out's other branches meanwhile (branches really overlap)
            for _ in range(self.rng.randint(1, 3)):
                mine = sorted((m for m in self.queue.visible() if m.body.execution_id == eid and m.mid != op.mid),
                              key=lambda m: m.mid)
                if not mine:
                    break
                self.stat("pause.siblings_delivered")
                self.deliver(self.rng.choice(mine))
        if eid is not None and len(self.ops) <= self.max_depth and self.rng.random() < 0.3:
            self.stat("pause.event_sent")
            self.send_event(eid)
        if (eid is not None and len(self.ops) <= self.max_depth and self.config.cancel_rate
                and self.rng.random() < 0.08):
            self.stat("pause.cancelled")  # an operator cancels while this worker is stopped mid-step
            self.cancel(eid)
        super().pause(op, where)

    forced_plan: OpPlan | None = None
    concurrent_copy: int | None = None
    """A copy of the message being delivered, handed to another worker when the delivery pauses."""

    def deliver_copies_at_once(self, m) -> None:
        """SQS hands two workers copies of one message at once: the first stops before one of its
        conditional writes (a branch's claim or completion, a commit, a record) while the second runs."""
        self.queue.duplicate(m)
        copy = max(self.queue.messages)
        self.stat("concurrent_copies")
        self.forced_plan = OpPlan(pause_on=self.rng.choice(RACES), pause_after=False,
                                  pause_nth=self.rng.choice([1, 1, 2]))
        self.concurrent_copy = copy
        try:
            self.deliver(m)
        finally:
            self.forced_plan = self.concurrent_copy = None

    hint: str | None = None
    """What the delivery being planned will do (its message's branch, or the execution's current step)."""

    def deliver(self, m) -> None:
        self.hint = self.hint_for(m.body)
        self.stat(f"deliver.{self.hint}{'' if self.faults_on else '.quiet'}")
        try:
            super().deliver(m)
        finally:
            self.hint = None

    def hint_for(self, body) -> str | None:
        if body.branch is not None:
            return "branch"
        attrs = self.inner.metas.get(body.execution_id, {})
        if attrs.get("compensating"):
            return "compensation"
        wf = self.specs.get(attrs.get("workflow"))
        i = attrs.get("current_step", 0)
        if wf is None or i >= len(wf.steps):
            return None
        kind = wf.steps[i].kind
        return {"parallel": "fanout", "map": "fanout", "sleep": None}.get(kind, kind)

    def check_deadline(self, op: Op, where: str) -> None:
        """As the main simulation's, but at the deadline itself the invocation is already gone (the
        journal counts a body dead from then on, and a claim's lease may end at that very instant)."""
        if op.deadline is not None and self.clock.now() >= op.deadline:
            self.stat("crash.deadline")
            self.log(f"  ** invocation timed out ({where})")
            raise SimulatedCrash(op.id, f"deadline ({where})")

    def point(self, name: str, info: dict) -> None:
        """An engine fault point, named with the kind of work it lies in (see ``POINTS``)."""
        if name.startswith(("worker.", "step.")):
            name = f"{name}:{self.point_context(info)}"
        self.call(name, lambda: None, point=True)

    def point_context(self, info: dict) -> str:
        if info.get("compensation"):
            return "compensation"
        if info.get("branch") is not None:
            return "branch"
        attrs = self.inner.metas.get(info.get("execution_id") or "", {})
        wf = self.specs.get(attrs.get("workflow"))
        index = info.get("step")
        if wf is None or not isinstance(index, int) or index >= len(wf.steps):
            return "task"
        kind = wf.steps[index].kind
        return {"parallel": "fanout", "map": "fanout"}.get(kind, kind)

    def live(self) -> list[str]:
        return sorted(eid for eid, a in self.inner.metas.items() if a.get("status") not in TERMINAL)

    def known_ids(self) -> list[str]:
        return sorted(self.inner.metas)

    def send_event(self, eid: str | None = None, name: str | None = None, event_id: str | None = None) -> None:
        rng = self.rng
        ids = self.known_ids()
        if eid is None:
            if not ids:
                return
            eid = rng.choice(ids)
        wf = self.specs[self.inner.metas[eid]["workflow"]]
        names = sorted({s.event for s in wf.steps if s.kind == "wait"})
        if not names:
            return
        name = name or rng.choice(names)
        event_id = event_id or f"{name}-{rng.choice([0, 0, 0, 1, 2])}"
        plan = self.plan("event")

        attrs = self.inner.metas[eid]
        waits = [sp.index for sp in wf.steps if sp.kind == "wait" and sp.event == name]
        if attrs.get("status") not in TERMINAL and not attrs.get("compensating") and waits \
                and attrs.get("current_step", 0) < waits[0]:
            self.stat("event.sent_before_the_wait")

        def handle(op: Op) -> None:
            try:
                sent = self.engine.operator.send_event(eid, name, event_data(name, event_id), by="sim", event_id=event_id)
            except (EngineError, StorageError) as exc:
                self.stat(f"event.refused.{type(exc).__name__}")
                self.log(f"  -> send_event refused: {type(exc).__name__}: {str(exc)[:80]}")
                return
            except Exception as exc:
                if type(exc).__name__ in ("InjectedQueueError",):
                    self.stat("event.send_failed")
                    return
                self.violation(f"send_event raised {type(exc).__name__}: {exc}")
                return
            self.event_sends.append((eid, name, event_id, sent.outcome))
            self.stat(f"event.{sent.outcome}")
            self.log(f"  -> event {name}#{event_id}: {sent.outcome}")

        self.run_op("event", f"{eid[:8]} {name}#{event_id}", plan, handle)

    def cancel(self, eid: str | None = None) -> None:
        live = self.live()
        if eid is None:
            if not live:
                return
            eid = self.rng.choice(live)
        plan = self.plan("cancel")

        def handle(op: Op) -> None:
            try:
                e = self.engine.operator.cancel(eid, by="sim", reason="simulated operator")
            except (EngineError, StorageError) as exc:
                self.stat(f"cancel.refused.{type(exc).__name__}")
                self.log(f"  -> cancel refused: {type(exc).__name__}")
                return
            except Exception as exc:
                if type(exc).__name__ == "InjectedQueueError":
                    return
                self.violation(f"cancel raised {type(exc).__name__}: {exc}")
                return
            self.stat("cancel.compensating" if e.compensating else f"cancel.{e.status.value}")
            self.log(f"  -> cancel: {e.status.value}{' compensating' if e.compensating else ''}")

        self.run_op("cancel", eid[:8], plan, handle)

    def redrive(self) -> None:
        """An operator resumes a FAILED execution at its failed step (a fan-out begins a new generation
        there, keeping the branches that succeeded)."""
        failed = sorted(eid for eid, a in self.inner.metas.items() if a.get("status") == "FAILED")
        if not failed:
            return
        eid = self.rng.choice(failed)
        plan = self.plan("redrive")

        def handle(op: Op) -> None:
            try:
                e = self.engine.operator.redrive(eid, by="sim")
            except (EngineError, StorageError) as exc:
                self.stat(f"redrive.refused.{getattr(exc, 'code', type(exc).__name__)}")
                self.log(f"  -> redrive refused: {type(exc).__name__}")
                return
            except Exception as exc:
                if type(exc).__name__ == "InjectedQueueError":
                    return
                self.violation(f"redrive raised {type(exc).__name__}: {exc}")
                return
            self.stat("redrive.done")
            self.log(f"  -> redriven at step {e.current_step}")

        self.run_op("redrive", eid[:8], plan, handle)

    def advance_interesting(self) -> None:
        s = self.settings
        timeouts = [wf.timeout(i) for wf in self.config.workflows for i in range(len(wf.steps))]
        waits = [sp.wait_timeout for wf in self.config.workflows for sp in wf.steps if sp.kind == "wait"]
        choices = [self.rng.uniform(0, 5), self.config.visibility_s + 1, s.lease_s + 1,
                   max(timeouts) + s.time_margin_ms / 1000 + 1, SWEEP_INTERVAL_S] + [w + 1 for w in waits[:2]]
        self.advance(self.rng.choice(choices))

    # -- the liveness check, after every operation ---------------------------------------------------------
    def after_op(self) -> None:
        slack = dt.timedelta(seconds=self.settings.slack_s)
        due = self.inner.due_ids()
        for eid in sorted(self.inner.metas):
            a = self.inner.metas[eid]
            status = a.get("status")
            terminal = status in TERMINAL
            if terminal:
                if eid in due:
                    self.violation(f"{eid[:8]}: ended {status} but still in the due index")
                continue
            if eid not in due:
                self.violation(f"{eid[:8]}: live ({status}) without a due-index key: nothing would ever wake it")
                continue
            key, wake = due_key(a), a.get("next_wake_at")
            if status == "WAITING":
                timeout = self.waiting_timeouts.get(eid)
                if a.get("timer") != "event" or (key != wake and not self.queued_timer_key(a, wake, key)):
                    self.violation(f"{eid[:8]}: WAITING with timer {a.get('timer')} at {wake}, indexed at {key}: its "
                                   "key must be its timeout")
                elif timeout is not None and wake != timeout and wake != a.get("updated_at"):
                    # its timeout, or the instant an event (or an operator) woke it
                    self.violation(f"{eid[:8]}: WAITING indexed at {wake}: neither its timeout {timeout} nor "
                                   "the wake of its last commit")
            elif a.get("timer") == "lease":
                if not (isinstance(wake, str) and wake <= key and parse_ts(key) <= parse_ts(wake) + slack):
                    self.violation(f"{eid[:8]}: lease until {wake} indexed at {key}, outside [lease, lease + slack]")
            elif key != wake and not self.queued_timer_key(a, wake, key):
                self.violation(f"{eid[:8]}: {a.get('timer')} timer at {wake} indexed at {key}")
        from .world import due_snapshot

        self.snapshots.append(due_snapshot(self.inner))

    def observe_commit(self, transition, before, after) -> None:
        super().observe_commit(transition, before, after)
        eid = transition.new.execution_id
        if after.get("status") == "WAITING" and (before or {}).get("attempt") != after.get("attempt"):
            # a new wait period: its key is its timeout, from the step's declared timeout
            wf = self.specs[after["workflow"]]
            spec = wf.steps[after["current_step"]]
            expected = parse_ts(after["updated_at"]) + dt.timedelta(seconds=spec.wait_timeout)
            if parse_ts(after["next_wake_at"]) != expected:
                self.violation(f"{eid[:8]} step {spec.index}: WAITING until {after['next_wake_at']}, not its "
                               f"timeout {expected.isoformat()}")
            self.waiting_timeouts[eid] = after["next_wake_at"]

    # -- phases -----------------------------------------------------------------------------------------
    def fault_phase(self) -> None:
        rng, cfg = self.rng, self.config
        pending_starts = list(self.planned)
        want = 5 * len(self.planned)
        i = -1
        while True:
            i += 1
            if i >= cfg.fault_ops and (self.stats["ops.deliver"] >= want or i >= 4 * cfg.fault_ops):
                break
            while pending_starts and pending_starts[0].at_op <= i:
                self.start(pending_starts.pop(0))
                self.after_op()
            r = rng.random()
            visible = self.queue.visible()
            if r < cfg.event_rate:
                self.send_event()
                if rng.random() < 0.3 and self.event_sends:  # the sender retries the same id at once
                    eid, name, event_id, _ = self.event_sends[-1]
                    self.stat("event.retried_same_id")
                    self.send_event(eid, name, event_id)
            elif r < cfg.event_rate + cfg.cancel_rate:
                self.cancel()
            elif r < cfg.event_rate + cfg.cancel_rate + cfg.redrive_rate:
                self.redrive()
            elif r < 0.55:
                if visible and rng.random() < 0.08:
                    self.deliver_copies_at_once(rng.choice(visible))
                elif visible:
                    self.deliver(rng.choice(visible))
                else:
                    self.advance_to_next_event()
            elif r < 0.6:
                self.sweep("(extra)")
            elif r < 0.72:
                self.advance(rng.uniform(0, 10))
            elif r < 0.82:
                self.advance_to_next_event()
            elif r < 0.87:
                self.advance_interesting()
            elif r < 0.91 and self.queue.messages:
                self.duplicate_queued(rng)
            elif r < 0.93 and self.queue.messages and self.fx.drop:
                self.lose_queued(rng)
            elif r < 0.96:
                unacked = [p for p in self.planned if p.attempts and not p.acked]
                if unacked:
                    self.start(rng.choice(unacked))
            self.maybe_tick()
            self.after_op()
        for ps in pending_starts:
            self.start(ps)
            self.after_op()

    def compute_liveness_bound(self) -> int:
        """Sweeps within which every execution must end once faults stop: every step and every
        compensation at its worst (each branch of a fan-out one after another), plus sleeps and waits."""
        s, vis = self.settings, self.config.visibility_s
        worst = 0.0
        for wf in self.specs.values():
            total = 0.0
            for spec in wf.steps:
                timeout = wf.timeout(spec.index)
                lease = max(s.lease_s, timeout + s.time_margin_ms / 1000, self.config.invocation_s)
                wait = lease + s.slack_s + vis + 2 * SWEEP_INTERVAL_S
                p = wf.policy(spec.index)
                one = (p.max_attempts + 1) * (wait + timeout + p.max_delay)
                if spec.kind == "sleep":
                    total += spec.sleep_s + wait
                elif spec.kind == "wait":
                    total += p.max_attempts * (spec.wait_timeout + wait) + wait
                elif spec.kind in ("parallel", "map"):
                    total += 7 * one + 2 * wait
                else:
                    total += one
                    if spec.undo:
                        q = wf.undo_policy(spec.index)
                        total += (q.max_attempts + 1) * (wait + timeout + q.max_delay)
            worst = max(worst, total)
        return math.ceil(worst / SWEEP_INTERVAL_S) + 10

    def send_needed_events(self) -> None:
        """Quiet phase: an execution at a wait with no event of its name left to consume gets one."""
        for eid in self.live():
            a = self.inner.metas[eid]
            wf = self.specs[a["workflow"]]
            i = a.get("current_step", 0)
            if a.get("compensating") or i >= len(wf.steps) or wf.steps[i].kind != "wait" or wf.steps[i].unsent:
                continue
            name = wf.steps[i].event
            # A sender that was told its event was kept does not send again: an event counts as used
            # only once a wait that recorded it was advanced past (the engine's own records do not decide
            # this, or a wait that recorded an event and crashed before advancing would be handed another).
            used = self.used_events(eid)
            kept = [w.record.event_id for w in self.writes.get(eid, ()) if w.what == "put_event"
                    and w.record.name == name and w.record.event_id not in used]
            if not kept:
                n = sum(1 for s in self.event_sends if s[0] == eid)
                self.stat("quiet.events_sent")
                self.send_event(eid, name, f"{name}-q{n}")
                self.after_op()

    def used_events(self, eid: str) -> set[str]:
        """Event ids recorded by a wait whose delivery then advanced the execution past it."""
        used = set()
        writes = self.writes.get(eid, ())
        for c in self.commits.get(eid, ()):
            if c.before.get("compensating") or c.after.get("current_step") != (c.before.get("current_step") or 0) + 1:
                continue
            for w in writes:
                if (w.what == "put_step" and w.op_id == c.op_id and w.seq < c.seq and w.record.kind == "event"
                        and w.record.step_index == c.before.get("current_step") and w.record.event_id):
                    used.add(w.record.event_id)
        return used

    def quiet_phase(self) -> None:
        self.fault_stats = Counter(self.stats)
        self.faults_on = False
        self.log("== faults stop ==")
        for ps in self.planned:
            if not ps.acked:
                self.start(ps)
                if not ps.acked:
                    self.violation(f"start #{ps.index} was not acknowledged even without faults")
        self.liveness_bound = bound = self.compute_liveness_bound()
        interval = dt.timedelta(seconds=SWEEP_INTERVAL_S)
        self.next_tick = max(self.next_tick, self.clock.now())
        deliveries = 0
        while self.live():
            self.send_needed_events()
            visible = self.queue.visible()
            if visible:
                deliveries += 1
                if deliveries > 20_000:
                    self.violation("livelock: 20,000 deliveries after faults stopped and executions still live")
                    return
                self.deliver(min(visible, key=lambda m: (m.visible_at, m.mid)))
                self.after_op()
                continue
            due, nxt = self.next_due_at(), self.queue.next_visible_at()
            useful = None
            if due is not None:
                useful = self.next_tick + interval * max(0, math.ceil((due - self.next_tick) / interval))
            if nxt is None and useful is None:
                self.violation(f"live executions {[e[:8] for e in self.live()]} have no due time and no message")
                return
            target = nxt if nxt is not None and (useful is None or nxt < useful) else useful
            skipped = max(0, math.ceil((target - self.next_tick) / interval))
            self.next_tick += interval * skipped
            self.quiet_sweeps += skipped
            self.clock.set(max(target, self.clock.now()))
            if self.clock.now() >= self.next_tick:
                self.sweep("(scheduled)")
                self.quiet_sweeps += 1
                self.next_tick += interval
                self.after_op()
            if self.quiet_sweeps > bound:
                self.violation(f"executions {[e[:8] for e in self.live()]} not terminal within {bound} sweeps after "
                               "faults stopped")
                return
        for _ in range(10_000):  # drain: whatever is still queued must be harmless now
            if not self.queue.messages:
                break
            visible = self.queue.visible()
            if not visible:
                self.clock.set(self.queue.next_visible_at())
                continue
            self.deliver(min(visible, key=lambda m: (m.visible_at, m.mid)))
            self.after_op()
        for _ in range(3):  # sweeps after the end change nothing either
            self.clock.advance(SWEEP_INTERVAL_S)
            self.sweep("(after the end)")
            self.after_op()

    def run(self) -> CompositionSim:
        self.log(self.config.describe())
        self.stat(f"profile.{self.config.profile}")
        self.fault_phase()
        self.quiet_phase()
        for eid in sorted(self.inner.metas):
            a = self.inner.metas[eid]
            extra = ".compensated" if a.get("compensated") else ""
            code = ""
            if a.get("status") in ("FAILED", "COMPENSATION_FAILED") and isinstance(a.get("error"), str):
                import json

                code = "." + str(json.loads(a["error"]).get("code"))
            self.stat(f"result.{a.get('status')}{extra}{code}")
        from .composition_checks import check_composition

        check_composition(self)
        return self


# -- running seeds ----------------------------------------------------------------------------------------
@dataclass
class CompResult:
    seed: int
    violations: list[str]
    stats: Counter
    seconds: float
    trace: list[str] = field(default_factory=list)
    describe: str = ""
    digest: str = ""

    @property
    def ok(self) -> bool:
        return not self.violations

    def report(self, tail: int = 60) -> str:
        from .runner import focused_trace
        import re

        lines = [f"composition seed {self.seed} FAILED -- replay: make soak-composition SEED={self.seed}"]
        lines += [f"  - {v}" for v in self.violations[:10]]
        if self.trace:
            m = re.match(r"^([0-9a-f]{8})", self.violations[0])
            focus = focused_trace(self.trace, m.group(1)) if m else self.trace
            lines += [f"    {t}" for t in focus[-tail:]]
        return "\n".join(lines)


def run_seed(seed: int, tracing: bool = False, store_factory=None, **overrides) -> CompResult:
    import hashlib
    import time

    from .runner import _Quiet

    config = make_config(seed, **overrides)
    started = time.perf_counter()
    with _Quiet():
        sim = CompositionSim(config, store_factory or MemoryStore, tracing=tracing)
        sim.run()
    digest = hashlib.sha256("\n".join(sim.trace).encode()).hexdigest()[:16] if tracing else ""
    return CompResult(seed, list(sim.violations), sim.stats, time.perf_counter() - started, sim.trace,
                      config.describe(), digest)


def _run_chunk(args) -> list[CompResult]:
    seeds, kind = args
    factory = broken_store_class(kind) if kind else None
    out = []
    for seed in seeds:
        r = run_seed(seed, store_factory=factory)
        if not r.ok:
            r = run_seed(seed, tracing=True, store_factory=factory)
        out.append(r)
    return out


def run_many(seeds: list[int], jobs: int = 0, store_kind: str | None = None, chunk: int = 20) -> list[CompResult]:
    import multiprocessing
    import os

    jobs = jobs or min(2, os.cpu_count() or 1)
    chunks = [(seeds[i:i + chunk], store_kind) for i in range(0, len(seeds), chunk)]
    if jobs == 1 or len(chunks) == 1:
        return [r for c in chunks for r in _run_chunk(c)]
    with multiprocessing.get_context("fork").Pool(jobs) as pool:
        results = [r for part in pool.imap_unordered(_run_chunk, chunks) for r in part]
    return sorted(results, key=lambda r: r.seed)


# -- deliberately broken stores, for the checker's self-test ------------------------------------------------
def broken_store_class(kind: str):
    event_sort_key, event_to_attrs, branch_to_attrs = items.event_sort_key, items.event_to_attrs, items.branch_to_attrs
    if kind == "put_event_ignores_duplicates":
        class Broken(MemoryStore):
            def put_event(self, execution_id, record, legacy=False):
                self._count("put_event")
                # no attribute_not_exists: a repeated send is written (and reported new) again
                self.events.setdefault(execution_id, {})[event_sort_key(record.name, record.event_id)] = \
                    event_to_attrs(record)
                return True
    elif kind == "complete_branch_counts_twice":
        class Broken(MemoryStore):
            def complete_branch(self, execution_id, branch, expected_version):
                super().complete_branch(execution_id, branch, expected_version)
                join = self.joins[execution_id][branch.step_index]
                join["done"] = join.get("done", 0) + 1  # an ADD that went through twice
    elif kind == "branch_claim_not_counted":
        class Broken(MemoryStore):
            def update_branch(self, execution_id, branch, expected_version):
                old = self.branch_items.get((execution_id, branch.step_index), {}).get(branch.branch, {})
                super().update_branch(execution_id, branch, expected_version)
                if branch.status.value == "RUNNING":
                    # the claim's write forgets its counter (an update expression that lost its ADD)
                    self.branch_items[(execution_id, branch.step_index)][branch.branch]["attempt"] = old.get("attempt", 0)
    elif kind == "branch_claim_ignores_version":
        class Broken(MemoryStore):
            def update_branch(self, execution_id, branch, expected_version):
                self._count("update_branch")
                # no condition: two deliveries of one branch both claim it
                self.branch_items.setdefault((execution_id, branch.step_index), {})[branch.branch] = \
                    branch_to_attrs(branch)
    elif kind == "compensation_record_lost":
        class Broken(MemoryStore):
            def put_step(self, execution_id, record):
                if record.kind == "compensation" and record.status.value == "SUCCEEDED":
                    self._count("put_step")
                    return  # acknowledged, never stored
                super().put_step(execution_id, record)
    else:
        raise ValueError(kind)
    Broken.__name__ = f"MemoryStore[{kind}]"
    return Broken


BROKEN_KINDS = ("put_event_ignores_duplicates", "complete_branch_counts_twice", "branch_claim_not_counted",
                "branch_claim_ignores_version", "compensation_record_lost")
__all__ = ["BROKEN_KINDS", "CompositionSim", "MemoryStore", "broken_store_class", "make_config", "run_many",
           "run_seed"]
