"""The composition simulation's two phases (a mixin of ``CompositionSim``): the fault phase picks, at random,
among deliveries, sweeps, clock moves, duplicated and lost messages, events, cancels, redrives, starts and
the actions of ``ACTIONS`` (and soon after a long timer or an ending, the clock past retention); the quiet
phase stops the faults, sends the events waits still need, and requires every execution to end within a
bound computed from its workflow."""

from __future__ import annotations

import datetime as dt
import math
from collections import Counter

from .composition_workflows import MISFIT_PREFIX, is_misfit
from .sim import SWEEP_INTERVAL_S
from .ttl import REAP_MODES


class Phases:
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
            if cfg.redeploy_at == i:
                self.redeploy()
                self.after_op()
                self.cancel_an_old_run()
                self.after_op()
            if self.outlive_due and rng.random() < 0.5:
                self.outlive_due = False
                self.outlive_retention()
                self.after_op()
            if self.expire_due and rng.random() < 0.5:
                self.expire_due = False
                self.expire_one()
                self.after_op()
            r = rng.random()
            visible = self.queue.visible()
            if rng.random() < cfg.action_rate:
                self.random_action()
            elif r < cfg.event_rate:
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
            if cfg.ttl and rng.random() < 0.1:
                self.reap_expired()
            self.after_op()
        for ps in pending_starts:
            self.start(ps)
            self.after_op()

    def compute_liveness_bound(self) -> int:
        """Sweeps within which every execution must end once faults stop: every step and every
        compensation at its worst (each branch of a fan-out one after another), plus sleeps and waits."""
        s, vis = self.settings, self.config.visibility_s
        worst = 0.0
        for wf in self.all_specs.values():
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
            wf, run = self.spec_for(a), a.get("created_at")
            i = a.get("current_step", 0)
            if a.get("compensating") or i >= len(wf.steps) or wf.steps[i].kind != "wait" or wf.steps[i].unsent:
                continue
            name = wf.steps[i].event
            # A sender that was told its event was kept does not send again: an event counts as used
            # only once a wait that recorded it was advanced past (the engine's own records do not decide
            # this, or a wait that recorded an event and crashed before advancing would be handed another).
            used = self.used_events(eid, run)
            kept = [w.record.event_id for w in self.writes.get(eid, ()) if w.what == "put_event" and w.run == run
                    and w.record.name == name and w.record.event_id not in used and not is_misfit(w.record.event_id)]
            if not kept and wf.code and a.get("status") == "WAITING" and (eid, run, i) not in self.quiet_misfits \
                    and self.rng.random() < 0.5:
                # First a misfit, alone: it wakes the wait, which must pass it over and wait on, not time out.
                self.quiet_misfits.add((eid, run, i))
                self.stat("quiet.misfit_sent")
                self.send_event(eid, name, f"{MISFIT_PREFIX}q{i}")
                self.after_op()
                continue
            if not kept:
                n = sum(1 for s in self.event_sends if s[0] == eid)
                self.stat("quiet.events_sent")
                self.send_event(eid, name, f"{name}-q{n}")
                self.after_op()

    def used_events(self, eid: str, run: str) -> set[str]:
        """Event ids recorded by a wait of ``run`` whose delivery then advanced the execution past it."""
        used = set()
        writes = [w for w in self.writes.get(eid, ()) if w.run == run]
        for c in self.commits.get(eid, ()):
            if c.after.get("created_at") != run or c.before.get("compensating") \
                    or c.after.get("current_step") != (c.before.get("current_step") or 0) + 1:
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
                if self.config.ttl and self.rng.random() < 0.3:
                    self.reap_expired()
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
        if self.config.ttl and self.rng.random() < 0.5:  # and then TTL deletes what expired
            ttls = [a["expires_at"] for a in self.inner.metas.values() if isinstance(a.get("expires_at"), int)]
            if ttls:
                self.clock.set(max(self.clock.now(), dt.datetime.fromtimestamp(max(ttls) + 1, tz=dt.timezone.utc)))
                self.reap_expired(self.rng.choice(REAP_MODES))
