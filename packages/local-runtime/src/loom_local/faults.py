"""Arming crash points from a test or the demo (the function side lives in ``_bootstrap.py``).

Layout of the control directory the local runtime hands to every function process:

    armed/<id>.json    an arm waiting for its point: {"id", "point", "action", "match", "function"}
    claimed/<id>.json  taken by one process (an atomic rename, so each arm fires once)
    fired/<id>.json    what happened: the arm plus "pid", "info", "fired_at", "function_name"

Points: the engine's (``engine_core.faults.POINTS``) and two inside a step body, ``step.enter`` and
``step.return``. ``match`` keys are compared with what the point reports: ``execution_id``, ``step``
(the index) and ``attempt`` everywhere; ``workflow`` and ``step_name`` in the body points too, and
``branch`` (a parallel or map branch, else None) and ``compensation`` (True in a compensation body).
"""

from __future__ import annotations

import json
import os
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine_core.faults import BODY_POINTS, ENGINE_POINTS, POINTS  # the one list (the engine's)
ACTIONS = ("kill", "stop", "raise")


class FaultError(Exception):
    pass


@dataclass(frozen=True)
class Fired:
    id: str
    point: str
    action: str
    pid: int
    info: dict[str, Any]
    fired_at: float
    function_name: str


class FaultControl:
    """Arms named crash points in the local runtime's function processes.

    Example:
        >>> faults = FaultControl(stack.fault_dir)
        >>> arm = faults.arm("worker.after_checkpoint", match={"execution_id": eid, "step": 0})
        >>> fired = faults.wait_fired(arm, timeout_s=30)   # the worker process is dead by now
    """

    def __init__(self, directory: str | os.PathLike[str]):
        self.dir = Path(directory)
        for sub in ("armed", "claimed", "fired"):
            (self.dir / sub).mkdir(parents=True, exist_ok=True)

    def arm(self, point: str, *, action: str = "kill", match: dict[str, Any] | None = None, count: int = 1,
            function: str | None = None, message: str | None = None) -> list[str]:
        """Arm ``point`` ``count`` times; returns the arm ids (one per firing)."""
        if point not in POINTS:
            raise FaultError(f"unknown crash point {point!r}; known points: {', '.join(POINTS)}")
        if action not in ACTIONS:
            raise FaultError(f"unknown action {action!r}; use one of {', '.join(ACTIONS)}")
        if action == "raise" and point == "step.return":
            raise FaultError("step.return cannot raise (the body already returned); use step.enter to inject an "
                             "exception into a step, or kill/stop at step.return")
        if count < 1:
            raise FaultError(f"count must be at least 1, got {count}")
        ids = []
        for _ in range(count):
            arm_id = f"{time.time_ns():020d}-{uuid.uuid4().hex[:8]}"
            body = {"id": arm_id, "point": point, "action": action, "match": match or {}, "function": function}
            if message:
                body["message"] = message
            tmp = self.dir / "armed" / f".{arm_id}.tmp"
            tmp.write_text(json.dumps(body), encoding="utf-8")
            os.replace(tmp, self.dir / "armed" / f"{arm_id}.json")  # appears whole or not at all
            ids.append(arm_id)
        return ids

    def fired(self, arm_ids: list[str] | None = None) -> list[Fired]:
        out = []
        for path in sorted((self.dir / "fired").glob("*.json")):
            if arm_ids is not None and path.stem not in arm_ids:
                continue
            raw = json.loads(path.read_text(encoding="utf-8"))
            out.append(Fired(raw["id"], raw["point"], raw.get("action", "kill"), raw["pid"], raw.get("info") or {},
                             raw["fired_at"], raw.get("function_name", "")))
        return out

    def pending(self) -> list[str]:
        return sorted(p.stem for p in (self.dir / "armed").glob("*.json"))

    def wait_fired(self, arm_ids: list[str], timeout_s: float, poll_s: float = 0.05) -> list[Fired]:
        """Wait until every arm in ``arm_ids`` fired; raises with what is still pending otherwise."""
        deadline = time.monotonic() + timeout_s
        while True:
            fired = self.fired(arm_ids)
            if len(fired) == len(arm_ids):
                return fired
            if time.monotonic() > deadline:
                raise FaultError(f"{len(arm_ids) - len(fired)} of {len(arm_ids)} arms did not fire within "
                                 f"{timeout_s:g} s (pending: {self.pending()})")
            time.sleep(poll_s)

    def disarm(self, arm_ids: list[str]) -> list[str]:
        """Remove these arms if no process claimed them yet; returns the ones removed (never fired)."""
        removed = []
        for arm_id in arm_ids:
            try:
                (self.dir / "armed" / f"{arm_id}.json").unlink()
                removed.append(arm_id)
            except FileNotFoundError:
                pass
        return removed

    def disarm_all(self) -> int:
        """Remove every arm not yet claimed (a test's teardown); returns how many were removed."""
        removed = 0
        for path in (self.dir / "armed").glob("*.json"):
            try:
                path.unlink()
                removed += 1
            except FileNotFoundError:
                pass
        return removed
