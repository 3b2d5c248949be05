"""``make demo-lite``: one order_fulfillment execution on SQLite, live, under real faults, in one process at a time.

1. ``reserve_inventory`` fails its first attempt (an exception injected into its body): recorded, retried
   after its backoff.
2. ``charge_payment``: the runtime process is SIGKILLed as the body returns, after the (fake) card was
   charged and before the checkpoint. A new runtime process starts on the same file. Attempt 1's claim
   holds the step until its lease ends (its budget and the killed delivery's deadline: no one may take
   over a step that could still be running); then the sweeper re-drives it, and attempt 2 runs with the
   same idempotency key: the payment ledger returns the first charge, so the customer is charged once.
3. ``wait_for_carrier_pickup`` sleeps 20 s, durably: SLEEPING, nothing runs. The demo skips the rest of it
   with ``wake`` (POST /executions/{id}/wake, the operator's skip), as ``loom wake`` would.
4. ``ship_order`` and ``notify_customer`` finish it; the history is printed.

Everything is in ``.loom/demo-lite/`` (the file, the ledger, the runtime's log), started afresh each time.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from loom_cli.render import execution_table, history_table
from loom_cli.sdk import LoomClient, LoomError

from .cli import UP_LINE

WORKFLOW = "order_fulfillment"
DELIVERY_S = 11
"""Each delivery's deadline (LOOM_FUNCTION_TIMEOUT_S): the order's steps have a 10 s budget, so a killed
attempt's claim ends 11.5 s after it began, and the sweeper (every 0.25 s here) re-drives it then."""
TIMEOUT_S = 60.0


class Narrator:
    def __init__(self) -> None:
        self.t0 = time.monotonic()

    def say(self, text: str, mark: str = " ") -> None:
        print(f"{mark} [{time.monotonic() - self.t0:5.1f}s] {text}", flush=True)

    def heading(self, text: str) -> None:
        print(f"\n== {text}", flush=True)


class Child:
    """One runtime process (``python -m loom_lite.demo_child``) on the demo's file."""

    def __init__(self, work: Path, arms: list[dict[str, Any]], env: dict[str, str]):
        self.log = open(work / "runtime.log", "ab")
        args = [sys.executable, "-m", "loom_lite.demo_child", json.dumps(arms), "--db", str(work / "loom.db"),
                "--no-record", "--no-entry-points", "--sweep-every", "0.25", "loom_examples"]
        self.proc = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=self.log, text=True)
        line = self.proc.stdout.readline() if self.proc.stdout else ""
        if UP_LINE not in line:
            self.proc.kill()
            raise RuntimeError(f"the runtime did not start (it printed {line!r}); {work / 'runtime.log'} says why")
        self.url = line.split(UP_LINE, 1)[1].split()[0]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


def _describe(r: Any) -> str | None:
    name = f"step {r.step_index} {r.name}"
    if r.status == "FAILED" and not r.final:
        message = (r.error.message if r.error else "").split(" (at ")[0][:90]
        return f"{name}: attempt {r.attempts} failed ({message}); retried after its backoff"
    if r.status == "SUCCEEDED" and isinstance(r.result, dict) and set(r.result) == {"wake_at"}:
        return (f"{name}: durable sleep until {r.result['wake_at']}: SLEEPING, no process holds it (the message "
                "waits in the queue, the sweeper is the backstop)")
    if r.status == "SUCCEEDED":
        return f"{name}: succeeded on attempt {r.attempts} -> {json.dumps(r.result, sort_keys=True)[:70]}"
    if r.status == "FAILED":
        return f"{name}: FAILED ({r.error.code if r.error else '?'})"
    return None


def run(work: Path) -> int:
    say = Narrator()
    for name in ("loom.db", "loom.db-wal", "loom.db-shm", "ledger.jsonl", "runtime.log"):
        (work / name).unlink(missing_ok=True)
    work.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "LOOM_EXAMPLES_LEDGER_PATH": str(work / "ledger.jsonl"),
           "LOOM_FUNCTION_TIMEOUT_S": str(DELIVERY_S), "LOOM_INDEX_SLACK_S": "0"}
    arms = [{"point": "step.enter", "action": "raise", "match": {"step_name": "reserve_inventory", "attempt": 1},
             "message": "inventory service timed out (injected by the demo)"},
            {"point": "step.return", "action": "kill", "match": {"step_name": "charge_payment", "attempt": 1}}]
    say.heading("Starting the runtime: worker, sweeper and the control plane's API in one process, on one SQLite file")
    child = Child(work, arms, env)
    say.say(f"runtime process {child.proc.pid} serves {child.url}; store {work / 'loom.db'} (WAL, synchronous=FULL)")
    try:
        client = LoomClient(child.url)
        order = {"order_id": f"o-{dt.datetime.now():%H%M%S}", "amount_cents": 4200,
                 "items": [{"sku": "loom-mug", "qty": 2}], "email": "ada@example.com"}
        say.heading(f"POST /executions  {WORKFLOW} {json.dumps(order)}")
        started = client.start(WORKFLOW, order, idempotency_token=f"demo-lite-{time.time_ns()}")
        eid, t_start = started.execution_id, time.monotonic()
        say.say(f"execution {eid} started")
        seen: dict[int, tuple] = {}
        woken = explain_claim = False
        deadline = time.monotonic() + TIMEOUT_S
        while True:
            if child.proc.poll() is not None:
                code = child.proc.returncode
                say.say(f"runtime process {child.proc.pid} was killed (signal {-code if code < 0 else code}) inside "
                        "charge_payment, after the card was charged and before the checkpoint", "!")
                child.stop()
                child = Child(work, [], env)
                client = LoomClient(child.url)
                say.say(f"a new runtime process {child.proc.pid} starts on the same file ({child.url}): nothing "
                        "committed was lost")
                explain_claim = True
            try:
                e, records = client.get(eid), client.history(eid).records()
            except LoomError:  # the runtime died under the request: the top of the loop starts another
                child.proc.wait(timeout=5)
                continue
            for r in records:
                key = (r.status, r.attempts, r.final)
                if seen.get(r.step_index) != key:
                    seen[r.step_index] = key
                    text = _describe(r)
                    if text:
                        say.say(text, "*" if r.status == "SUCCEEDED" else "-")
            if explain_claim:
                explain_claim = False
                say.say(f"attempt {e.attempt}'s claim holds step {e.current_step} {e.current_step_name} until "
                        f"{e.next_wake_at} (its budget and the killed delivery's deadline: no one takes over a step "
                        "that could still be running); then the sweeper re-drives it, with the same idempotency key")
            if e.status == "SLEEPING" and not woken:
                time.sleep(0.5)
                woken = True
                try:
                    client.wake(eid)
                    say.say("wake: the operator skips the rest of the sleep (POST /executions/{id}/wake)", ">")
                except LoomError as exc:  # not_waiting: the sleep ran out on its own meanwhile
                    say.say(f"wake: {exc.code}: the sleep ended on its own", ">")
            if e.status in ("COMPLETED", "FAILED", "CANCELLED"):
                say.say(f"execution {e.status}")
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"the execution did not finish within {TIMEOUT_S:g} s; {work / 'runtime.log'} "
                                   "says where it stands")
            time.sleep(0.1)
        took = time.monotonic() - t_start
        say.heading("History (GET /executions/{id}/history)")
        print(history_table(client.history(eid)))
        say.heading("Execution (GET /executions/{id})")
        print(execution_table(client.get(eid)))
        ledger = work / "ledger.jsonl"
        charges = [json.loads(x) for x in ledger.read_text().splitlines() if x.strip()] if ledger.exists() else []
        mine = [c for c in charges if c.get("order_id") == order["order_id"]]
        say.heading("What the payment provider saw")
        print(f"{len(mine)} charge(s) for order {order['order_id']}: "
              + ", ".join(f"{c['charge_id']} {c['amount_cents']} cents (key {c['idempotency_key']})" for c in mine))
        print(f"\nThe execution took {took:.1f} s; the whole demo {time.monotonic() - say.t0:.1f} s. "
              f"Runtime log: {work / 'runtime.log'}")
        return 0 if e.status == "COMPLETED" and len(mine) == 1 else 1
    finally:
        child.stop()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m loom_lite.demo", description=__doc__.splitlines()[0])
    p.add_argument("--dir", default=".loom/demo-lite", help="where the demo's file, ledger and log go")
    return run(Path(p.parse_args(argv).dir))


if __name__ == "__main__":
    sys.exit(main())
