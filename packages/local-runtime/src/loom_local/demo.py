"""``make demo``: one order_fulfillment execution, live, through the deployed functions, under real faults.

What happens (and is narrated as it happens):

1. ``reserve_inventory`` fails on its first attempt (an exception injected into the step body at
   ``step.enter``): the engine records the failure and retries it after a backoff.
2. ``charge_payment``'s worker process is killed with SIGKILL as the step body returns, after the
   (fake) card was charged and before the checkpoint. Attempt 1's claim holds the step until its
   budget and the killed invocation's deadline have passed; then the sweeper re-drives it, and
   attempt 2 runs with the same idempotency key: the ledger returns the first charge, so the
   customer is charged once.
3. ``wait_for_carrier_pickup`` is a durable sleep: nothing runs while it lasts.
4. ``ship_order`` and ``notify_customer`` finish it. The history is printed as a table.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
import threading
import time
from pathlib import Path
from typing import Any

from .options import examples_environment, options_from
from .stack import LocalStack, StackOptions, install_signal_handlers

WORKFLOW = "order_fulfillment"
TIMEOUT_S = 120.0
"""How long the tour waits for the execution, plus the worker's timeout (a killed attempt's claim lasts
until its invocation's deadline) and two leases."""


class Narrator:
    def __init__(self) -> None:
        self.t0 = time.monotonic()
        self.lock = threading.Lock()
        self.execution_started: float | None = None
        self.faults: Any = None
        self.crashes = 0
        self.cold_starts_to_show = 0
        self.redrives_since_crash = 0
        self.killed_claims: set[tuple] = set()
        """(step, attempt) of killed attempts, already narrated with the kill."""

    def say(self, text: str, mark: str = " ") -> None:
        with self.lock:
            print(f"{mark} [{time.monotonic() - self.t0:6.1f}s] {text}", flush=True)

    def heading(self, text: str) -> None:
        with self.lock:
            print(f"\n== {text}", flush=True)

    # Events from the runtime (called from its threads).
    def on_runtime_event(self, kind: str, d: dict[str, Any]) -> None:
        role = d.get("role") or ""
        if self.execution_started is None:
            return
        if kind == "crashed" and role == "worker":
            pid = d.get("pid")
            # The same warm process may have fired other faults before (the injected exception): the
            # kill is the last one it fired.
            fired = [f for f in (self.faults.fired() if self.faults else []) if f.pid == pid and f.action == "kill"]
            where = ""
            if fired:
                info = fired[-1].info
                self.killed_claims.add((info.get("step"), info.get("attempt")))
                where = (f" inside step {info.get('step')} {info.get('step_name')} (attempt {info.get('attempt')}), "
                         "after the card was charged and before the checkpoint")
            reason = (d.get("error") or {}).get("errorMessage", "").split("Error: ")[-1]
            self.say(f"worker process {pid} was killed{where}: {reason}", "!")
            self.crashes += 1
            self.cold_starts_to_show += 1
            self.redrives_since_crash = 0
        elif kind == "cold_start" and role == "worker" and self.cold_starts_to_show:
            self.cold_starts_to_show -= 1
            self.say(f"the Lambda service (here: the local runtime) starts a fresh worker process, pid {d.get('pid')}")
        elif kind == "tick_done":
            redriven = (d.get("payload") or {}).get("redriven") or {}
            if redriven:
                reasons = ", ".join(f"{n} {why}" for why, n in redriven.items())
                self.redrives_since_crash += 1
                self.say(f"sweeper re-drove {sum(redriven.values())} execution(s) ({reasons}): a conditional write "
                         "gives the step a fresh message lease, then it enqueues the step again", ">")
        elif kind == "batch":
            counts = d.get("receive_counts") or {}
            again = [n for n in counts.values() if n > 1]
            if again:
                self.say(f"SQS redelivered a message (receive #{max(again)}); the worker checks it against the "
                         "execution's version", ">")


def _short(value: Any, limit: int = 70) -> str:
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _describe(step: dict[str, Any], execution: dict[str, Any]) -> str | None:
    name, n = f"step {step['step_index']} {step['name']}", step.get("attempts")
    status = step["status"]
    if status == "RUNNING":  # written by engine-core < 0.2 (an intent record); 0.2 claims on the execution
        return f"{name}: attempt {n} started"
    if status == "FAILED" and not step.get("final"):
        err = step.get("error") or {}
        when = execution.get("next_wake_at") if execution.get("timer") == "retry" else None
        return (f"{name}: attempt {n} failed ({err.get('code')}: {_short(err.get('message', ''), 60)}); "
                f"retry scheduled{' for ' + when if when else ''}")
    if status == "FAILED":
        err = step.get("error") or {}
        return f"{name}: FAILED for good ({err.get('code')}: {_short(err.get('message', ''))})"
    if status == "SUCCEEDED":
        result = step.get("result") or {}
        if "wake_at" in result and len(result) == 1:
            return (f"{name}: durable sleep until {result['wake_at']}. No process runs meanwhile: the next step "
                    "message waits in SQS (DelaySeconds) and the sweeper is the backstop")
        return f"{name}: succeeded on attempt {n} -> {_short(result)}"
    return None


def _client(url: str):
    from loom_cli.client import Client

    return Client.create(url, sign=False)


def stack_options(args: argparse.Namespace) -> tuple[StackOptions, Path]:
    """The demo's stack: the command line's options, a 2 s sweep, a 5 s lease, a fresh examples ledger."""
    opts = options_from(args)
    if opts.sweep_every_s is None:
        opts.sweep_every_s = 2.0
    from .terraform import declared_variables

    env_dir = opts.env_dir or opts.repo / "terraform" / "envs" / "local"
    if "lease_s" in declared_variables(env_dir):
        opts.tf_vars.setdefault("lease_s", "5")  # recover the killed worker within seconds, not minutes
    ledger = opts.run_dir / "demo-ledger.jsonl"
    opts.function_env.update(examples_environment(ledger))
    return opts, ledger


def run(args: argparse.Namespace) -> int:
    narrator = Narrator()
    opts, ledger = stack_options(args)
    opts.progress = lambda m: narrator.say(m)
    opts.observer = narrator.on_runtime_event
    opts.run_dir.mkdir(parents=True, exist_ok=True)
    ledger.unlink(missing_ok=True)
    stack = LocalStack(opts)
    install_signal_handlers(stack)
    try:
        narrator.heading("Starting the local stack (moto, terraform apply, the deployed functions)")
        stack.start()
        d = stack.deployment
        assert d is not None and d.queue is not None
        narrator.say(f"worker {d.worker.name} ({d.worker.handler}, timeout {d.worker.timeout_s:g} s), "
                     f"sweeper {d.sweeper.name} (schedule {d.rule.expression}, played every "
                     f"{opts.sweep_every_s:g} s here), control plane {d.control_plane.name} at {stack.url}")
        narrator.say(f"each runs from its zip in dist/local (SHA-256 checked against the deployed CodeSha256), "
                     f"visibility timeout {d.queue.visibility_timeout_s} s, DLQ after {d.queue.max_receive_count} receives")
        lease = float(d.worker.environment.get("LOOM_LEASE_S") or 900)
        if lease > 30:
            narrator.say(f"note: terraform/envs/local deploys LOOM_LEASE_S={lease:g}: recovering the killed worker "
                         f"waits that long (LOCAL_TF_VARS=lease_s=5 shortens it, if the environment declares lease_s)",
                         "!")
        _tour(stack, narrator, ledger, timeout_s=TIMEOUT_S + d.worker.timeout_s + 2 * lease)
        if getattr(args, "keep", False):
            narrator.heading(f"The stack stays up at {stack.url} (Ctrl-C stops it)")
            stack.wait()
    except KeyboardInterrupt:
        print("\ninterrupted: stopping everything", file=sys.stderr, flush=True)
        return 130
    finally:
        stack.stop()
        narrator.say("stopped: function processes, pollers, schedule, Function URL and emulator are gone")
    return 0


def _tour(stack: LocalStack, narrator: Narrator, ledger: Path, timeout_s: float) -> None:
    faults = stack.faults
    # Faults inside the step bodies, matched on workflow, step and attempt (the stack is fresh).
    faults.arm("step.enter", action="raise", match={"workflow": WORKFLOW, "step_name": "reserve_inventory",
                                                     "attempt": 1},
               message="inventory service timed out (injected by the demo)")
    narrator.faults = faults
    faults.arm("step.return", action="kill", match={"workflow": WORKFLOW, "step_name": "charge_payment",
                                                           "attempt": 1})
    client = _client(stack.url)
    order = {"order_id": f"o-{dt.datetime.now():%H%M%S}", "amount_cents": 4200,
             "items": [{"sku": "loom-mug", "qty": 2}], "email": "ada@example.com"}
    narrator.heading(f"POST {stack.url}/executions  {WORKFLOW} {json.dumps(order)}")
    narrator.execution_started = time.monotonic()
    status, body = client.request("POST", "/executions", {"workflow": WORKFLOW, "input": order,
                                                           "idempotency_token": f"demo-{time.time_ns()}"})
    eid = body["execution_id"]
    narrator.say(f"HTTP {status}: execution {eid} started")

    seen: dict[int, tuple] = {}
    claimed: tuple | None = None
    last_status = None
    explained = 0
    deadline = time.monotonic() + timeout_s
    while True:
        _, e = client.request("GET", f"/executions/{eid}")
        _, h = client.request("GET", f"/executions/{eid}/history")
        for step in h["steps"]:
            key = (step.get("status"), step.get("attempts"), step.get("final"))
            if seen.get(step["step_index"]) != key:
                seen[step["step_index"]] = key
                text = _describe(step, e)
                if text:
                    narrator.say(text, "*" if step["status"] == "SUCCEEDED" else "-")
        if e.get("attempt_started_at") and (e["current_step"], e.get("attempt")) != claimed:
            claimed = (e["current_step"], e.get("attempt"))
            if claimed not in narrator.killed_claims:
                narrator.say(f"step {e['current_step']} {e.get('current_step_name')}: attempt {e.get('attempt')} claimed "
                             "(counted and leased on the execution before its body runs)", "-")
        if narrator.crashes > explained and e.get("timer") == "lease":
            explained = narrator.crashes
            narrator.say(f"attempt {e.get('attempt')}'s claim holds the step until {e['next_wake_at']} (its budget "
                         "and the killed invocation's deadline: no one may take over a step that could still be "
                         "running); then the sweeper re-drives it", " ")
        if e["status"] != last_status:
            last_status = e["status"]
            if e["status"] != "RUNNING":
                narrator.say(f"execution {e['status']}")
        if e["status"] in ("COMPLETED", "FAILED"):
            break
        if time.monotonic() > deadline:
            raise TimeoutError(f"the execution did not finish within {timeout_s:g} s; the function logs in "
                               f"{stack.log_dir} say where it stands")
        time.sleep(0.25)

    from loom_cli.render import execution_table, history_table

    narrator.heading("History (GET /executions/{id}/history)")
    print(history_table(h))
    narrator.heading("Execution (GET /executions/{id})")
    print(execution_table(e))
    charges = [json.loads(line) for line in ledger.read_text().splitlines() if line.strip()] if ledger.exists() else []
    narrator.heading("What the payment provider saw")
    print(f"{len(charges)} charge(s) for order {order['order_id']}: "
          + ", ".join(f"{c['charge_id']} {c['amount_cents']} cents (key {c['idempotency_key']})" for c in charges))
    took = time.monotonic() - (narrator.execution_started or 0)
    print(f"\nThe execution took {took:.0f} s; the whole demo {time.monotonic() - narrator.t0:.0f} s. "
          f"Function logs: {stack.log_dir}")
