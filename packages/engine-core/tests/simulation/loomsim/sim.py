"""The scheduler: one seed -> one configuration -> one run of the real Engine and Sweeper.

A run has two phases. In the *fault phase* the scheduler picks, at random (seeded), among: delivering
any visible message (so messages are reordered), sweeping, moving the clock, starting executions,
duplicating or losing queued messages; every operation carries a fault plan (crash before/after its
k-th store or queue call, an injected error, a pause that runs other operations re-entrantly, a
crash or pause inside the step body, too little invocation time, a lost acknowledgement). Sweeps also
fire on a 60 s schedule (sometimes skipped or doubled) and may read a stale due index.
In the *quiet phase* faults stop: starts that were never acknowledged are retried, messages are
delivered in order and the sweeper runs on schedule; every execution must end within a bound
computed from its remaining steps. Then the queue is drained and the checker runs.
"""

from __future__ import annotations

import datetime as dt
import math
import random
from collections import Counter, deque
from dataclasses import dataclass
from typing import Any, Callable

from engine_core import Engine, EngineSettings, ManualClock, Registry, Sweeper
from engine_core.clock import UTC, parse_ts
from engine_core.errors import InsufficientTimeError, StepBusyError
from engine_core.settings import lease_seconds
from engine_core.storage.memory import MemoryStore

from .world import (
    InjectedQueueError,
    InjectedStorageError,
    Op,
    OpPlan,
    QueueProxy,
    SimMessage,
    SimQueue,
    SimulatedCrash,
    StoreProxy,
    due_snapshot,
)
from .workflows import Ledger, StepSpec, WorkflowSpec, generate, register

START = dt.datetime(2026, 1, 1, tzinfo=UTC)
CRASH_TARGETS = {
    "deliver": ("load", "record_intent", "commit", "send", "finalize", "send_dead_letter", "ack"),
    "sweep": ("query_due", "load", "commit", "send"),
    "start": ("create", "send"),
}
# What Engine.process may raise to ask for redelivery; anything else escaping it is a bug.
REDELIVER = (InsufficientTimeError, StepBusyError, InjectedStorageError, InjectedQueueError)
SWEEP_INTERVAL_S = 60.0
TERMINAL = ("COMPLETED", "FAILED")


PROFILES = ("mixed", "sigstop", "crashy", "lossy", "stale")


@dataclass(frozen=True)
class FaultMix:
    """Per-operation probabilities while faults are on (a seed may switch any of them off)."""

    crash: float = 0.0        # crash before/after the k-th store or queue call of an operation
    error: float = 0.0        # that call raises instead (StorageError / SendMessage error), maybe after applying
    pause: float = 0.0        # the operation stops at a call while others run (SIGSTOP), then resumes
    body_crash: float = 0.0   # the worker dies inside the step body, after its side effect
    body_pause: float = 0.0   # the worker stops inside the step body
    low_time: float = 0.0     # the invocation has too little time left for the step
    lose_ack: float = 0.0     # the acknowledgement never reaches SQS
    dup: float = 0.0          # a send is delivered twice
    drop: float = 0.0         # a send is lost
    extra_delay: float = 0.0  # seconds a send may be late beyond its DelaySeconds
    stale: float = 0.0        # a due-index query answers from an older snapshot
    tick_skip: float = 0.0    # a scheduled sweep does not fire
    tick_double: float = 0.0  # a scheduled sweep fires twice (EventBridge at-least-once)

    def describe(self) -> str:
        return " ".join(f"{k}={v:g}" for k, v in self.__dict__.items() if v)


@dataclass
class SimConfig:
    seed: int
    settings: EngineSettings
    visibility_s: float
    max_receives: int
    page_size: int
    fault_ops: int
    n_execs: int
    workflows: list[WorkflowSpec]
    fx: FaultMix
    caps: bool
    profile: str = "mixed"

    def describe(self) -> str:
        s = self.settings
        lines = [
            f"seed {self.seed}: {self.n_execs} executions, {self.fault_ops} fault-phase operations",
            f"  settings: shards={s.shards} lease_s={s.lease_s:g} max_queue_delay_s={s.max_queue_delay_s} "
            f"time_margin_ms={s.time_margin_ms} sweep_max_items={s.sweep_max_items} max_steps={s.max_steps} "
            f"max_total_attempts={s.max_total_attempts}",
            f"  queue: visibility={self.visibility_s:g}s max_receives={self.max_receives}; sweeper page_size={self.page_size}",
            f"  faults ({self.profile}): {self.fx.describe() or 'none'}",
        ]
        lines += [f"  {wf.describe()}" for wf in self.workflows]
        return "\n".join(lines)


def make_config(seed: int, **overrides: Any) -> SimConfig:
    rng = random.Random(f"loomsim-config:{seed}")

    def rate(hi: float, off: float = 0.2) -> float:
        return 0.0 if rng.random() < off else round(rng.uniform(0, hi), 3)

    caps = rng.random() < 0.15
    settings = EngineSettings(
        shards=rng.choice([1, 1, 2, 4]),
        lease_s=rng.choice([60.0, 120.0, 300.0, 900.0]),
        max_queue_delay_s=rng.choice([900, 900, 900, 60, 0]),
        time_margin_ms=rng.choice([0, 3000]),
        sweep_max_items=rng.choice([1, 3, 500, 500]),
        max_steps=rng.choice([1, 2, 3]) if caps else 1000,
        max_total_attempts=rng.choice([1, 2, 3, 5]) if caps else 5000,
    )
    # Most seeds mix every fault at random rates; the rest concentrate on one theme, so that rare
    # combinations (a stopped worker whose message comes back, then a crash at its checkpoint) occur.
    profile = rng.choices(PROFILES, weights=[50, 15, 15, 10, 10])[0]
    u = rng.uniform
    if profile == "mixed":
        fx = FaultMix(
            crash=rate(0.3), error=rate(0.1), pause=rate(0.2), body_crash=rate(0.2), body_pause=rate(0.15),
            low_time=rate(0.05, 0.5), lose_ack=rate(0.05, 0.5), dup=rate(0.3), drop=rate(0.15),
            extra_delay=rng.choice([0.0, 5.0, 120.0, 1000.0]), stale=rate(0.5), tick_skip=rate(0.2, 0.5),
            tick_double=rate(0.2, 0.5))
    elif profile == "sigstop":  # workers stop mid-call or mid-body while others take over, then resume
        fx = FaultMix(crash=u(0.1, 0.3), pause=u(0.1, 0.3), body_pause=u(0.2, 0.5), dup=rate(0.2),
                      stale=rate(0.3), body_crash=rate(0.05))
    elif profile == "crashy":  # processes die after any call; calls fail, sometimes after applying
        fx = FaultMix(crash=u(0.25, 0.5), error=u(0.0, 0.15), body_crash=u(0.1, 0.3), lose_ack=rate(0.1),
                      pause=rate(0.1), low_time=rate(0.05))
    elif profile == "lossy":  # the queue and the schedule misbehave: lost, doubled, late, dead-lettered
        fx = FaultMix(drop=u(0.1, 0.3), dup=u(0.2, 0.5), extra_delay=1000.0, lose_ack=u(0.0, 0.1),
                      tick_skip=u(0.1, 0.4), tick_double=u(0.1, 0.4), crash=rate(0.1))
    else:  # "stale": the due index lags and sweeps overlap each other and the workers
        fx = FaultMix(stale=u(0.5, 0.9), pause=u(0.2, 0.4), tick_double=u(0.2, 0.5), crash=rate(0.1),
                      dup=rate(0.2))
    fx = FaultMix(**{k: round(v, 3) for k, v in fx.__dict__.items()})
    workflows = [generate(rng, 0, plain_only=True)] + [generate(rng, i) for i in range(1, rng.randint(2, 4))]
    config = SimConfig(seed=seed, settings=settings, visibility_s=rng.choice([30.0, 120.0, 360.0, 1200.0]),
                       max_receives=rng.choice([2, 3, 5, 10]), page_size=rng.choice([1, 2, 100]),
                       fault_ops=rng.randint(60, 160), n_execs=rng.randint(3, 8), workflows=workflows, fx=fx,
                       caps=caps, profile=profile)
    for key, value in overrides.items():
        setattr(config, key, value)
    return config


@dataclass
class PlannedStart:
    index: int
    workflow: str
    input: dict
    token: str
    at_op: int
    eid: str | None = None
    acked: int = 0
    attempts: int = 0


@dataclass(frozen=True)
class CommitObs:
    seq: int
    execution_id: str
    expected_step: int
    expected_version: int
    new_step: int
    new_version: int
    new_status: str
    prev_version: Any
    prev_status: Any
    settle_index: int | None
    settle_status: str | None
    settle_final: bool
    error_code: str | None
    op_id: int
    mid: int | None
    at: dt.datetime
    fault_phase: bool


@dataclass(frozen=True)
class IntentObs:
    seq: int
    attempt: int
    at: dt.datetime
    op_id: int


class Simulation:
    def __init__(self, config: SimConfig, store_factory: Callable[..., MemoryStore] = MemoryStore,
                 tracing: bool = False):
        self.config = config
        self.rng = random.Random(f"loomsim:{config.seed}")
        self.fx = config.fx
        self.settings = config.settings
        self.clock = ManualClock(START)
        self.inner = store_factory(shards=config.settings.shards)
        self.queue = SimQueue(self, config.visibility_s, config.max_receives)
        self.store = StoreProxy(self.inner, self)
        self.qproxy = QueueProxy(self.queue, self)
        self.registry = Registry()
        self.specs: dict[str, WorkflowSpec] = {}
        for wf in config.workflows:
            register(wf, self.registry, self.on_body)
            self.specs[wf.name] = wf
        self.engine = Engine(self.store, self.qproxy, self.registry, self.clock, self.settings)
        self.sweeper = Sweeper(self.store, self.qproxy, self.clock, self.settings, self.registry,
                               page_size=config.page_size)
        self.tracing = tracing
        self.trace: list[str] = []
        self.stats: Counter = Counter()
        self.violations: list[str] = []
        self.ops: list[Op] = []
        self._op_ids = 0
        self._seq = 0
        self.faults_on = True
        self.max_depth = 2
        self.snapshots: deque[dict[str, str]] = deque(maxlen=8)
        self.next_tick = START + dt.timedelta(seconds=SWEEP_INTERVAL_S)
        self.ledger = Ledger()
        self.commits: dict[str, list[CommitObs]] = {}
        self.intents: dict[tuple[str, int], list[IntentObs]] = {}
        self.creates: Counter = Counter()
        self.body_attempts: dict[tuple[str, int], list[tuple[int, int]]] = {}
        self.fault_stats: Counter = Counter()
        self.quiet_sweeps = 0
        self.liveness_bound = 0
        rng = self.rng
        self.planned = [  # start #0 always runs the reliable workflow, so every seed has one to finish
            PlannedStart(i, (rng.choice(config.workflows) if i else config.workflows[0]).name, {"n": i, "seed": config.seed},
                         f"sim-{config.seed}-{i}", at_op=rng.randrange(max(1, config.fault_ops * 2 // 3)))
            for i in range(config.n_execs)
        ]
        self.planned.sort(key=lambda p: (p.at_op, p.index))

    # -- bookkeeping --------------------------------------------------------------------------------
    def stat(self, key: str, n: int = 1) -> None:
        self.stats[key] += n

    def violation(self, text: str) -> None:
        self.violations.append(text)
        self.log(f"!! VIOLATION: {text}")

    def log(self, text: str) -> None:
        if self.tracing:
            t = (self.clock.now() - START).total_seconds()
            self.trace.append(f"{t:10.1f}s {'    ' * max(0, len(self.ops) - 1)}{text}")

    def _next_seq(self) -> int:
        self._seq += 1
        return self._seq

    @property
    def op(self) -> Op | None:
        return self.ops[-1] if self.ops else None

    # -- observations (made inside the store proxy, after the inner call succeeded) -------------------
    def observe_create(self, execution) -> None:
        self.creates[execution.execution_id] += 1
        self.commits.setdefault(execution.execution_id, [])
        self.log(f"    store: created {execution.execution_id[:8]} ({execution.workflow}) v1")

    def observe_intent(self, eid: str, index: int, attempt: int, at: dt.datetime) -> None:
        op = self.op
        self.intents.setdefault((eid, index), []).append(IntentObs(self._next_seq(), attempt, at, op.id if op else 0))
        self.log(f"    store: {eid[:8]} intent s{index} attempt {attempt}")

    def observe_commit(self, transition, before: dict | None) -> None:
        new, settle = transition.new, transition.step
        op = self.op
        obs = CommitObs(
            seq=self._next_seq(), execution_id=new.execution_id, expected_step=transition.expected_step,
            expected_version=transition.expected_version, new_step=new.current_step, new_version=new.version,
            new_status=new.status.value, prev_version=None if before is None else before.get("version"),
            prev_status=None if before is None else before.get("status"),
            settle_index=None if settle is None else settle.step_index,
            settle_status=None if settle is None else settle.status.value,
            settle_final=bool(settle and settle.is_final),
            error_code=None if settle is None or settle.error is None else settle.error.code,
            op_id=op.id if op else 0, mid=op.mid if op else None, at=self.clock.now(), fault_phase=self.faults_on,
        )
        self.commits.setdefault(new.execution_id, []).append(obs)
        self.stat("commits.fault_phase" if self.faults_on else "commits.quiet_phase")
        if self.faults_on and op is not None and op.kind == "deliver":
            self.stat("commits.fault_phase_by_workers")
        settled = f" settle s{obs.settle_index} {obs.settle_status}{' final' if obs.settle_final else ''}" if settle else ""
        self.log(f"    store: {new.execution_id[:8]} commit v{obs.expected_version}->v{obs.new_version} s{obs.expected_step}->s{obs.new_step} "
                 f"{obs.new_status}{settled}")

    def on_body(self, workflow: str, spec: StepSpec, ctx) -> None:
        """Called first thing in every step body: count it, then maybe crash or pause right there."""
        key = (ctx.execution_id, spec.index)
        self.ledger.record(ctx.execution_id, spec.index, ctx.attempt)
        op = self.op
        self.body_attempts.setdefault(key, []).append((ctx.attempt, self._next_seq()))
        self.stat("bodies")
        self.log(f"    body {workflow}.{spec.name} attempt {ctx.attempt}")
        if op is None or not self.faults_on:
            return
        if op.plan.body_pause:
            op.plan.body_pause = False
            self.pause(op, f"inside body {spec.name}")
        if op.plan.body_crash:
            self.stat("crash.body")
            raise SimulatedCrash(op.id, f"body {spec.name}")

    # -- the fault point: every store and queue call comes through here -----------------------------
    def call(self, name: str, fn: Callable[[], Any]) -> Any:
        op = self.op
        if op is None or not self.faults_on:
            return fn()
        op.calls += 1
        k, p = op.calls, op.plan
        if p.pause_at == k and not p.pause_after:
            self.pause(op, f"before {name}")
        crash_here = p.crash_at == k or p.crash_on == name
        if crash_here and not p.crash_after:
            self._crash(op, f"before {name}")
        if p.error_at == k and not p.error_after:
            raise self._injected(name, "before")
        error: Exception | None = None
        result = None
        try:
            result = fn()
        except Exception as exc:  # the store's own answer (conflict, busy, settled): passed on below
            error = exc
        if p.pause_at == k and p.pause_after:
            self.pause(op, f"after {name}")
        if crash_here and p.crash_after:
            self._crash(op, f"after {name}")
        if p.error_at == k and p.error_after and error is None:
            raise self._injected(name, "after (applied)")
        if error is not None:
            raise error
        return result

    def _crash(self, op: Op, where: str) -> None:
        self.stat(f"crash.{where.replace(' ', '.')}")
        self.log(f"  ** crash {where}")
        raise SimulatedCrash(op.id, where)

    def _injected(self, name: str, when: str) -> Exception:
        self.stat(f"error.{name}")
        self.log(f"  ** {name} fails {when}")
        if name in ("send", "send_dead_letter", "ack"):
            return InjectedQueueError(f"injected SendMessage/DeleteMessage failure {when}")
        return InjectedStorageError(f"injected {name} failure {when}")

    def stale_snapshot(self) -> dict[str, str] | None:
        if not self.faults_on or not self.fx.stale or not self.snapshots or self.rng.random() >= self.fx.stale:
            return None
        return self.snapshots[self.rng.randrange(len(self.snapshots))]

    def plan(self, kind: str) -> OpPlan:
        if not self.faults_on:
            return OpPlan()
        rng, fx, p = self.rng, self.fx, OpPlan()
        if rng.random() < fx.crash:
            p.crash_after = rng.random() < 0.7
            if rng.random() < 0.5:
                p.crash_at = rng.randint(1, 8)
            else:  # aim at a method, so rare points (finalize, the DLQ notice, the ack) are hit as often
                p.crash_on = rng.choice(CRASH_TARGETS[kind])
        if rng.random() < fx.error:
            p.error_at, p.error_after = rng.randint(1, 8), rng.random() < 0.5
        if len(self.ops) < self.max_depth and rng.random() < fx.pause:
            p.pause_at, p.pause_after = rng.randint(1, 6), rng.random() < 0.5
        if kind == "deliver":
            p.body_crash = rng.random() < fx.body_crash
            p.body_pause = len(self.ops) < self.max_depth and rng.random() < fx.body_pause
            p.low_time = rng.random() < fx.low_time
            p.lose_ack = rng.random() < fx.lose_ack
        return p

    # -- operations ---------------------------------------------------------------------------------
    def run_op(self, kind: str, label: str, plan: OpPlan, fn: Callable[[Op], None], mid: int | None = None) -> Op:
        self._op_ids += 1
        op = Op(self._op_ids, kind, len(self.ops), plan, label, mid=mid)
        self.ops.append(op)
        self.stat(f"ops.{kind}")
        self.log(f"{kind} {label}".rstrip())
        try:
            fn(op)
        except SimulatedCrash as crash:
            if crash.op_id != op.id:
                raise
            op.crashed = True
            self.stat(f"crashed.{kind}")
        finally:
            self.ops.pop()
        return op

    def deliver(self, m: SimMessage) -> None:
        receipt = self.queue.receive(m)
        if receipt is None:
            return
        plan = self.plan("deliver")
        label = f"#{m.mid} ({m.body.execution_id[:8]} s{m.body.step} v{m.body.version}) receive {receipt}"

        def handle(op: Op) -> None:
            remaining = (lambda: 500) if plan.low_time else None
            try:
                outcome = self.engine.process(m.body, remaining_ms=remaining)
            except REDELIVER as exc:  # the handler raised: SQS redelivers after the visibility timeout
                self.stat(f"raised.{type(exc).__name__}")
                self.log(f"  -> raised {type(exc).__name__} (not acknowledged)")
                return
            except Exception as exc:
                self.violation(f"Engine.process raised {type(exc).__name__}: {exc} on {label}")
                return
            self.stat(f"outcome.{outcome.kind}")
            self.log(f"  -> {outcome.kind} {outcome.detail}".rstrip())
            if plan.lose_ack:
                self.stat("ack.lost")
                self.log("  ** acknowledgement lost")
                return
            try:
                self.call("ack", lambda: self.queue.ack(m, receipt))
            except InjectedQueueError:
                return

        self.run_op("deliver", label, plan, handle, mid=m.mid)

    def sweep(self, why: str) -> None:
        plan = self.plan("sweep")

        def handle(op: Op) -> None:
            try:
                report = self.sweeper.sweep()
            except (InjectedStorageError, InjectedQueueError) as exc:
                self.stat(f"raised.sweep.{type(exc).__name__}")
                self.log(f"  -> sweep raised {type(exc).__name__}")
                return
            except Exception as exc:
                self.violation(f"Sweeper.sweep raised {type(exc).__name__}: {exc}")
                return
            for reason, n in report.redriven.items():
                self.stat(f"sweep.redriven.{reason}", n)
            for reason, n in report.skipped.items():
                self.stat(f"sweep.skipped.{reason}", n)
            if report.truncated:
                self.stat("sweep.truncated")
            self.log(f"  -> redriven {dict(report.redriven)} skipped {dict(report.skipped)}")

        self.run_op("sweep", why, plan, handle)

    def start(self, ps: PlannedStart) -> None:
        plan = self.plan("start")
        ps.attempts += 1

        def handle(op: Op) -> None:
            try:
                result = self.engine.start(ps.workflow, ps.input, ps.token)
            except InjectedStorageError:
                self.log("  -> start failed (client will retry with the same token)")
                return
            except Exception as exc:
                self.violation(f"Engine.start raised {type(exc).__name__}: {exc} (start #{ps.index}, attempt {ps.attempts})")
                return
            eid = result.execution.execution_id
            if ps.eid is not None and eid != ps.eid:
                self.violation(f"start #{ps.index}: the same token returned {eid}, earlier {ps.eid}")
            if ps.acked and result.created:
                self.violation(f"start #{ps.index}: a repeated start created execution {eid} again")
            ps.eid = eid
            ps.acked += 1
            if eid not in self.inner.metas:
                self.violation(f"start #{ps.index}: acknowledged execution {eid} does not exist in the store")
            self.log(f"  -> acknowledged {eid[:8]} ({ps.workflow}) created={result.created}")

        self.run_op("start", f"#{ps.index} {ps.workflow} token={ps.token}", plan, handle)

    def pause(self, op: Op, where: str) -> None:
        """The operation on top of the stack stops here; others run meanwhile, then it resumes."""
        if len(self.ops) > self.max_depth:
            return
        self.stat(f"pause.{op.kind}")
        self.log(f"  ~~ {op.kind} op {op.id} paused {where}")
        own = self.queue.messages.get(op.mid) if op.mid is not None else None
        if own is not None and self.rng.random() < 0.5:
            # The stopped worker's own message outlives its visibility timeout and goes to another.
            self.clock.set(max(self.clock.now(), own.visible_at))
            self.stat("pause.own_message_redelivered")
            self.deliver(own)
        for _ in range(self.rng.randint(0 if own is not None else 1, 3)):
            r = self.rng.random()
            if r < 0.35:
                self.advance_interesting()
            elif r < 0.8:
                visible = self.queue.visible()
                if visible:
                    self.deliver(self.rng.choice(visible))
                else:
                    self.advance_interesting()
            else:
                self.sweep("(overlapping)")
        self.log(f"  ~~ {op.kind} op {op.id} resumes")

    # -- time ---------------------------------------------------------------------------------------
    def advance(self, seconds: float) -> None:
        if seconds > 0:
            self.clock.advance(seconds)

    def advance_interesting(self) -> None:
        """A jump that changes who may act: past a visibility timeout, a lease, a step timeout."""
        s = self.settings
        timeouts = [wf.timeout(i) for wf in self.config.workflows for i in range(len(wf.steps))]
        choices = [self.rng.uniform(0, 5), self.config.visibility_s + 1, s.lease_s + 1,
                   max(timeouts) + s.time_margin_ms / 1000 + 1, SWEEP_INTERVAL_S]
        self.advance(self.rng.choice(choices))

    def next_due_at(self) -> dt.datetime | None:
        due = [a["next_wake_at"] for a in self.inner.metas.values() if isinstance(a.get("next_wake_at"), str)]
        return parse_ts(min(due)) if due else None

    def advance_to_next_event(self) -> None:
        candidates = [t for t in (self.queue.next_visible_at(), self.next_tick, self.next_due_at()) if t is not None]
        if candidates:
            target = min(candidates)
            if target > self.clock.now():
                self.clock.set(target)

    def maybe_tick(self) -> None:
        """The 60 s schedule: EventBridge may skip a tick or deliver it twice while faults are on."""
        now = self.clock.now()
        if now < self.next_tick:
            return
        self.next_tick = now + dt.timedelta(seconds=SWEEP_INTERVAL_S)
        if self.faults_on and self.rng.random() < self.fx.tick_skip:
            self.stat("tick.skipped")
            return
        self.sweep("(scheduled)")
        if self.faults_on and self.rng.random() < self.fx.tick_double:
            self.stat("tick.doubled")
            self.sweep("(scheduled, duplicate event)")

    # -- phases -------------------------------------------------------------------------------------
    def after_op(self) -> None:
        for eid, a in self.inner.metas.items():
            terminal = a.get("status") in TERMINAL
            if terminal == ("next_wake_at" in a):
                self.violation(f"{eid}: status {a.get('status')} but next_wake_at={a.get('next_wake_at')} "
                               "(terminal must be exactly the executions out of the due index)")
        self.snapshots.append(due_snapshot(self.inner))

    def fault_phase(self) -> None:
        rng = self.rng
        pending = list(self.planned)
        # Run the planned number of operations, and longer (up to 4x) until the workers have had a fair
        # share of deliveries: slow redelivery (long visibility timeouts after crashes) must not leave a
        # fault phase that tested almost nothing.
        want_deliveries = 4 * len(self.planned)
        i = -1
        while True:
            i += 1
            if i >= self.config.fault_ops and (self.stats["ops.deliver"] >= want_deliveries
                                               or i >= 4 * self.config.fault_ops):
                break
            while pending and pending[0].at_op <= i:
                self.start(pending.pop(0))
                self.after_op()
            r = rng.random()
            visible = self.queue.visible()
            if r < 0.5:
                if visible:
                    self.deliver(rng.choice(visible))
                else:
                    self.advance_to_next_event()
            elif r < 0.56:
                self.sweep("(extra)")
            elif r < 0.7:
                self.advance(rng.uniform(0, 10))
            elif r < 0.8:
                self.advance_to_next_event()
            elif r < 0.85:
                self.advance_interesting()
            elif r < 0.89 and self.queue.messages:
                m = self.queue.messages[rng.choice(sorted(self.queue.messages))]
                self.queue.duplicate(m)
                self.stat("queue.redelivered_copy")
                self.log(f"queue: extra copy of #{m.mid}")
            elif r < 0.91 and self.queue.messages and self.fx.drop:
                m = self.queue.messages[rng.choice(sorted(self.queue.messages))]
                self.queue.lose(m)
                self.stat("queue.lost_message")
                self.log(f"queue: #{m.mid} lost")
            elif r < 0.95:
                unacked = [p for p in self.planned if p.attempts and not p.acked]
                acked = [p for p in self.planned if p.acked]
                if unacked:
                    self.start(rng.choice(unacked))  # the client retries a start it saw fail
                elif acked:
                    self.stat("start.repeated")
                    self.start(rng.choice(acked))  # a client repeats a start that succeeded
            self.maybe_tick()
            self.after_op()
        for ps in pending:  # anything not yet started starts as faults stop
            self.start(ps)
            self.after_op()

    def compute_liveness_bound(self) -> int:
        """Sweeps (scheduled ticks) within which every execution must end once faults stop."""
        s, interval, vis = self.settings, SWEEP_INTERVAL_S, self.config.visibility_s
        worst = 0.0
        for eid, a in self.inner.metas.items():
            if a.get("status") in TERMINAL:
                continue
            wf = self.specs[a["workflow"]]
            total = 0.0
            for spec in wf.steps[max(0, int(a["current_step"]) - 1):]:
                lease = lease_seconds(s, wf.timeout(spec.index))
                if spec.kind == "sleep":
                    total += spec.sleep_s + lease + vis + 2 * interval
                else:
                    policy = wf.policy(spec.index)
                    total += (policy.max_attempts + 1) * (lease + vis + policy.max_delay + 2 * interval)
            worst = max(worst, total)
        return math.ceil(worst / interval) + 5

    def live(self) -> list[str]:
        return [eid for eid, a in self.inner.metas.items() if a.get("status") not in TERMINAL]

    def quiet_phase(self) -> None:
        self.fault_stats = Counter(self.stats)  # what the fault phase achieved, for the meaningfulness check
        self.faults_on = False
        self.log("== faults stop ==")
        for ps in self.planned:
            if not ps.acked:
                self.start(ps)
                if not ps.acked:
                    self.violation(f"start #{ps.index} was not acknowledged even without faults")
        self.liveness_bound = bound = self.compute_liveness_bound()
        deliveries = 0
        interval = dt.timedelta(seconds=SWEEP_INTERVAL_S)
        self.next_tick = max(self.next_tick, self.clock.now())
        while self.live():
            visible = self.queue.visible()
            if visible:
                deliveries += 1
                if deliveries > 50_000:
                    self.violation("livelock: 50,000 deliveries after faults stopped and executions still live")
                    return
                self.deliver(min(visible, key=lambda m: (m.visible_at, m.mid)))
                self.after_op()
                continue
            # Idle: jump to the next message, or to the first tick that can find something due. Ticks
            # before that would sweep an index holding nothing due: they are counted, not run.
            due, nxt = self.next_due_at(), self.queue.next_visible_at()
            useful = None
            if due is not None:
                useful = self.next_tick + interval * max(0, math.ceil((due - self.next_tick) / interval))
            if nxt is None and useful is None:
                self.violation(f"live executions {sorted(self.live())} have no due time and no message: "
                               "nothing can ever wake them")
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
                self.violation(f"executions {sorted(e[:8] for e in self.live())} not terminal within {bound} "
                               f"sweeps after faults stopped")
                return
        self.stat("quiet.sweeps", self.quiet_sweeps)
        # Drain: whatever is still queued must be harmless now.
        for _ in range(10_000):
            if not self.queue.messages:
                break
            visible = self.queue.visible()
            if not visible:
                self.clock.set(self.queue.next_visible_at())
                continue
            self.deliver(min(visible, key=lambda m: (m.visible_at, m.mid)))
            self.after_op()
        else:
            self.violation("the queue never drained after every execution ended")
        # Housekeeping owed: a few more scheduled sweeps (past a lease) while an ended execution is
        # still not finalized, for an engine whose sweeper finishes it. The checker judges the rest.
        ticks = math.ceil(self.settings.lease_s / SWEEP_INTERVAL_S) + 3
        for _ in range(ticks):
            if not self.unfinalized():
                break
            self.clock.set(max(self.clock.now(), self.next_tick))
            self.next_tick = self.clock.now() + interval
            self.sweep("(scheduled, housekeeping)")
            self.after_op()
            for _ in range(1000):
                visible = self.queue.visible()
                if not visible:
                    break
                self.deliver(min(visible, key=lambda m: (m.visible_at, m.mid)))
                self.after_op()

    def unfinalized(self) -> list[str]:
        return [eid for eid, a in self.inner.metas.items() if a.get("status") in TERMINAL and not a.get("finalized")]

    def run(self) -> Simulation:
        self.log(self.config.describe())
        self.stat(f"profile.{self.config.profile}")
        self.fault_phase()
        self.quiet_phase()
        from .checks import check_run

        check_run(self)
        return self
