"""Time, TTLs, token re-use and redeploys in the composition simulation (a mixin of ``CompositionSim``).

- *Time passes with the schedule running*: a clock move that comes within ``MAX_UNSWEPT_S`` of the expiry of
  an item of a live execution is made tick by tick where something is due (the sweeper runs, the workers
  take what is visible, TTL deletes what expired), as on AWS, where the one-minute schedule does not stop
  for hours. One jump over such an expiry would model a sweeper that was down for longer than the engine's
  re-stamping margin, which no TTL margin can cover. Moves that cross no expiry are one jump.
- *TTL deletes lazily*: ``reap_expired`` first checks that no item of a live run has expired (nothing of
  a live execution may ever be deleted), keeps what the store holds of each run about to lose an item
  (``RunBook.archive``), then deletes all expired items or only some (``composition_runs.REAP_MODES``).
- *A token is used again*: after its execution expired (a new run under the same id, which must see
  nothing of the old one), or while it has not (the same execution, nothing created).
- *A redeploy* replaces one workflow's step list under its name: the registry the engine, the operator
  and the sweeper see is replaced mid-run; executions started on the old list fail
  ``workflow_definition_mismatch`` without running a step of the new one.
"""

from __future__ import annotations

import datetime as dt
import random

from engine_core import Registry, codec
from engine_core.clock import parse_ts

from .composition_config import ACTIONS, TERMINAL
from .composition_runs import RunInfo
from .composition_workflows import generate, register, retuned
from .sim import SWEEP_INTERVAL_S, PlannedStart
from .ttl import REAP_MODES, doomed, epoch, expired_items, reap
from .world import InjectedStorageError, Op, due_key

MAX_UNSWEPT_S = 1800.0
"""A clock move ends at least this long before the earliest expiry of a live execution's item, or runs the
schedule on the way (``pass_time``): half the engine's re-stamping margin (``lifecycle.RESTAMP_MARGIN_S``)."""
PASS_TIME_FAULTY_OPS = 300
"""Operations a long clock move makes with faults on; the rest of it runs without (so it ends)."""
PASS_TIME_MAX_OPS = 20_000


class Lifecycle:
    # -- the clock -----------------------------------------------------------------------------------------
    def advance(self, seconds: float) -> None:
        if seconds <= 0:
            return
        target = self.clock.now() + dt.timedelta(seconds=seconds)
        if seconds > SWEEP_INTERVAL_S and not self.safe_until(target):
            self.pass_time(target, f"{seconds:g}s")
        else:
            self.clock.advance(seconds)

    def earliest_live_ttl(self) -> int | None:
        """The earliest expiry (epoch seconds) of an item of a live execution's run."""
        ttls = [a["expires_at"] for eid in self.live() for kind, items in self.inner.item_kinds(eid).items()
                if kind != "#META" for a in items
                if a.get("run") == self.inner.metas[eid].get("created_at") and isinstance(a.get("expires_at"), int)]
        return min(ttls) if ttls else None

    def safe_until(self, target: dt.datetime) -> bool:
        """No item of a live execution expires within ``MAX_UNSWEPT_S`` of ``target``: the clock may jump."""
        ttl = self.earliest_live_ttl()
        return ttl is None or epoch(target) + MAX_UNSWEPT_S < ttl

    def pass_time(self, target: dt.datetime, why: str) -> None:
        """Move the clock to ``target`` with the one-minute schedule running on the way: wherever something
        is due (a due-index key, a message becoming visible), the workers take the visible messages and the
        sweeper runs at its tick, until no item of a live execution expires near ``target`` any more."""
        self.stat("time.passed_with_the_schedule")
        self.log(f"== time passes to +{(target - self.clock.now()).total_seconds():g}s ({why}) ==")
        faults_were, ops = self.faults_on, 0
        try:
            while self.clock.now() < target:
                ops += 1
                if ops == PASS_TIME_FAULTY_OPS and self.faults_on:
                    self.stat("time.passed_quietly")
                    self.faults_on = False  # the rest of the way without faults, so the move ends
                if ops > PASS_TIME_MAX_OPS:
                    self.violation(f"time could not pass to {target.isoformat()}: executions "
                                   f"{[e[:8] for e in self.live()]} stay due with faults off")
                    self.clock.set(target)
                    break
                if self.safe_until(target):
                    self.clock.set(target)
                    break
                visible = self.queue.visible()
                if visible:
                    m = self.rng.choice(visible) if self.faults_on else min(visible, key=lambda m: (m.visible_at, m.mid))
                    self.deliver(m)
                else:
                    candidates = [t for t in (self.queue.next_visible_at(),) if t is not None]
                    due = self.next_due_at()
                    if due is not None:
                        candidates.append(max(due, self.next_tick))  # the sweeper sees it at the next tick
                    step_to = min(candidates) if candidates else target
                    if step_to >= target:
                        self.clock.set(target)
                        break
                    self.clock.set(max(step_to, self.clock.now()))
                self.maybe_tick()
                if self.config.ttl and self.rng.random() < 0.2:
                    self.reap_expired()
                self.after_op()
        finally:
            self.faults_on = faults_were

    def takeover(self, eid: str) -> None:
        """As the main simulation's (the stopped worker stays stopped past its execution's due key while
        the sweeper re-drives it and others run it), with the schedule running on a long way there."""
        self.stat("pause.takeover")
        for _ in range(2):
            key = due_key(self.inner.metas.get(eid) or {})
            if key is None:
                return
            self.advance((parse_ts(key) + dt.timedelta(seconds=1) - self.clock.now()).total_seconds())
            self.sweep("(while a worker is stopped)")
            for _ in range(3):
                mine = [m for m in self.queue.visible() if m.body.execution_id == eid]
                if not mine:
                    break
                self.deliver(min(mine, key=lambda m: (m.visible_at, m.mid)))

    # -- TTL ------------------------------------------------------------------------------------------------
    def check_live_ttls(self, when: str) -> None:
        """No item of a live execution's run has expired (or lacks a TTL): TTL would delete it. An event whose
        send died before answering is its sender's to send again (the send that answers raises its TTL)."""
        now = self.clock.now()
        for eid in self.live():
            def unanswered(kind: str, attrs: dict, eid: str = eid) -> bool:
                return kind == "EVT" and (eid, attrs.get("name"), attrs.get("event_id")) in self.unanswered_events

            for text in expired_items(self.inner, eid, now, unanswered):
                if (eid, text) in self.ttl_reported:
                    continue
                self.ttl_reported.add((eid, text))
                a = self.inner.metas[eid]
                self.violation(f"{eid[:8]}: live ({a.get('status')} at step {a.get('current_step')}"
                               f"{', compensating' if a.get('compensating') else ''}), but its item {text} may be "
                               f"deleted by TTL now ({when}; stamped_until {a.get('stamped_until')})")

    def reap_expired(self, mode: str | None = None) -> None:
        """DynamoDB's TTL deletes expired items: all of them or only some (``REAP_MODES``)."""
        now = self.clock.now()
        self.check_live_ttls("before TTL deleted anything")
        victims = doomed(self.inner, now)
        if not victims:
            return
        for eid in victims:
            self.runs.archive(self.inner, eid)
        mode = mode or self.rng.choice(REAP_MODES)
        n = reap(self.inner, now, mode, self.rng)
        if n:
            self.stat(f"ttl.reaped.{mode}")
            self.stat("ttl.items_deleted", n)
            self.log(f"ttl: deleted {n} expired items ({mode}) of {[e[:8] for e in victims]}")

    # -- starts and token re-use ---------------------------------------------------------------------------
    def observe_create(self, execution, input_blob: str, before: dict | None = None) -> None:
        super().observe_create(execution, input_blob)
        eid, run = execution.execution_id, execution.run
        data = codec.decode(input_blob)
        earlier = self.runs.runs.get(eid, [])
        self.runs.started(RunInfo(eid, run, execution.workflow, execution.fingerprint, int(data.get("inc", 0))))
        if before is not None:
            ttl = before.get("expires_at")
            if not (isinstance(ttl, int) and ttl <= epoch(execution.created_at)):
                self.violation(f"{eid[:8]}: a start replaced run {before.get('created_at')} ({before.get('status')}), "
                               f"which had not expired (expires_at {ttl}): a token's execution was replaced early")
            self.stat("runs.replaced_an_expired_item")
        elif earlier:
            self.stat("runs.created_after_ttl_deleted_the_item")
        if earlier:
            left = sum(1 for kind, items in self.inner.item_kinds(eid).items() if kind != "#META"
                       for a in items if a.get("run") != run)
            if left:
                self.stat("runs.started_over_an_older_runs_items")

    def start(self, ps: PlannedStart) -> None:
        """Start (or start again) with the planned start's token. A repeated start of an execution that
        has not expired returns it and creates nothing; once it expired, the same token starts a new run."""
        plan = self.plan("start")
        ps.attempts += 1

        def handle(op: Op) -> None:
            try:
                result = self.engine.start(ps.workflow, ps.input, ps.token)
            except InjectedStorageError:
                self.log("  -> start failed (client will retry with the same token)")
                return
            except Exception as exc:
                self.violation(f"Engine.start raised {type(exc).__name__}: {exc} (start #{ps.index}, attempt "
                               f"{ps.attempts})")
                return
            e = result.execution
            if ps.eid is not None and e.execution_id != ps.eid:
                self.violation(f"start #{ps.index}: the same token returned {e.execution_id}, earlier {ps.eid}")
            ps.eid = e.execution_id
            ps.acked += 1
            current = self.current_run(e.execution_id)
            if e.run != current:
                self.violation(f"start #{ps.index}: acknowledged run {e.run} of {e.execution_id[:8]}, but the "
                               f"store's current run is {current}")
            self.stat("start.created" if result.created else "start.returned_existing")
            self.log(f"  -> acknowledged {e.execution_id[:8]} ({ps.workflow}) run {e.run} created={result.created}")

        self.run_op("start", f"#{ps.index} {ps.workflow} token={ps.token} inc={ps.input.get('inc', 0)}", plan, handle)

    def restart(self, ps: PlannedStart | None = None) -> None:
        """A client starts again with a token it used: after its execution expired (or TTL deleted it) with
        a new input (a new run), or before that with the same one (the same execution)."""
        known = [p for p in self.planned if p.eid is not None and p.acked]
        if ps is None:
            if not known:
                return
            expired = [p for p in known if self.current_run(p.eid) is None]
            ps = self.rng.choice(expired if expired and self.rng.random() < 0.8 else known)
        runs = self.runs.runs.get(ps.eid) or []
        old_run = runs[-1].run if runs else None
        if self.current_run(ps.eid) is None:
            ps.input = {**ps.input, "inc": int(ps.input.get("inc", 0)) + 1}
            ps.acked = ps.attempts = 0
            self.stat("restart.after_expiry")
        else:
            self.stat("restart.repeated")
        self.start(ps)
        if self.current_run(ps.eid) in (None, old_run):
            return
        # The old run's event ids are the new run's to use: a sender uses one again.
        used = [w.record for w in self.writes.get(ps.eid, ()) if w.what == "put_event" and w.run == old_run
                and not w.record.event_id.startswith("callback:")]
        if used and self.rng.random() < 0.9:
            record = self.rng.choice(used)
            self.stat("event.reused_an_older_runs_id")
            self.send_event(ps.eid, record.name, record.event_id)

    def expire_one(self) -> None:
        """Time passes beyond an ended execution's retention (the schedule running meanwhile); TTL may
        delete it, and its token may be used again."""
        ended = sorted(eid for eid, a in self.inner.metas.items()
                       if a.get("status") in TERMINAL and isinstance(a.get("expires_at"), int))
        if not ended:
            return
        eid = self.rng.choice(ended)
        when = dt.datetime.fromtimestamp(self.inner.metas[eid]["expires_at"], tz=dt.timezone.utc)
        target = max(self.clock.now(), when) + dt.timedelta(seconds=self.rng.uniform(0, 900))
        if target - self.clock.now() > dt.timedelta(days=3):
            return
        self.stat("time.past_a_retention")
        self.advance((target - self.clock.now()).total_seconds())
        if self.rng.random() < 0.7:
            self.reap_expired()
        ps = next((p for p in self.planned if p.eid == eid and p.acked), None)
        if ps is not None and self.rng.random() < 0.9:
            self.restart(ps)

    def outlive_retention(self) -> None:
        """Time passes beyond retention plus grace while executions live (waiting, sleeping, retrying, fanning
        out), the schedule running where an expiry is near: nothing of theirs may expire."""
        if not self.live():
            return
        s = self.settings
        kept_s = s.retention_days * 86400 + s.history_grace_s
        self.stat("time.past_retention_while_live")
        self.advance(kept_s * self.rng.uniform(1.05, 1.5))

    # -- redeploys ----------------------------------------------------------------------------------------
    def redeploy(self) -> None:
        """One workflow's step list changes under its name (a deploy mid-run): the registry the engine, the
        operator and the sweeper read is replaced."""
        names = sorted(self.specs)
        step_lists = [n for n in names[1:] or names if not self.specs[n].code]  # a function is not redeployed
        if not step_lists:
            return
        name = self.rng.choice(step_lists)
        old = self.specs[name]
        s = self.settings
        long_s = s.retention_days * 86400 + s.history_grace_s
        long_s = long_s if self.config.ttl and long_s <= 4 * 3600 else None
        for _ in range(10):
            new = generate(self.rng, int(name[2:]), reliable=name == "cw0", long_s=long_s)
            if self.config.compatible_redeploy:  # the same draws as any redeploy: only what is deployed differs
                new = retuned(random.Random(f"loomsim-retune:{self.config.seed}"), old)
            registry = Registry()
            register(new, registry, self)
            if new.definition.fingerprint != old.definition.fingerprint:
                break
        else:
            return
        for other in names:
            if other != name:
                registry.register(self.specs[other].definition)
        self.specs[name] = new
        self.all_specs[new.definition.fingerprint] = new
        need = max(new.timeout(i) for i in range(len(new.steps))) + s.time_margin_ms / 1000
        if need + 1 > self.config.invocation_s:  # the deploy raises the worker's timeout to fit (check_fits)
            self.config.invocation_s = round(need * 1.5 + 1, 3)
        self.registry = self.engine.registry = self.engine.life.registry = registry
        self.sweeper.registry = self.sweeper.life.registry = registry
        self.undeployed[old.definition.fingerprint] = self._next_seq()
        self.stat("redeploy.done")
        self.log(f"== redeploy: {name} is now {new.describe()} ==")

    def cancel_an_old_run(self) -> None:
        """Right after a redeploy, half the time, an operator cancels a live execution of the definition it
        replaced: one that completed a compensable step must not end CANCELLED with it left done. Drawn from
        a stream of its own (the cancel's fault plan too), so every other draw of the seed stays as it was."""
        side = random.Random(f"loomsim-composition-cancel-old:{self.config.seed}")
        old = [eid for eid in self.live() if self.inner.metas[eid].get("fingerprint") in self.undeployed]
        if not old or side.random() < 0.5:
            return
        self.stat("redeploy.cancel_of_an_old_run")
        main, self.rng = self.rng, side
        try:
            self.cancel(side.choice(old))
        finally:
            self.rng = main

    def deployed(self, fingerprint: str | None) -> bool:
        return fingerprint not in self.undeployed

    # -- the extra operations of the fault phase -------------------------------------------------------------
    def random_action(self) -> None:
        action = self.rng.choices(ACTIONS, weights=self.config.action_weights)[0]
        self.stat(f"action.{action}")
        {"wake": self.wake, "callback": self.complete_callback, "reserved_id": self.send_reserved_id,
         "restart": self.restart, "expire": self.expire_one, "reap": self.reap_expired,
         "outlive": self.outlive_retention}[action]()
