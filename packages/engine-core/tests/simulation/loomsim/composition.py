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
import random
from collections import Counter, deque
from typing import Any, Callable

from engine_core import Engine, ManualClock, Registry, Sweeper
from engine_core.adapters.memory import MemoryStore
from engine_core.clock import parse_ts
from engine_core.kinds import KINDS, KindTable
from engine_core.settings import lease_seconds

from .composition_actions import OperatorActions, Token
from .composition_config import TERMINAL, CompConfig
from .composition_lifecycle import Lifecycle
from .composition_observe import BodyEntry, CompStoreProxy, Observing, Write
from .composition_phases import Phases
from .composition_runs import RunBook
from .composition_code import register as register_code
from .composition_workflows import CWorkflow, register
from .sim import START, SWEEP_INTERVAL_S, Op, OpPlan, PlannedStart, Simulation
from .world import QueueProxy, SimQueue, SimulatedCrash, due_key

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
    "cancel": ("load", "history", "commit", "send", "finalize"),
    "redrive": ("load", "history", "commit", "send"),
    "wake": ("load", "load_state", "commit", "send"),
    "callback": ("load", "load_state", "history", "list_events", "put_event", "commit", "send"),
}
HINT_CALLS = {
    "task": ("put_step", "commit", "send"),
    "compensation": ("put_step", "commit", "send", "finalize"),
    "wait": ("put_step", "commit", "list_events", "send"),
    "fanout": ("put_join", "create_branch", "update_branch", "branches", "commit", "put_step", "send"),
    "branch": ("get_branch", "update_branch", "complete_branch", "complete_branch", "get_join", "create_branch",
               "branches", "put_step", "commit", "send"),
}
RACES = ("update_branch", "update_branch", "complete_branch", "get_branch", "commit", "put_step", "list_events",
         "put_join", "create_branch")
REPEATING = ("put_step", "commit", "update_branch", "complete_branch", "send") + POINTS


# -- the simulation -------------------------------------------------------------------------------------
class CompositionSim(Observing, OperatorActions, Lifecycle, Phases, Simulation):
    """``Simulation``'s scheduler and fault machinery over composition workflows (see the module docstring).
    Only the parts that know about workflows are replaced; ``call``, ``deliver``, ``sweep``, ``start``,
    ``takeover``, ``maybe_tick`` and the observation of commits are the main simulation's."""

    def __init__(self, config: CompConfig, store_factory: Callable[..., MemoryStore] = MemoryStore,
                 tracing: bool = False, kinds: KindTable = KINDS):  # noqa: D107 -- not calling Simulation.__init__
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
        """The deployed workflows by name (a redeploy replaces one)."""
        self.all_specs: dict[str, CWorkflow] = {}
        """Every definition ever deployed, by fingerprint: what each run started on."""
        self.undeployed: dict[str, int] = {}
        """Fingerprints a redeploy replaced, and the sequence number from which they were gone."""
        for wf in config.workflows:
            (register_code if wf.code else register)(wf, self.registry, self)
            self.specs[wf.name] = wf
            self.all_specs[wf.definition.fingerprint] = wf
        self.engine = Engine(self.store, self.qproxy, self.registry, self.clock, self.settings, kinds=kinds)
        self.sweeper = Sweeper(self.store, self.qproxy, self.clock, self.settings, self.registry,
                               page_size=config.page_size)
        self.tracing = tracing
        self.trace: list[str] = []
        self.stats: Counter = Counter()
        self.delivered_calls: Counter = Counter()
        """Store calls made while a worker delivered a message of each execution (every run under its id)."""
        self.delivered_messages: Counter = Counter()
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
        self.runs = RunBook()
        self.op_runs: dict[tuple[int, str], str] = {}
        """The run each operation last wrote for, by (operation, execution): the run its bodies belong to."""
        self.tokens: list[Token] = []
        self.ttl_reported: set[tuple[str, str]] = set()
        self.unanswered_events: set[tuple[str, str, str]] = set()
        """(execution, name, event_id) of sends that died before answering (their sender sends again; until then
        the event may carry the TTL of the dead send's view: docs/workflows.md, a sender that got no answer)."""
        self.step_entered: dict[tuple, dt.datetime] = {}
        self.outlive_due = self.expire_due = False
        self.event_sends: list[tuple[str, str, str, str]] = []
        """(execution, name, event_id, outcome) of every send_event that returned."""
        self.waiting_timeouts: dict[str, str] = {}
        self.event_wakes: dict[str, list[dt.datetime]] = {}
        self.quiet_misfits: set[tuple[str, str, int]] = set()
        """When an operator's wake cut an event wait short, by execution: a wait may end before its timeout then."""
        rng = self.rng
        self.planned = [
            PlannedStart(i, (rng.choice(config.workflows) if i else config.workflows[0]).name,
                         self._input(rng), f"comp-{config.seed}-{i}", at_op=rng.randrange(max(1, config.fault_ops // 2)))
            for i in range(config.n_execs)
        ]
        self.planned.sort(key=lambda p: (p.at_op, p.index))

    @staticmethod
    def _input(rng: random.Random) -> dict:
        return {"items": [f"i{k}" for k in range(rng.choice([0, 1, 2, 3, 5, 6]))], "inc": 0}

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
        if self.config.ttl and self.rng.random() < 0.1:
            self.reap_expired()  # TTL deletes whenever it does, also while a worker is stopped
        # an operator cancels while this worker is stopped mid-step; more often inside the body of a step
        # with a compensation (the cancel must wait for that attempt, then undo it: issue 19)
        chance = 0.35 if self.paused_in == ("task", True) else 0.08
        if (eid is not None and len(self.ops) <= self.max_depth and self.config.cancel_rate
                and self.rng.random() < chance):
            self.stat("pause.cancelled" if chance < 0.3 else "pause.cancelled_in_a_compensable_body")
            self.cancel(eid)
            if chance > 0.3:  # and another worker takes what the cancel sent while this body still runs
                mine = sorted((m for m in self.queue.visible() if m.body.execution_id == eid and m.mid != op.mid),
                              key=lambda m: m.mid)
                for m in mine[:2]:
                    self.deliver(m)
        super().pause(op, where)

    paused_in: tuple[str, bool] | None = None
    """While a body stops: its kind and whether its step has a compensation."""
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
        calls = getattr(self.inner, "calls", {})  # the SQLite store counts none (nor does its ledger)
        before = sum(calls.values())
        try:
            super().deliver(m)
        finally:
            self.hint = None
            # What the cost ledger may claim at most (composition_checks.py, ``ledger``): a copy delivered
            # while another pauses is counted in both, which only loosens the bound.
            self.delivered_calls[m.body.execution_id] += sum(calls.values()) - before
            self.delivered_messages[m.body.execution_id] += 1

    def hint_for(self, body) -> str | None:
        if body.branch is not None:
            return "branch"
        attrs = self.inner.metas.get(body.execution_id, {})
        if attrs.get("compensating"):
            return "compensation"
        wf = self.spec_for(attrs)
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
        wf = self.spec_for(attrs)
        index = info.get("step")
        if wf is None or not isinstance(index, int) or index >= len(wf.steps):
            return "task"
        kind = wf.steps[index].kind
        return {"parallel": "fanout", "map": "fanout"}.get(kind, kind)

    def spec_for(self, attrs: dict) -> CWorkflow | None:
        """The workflow an execution item's run started on (by fingerprint: a redeploy changes the name's)."""
        return self.all_specs.get(attrs.get("fingerprint")) or self.specs.get(attrs.get("workflow"))

    def live(self) -> list[str]:
        return sorted(eid for eid, a in self.inner.metas.items() if a.get("status") not in TERMINAL)

    def known_ids(self) -> list[str]:
        return sorted(self.inner.metas)

    def advance_interesting(self) -> None:
        s = self.settings
        timeouts = [wf.timeout(i) for wf in self.config.workflows for i in range(len(wf.steps))]
        waits = [sp.wait_timeout for wf in self.config.workflows for sp in wf.steps if sp.kind == "wait"]
        choices = [self.rng.uniform(0, 5), self.config.visibility_s + 1, s.lease_s + 1,
                   max(timeouts) + s.time_margin_ms / 1000 + 1, SWEEP_INTERVAL_S] + [w + 1 for w in waits[:2]]
        self.advance(self.rng.choice(choices))

    # -- the liveness check, after every operation ---------------------------------------------------------
    def queued_timer_key(self, attrs: dict, wake: str, key: str) -> bool:
        """As the main simulation's, and also by the definition the execution started on: a key written before
        a redeploy carries that definition's lease, not the one the registry now holds."""
        if super().queued_timer_key(attrs, wake, key):
            return True
        spec = self.all_specs.get(attrs.get("fingerprint"))
        delay_s = (parse_ts(wake) - parse_ts(attrs["updated_at"])).total_seconds()
        if spec is None or delay_s > self.settings.max_queue_delay_s:
            return False
        steps, index = spec.definition.steps, attrs["current_step"]
        timeout = self.engine.life.timeout_s(spec.definition, index) if index < len(steps) else 0.0
        lease = lease_seconds(self.settings, timeout)
        return parse_ts(key) == parse_ts(wake) + dt.timedelta(seconds=lease)

    def after_op(self) -> None:
        """After every operation: the due index holds every live execution (keyed as its timer says) and
        no ended one, and no item of a live execution's run has expired."""
        self.check_live_ttls("after an operation")
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
        c = self.commits[eid][-1]
        if self.op is not None:
            self.op_runs[(self.op.id, eid)] = after.get("created_at")
        if c.op_kind == "wake":
            self.check_wake_commit(c)
        self.note_step_span(eid, before or {}, after)
        self.note_long_timer(after.get("next_wake_at"))
        if self.config.ttl and self.faults_on and after.get("status") in TERMINAL \
                and (before or {}).get("status") not in TERMINAL:
            self.expire_due = True  # the fault phase soon passes its retention, and its token is used again
        if c.op_kind == "redrive" and not self.goes_on_here(after.get("fingerprint"), eid, after.get("created_at")):
            self.violation(f"{eid[:8]}: redriven although its definition was replaced (fingerprint "
                           f"{after.get('fingerprint')}): the redrive would run the wrong step list")
        if after.get("status") == "WAITING" and (before or {}).get("attempt") != after.get("attempt"):
            # a new wait period: its key is its timeout, from the step's declared timeout (under a compatible
            # same-version redeploy, the deployed list's: timeouts may differ there, DESIGN.md's versions)
            wf = self.spec_for(after)
            if not self.deployed(after.get("fingerprint")) \
                    and self.goes_on_here(after.get("fingerprint"), eid, after.get("created_at")):
                wf = self.specs.get(after.get("workflow")) or wf
            spec = wf.steps[after["current_step"]]
            expected = parse_ts(after["updated_at"]) + dt.timedelta(seconds=spec.wait_timeout)
            if parse_ts(after["next_wake_at"]) != expected:
                self.violation(f"{eid[:8]} step {spec.index}: WAITING until {after['next_wake_at']}, not its "
                               f"timeout {expected.isoformat()}")
            self.waiting_timeouts[eid] = after["next_wake_at"]

    def note_long_timer(self, wake: str | None) -> None:
        """A timer (a wait's timeout, a sleep, a backoff, a branch's retry) reaching past retention plus grace:
        the fault phase soon lets that much time pass, so the execution outlives its retention while live."""
        s = self.settings
        if self.config.ttl and isinstance(wake, str) and self.faults_on and (parse_ts(wake) - self.clock.now(
                )).total_seconds() > s.retention_days * 86400 + s.history_grace_s:
            self.stat("ttl.long_timer")
            self.outlive_due = True

    def note_step_span(self, eid: str, before: dict, after: dict) -> None:
        """Counts steps that lasted longer than retention plus grace while their execution was live (what
        TTLs must survive): a wait, a sleep, a fan-out, a retried task."""
        run, step = after.get("created_at"), before.get("current_step")
        key = (eid, run, after.get("current_step"), bool(after.get("compensating")))
        self.step_entered.setdefault(key, self.clock.now())
        if step is None or (step == after.get("current_step") and after.get("status") not in TERMINAL):
            return
        began = self.step_entered.get((eid, run, step, bool(before.get("compensating"))))
        s = self.settings
        if began is not None and (self.clock.now() - began).total_seconds() > s.retention_days * 86400 + s.history_grace_s:
            wf = self.spec_for(after)
            kind = "compensation" if before.get("compensating") else wf.steps[step].kind if wf and step < len(
                wf.steps) else "?"
            self.stat(f"ttl.step_outlived_retention.{kind}")

    def run(self) -> CompositionSim:
        """Both phases; ``composition_checks.check_composition`` then checks what happened."""
        self.log(self.config.describe())
        self.stat(f"profile.{self.config.profile}")
        self.fault_phase()
        self.quiet_phase()
        for info, view in self.runs.views(self.inner):
            if view is None:
                continue
            e = view.final
            extra = ".compensated" if e.compensated else ""
            code = f".{e.error.code}" if e.status.value in ("FAILED", "COMPENSATION_FAILED") and e.error else ""
            self.stat(f"result.{e.status.value}{extra}{code}")
            if len(self.runs.runs[info.execution_id]) > 1:
                self.stat(f"runs.result.{e.status.value}")
        return self
