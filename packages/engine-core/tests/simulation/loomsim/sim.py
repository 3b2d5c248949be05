"""The scheduler: one seed -> one configuration -> one run of the real Engine and Sweeper.

A run has two phases. In the *fault phase* the scheduler picks, at random (seeded), among: delivering
any visible message (so messages are reordered), sweeping, moving the clock, starting executions,
duplicating or losing queued messages; every operation carries a fault plan (crash before/after its
k-th store or queue call, an injected error, a pause that runs other operations re-entrantly, a
crash, pause or overrun inside the step body, an invocation deadline or too little time, a lost
acknowledgement). Deliveries run chains of steps (``max_chain_steps`` varies per seed), and the
engine's fault points are crash and pause points too, so faults land inside chains. Sweeps also
fire on a 60 s schedule (sometimes skipped or doubled) and may read a stale due index.
In the *quiet phase* faults stop: starts that were never acknowledged are retried, messages are
delivered in order and the sweeper runs on schedule; every execution must end within a bound
computed from its remaining steps. Then the queue is drained and the checker runs.
"""

from __future__ import annotations

import contextvars
import datetime as dt
import math
import random
from collections import Counter, deque
from dataclasses import dataclass
from typing import Any, Callable

import engine_core.step_run as step_run_module
from engine_core import Engine, EngineSettings, ManualClock, Registry, Sweeper, faults
from engine_core.clock import UTC, parse_ts
from engine_core.errors import InsufficientTimeError
from engine_core.settings import lease_seconds
from engine_core.adapters.memory import MemoryStore

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
    due_key,
    due_snapshot,
)
from . import code_first
from .workflows import Ledger, StepSpec, WorkflowSpec, generate, register

START = dt.datetime(2026, 1, 1, tzinfo=UTC)
CRASH_TARGETS = {
    "deliver": ("load_state", "put_step", "commit", "send", "stamp_items", "finalize", "send_dead_letter", "ack",
                "worker.after_claim", "worker.after_record", "worker.after_checkpoint", "worker.after_enqueue"),
    "sweep": ("query_due", "load", "commit", "send", "sweeper.after_claim", "query_unfinalized", "finalize"),
    "start": ("create", "send", "control.after_create"),
}
# Store/queue methods and engine fault points that may occur more than once in one delivery (a chain).
REPEATING = ("put_step", "commit", "worker.after_claim", "worker.after_record", "worker.after_checkpoint")
# What Engine.process may raise to ask for redelivery; anything else escaping it is a bug.
REDELIVER = (InsufficientTimeError, InjectedStorageError, InjectedQueueError)
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
    body_overrun: float = 0.0  # the step body runs past its timeout budget
    low_time: float = 0.0     # the invocation has too little time left for the step
    lose_ack: float = 0.0     # the acknowledgement never reaches SQS
    dup: float = 0.0          # a send is delivered twice
    drop: float = 0.0         # a send is lost
    extra_delay: float = 0.0  # seconds a send may be late beyond its DelaySeconds
    stale: float = 0.0        # a due-index query answers from an older snapshot
    tick_skip: float = 0.0    # a scheduled sweep does not fire
    tick_double: float = 0.0  # a scheduled sweep fires twice (EventBridge at-least-once)
    backlog: float = 0.0      # seconds of delivery delay per message already queued (a backlog; backlog.py)

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
    deadline_rate: float = 0.0
    """Share of deliveries that get an invocation deadline (``remaining_ms``)."""
    invocation_s: float = 900.0
    """The invocation's time at the start of a delivery that has a deadline."""
    body_time: float = 0.0
    """A body takes up to this share of its timeout budget in simulated time."""

    def describe(self) -> str:
        s = self.settings
        lines = [
            f"seed {self.seed}: {self.n_execs} executions, {self.fault_ops} fault-phase operations",
            f"  settings: shards={s.shards} lease_s={s.lease_s:g} max_queue_delay_s={s.max_queue_delay_s} "
            f"time_margin_ms={s.time_margin_ms} sweep_max_items={s.sweep_max_items} max_steps={s.max_steps} "
            f"max_total_attempts={s.max_total_attempts} max_chain_steps={s.max_chain_steps} "
            f"index_slack_s={s.index_slack_s:g} history_grace_s={s.history_grace_s:g} backlog_marks={s.backlog_marks}",
            f"  invocations: deadline on {self.deadline_rate:.0%} of deliveries, {self.invocation_s:g}s each; "
            f"bodies take up to {self.body_time:.0%} of their budget",
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
        max_chain_steps=rng.choice([1, 2, 100, 100]),
        index_slack_s=rng.choice([0.0, 30.0, 300.0]),
        history_grace_s=rng.choice([86400.0, 86400.0, 600.0, 0.0]),
        # Its own draw, so the draws above (and every seed's run without it) stay as they were.
        checkpoint_records=random.Random(f"loomsim-checkpoint:{seed}").choice([1, 2, 3, 100]),
        # The workers' backlog mark, off in a quarter of the seeds (its own draw): the lease alone decides.
        backlog_marks=overrides.pop("backlog_marks", random.Random(f"loomsim-marks:{seed}").random() >= 0.25),
    )
    # Most seeds mix every fault at random rates; the rest concentrate on one theme, so that rare
    # combinations (a stopped worker whose message comes back, then a crash at its checkpoint) occur.
    profile = rng.choices(PROFILES, weights=[50, 15, 15, 10, 10])[0]
    u = rng.uniform
    if profile == "mixed":
        fx = FaultMix(
            crash=rate(0.3), error=rate(0.1), pause=rate(0.2), body_crash=rate(0.2), body_pause=rate(0.15),
            body_overrun=rate(0.05, 0.5),
            low_time=rate(0.05, 0.5), lose_ack=rate(0.05, 0.5), dup=rate(0.3), drop=rate(0.15),
            extra_delay=rng.choice([0.0, 5.0, 120.0, 1000.0]), stale=rate(0.5), tick_skip=rate(0.2, 0.5),
            tick_double=rate(0.2, 0.5))
    elif profile == "sigstop":  # workers stop mid-call or mid-body while others take over, then resume
        fx = FaultMix(crash=u(0.1, 0.3), pause=u(0.1, 0.3), body_pause=u(0.2, 0.5), dup=rate(0.2),
                      stale=rate(0.3), body_crash=rate(0.05), body_overrun=rate(0.05))
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
    # A backlog on its own draw (the draws above and below stay as they were): each queued message delays
    # the next send by a share of the lease, so messages wait past their leases and the sweeper re-drives.
    backlog = random.Random(f"loomsim-backlog:{seed}")
    if backlog.random() < 0.15:
        fx = FaultMix(**{**fx.__dict__, "backlog": round(backlog.uniform(0.1, 1.0) * settings.lease_s, 1)})
    workflows = [generate(rng, 0, plain_only=True)] + [generate(rng, i) for i in range(1, rng.randint(2, 4))]
    code_first.pick(seed, workflows)  # its own draw: a share of the seeds runs one of them as a function
    # Invocations: some seeds pass no deadline (a paused worker then lives on as a zombie), others give
    # every delivery the function's time, just enough for the longest step or more, so chains also
    # stop because time runs out and a claim's lease must cover the claimer's deadline.
    need = max(wf.timeout(i) for wf in workflows for i in range(len(wf.steps))) + settings.time_margin_ms / 1000
    config = SimConfig(seed=seed, settings=settings, visibility_s=rng.choice([30.0, 120.0, 360.0, 1200.0]),
                       max_receives=rng.choice([2, 3, 5, 10]), page_size=rng.choice([1, 2, 100]),
                       fault_ops=rng.randint(60, 160), n_execs=rng.randint(3, 8), workflows=workflows, fx=fx,
                       caps=caps, profile=profile, deadline_rate=rng.choice([0.0, 0.5, 1.0]),
                       invocation_s=round(need * rng.choice([1.0, 1.2, 2.0, 4.0]) + rng.choice([0.0, 1.0]), 3),
                       body_time=rng.choice([0.0, 0.0, 0.1, 0.6]))
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
    """One successful commit, with the execution item as the store held it before and after."""

    seq: int
    execution_id: str
    expected_step: int
    expected_version: int
    before: dict
    after: dict
    op_id: int
    op_kind: str
    mid: int | None
    message: Any
    at: dt.datetime
    issued_at: dt.datetime
    """When the worker made the call (a pause before the write lands may lie between)."""
    fault_phase: bool

    @property
    def new_version(self) -> Any:
        return self.after.get("version")

    @property
    def new_step(self) -> Any:
        return self.after.get("current_step")

    @property
    def new_status(self) -> Any:
        return self.after.get("status")

    @property
    def claim(self) -> bool:
        """This write started an attempt: an unclaimed step became claimed, or the execution moved on
        and claimed the next step in the same write (a chain)."""
        a, b = self.after, self.before
        if a.get("attempt_started_at") is None or a.get("status") in ("COMPLETED", "FAILED"):
            return False
        return a.get("current_step") != b.get("current_step") or b.get("attempt_started_at") is None

    @property
    def released(self) -> bool:
        """The write ended a claim on the same step without moving on (a retry, a re-drive, FAILED)."""
        return (self.before.get("attempt_started_at") is not None
                and self.after.get("attempt_started_at") is None
                and self.after.get("current_step") == self.before.get("current_step"))

    @property
    def advanced(self) -> bool:
        return self.after.get("current_step", 0) > self.before.get("current_step", 0)


@dataclass(frozen=True)
class PutObs:
    seq: int
    execution_id: str
    step: int
    attempts: int
    status: str
    is_final: bool
    result_blob: str | None
    error_code: str | None
    op_id: int
    at: dt.datetime
    replaced: int | None = None
    """The attempt number of the record this write replaced (None: there was none)."""
    kind: str = "task"
    """The record's kind (a code-first function's return value is ``return``, one position past its last call)."""
    name: str = ""


@dataclass
class BodyRun:
    """One step body execution, as the body itself saw it."""

    seq: int
    execution_id: str
    step: int
    attempt: int
    op_id: int
    at: dt.datetime
    end: str = "unfinished"
    """ok, raised (retryable), permanent, overran (returned past its budget), or unfinished (the
    worker died inside it)."""


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
            (code_first.register if wf.code else register)(wf, self.registry, self.on_body)
            self.specs[wf.name] = wf
        self.engine = Engine(self.store, self.qproxy, self.registry, self.clock, self.settings)
        # Starts come through a control plane that still has the step cap from before a deploy lowered the
        # workers' (under the workers' own cap a step list longer than it is refused at start, a functional
        # test's case): a seed with tiny caps still sees executions reach them mid-run.
        self.starter = Engine(self.store, self.qproxy, self.registry, self.clock,
                              self.settings.model_copy(update={"max_steps": 100_000}))
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
        self.snapshots: deque[dict[str, str]] = deque(maxlen=8)
        self.next_tick = START + dt.timedelta(seconds=SWEEP_INTERVAL_S)
        self.ledger = Ledger()
        self.commits: dict[str, list[CommitObs]] = {}
        self.puts: dict[str, list[PutObs]] = {}
        self.bodies: dict[tuple[str, int], list[BodyRun]] = {}
        self.creates: Counter = Counter()
        self.inputs: dict[str, str] = {}
        self.op_deadlines: dict[int, dt.datetime | None] = {}
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

    def code_stat(self, op: Op | None, key: str) -> None:
        """Count ``key`` again under ``code.`` when ``op`` delivers a code-first execution's message."""
        if op is not None and op.message is not None:
            wf = self.specs.get((self.inner.metas.get(op.message.execution_id) or {}).get("workflow"))
            if wf is not None and wf.code:
                self.stat(f"code.{key}")

    def known_defect(self, key: str, text: str) -> None:
        """A violation of a known, not yet fixed engine defect (``checks.KNOWN_DEFECTS``)."""
        from .checks import KNOWN_DEFECTS

        if key not in KNOWN_DEFECTS:
            return self.violation(text)
        self.known.append(f"[{key}] {text}")
        self.stat(f"known.{key}")
        self.log(f"!! KNOWN DEFECT {key}: {text}")

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
    def observe_create(self, execution, input_blob: str) -> None:
        self.creates[execution.execution_id] += 1
        self.inputs[execution.execution_id] = input_blob
        self.commits.setdefault(execution.execution_id, [])
        self.log(f"    store: created {execution.execution_id[:8]} ({execution.workflow}) v1")

    def observe_commit(self, transition, before: dict | None, after: dict) -> None:
        new = transition.new
        op = self.op
        obs = CommitObs(
            seq=self._next_seq(), execution_id=new.execution_id, expected_step=transition.expected_step,
            expected_version=transition.expected_version, before=before or {}, after=after,
            op_id=op.id if op else 0, op_kind=op.kind if op else "", mid=op.mid if op else None,
            message=op.message if op else None, at=self.clock.now(),
            issued_at=op.call_at if op and op.call_at else self.clock.now(), fault_phase=self.faults_on,
        )
        self.commits.setdefault(new.execution_id, []).append(obs)
        self.op_deadlines.setdefault(obs.op_id, op.deadline if op else None)
        self.stat("commits.fault_phase" if self.faults_on else "commits.quiet_phase")
        if self.faults_on and op is not None and op.kind == "deliver":
            self.stat("commits.fault_phase_by_workers")
        if obs.claim and obs.advanced and op is not None:
            op.chained += 1
            self.stat("commits.chained_claims")
        claim = f" claim attempt {after.get('attempt')} until {after.get('next_wake_at')}" if obs.claim else ""
        self.log(f"    store: {new.execution_id[:8]} commit v{obs.expected_version}->v{obs.new_version} "
                 f"s{obs.expected_step}->s{obs.new_step} {obs.new_status} {after.get('timer') or ''}{claim}")

    def observe_put(self, eid: str, record, before: dict | None) -> None:
        op = self.op
        obs = PutObs(self._next_seq(), eid, record.step_index, record.attempts, record.status.value, record.is_final,
                     record.result_blob, record.error.code if record.error else None, op.id if op else 0,
                     self.clock.now(), before.get("attempts") if before else None, record.kind, record.name)
        self.puts.setdefault(eid, []).append(obs)
        if before is not None and isinstance(before.get("attempts"), int) and before["attempts"] > record.attempts:
            self.violation(f"{eid[:8]} step {record.step_index}: a history write by attempt {record.attempts} "
                           f"replaced the record of later attempt {before['attempts']} (a taken-over attempt "
                           "overwrote its successor)")
        self.log(f"    store: {eid[:8]} put s{record.step_index} attempt {record.attempts} {record.status.value}"
                 f"{' final' if record.is_final else ''}")

    def on_body(self, workflow: str, spec: StepSpec, ctx) -> BodyRun:
        """Called first thing in every step body: count it, let it take simulated time, then maybe crash
        or pause right there."""
        key = (ctx.execution_id, spec.index)
        self.ledger.record(ctx.execution_id, spec.index, ctx.attempt)
        op = self.op
        run = BodyRun(self._next_seq(), ctx.execution_id, spec.index, ctx.attempt, op.id if op else 0, self.clock.now())
        self.bodies.setdefault(key, []).append(run)
        self.stat("bodies")
        if op is not None and op.chained:
            self.stat("bodies.in_chain")
        self.log(f"    body {workflow}.{spec.name} attempt {ctx.attempt}")
        if op is None:
            return run
        op.bodies += 1
        timeout = self.specs[workflow].timeout(spec.index)
        p = op.plan
        here = self.faults_on and op.bodies == p.body_at
        if here and p.body_overrun:
            self.stat("body.overrun")
            self.log("  ** body runs past its budget")
            self.advance(timeout * self.rng.uniform(1.01, 1.5))
        elif self.config.body_time:
            self.advance(timeout * self.config.body_time * self.rng.random())
        if not here:
            return run
        if p.body_pause:
            self.pause(op, f"inside body {spec.name}")
            if op.chained:
                self.stat("pause.body.in_chain")
        if p.body_crash:
            self.stat("crash.body")
            self.code_stat(op, "crash.body")
            if op.chained:
                self.stat("crash.body.in_chain")
            raise SimulatedCrash(op.id, f"body {spec.name}")
        self.check_deadline(op, f"body {spec.name}")
        return run

    def on_wrong_input(self, run: BodyRun, got: Any, want: Any) -> None:
        """A code-first body was handed something other than the previous step's recorded result."""
        self.violation(f"{run.execution_id[:8]} step {run.step}: the function handed its body {got!r}, the previous "
                       f"step's result is {want!r} (a replay returned a wrong value)")

    def on_body_end(self, run: BodyRun, end: str) -> None:
        timeout = self.specs[self.inner.metas[run.execution_id]["workflow"]].timeout(run.step)
        elapsed_ms = self._monotonic_ms() - (run.at - START).total_seconds() * 1000.0  # the engine's own arithmetic
        if end == "ok" and elapsed_ms > timeout * 1000:
            end = "overran"  # returned past its budget: the engine's clock says so too (step_timeout)
        run.end = end

    def check_deadline(self, op: Op, where: str) -> None:
        """Lambda ends an invocation at its deadline: a worker that resumes past it is gone."""
        if op.deadline is not None and self.clock.now() > op.deadline:
            self.stat("crash.deadline")
            self.log(f"  ** invocation timed out ({where})")
            raise SimulatedCrash(op.id, f"deadline ({where})")

    def duplicate_queued(self, rng) -> None:
        """SQS hands out an extra copy of a message in the queue (at-least-once delivery)."""
        m = self.queue.messages[rng.choice(sorted(self.queue.messages))]
        self.queue.duplicate(m)
        self.stat("queue.redelivered_copy")
        self.log(f"queue: extra copy of #{m.mid}")

    def lose_queued(self, rng) -> None:
        """A message in the queue is lost (purged, or moved to the DLQ)."""
        m = self.queue.messages[rng.choice(sorted(self.queue.messages))]
        self.queue.lose(m)
        self.stat("queue.lost_message")
        self.log(f"queue: #{m.mid} lost")

    def point(self, name: str, info: dict) -> None:
        """An engine fault point (``faults.point``): a crash or pause point like any store call. The two
        body points are not: the bodies crash, pause and overrun by their own plan (``on_body``)."""
        if name in faults.BODY_POINTS:
            return
        self.call(name, lambda: None, point=True)

    # -- the fault point: every store and queue call comes through here -----------------------------
    def call(self, name: str, fn: Callable[[], Any], point: bool = False) -> Any:
        op = self.op
        if op is None or not self.faults_on:
            if op is not None:
                op.call_at = self.clock.now()
                self.check_deadline(op, name)
            return fn()
        op.calls += 1
        op.names[name] = op.names.get(name, 0) + 1
        op.call_at = self.clock.now()
        k, p = op.calls, op.plan
        self.check_deadline(op, name)
        pause_here = p.pause_at == k or (p.pause_on == name and op.names[name] == p.pause_nth)
        if pause_here and not p.pause_after:
            self._pause_at(op, f"before {name}")
        crash_here = p.crash_at == k or (p.crash_on == name and op.names[name] == p.crash_nth)
        if crash_here and not p.crash_after:
            self._crash(op, f"before {name}")
        if p.error_at == k and not p.error_after and not point:
            raise self._injected(name, "before")
        error: Exception | None = None
        result = None
        try:
            result = fn()
        except Exception as exc:  # the store's own answer (conflict, superseded): passed on below
            error = exc
        if pause_here and p.pause_after:
            self._pause_at(op, f"after {name}")
        if crash_here and p.crash_after:
            self._crash(op, f"after {name}")
        if p.error_at == k and p.error_after and error is None and not point:
            raise self._injected(name, "after (applied)")
        if error is not None:
            raise error
        return result

    def _pause_at(self, op: Op, where: str) -> None:
        if op.chained:
            self.stat("pause.in_chain")
        self.pause(op, where)
        self.check_deadline(op, where)

    def _crash(self, op: Op, where: str) -> None:
        self.stat(f"crash.{where.replace(' ', '.')}")
        self.code_stat(op, f"crash.{where.replace(' ', '.')}")
        if op.chained:
            self.stat("crash.in_chain")
            self.stat(f"crash.in_chain.{where.replace(' ', '.')}")
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
                p.crash_at = rng.randint(1, 12 if kind == "deliver" else 8)
            else:  # aim at a method, so rare points (finalize, the DLQ notice, the ack) are hit as often
                p.crash_on = rng.choice(CRASH_TARGETS[kind])
                if p.crash_on in REPEATING:  # the second or third one lies inside a chain
                    p.crash_nth = rng.choice([1, 1, 1, 2, 2, 3])
        if rng.random() < fx.error:
            p.error_at, p.error_after = rng.randint(1, 10), rng.random() < 0.5
        if len(self.ops) < self.max_depth and rng.random() < fx.pause:
            p.pause_at, p.pause_after = rng.randint(1, 10), rng.random() < 0.5
        if kind == "deliver":
            p.body_at = rng.choice([1, 1, 2, 3])
            p.body_crash = rng.random() < fx.body_crash
            p.body_pause = len(self.ops) < self.max_depth and rng.random() < fx.body_pause
            p.body_overrun = rng.random() < fx.body_overrun
            p.low_time = rng.random() < fx.low_time
            p.lose_ack = rng.random() < fx.lose_ack
        return p

    def deadline_for(self, plan: OpPlan) -> float | None:
        """The invocation time a delivery starts with (None: the engine is given no deadline)."""
        if plan.low_time:
            return 0.5
        if plan.deadline_s is not None:
            return plan.deadline_s
        if self.config.deadline_rate and self.rng.random() < self.config.deadline_rate:
            return self.config.invocation_s
        return None

    # -- operations ---------------------------------------------------------------------------------
    def run_op(self, kind: str, label: str, plan: OpPlan, fn: Callable[[Op], None], mid: int | None = None,
               message=None, deadline_s: float | None = None) -> Op:
        self._op_ids += 1
        op = Op(self._op_ids, kind, len(self.ops), plan, label, mid=mid, message=message)
        if deadline_s is not None:
            op.deadline = self.clock.now() + dt.timedelta(seconds=deadline_s)
        self.ops.append(op)
        self.stat(f"ops.{kind}")
        self.log(f"{kind} {label}".rstrip() + (f" (invocation {deadline_s:g}s)" if deadline_s is not None else ""))
        outermost = len(self.ops) == 1
        if outermost:
            # The engine's step clock and fault points become the simulation's for this operation.
            saved = step_run_module._STEP_CLOCK[0]
            step_run_module._STEP_CLOCK[0] = self._monotonic_ms
            faults.install(self.point)
        try:
            # Each operation is its own process: a nested one (run inside a paused call or body) must not see
            # the paused one's context variables (a code-first run's ``_current.RUN``).
            contextvars.Context().run(fn, op)
        except SimulatedCrash as crash:
            if crash.op_id != op.id:
                raise
            op.crashed = True
            self.stat(f"crashed.{kind}")
        finally:
            self.ops.pop()
            if outermost:
                step_run_module._STEP_CLOCK[0] = saved
                faults.install(None)
        return op

    def _monotonic_ms(self) -> float:
        return (self.clock.now() - START).total_seconds() * 1000.0

    def deliver(self, m: SimMessage) -> None:
        receipt = self.queue.receive(m)
        if receipt is None:
            return
        plan = self.plan("deliver")
        deadline_s = self.deadline_for(plan)
        label = f"#{m.mid} ({m.body.execution_id[:8]} s{m.body.step} v{m.body.version}) receive {receipt}"

        def handle(op: Op) -> None:
            remaining = None
            if op.deadline is not None:
                deadline = op.deadline
                remaining = lambda: max(0, int((deadline - self.clock.now()).total_seconds() * 1000))  # noqa: E731
            self.engine.backlog.observe(m.body, m.sent_at)  # as the worker does, before the record's step
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
            self.code_stat(op, f"outcome.{outcome.kind}")
            self.stat(f"steps_run.{min(outcome.steps_run, 3)}")
            if outcome.steps_run > 1 and op.deadline is not None:
                self.stat("steps_run.chain_with_deadline")
            if outcome.kind == "advanced" and op.deadline is not None and outcome.steps_run < self.settings.max_chain_steps:
                self.stat("steps_run.chain_stopped_on_time")  # the next step's budget did not fit any more
            self.log(f"  -> {outcome.kind} {outcome.detail} (steps run {outcome.steps_run})")
            if plan.lose_ack:
                self.stat("ack.lost")
                self.log("  ** acknowledgement lost")
                return
            try:
                self.call("ack", lambda: self.queue.ack(m, receipt))
            except InjectedQueueError:
                return

        self.run_op("deliver", label, plan, handle, mid=m.mid, message=m.body, deadline_s=deadline_s)

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
            if report.finalized:
                self.stat("sweep.finalized", report.finalized)
            self.log(f"  -> redriven {dict(report.redriven)} skipped {dict(report.skipped)}")

        self.run_op("sweep", why, plan, handle)

    def start(self, ps: PlannedStart) -> None:
        plan = self.plan("start")
        ps.attempts += 1

        def handle(op: Op) -> None:
            try:
                result = self.starter.start(ps.workflow, ps.input, ps.token)
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
        if op.kind == "deliver" and op.message is not None and self.rng.random() < 0.3:
            self.takeover(op.message.execution_id)
            self.log(f"  ~~ {op.kind} op {op.id} resumes")
            return
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

    def takeover(self, eid: str) -> None:
        """The stopped worker stays stopped past its execution's due time (its lease): the sweeper
        re-drives the execution and another worker runs it meanwhile (SIGSTOP, a long GC pause)."""
        self.stat("pause.takeover")
        for _ in range(2):
            attrs = self.inner.metas.get(eid) or {}
            key = due_key(attrs)
            if key is None:
                return
            self.clock.set(max(self.clock.now(), parse_ts(key) + dt.timedelta(seconds=1)))
            self.sweep("(while a worker is stopped)")
            for _ in range(3):
                mine = [m for m in self.queue.visible() if m.body.execution_id == eid]
                if not mine:
                    break
                self.deliver(min(mine, key=lambda m: (m.visible_at, m.mid)))

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
        due = [key for a in self.inner.metas.values() if (key := due_key(a)) is not None]
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
        slack = dt.timedelta(seconds=self.settings.slack_s)
        for eid, a in self.inner.metas.items():
            terminal = a.get("status") in TERMINAL
            key = due_key(a)
            if terminal == (key is not None):
                self.violation(f"{eid[:8]}: status {a.get('status')} but due-index key {key} "
                               "(terminal must be exactly the executions out of the due index)")
            elif not terminal:
                wake = a.get("next_wake_at")
                if not isinstance(wake, str):
                    self.violation(f"{eid[:8]}: live without next_wake_at")
                elif key == wake:  # fixed-width timestamps: string order is time order
                    pass
                elif a.get("timer") == "lease" and not (wake < key and parse_ts(key) <= parse_ts(wake) + slack):
                    self.violation(f"{eid[:8]}: lease until {a['next_wake_at']} indexed at {key}, outside "
                                   f"[lease, lease + {self.settings.slack_s:g}s]: the sweeper would re-drive it "
                                   "early or too late")
                elif a.get("timer") != "lease" and not self.queued_timer_key(a, wake, key):
                    self.violation(f"{eid[:8]}: {a.get('timer')} timer at {a['next_wake_at']} indexed at {key}")
        self.snapshots.append(due_snapshot(self.inner))

    def queued_timer_key(self, attrs: dict, wake: str, key: str) -> bool:
        """A timer short enough to ride SQS DelaySeconds has its message sent with its commit: it is keyed
        one message lease past its wake time, so the sweeper sends another only if that one is late."""
        delay_s = (parse_ts(wake) - parse_ts(attrs["updated_at"])).total_seconds()
        if delay_s > self.settings.max_queue_delay_s:
            return False
        lease = self.engine.life.lease_s(attrs["workflow"], attrs["current_step"])
        return parse_ts(key) == parse_ts(wake) + dt.timedelta(seconds=lease)

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
                self.duplicate_queued(rng)
            elif r < 0.91 and self.queue.messages and self.fx.drop:
                self.lose_queued(rng)
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
            # first, its timer as it stands: a message re-sent under a backlog holds a doubled lease
            # (``max_resend_doublings``), and a lost one is re-driven only when that runs out
            key = due_key(a)
            total = max(0.0, (parse_ts(key) - self.clock.now()).total_seconds()) if key is not None else 0.0
            for spec in wf.steps[max(0, int(a["current_step"]) - 1):]:
                # a lost message or a dead attempt waits for its lease (or its claimer's deadline), then
                # for the index key's slack, the visibility timeout and two ticks; each attempt may run
                # its whole budget, and back off
                timeout = wf.timeout(spec.index)
                lease = max(lease_seconds(s, timeout), self.config.invocation_s + s.time_margin_ms / 1000)
                wait = lease + s.slack_s + vis + 2 * interval
                if spec.kind == "sleep":
                    total += spec.sleep_s + wait
                else:
                    policy = wf.policy(spec.index)
                    total += (policy.max_attempts + 1) * (wait + timeout + policy.max_delay)
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
        # Housekeeping owed: scheduled sweeps until every ended execution's finalize_by has passed (the
        # sweeper finishes what a worker that died after the terminal commit left undone).
        last = max((parse_ts(a["finalize_by"]) for a in self.inner.metas.values()
                    if isinstance(a.get("finalize_by"), str)), default=self.clock.now())
        swept_past = False  # a sweep ran once every finalize_by had passed (the drain may end past them all)
        for _ in range(10_000):
            if not self.unfinalized() or (swept_past and self.clock.now() > last + 3 * interval):
                break
            self.clock.set(max(self.clock.now(), self.next_tick))
            self.next_tick = self.clock.now() + interval
            self.sweep("(scheduled, housekeeping)")
            swept_past = swept_past or self.clock.now() >= last
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
        self.stat(f"config.max_chain_steps.{self.settings.max_chain_steps}")
        self.fault_phase()
        self.quiet_phase()
        from .checks import check_run

        check_run(self)
        from .backlog import check_redrive_backoff

        check_redrive_backoff(self)
        return self
