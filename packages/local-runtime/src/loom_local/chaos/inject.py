"""The fault injector: crash points armed to SIGKILL a worker, the sweeper or the control plane, and step
messages put on the queue again (duplicated at once, or replayed long after, as a stale copy).

Kills are the local runtime's crash points (:class:`loom_local.faults.FaultControl`): a worker kill is
armed for its execution before the start (its id is known from the token), each control-plane kill
for its execution's create, and the sweeper kills for the first re-drive claims of the run. A
duplicate is the very body of a message the worker was just handed, sent again; a replay is an
execution's first message, sent again after the execution ended. Both go straight onto the step
queue, as SQS itself would deliver them, and are recorded with the message id SQS gave them.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

from ..faults import FaultControl
from .plan import Planned


class Tail:
    """New whole JSON lines of a file that another process appends to."""

    def __init__(self, path: Path):
        self.path, self.offset, self.rest = path, 0, b""

    def read(self) -> list[dict[str, Any]]:
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                chunk = f.read()
        except FileNotFoundError:
            return []
        self.offset += len(chunk)
        *lines, self.rest = (self.rest + chunk).split(b"\n")
        out = []
        for line in lines:
            try:
                out.append(json.loads(line))
            except ValueError:
                continue
        return out


class Injector:
    def __init__(self, faults: FaultControl, sqs: Any, queue_url: str, functions: dict[str, str],
                 invocations: Path):
        self.faults, self.sqs, self.queue_url, self.functions = faults, sqs, queue_url, functions
        self.tail = Tail(invocations)
        self.tail.offset = invocations.stat().st_size if invocations.exists() else 0  # only this run's
        self.arms: dict[str, dict[str, Any]] = {}
        self.injected: list[dict[str, Any]] = []
        self.first_body: dict[str, tuple[str, str]] = {}
        self.to_duplicate: set[str] = set()
        self.lock = threading.Lock()

    def _arm(self, kind: str, point: str, match: dict[str, Any], count: int = 1, **about: Any) -> None:
        ids = self.faults.arm(point, action="kill", match=match, count=count, function=self.functions[kind])
        for arm_id in ids:
            self.arms[arm_id] = {"arm_id": arm_id, "kind": kind, "point": point, "match": match, **about}

    def arm_sweeper(self, n: int) -> None:
        """SIGKILL the sweeper right after its next ``n`` re-drive claims (before it sends their messages)."""
        if n:
            self._arm("sweeper", "sweeper.after_claim", {}, count=n, how="first claims")

    def arm_for(self, planned: Planned) -> None:
        """Arm what ``planned`` meets on its way: before its start, so even its first step's points are covered."""
        if planned.kill is not None:
            k = planned.kill
            self._arm("worker", k.point, k.match, execution_id=planned.execution_id, how=k.how, label=k.label)
        if planned.control_kill:
            self._arm("control-plane", "control.after_create", {"execution_id": planned.execution_id},
                      execution_id=planned.execution_id, how="after the create")
        if planned.duplicate:
            with self.lock:
                self.to_duplicate.add(planned.execution_id)

    def watch(self) -> None:
        """Read the deliveries since the last call: duplicate each targeted execution's first one at once."""
        for record in self.tail.read():
            if record.get("kind") != "held":
                continue
            for m in record.get("messages", []):
                eid = m.get("execution_id")
                if eid is None:
                    continue
                with self.lock:
                    self.first_body.setdefault(eid, (m["message_id"], m["body"]))
                    due = eid in self.to_duplicate
                    self.to_duplicate.discard(eid)
                if due:
                    self._send("duplicate", eid, m["message_id"], m["body"])

    def replay(self, execution_id: str, version: int) -> bool:
        """Send the execution's first message again (it ended at ``version``); False if none was seen yet."""
        self.watch()
        with self.lock:
            first = self.first_body.get(execution_id)
        if first is None:
            return False
        self._send("replay", execution_id, first[0], first[1], version_at_end=version)
        return True

    def _send(self, kind: str, execution_id: str, of: str, body: str, **about: Any) -> None:
        sent = self.sqs.send_message(QueueUrl=self.queue_url, MessageBody=body)
        with self.lock:
            self.injected.append({"kind": kind, "at": time.time(), "execution_id": execution_id, "of": of,
                                  "message_id": sent["MessageId"], "body": body, **about})

    def finish(self) -> dict[str, Any]:
        """Disarm what never fired; what was armed, what fired (read from the fired records) and what was sent."""
        unfired = set(self.faults.disarm(list(self.arms)))
        fired = {f.id: f for f in self.faults.fired(list(self.arms))}
        arms = []
        for arm_id, arm in self.arms.items():
            f = fired.get(arm_id)
            state = {"fired": False, "unfired": arm_id in unfired}
            if f is not None:
                state = {"fired": True, "fired_at": f.fired_at, "pid": f.pid, "info": f.info,
                         "function_name": f.function_name}
            arms.append({**arm, **state})
        return {"arms": arms, "injected": list(self.injected)}
