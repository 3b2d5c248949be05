"""The operator's actions in the composition simulation (a mixin of ``CompositionSim``): events, cancels and
redrives, each an operation under its own fault plan."""

from __future__ import annotations

from engine_core.errors import EngineError, StorageError

from .composition_config import TERMINAL
from .composition_workflows import event_data
from .world import Op


class OperatorActions:
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
