"""One chaos run on a running local stack: start the plan's executions on time, inject its faults, let the
operator act mid-flight, wait for every execution to end (within the run's bound), let the queue drain,
then read back what happened.

The result is one JSON-able record (the plan, each start's and each action's answer, the arms and
what fired, the messages injected, each execution's end and history as the API gives them, the
ledger's lines, and the runtime's records); :mod:`.invariants` and :mod:`.figures` work on that
record alone, so a recorded run can be checked again without a stack.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loom_cli.sdk import LoomClient
from loom_cli.sdk.errors import LoomError

from ..faults import FaultControl
from ..invocations import FILE as INVOCATIONS
from . import observe
from .actions import Operator, refusal
from .config import ENDED
from .inject import Injector
from .plan import Plan, Planned

STARTERS = 4
"""Concurrent start requests (the local control plane runs four environments)."""
START_RETRIES = 5


@dataclass
class Target:
    """The stack a run drives, and where its functions keep the examples' ledger and feed fixes."""

    url: str
    faults: FaultControl
    sqs: Any
    queue_url: str
    log_dir: Path
    ledger: Path
    fixes_dir: Path
    functions: dict[str, str]
    """Function name by role (worker, sweeper, control-plane)."""
    settings: dict[str, Any]

    @classmethod
    def of(cls, stack: Any, ledger: Path, fixes_dir: Path) -> Target:
        d = stack.deployment
        settings = {"worker_timeout_s": d.worker.timeout_s, "sweep_every_s": stack.scheduler.period_s,
                    "lease_s": float(d.worker.environment.get("LOOM_LEASE_S") or 0),
                    "visibility_timeout_s": d.queue.visibility_timeout_s,
                    "worker_concurrency": stack.poller.config.max_concurrency,
                    "batch_size": stack.poller.config.batch_size}
        return cls(stack.url, stack.faults, stack.client("sqs"), d.queue.url, stack.log_dir, ledger, fixes_dir,
                   {role: f.name for role, f in d.functions.items()}, settings)


def _iso(at: float) -> str:
    return dt.datetime.fromtimestamp(at, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class Run:
    def __init__(self, plan: Plan, target: Target, progress: Callable[[str], None] = print,
                 drain_s: float | None = None):
        self.plan, self.target, self.say = plan, target, progress
        self.client = LoomClient(target.url, sign=False)
        self.operator = Operator(LoomClient(target.url, sign=False), target.fixes_dir)
        self.injector = Injector(target.faults, target.sqs, target.queue_url, target.functions,
                                 target.log_dir / INVOCATIONS)
        self.drain_s = drain_s if drain_s is not None else target.settings["visibility_timeout_s"] + 30.0
        self.starts: dict[str, dict[str, Any]] = {}
        self.statuses: dict[str, str] = {}
        self.replayed: set[str] = set()

    def _start(self, p: Planned, t0: float) -> None:
        time.sleep(max(0.0, t0 + p.start_at_s - time.time()))
        self.injector.arm_for(p)
        client = LoomClient(self.target.url, sign=False)
        record: dict[str, Any] = {"at": time.time(), "errors": []}
        for _ in range(1 + START_RETRIES):
            try:
                started = client.start(p.workflow, p.input, idempotency_token=p.token)
            except LoomError as exc:
                record["errors"].append({"at": time.time(), **refusal(exc)})
                if exc.is_refusal and exc.status is not None and exc.status < 500:
                    break  # refused for good (the plan's input, say): a client would not retry it
                time.sleep(1.0)  # a client retrying a start that failed: the same token, the same input
                continue
            record["answer"] = {"execution_id": started.execution_id, "created": started.created}
            self.operator.add(p, time.time())
            break
        self.starts[p.execution_id] = record

    def _ended_now(self, t0: float) -> None:
        ours = {p.execution_id for p in self.plan.executions}
        try:
            for entry in self.client.list(started_after=_iso(t0 - 5)):
                if entry.execution_id in ours:
                    self.statuses[entry.execution_id] = entry.status
        except LoomError:
            return  # the next look lists again
        for p in self.plan.executions:
            if p.replay and p.execution_id not in self.replayed and self.statuses.get(p.execution_id) in ENDED:
                try:
                    version = self.client.get(p.execution_id).version
                except LoomError:
                    continue
                if self.injector.replay(p.execution_id, version):
                    self.replayed.add(p.execution_id)

    def _all_done(self, futures: list[Future]) -> bool:
        if not all(f.done() for f in futures) or self.operator.busy:
            return False
        live = [eid for eid, s in self.starts.items() if "answer" in s and self.statuses.get(eid) not in ENDED]
        replays = [p for p in self.plan.executions if p.replay and p.execution_id not in self.replayed
                   and "answer" in self.starts.get(p.execution_id, {})]
        return not live and not replays

    def _queue_empty(self) -> int:
        attrs = self.target.sqs.get_queue_attributes(QueueUrl=self.target.queue_url, AttributeNames=["All"])
        a = attrs["Attributes"]
        return sum(int(a.get(k, 0)) for k in ("ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible",
                                               "ApproximateNumberOfMessagesDelayed"))

    def run(self) -> dict[str, Any]:
        config = self.plan.config
        t0 = time.time() + 1.0
        self.injector.arm_sweeper(config.sweeper_kills)
        pool = ThreadPoolExecutor(STARTERS, thread_name_prefix="chaos-start")
        futures = [pool.submit(self._start, p, t0) for p in self.plan.executions]
        pool.shutdown(wait=False)
        deadline, last_list, last_say = t0 + config.duration_s, 0.0, time.time()
        while time.time() < deadline:
            self.injector.watch()
            self.operator.look()
            if time.time() - last_list >= 3.0:
                self._ended_now(t0)
                last_list = time.time()
                if self._all_done(futures):
                    break
            if time.time() - last_say >= 30.0:
                self._progress(t0)
                last_say = time.time()
            time.sleep(0.3)
        for f in futures:
            f.result()  # a start that raised is a driver bug: surface it
        load_done = time.time()
        self._progress(t0)
        left = self._drain()
        ended_at = time.time()
        faults = self.injector.finish()
        ids = {p.execution_id for p in self.plan.executions}
        finals = {}
        for p in self.plan.executions:
            if "answer" in self.starts.get(p.execution_id, {}):
                try:
                    finals[p.execution_id] = observe.final_state(self.client, p.execution_id)
                except LoomError as exc:
                    finals[p.execution_id] = {"unreadable": refusal(exc)}
        return {"plan": self.plan.as_dict(), "settings": self.target.settings, "functions": self.target.functions,
                "window": {"t0": t0, "load_done": load_done, "ended": ended_at, "bound_s": config.duration_s,
                           "timed_out": load_done >= deadline, "left_on_queue": left},
                "starts": self.starts, "actions": self.operator.records(), "faults": faults, "finals": finals,
                "ledger": observe.ledger(self.target.ledger, ids),
                "runtime": observe.runtime(self.target.log_dir, self.target.functions, ids, t0 - 1.0, ended_at)}

    def _drain(self) -> int:
        """Wait (at most ``drain_s``) until the step queue is empty, so late copies are delivered and counted;
        returns how many messages were left."""
        until = time.time() + self.drain_s
        left = self._queue_empty()
        while left and time.time() < until:
            self.injector.watch()
            time.sleep(1.0)
            left = self._queue_empty()
        time.sleep(2.0)  # the last batch's log lines and invocation end
        return left

    def _progress(self, t0: float) -> None:
        ended = sum(1 for s in self.statuses.values() if s in ENDED)
        fired = len(self.target.faults.fired([a for a in self.injector.arms]))
        self.say(f"  chaos [{self.plan.config.profile}] +{time.time() - t0:.0f} s: {len(self.starts)} of "
                 f"{len(self.plan.executions)} started, {ended} ended, {fired} kills fired, "
                 f"{len(self.injector.injected)} messages injected")
