"""The operator: each execution's script of cancels, wakes, fixes, redrives, events, callbacks and repeated
starts, done through the SDK (``loom_cli.sdk.LoomClient``) mid-flight, each answer recorded as the API gave it.

An action waits for its statuses (one ``GET`` per look); a refusal that only means "not in that state
yet" (``not_waiting`` before a sleep began, say) is looked at again on a later pass, and any other
answer, accepted or refused, is the action's record. An execution that ended before an action could
be done records that action as skipped, with the status it ended in.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from loom_cli.sdk import LoomClient
from loom_cli.sdk.errors import LoomError

from . import catalog
from .config import ENDED
from .plan import Planned

EVENT = "approved"
ANSWER = {"approved": True, "approver": "chaos"}


def refusal(exc: LoomError) -> dict[str, Any]:
    return {"code": exc.code, "http_status": exc.status, "execution_status": exc.execution_status,
            "message": exc.message[:300]}


def execution_answer(doc: Any) -> dict[str, Any]:
    return {k: getattr(doc, k) for k in ("status", "version", "cancel_requested", "compensating", "redrives")}


@dataclass
class Script:
    planned: Planned
    actions: list[catalog.Action]
    started_at: float
    done: list[dict[str, Any]] = field(default_factory=list)
    last_at: float = 0.0
    callback_token: str | None = None

    @property
    def pending(self) -> bool:
        return len(self.done) < len(self.actions)

    @property
    def next(self) -> catalog.Action:
        return self.actions[len(self.done)]


class Operator:
    """Runs every execution's script; ``look()`` is one pass over the executions with something left to do."""

    def __init__(self, client: LoomClient, fixes_dir: Path):
        self.client, self.fixes_dir = client, fixes_dir
        self.scripts: dict[str, Script] = {}

    def add(self, planned: Planned, started_at: float) -> None:
        actions = list(catalog.BY_KEY[planned.variant].script)
        if planned.restart:
            actions.insert(0, catalog.Action("restart", after_s=2.0))
        self.scripts[planned.execution_id] = Script(planned, actions, started_at, last_at=started_at)

    @property
    def busy(self) -> bool:
        return any(s.pending for s in self.scripts.values())

    def records(self) -> dict[str, list[dict[str, Any]]]:
        return {eid: s.done for eid, s in self.scripts.items()}

    def look(self) -> int:
        """One pass: do every action whose time and statuses have come. Returns how many were done."""
        acted = 0
        for script in list(self.scripts.values()):
            while script.pending and time.time() - script.last_at >= script.next.after_s:
                record = self._try(script)
                if record is None:
                    break  # not yet: look again on the next pass
                script.done.append({"op": script.next.op, "at": time.time(), **record})
                script.last_at = time.time()
                acted += 1
        return acted

    def _try(self, script: Script) -> dict[str, Any] | None:
        action, eid = script.next, script.planned.execution_id
        if action.when:
            try:
                doc = self.client.get(eid)
            except LoomError as exc:
                return None if not exc.is_refusal else {"ok": False, "refused": refusal(exc)}
            if doc.status in ENDED and doc.status not in action.when:
                return {"ok": False, "skipped": f"it ended {doc.status} first"}
            if doc.status not in action.when:
                return None
            if action.op == "callback":
                script.callback_token = (doc.context or {}).get("approval_callback")
                if not script.callback_token:
                    return {"ok": False, "skipped": "its context has no approval_callback token"}
        if action.op == "callback_again" and not script.callback_token:
            return {"ok": False, "skipped": "its callback was never sent"}
        try:
            return {"ok": True, "answer": self._do(action.op, script)}
        except LoomError as exc:
            if not exc.is_refusal:
                return None  # could not reach the API this time: try again
            if exc.code in action.not_yet and exc.execution_status not in ENDED:
                return None
            return {"ok": False, "refused": refusal(exc)}

    def _do(self, op: str, script: Script) -> dict[str, Any]:
        p, client = script.planned, self.client
        if op == "cancel":
            return execution_answer(client.cancel(p.execution_id, reason="chaos run: an operator cancels"))
        if op == "wake":
            return execution_answer(client.wake(p.execution_id))
        if op == "redrive":
            return execution_answer(client.redrive(p.execution_id))
        if op == "fix":
            self.fixes_dir.mkdir(parents=True, exist_ok=True)
            (self.fixes_dir / p.input["feed"]).write_text("fixed by the chaos run\n")
            return {"fixed": p.input["feed"]}
        if op in ("send", "send_again"):
            sent = client.send(p.execution_id, EVENT, ANSWER, event_id=f"chaos-{p.index}")
            return {"outcome": sent.outcome}
        if op in ("callback", "callback_again"):
            return {"outcome": client.complete_callback(script.callback_token, ANSWER).outcome}
        if op == "restart":
            started = client.start(p.workflow, p.input, idempotency_token=p.token)
            return {"execution_id": started.execution_id, "created": started.created}
        raise ValueError(f"unknown action {op!r}")
