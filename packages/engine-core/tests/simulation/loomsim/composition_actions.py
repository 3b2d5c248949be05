"""The operator's actions in the composition simulation (a mixin of ``CompositionSim``), each an operation
under its own fault plan: events (also under ids reserved for callbacks, which must be refused writing
nothing), callbacks with the tokens the workflows' steps issued (also once their wait ended another way:
409 ``callback_used``), cancels, redrives and wakes.

Every event names the run it is sent to (``event_data``), read from the execution item as the sender
sends: the checks then see that no run consumes, or holds in a body's context, an event sent to another.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine_core import callbacks
from engine_core.errors import (
    CallbackNotFoundError,
    EngineError,
    ExecutionStateConflictError,
    InvalidRequestError,
    StorageError,
)
from engine_core.model import StepRecord, StepStatus

from .composition_config import TERMINAL
from .composition_workflows import MISFIT_PREFIX, event_data
from .ttl import epoch
from .world import InjectedQueueError, Op

_INJECTED = (InjectedQueueError, StorageError)
"""What a fault plan makes an operator call raise (a failed SendMessage, a store call that failed)."""


@dataclass(frozen=True)
class Token:
    """A callback token a step body was handed (``ctx.callback_token(event)``)."""

    execution_id: str
    run: str
    step: int
    """The wait it completes: the first ``wait_for_event(event)`` from the issuing step on."""
    event: str
    token: str


class OperatorActions:
    # -- what the store says now -------------------------------------------------------------------------
    def current_run(self, eid: str) -> str | None:
        """The run the engine reads under ``eid`` now: None once its item is gone or has expired."""
        attrs = self.inner.metas.get(eid)
        if attrs is None:
            return None
        ttl = attrs.get("expires_at")
        return None if isinstance(ttl, int) and ttl <= epoch(self.clock.now()) else attrs.get("created_at")

    def wait_answered(self, eid: str, run: str, step: int) -> StepRecord | None:
        """The SUCCEEDED record of the wait at ``step`` in ``run``, if the store holds one."""
        for r in self.inner._records(eid):
            if isinstance(r, StepRecord) and r.step_index == step and r.kind == "event" and r.run == run \
                    and r.status is StepStatus.SUCCEEDED:
                return r
        return None

    def wait_woken_at(self, eid: str, run: str, step: int) -> bool:
        """The execution waits at ``step`` of ``run``, and an operator's wake of that wait is not delivered yet."""
        attrs = self.inner.metas.get(eid) or {}
        return bool(attrs.get("wait_woken")) and attrs.get("status") == "WAITING" \
            and attrs.get("current_step") == step and self.current_run(eid) == run

    def event_written(self, eid: str, run: str, name: str, event_id: str) -> bool:
        return any(w.what == "put_event" and w.run == run and (w.record.name, w.record.event_id) == (name, event_id)
                   for w in self.writes.get(eid, ()))

    def writes_by(self, op: Op) -> list:
        return [w for ws in self.writes.values() for w in ws if w.op_id == op.id] + \
            [c for cs in self.commits.values() for c in cs if c.op_id == op.id]

    # -- events ----------------------------------------------------------------------------------------------
    def send_event(self, eid: str | None = None, name: str | None = None, event_id: str | None = None) -> None:
        rng = self.rng
        ids = self.known_ids()
        if eid is None:
            if not ids:
                return
            eid = rng.choice(ids)
        attrs = self.inner.metas.get(eid)
        if attrs is None:
            return
        wf = self.spec_for(attrs)
        names = sorted({s.event for s in wf.steps if s.kind == "wait"})
        if not names:
            return
        name = name or rng.choice(names)
        if event_id is None and wf.code and rng.random() < 0.15:  # data its wait's model refuses, unchecked at send
            event_id = f"{MISFIT_PREFIX}{rng.choice([0, 1])}"
            self.stat("event.misfit_sent")
        event_id = event_id or f"{name}-{rng.choice([0, 0, 0, 1, 2])}"
        run = attrs.get("created_at")
        plan = self.plan("event")
        waits = [sp.index for sp in wf.steps if sp.kind == "wait" and sp.event == name]
        if attrs.get("status") not in TERMINAL and not attrs.get("compensating") and waits \
                and attrs.get("current_step", 0) < waits[0]:
            self.stat("event.sent_before_the_wait")

        def handle(op: Op) -> None:
            key = (eid, name, event_id)
            answered = key not in self.unanswered_events
            self.unanswered_events.add(key)  # until this send answers (a crash or a timeout kills it first)
            try:
                sent = self.engine.operator.send_event(eid, name, event_data(name, event_id, run), by="sim",
                                                       event_id=event_id)
                self.unanswered_events.discard(key)
                if not answered:
                    self.stat("event.answered_after_a_dead_send")
            except (EngineError, StorageError) as exc:
                self.unanswered_events.discard(key)
                self.stat(f"event.refused.{type(exc).__name__}")
                self.log(f"  -> send_event refused: {type(exc).__name__}: {str(exc)[:80]}")
                return
            except Exception as exc:
                if isinstance(exc, InjectedQueueError):
                    self.stat("event.send_failed")
                    return
                self.violation(f"send_event raised {type(exc).__name__}: {exc}")
                return
            self.event_sends.append((eid, name, event_id, sent.outcome))
            self.stat(f"event.{sent.outcome}")
            self.log(f"  -> event {name}#{event_id}: {sent.outcome}")
            if sent.outcome == "duplicate" and not self.event_written(eid, run, name, event_id):
                self.violation(f"{eid[:8]}: event {name}#{event_id} sent to run {run} answered duplicate, but that "
                               "id was never written to this run (another run's event counted as this run's)")

        self.run_op("event", f"{eid[:8]} {name}#{event_id}", plan, handle)

    def send_reserved_id(self) -> None:
        """Someone posts an event under an id reserved for callback tokens: refused, nothing written."""
        ids = self.known_ids()
        if not ids:
            return
        eid = self.rng.choice(ids)
        wf = self.spec_for(self.inner.metas[eid])
        waits = [s for s in wf.steps if s.kind == "wait"]
        if not waits:
            return
        wait = self.rng.choice(waits)
        event_id = callbacks.event_id(wait.index if self.rng.random() < 0.8 else wait.index + 1)
        data = event_data(wait.event, event_id, self.inner.metas[eid].get("created_at"))

        def handle(op: Op) -> None:
            try:
                sent = self.engine.operator.send_event(eid, wait.event, data, by="sim", event_id=event_id)
            except InvalidRequestError:
                self.stat("event.reserved_id_refused")
                self.log(f"  -> {event_id} refused: reserved for callback tokens")
            except Exception as exc:
                self.violation(f"{eid[:8]}: an event under the reserved id {event_id} raised {type(exc).__name__}: "
                               f"{exc}, not InvalidRequestError")
            else:
                self.violation(f"{eid[:8]}: an event under the reserved id {event_id} was accepted ({sent.outcome}): "
                               "anyone could complete or burn that wait's callback token")
            written = self.writes_by(op)
            if written:
                self.violation(f"{eid[:8]}: refusing an event under the reserved id {event_id} wrote "
                               f"{[getattr(w, 'what', 'commit') for w in written]}")

        self.run_op("event", f"{eid[:8]} {wait.event}#{event_id} (reserved)", self.plan("event"), handle)

    # -- callback tokens ---------------------------------------------------------------------------------------
    def maybe_issue_token(self, ctx, wf, s, entry) -> None:
        """A body hands a callback token for a later wait to the outside world (half the time): a wait of the
        list its run started on (a compatible same-version redeploy runs on that list, cut to its length)."""
        info = self.runs.info(ctx.execution_id, entry.run)
        own = self.all_specs.get(info.fingerprint) if info is not None else None
        length = len(own.steps) if own is not None else len(wf.steps)
        ahead = [w for w in wf.steps if w.kind == "wait" and s.index < w.index < length]
        if wf.code or not ahead or self.rng.random() >= 0.5:
            return
        name = self.rng.choice(sorted({w.event for w in ahead}))
        step = next(w.index for w in ahead if w.event == name)
        try:
            token = ctx.callback_token(name)
            named = callbacks.parse(token)
        except Exception as exc:
            self.violation(f"{ctx.execution_id[:8]} step {s.index}: callback_token({name!r}) raised "
                           f"{type(exc).__name__}: {exc}")
            return
        if named != (ctx.execution_id, step):
            self.violation(f"{ctx.execution_id[:8]} step {s.index}: the callback token for {name!r} names {named}, "
                           f"not the next wait of that name (step {step})")
        self.tokens.append(Token(ctx.execution_id, entry.run, step, name, token))
        self.stat("callback.issued")

    def complete_callback(self) -> None:
        """The outside system posts a token it was handed; sometimes one whose wait already ended another
        way (a plain event, its default), which must be refused 409 ``callback_used``."""
        if not self.tokens:
            return
        rng = self.rng
        answered = [t for t in self.tokens if self.wait_answered(t.execution_id, t.run, t.step)]
        t = rng.choice(answered) if answered and rng.random() < 0.5 else rng.choice(self.tokens)
        event_id = callbacks.event_id(t.step)
        eid = t.execution_id
        attrs = self.inner.metas.get(eid, {})
        before = (self.current_run(eid), self.wait_answered(eid, t.run, t.step), self.event_written(eid, t.run, t.event,
                                                                                                     event_id),
                  self.wait_woken_at(eid, t.run, t.step),
                  attrs.get("status") in TERMINAL or bool(attrs.get("compensating") or attrs.get("cancel_requested")))

        def handle(op: Op) -> None:
            try:
                sent = self.engine.operator.complete_callback(t.token, event_data(t.event, event_id, t.run), by="sim")
                outcome = sent.outcome
            except CallbackNotFoundError:
                outcome = "not_found"
            except ExecutionStateConflictError as exc:
                outcome = exc.code
            except _INJECTED:
                self.stat("callback.failed")
                return
            except Exception as exc:
                self.violation(f"{eid[:8]}: complete_callback raised {type(exc).__name__}: {exc}")
                return
            self.log(f"  -> callback for step {t.step}: {outcome}")
            self.judge_callback(t, outcome, before, op)

        self.run_op("callback", f"{eid[:8]} callback step {t.step}", self.plan("callback"), handle)

    def judge_callback(self, t: Token, outcome: str, before: tuple, op: Op) -> None:
        eid, event_id = t.execution_id, callbacks.event_id(t.step)
        run_before, answered_before, sent_before, woken_before, ended_before = before
        run_after = self.current_run(eid)
        answered = answered_before or self.wait_answered(eid, t.run, t.step)
        sent = sent_before or self.event_written(eid, t.run, t.event, event_id)
        mine = t.run in (run_before, run_after)
        self.stat(f"callback.{outcome}")
        if outcome in ("delivered", "buffered"):
            wrote = [w for w in self.writes.get(eid, ()) if w.op_id == op.id and w.what == "put_event"
                     and w.record.event_id == event_id and w.run == t.run]
            # A use that died between keeping the answer and waking the wait: a repeat wakes it, writing no event
            woke = outcome == "delivered" and sent_before and any(
                c.op_id == op.id for c in self.commits.get(eid, ()))
            if not wrote and not woke:
                self.violation(f"{eid[:8]}: a callback for step {t.step} answered {outcome}, but no event {event_id} "
                               f"was written to its run {t.run}" + (" (and this use woke nothing)" if sent_before else ""))
            # A repeat of the use whose answer the wait's record already took, the record written but the wait not
            # yet moved past it (its delivery died between the two): waking that wait completes it once, as recorded.
            same = woke and answered_before is not None and answered_before.event_id == event_id and any(
                c.op_id == op.id and c.before.get("current_step") == t.step and c.before.get("status") == "WAITING"
                for c in self.commits.get(eid, ()))
            if answered_before is not None and not same:
                how = answered_before.event_id or "its default"
                self.violation(f"{eid[:8]}: the callback token of step {t.step} completed ({outcome}) after its wait "
                               f"had ended by {how}: a token must complete only its own wait, once")
        elif outcome == "not_found":
            info = self.runs.info(eid, t.run)
            if not self.deployed(info.fingerprint if info else None):
                self.stat("callback.not_found_after_a_redeploy")  # the deployed list cannot say which wait it is
            elif run_before == t.run and run_after == t.run:
                self.violation(f"{eid[:8]}: a callback token of the current run {t.run} (step {t.step}) answered "
                               "404 not found")
            else:
                self.stat("callback.not_found_after_its_run")
        elif outcome == "callback_used":
            if answered is None and not sent and (woken_before or self.wait_woken_at(eid, t.run, t.step)):
                self.stat("callback.used_after_a_wake")  # the wake came first: refused, nothing kept
            elif answered is None and not sent:
                self.violation(f"{eid[:8]}: a callback token for step {t.step} was refused callback_used, but its "
                               "wait was never answered and the token never used")
            elif answered is not None and answered.event_id != event_id:
                self.stat("callback.used_after_answered_otherwise")
        elif outcome in ("workflow_definition_mismatch", "workflow_version_missing"):
            # A genuine token of a live execution whose definition is not deployed: refused, not used up.
            info = self.runs.info(eid, t.run)
            attrs = self.inner.metas.get(eid, {})
            if self.deployed(info.fingerprint if info else None) or attrs.get("status") in TERMINAL:
                self.violation(f"{eid[:8]}: a callback for step {t.step} answered {outcome}, but its definition is "
                               f"deployed or the execution ended ({attrs.get('status')})")
            elif [w for w in self.writes.get(eid, ()) if w.op_id == op.id and w.what == "put_event"]:
                self.violation(f"{eid[:8]}: a callback refused {outcome} wrote an event")
            else:
                self.stat("callback.refused_while_its_definition_is_not_deployed")
        elif outcome == "execution_ended":
            attrs = self.inner.metas.get(eid, {})
            ending = attrs.get("compensating") or attrs.get("cancel_requested")  # no wait of it runs again
            if (attrs.get("status") not in TERMINAL and not ending) or not mine:
                self.violation(f"{eid[:8]}: a callback answered execution_ended while it is {attrs.get('status')}")
            elif [w for w in self.writes.get(eid, ()) if w.op_id == op.id and w.what == "put_event"]:
                if ended_before:  # only an ending that came while the answer was being kept may leave it kept
                    self.violation(f"{eid[:8]}: a callback refused execution_ended wrote an event")
                else:
                    self.stat("callback.refused_as_it_ended")
            elif ending and attrs.get("status") not in TERMINAL:
                self.stat("callback.refused_while_it_is_ending")
        else:
            self.violation(f"{eid[:8]}: a callback for step {t.step} answered {outcome}")

    # -- cancel, redrive, wake ---------------------------------------------------------------------------------
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
                if isinstance(exc, InjectedQueueError):
                    return
                self.violation(f"cancel raised {type(exc).__name__}: {exc}")
                return
            self.stat("cancel.compensating" if e.compensating else
                      "cancel.requested" if e.cancel_requested else f"cancel.{e.status.value}")
            self.log(f"  -> cancel: {e.status.value}{' compensating' if e.compensating else ''}"
                     f"{' requested' if e.cancel_requested else ''}")

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
                if isinstance(exc, InjectedQueueError):
                    return
                self.violation(f"redrive raised {type(exc).__name__}: {exc}")
                return
            self.stat("redrive.done")
            self.log(f"  -> redriven at step {e.current_step}")

        self.run_op("redrive", eid[:8], plan, handle)

    def wake(self) -> None:
        """An operator skips the current sleep, retry backoff or event wait (``not_waiting`` elsewhere)."""
        ids = self.live() if self.live() and self.rng.random() < 0.9 else self.known_ids()
        if not ids:
            return
        eid = self.rng.choice(ids)

        def handle(op: Op) -> None:
            try:
                e = self.engine.operator.wake(eid, by="sim")
            except ExecutionStateConflictError as exc:
                self.stat(f"wake.refused.{exc.code}")
                self.log(f"  -> wake refused: {exc.code}")
                return
            except (EngineError, StorageError) as exc:
                self.stat(f"wake.refused.{type(exc).__name__}")
                return
            except Exception as exc:
                if isinstance(exc, InjectedQueueError):
                    return
                self.violation(f"wake raised {type(exc).__name__}: {exc}")
                return
            self.log(f"  -> woken at step {e.current_step}")

        self.run_op("wake", eid[:8], self.plan("wake"), handle)

    def check_wake_commit(self, c) -> None:
        """A wake ends a sleep, a retry's backoff or an event wait, never a running attempt's lease."""
        before = c.before
        timer = before.get("timer")
        self.stat(f"wake.applied.{'compensation_' if before.get('compensating') else ''}{timer}")
        if timer == "event":
            self.event_wakes.setdefault(c.execution_id, []).append(self.clock.now())
        if timer not in ("sleep", "retry", "event") or before.get("attempt_started_at") or before.get("cancel_requested"):
            self.violation(f"{c.execution_id[:8]}: a wake moved the execution while its timer was {timer}"
                           f"{' (claimed)' if before.get('attempt_started_at') else ''}"
                           f"{' (cancel requested)' if before.get('cancel_requested') else ''}: only a sleep, a "
                           "backoff or a wait may be cut short")
