"""Recovery time on the local stack: a worker SIGKILLed inside a step body, until the step runs again.

The deployed zips run on moto (packages/local-runtime), as in ``make up``. Each sample starts a
``flaky_greeting`` execution with a crash point armed at ``step.enter`` of its first step, attempt 1:
the worker process holding it is SIGKILLed as the body starts. The killed attempt's claim holds the
step until the killed invocation's deadline; then the sweeper re-drives it and attempt 2 claims it.

- kill time: when the crash point fired (its record, written just before the SIGKILL);
- re-run time: attempt 2's start, the step record's ``started_at`` once the execution completed;
- the design's bound for that kill: the killed invocation's deadline (its start, seen by the
  runtime, plus the worker's timeout) + 5 s + one sweeper tick, minus the kill time.

Two configurations: ``make up``'s (``LOCAL_TF_VARS=lease_s=5``, a sweep every 5 s) and the deployed
defaults of terraform/envs/local (no lease override, the schedule's own ``rate(1 minute)``).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import statistics
import tempfile
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
WORKFLOW = "flaky_greeting"
MARGIN_S = 5.0
"""The design's slack after the killed invocation's deadline (issue 20, item 5)."""
CONFIGS = {
    "make up": {"tf_vars": {"lease_s": "5"}, "sweep_every_s": 5.0},
    "deployed defaults": {"tf_vars": {}, "sweep_every_s": None},
}


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=30) as resp:
        return json.loads(resp.read())


def _post(url: str, body: dict[str, Any]) -> Any:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"content-type": "application/json"},
                                 method="POST")
    with urllib.request.urlopen(req, timeout=30) as resp:
        return json.loads(resp.read())


def _ts(text: str) -> float:
    return dt.datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=dt.timezone.utc).timestamp()


class _Invocations:
    """The runtime's observer: when each worker process last started an invocation."""

    def __init__(self) -> None:
        self.started: dict[int, float] = {}
        self.lock = threading.Lock()

    def __call__(self, kind: str, details: dict[str, Any]) -> None:
        if kind == "invoke" and details.get("role") == "worker":
            with self.lock:
                self.started[details["pid"]] = time.time()


def _sample(stack: Any, invocations: _Invocations, n: int, timeout_s: float) -> list[dict[str, Any]]:
    """``n`` kills, one after the other (each in its own invocation), then every recovery awaited."""
    timeout = stack.deployment.worker.timeout_s
    tick = stack.scheduler.period_s
    pending = []
    for i in range(n):
        from engine_core.engine import _TOKEN_NAMESPACE  # the id a token starts, to arm the kill before the start

        token = f"bench-recovery-{uuid.uuid4().hex[:12]}"
        eid = str(uuid.uuid5(_TOKEN_NAMESPACE, token))
        arm = stack.faults.arm("step.enter", action="kill", match={"execution_id": eid, "step": 0, "attempt": 1})
        _post(f"{stack.url}/executions", {"workflow": WORKFLOW, "input": {"name": f"r{i}", "failures": 0},
                                          "idempotency_token": token})
        (fired,) = stack.faults.wait_fired(arm, timeout_s=60)
        with invocations.lock:
            started = invocations.started.get(fired.pid)
        pending.append((eid, fired, started))
    out = []
    deadline = time.monotonic() + timeout_s
    for eid, fired, started in pending:
        while time.monotonic() < deadline:
            e = _get(f"{stack.url}/executions/{eid}")
            if e["status"] in ("COMPLETED", "FAILED"):
                break
            time.sleep(0.5)
        steps = _get(f"{stack.url}/executions/{eid}/history")["steps"]
        first = steps[0]
        rerun = _ts(first["started_at"]) - fired.fired_at
        bound = (started + timeout + MARGIN_S + tick - fired.fired_at) if started is not None else None
        out.append({"execution_id": eid, "status": e["status"], "attempts": first["attempts"],
                    "recovery_s": round(rerun, 2), "bound_s": None if bound is None else round(bound, 2),
                    "killed_after_invocation_start_s": None if started is None else round(fired.fired_at - started, 2)})
    return out


def _run_config(name: str, config: dict[str, Any], kills: int, progress: Callable[[str], None]) -> dict[str, Any]:
    from loom_local.stack import LocalStack, StackOptions

    run_dir = Path(tempfile.mkdtemp(prefix="loom-bench-recovery-"))
    invocations = _Invocations()
    opts = StackOptions(repo=ROOT, run_dir=run_dir, tf_vars=dict(config["tf_vars"]),
                        sweep_every_s=config["sweep_every_s"], observer=invocations,
                        function_env={"LOOM_EXAMPLES_LEDGER_PATH": str(run_dir / "ledger.jsonl")},
                        progress=lambda m: None if m.lstrip().startswith("module.") else progress(f"  recovery: {m}"))
    try:
        with LocalStack(opts) as stack:
            timeout = stack.deployment.worker.timeout_s
            tick = stack.scheduler.period_s
            lease = float(stack.deployment.worker.environment.get("LOOM_LEASE_S") or 0)
            progress(f"  recovery [{name}]: worker timeout {timeout:g} s, sweeper every {tick:g} s, lease {lease:g} s; "
                     f"{kills} kills")
            samples = _sample(stack, invocations, kills, timeout_s=4 * (timeout + MARGIN_S + tick) + 60)
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)
    recoveries = [s["recovery_s"] for s in samples]
    within = [s for s in samples if s["bound_s"] is not None and s["recovery_s"] <= s["bound_s"]]
    progress(f"  recovery [{name}]: median {statistics.median(recoveries):.1f} s, max {max(recoveries):.1f} s; "
             f"{len(within)} of {len(samples)} within the bound")
    return {"worker_timeout_s": timeout, "sweep_every_s": tick, "lease_s": lease, "samples": samples,
            "median_s": statistics.median(recoveries), "max_s": max(recoveries),
            "median_bound_s": statistics.median(s["bound_s"] for s in samples if s["bound_s"] is not None),
            "within_bound": len(within)}


def measure(progress: Callable[[str], None] = print, quick: bool = False) -> dict[str, Any]:
    if shutil.which("terraform") is None:
        return {"status": "pending", "reason": "no terraform CLI on PATH: the local runtime deploys terraform/envs/local"}
    if not list((ROOT / "dist" / "local").glob("*.zip")):
        return {"status": "pending", "reason": "no zips in dist/local: run `make build-local` (`make bench` does)"}
    rc = ROOT / "build" / "terraform" / "terraformrc"
    if rc.exists():
        os.environ["TF_CLI_CONFIG_FILE"] = str(rc)
    configs = {"make up": CONFIGS["make up"]} if quick else CONFIGS
    kills = {"make up": 2 if quick else 5, "deployed defaults": 2}
    runs = {}
    for name, config in configs.items():
        try:
            runs[name] = _run_config(name, config, kills[name], progress)
        except Exception as exc:  # noqa: BLE001 - the section says why it could not measure
            runs[name] = {"status": "failed", "reason": f"{type(exc).__name__}: {exc}"}
    return {"status": "measured", "workflow": WORKFLOW, "margin_s": MARGIN_S, "runs": runs}
