"""Requests per step through the local runtime: the deployed zips, in their own processes, on moto.

``loom_local`` (packages/local-runtime) runs each function from ``dist/local`` in an isolated Python
process, with an SQS poller for the worker and a Function URL for the control plane, against a moto
server that Terraform (``terraform/envs/local``) deployed into. The function processes are not ours
to instrument, so the count is taken where every request lands: moto's own request recorder
(``/moto-api/recorder/*``), which logs each HTTP request the server receives, headers and body.

Attribution, from the recorded headers: requests whose User-Agent carries ``exec-env/AWS_Lambda_*``
come from a function process (the runtime sets ``AWS_EXECUTION_ENV`` as Lambda does); the others are
the runtime's own (the SQS poller's ReceiveMessage/DeleteMessageBatch) or the bench's status reads,
which carry ``loom-bench`` in their User-Agent and are excluded. The recorder does not keep
responses, so empty receives are told apart with the poller's batch counter: one non-empty receive
per batch (batching window 0), the rest were idle long polls (1 s here).

Workload: ``flaky_greeting`` from workflows-examples (two steps; ``failures: 1`` makes the first step
fail once, then succeed), because the zips carry only the installed workflow packages.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import statistics
import tempfile
import time
import urllib.request
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
WORKFLOW = "flaky_greeting"
STEPS_PER_EXECUTION = 2
BENCH_UA = "loom-bench"


def _pending(reason: str, progress: Callable[[str], None]) -> dict[str, Any]:
    progress(f"  local: pending: {reason}")
    return {"status": "pending", "reason": reason}


def _op(entry: dict[str, Any]) -> str | None:
    headers = {k.lower(): v for k, v in (entry.get("headers") or {}).items()}
    target = headers.get("x-amz-target", "")
    if target:
        service, _, op = target.partition(".")
        service = "dynamodb" if service.startswith("DynamoDB") else "sqs" if service.startswith("AmazonSQS") else service
        return f"{service}:{op}"
    body = entry.get("body") or ""
    if entry.get("body_encoded"):
        body = base64.b64decode(body).decode("utf-8", "replace")
    if "Action=" in body:  # SQS query protocol, should a client still use it
        action = body.split("Action=")[1].split("&")[0]
        return f"sqs:{action}"
    return None


def classify(recording: str) -> dict[str, Counter]:
    """Recorded requests by origin (function / runtime / bench) and ``service:Op``."""
    out: dict[str, Counter] = {"function": Counter(), "runtime": Counter(), "bench": Counter()}
    for line in recording.splitlines():
        if not line.strip():
            continue
        entry = json.loads(line)
        op = _op(entry)
        if op is None:
            continue
        ua = {k.lower(): v for k, v in (entry.get("headers") or {}).items()}.get("user-agent", "")
        origin = "bench" if BENCH_UA in ua else "function" if "exec-env/AWS_Lambda" in ua else "runtime"
        out[origin][op] += 1
    return out


class _Moto:
    def __init__(self, endpoint: str):
        self.endpoint = endpoint

    def _post(self, path: str) -> bytes:
        req = urllib.request.Request(f"{self.endpoint}/moto-api/recorder/{path}", data=b"", method="POST")
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.read()

    def reset(self) -> None:
        self._post("reset-recording")

    def start(self) -> None:
        self._post("start-recording")

    def stop(self) -> None:
        self._post("stop-recording")

    def download(self) -> str:
        with urllib.request.urlopen(f"{self.endpoint}/moto-api/recorder/download-recording", timeout=60) as resp:
            return resp.read().decode("utf-8")


def _start_execution(url: str, body: dict[str, Any]) -> str:
    req = urllib.request.Request(f"{url.rstrip('/')}/executions", data=json.dumps(body).encode(),
                                 headers={"content-type": "application/json"}, method="POST")
    with urllib.request.urlopen(req, timeout=60) as resp:
        return json.loads(resp.read())["execution_id"]


def _wait_terminal(table: Any, name: str, ids: list[str], timeout_s: float) -> dict[str, str]:
    deadline = time.monotonic() + timeout_s
    status: dict[str, str] = {}
    while time.monotonic() < deadline:
        for eid in ids:
            if status.get(eid) in ("COMPLETED", "FAILED"):
                continue
            item = table.get_item(TableName=name, Key={"PK": {"S": f"EXEC#{eid}"}, "SK": {"S": "#META"}},
                                  ConsistentRead=True).get("Item") or {}
            status[eid] = item.get("status", {}).get("S", "?")
        if all(status.get(e) in ("COMPLETED", "FAILED") for e in ids):
            return status
        time.sleep(0.1)
    raise TimeoutError(f"executions not terminal after {timeout_s} s: {status}")


def _run(stack: Any, moto: _Moto, table: Any, table_name: str, inputs: list[dict[str, Any]],
         timeout_s: float = 120.0) -> dict[str, Any]:
    poller = stack.poller
    batches0 = poller.batches
    moto.reset()
    moto.start()
    started = time.perf_counter()
    ids = [_start_execution(stack.url, {"workflow": WORKFLOW, "input": i}) for i in inputs]
    status = _wait_terminal(table, table_name, ids, timeout_s)
    wall = time.perf_counter() - started
    time.sleep(1.5)  # let the last batch's DeleteMessageBatch land
    moto.stop()
    counts = classify(moto.download())
    batches = poller.batches - batches0
    return {"counts": {k: dict(v) for k, v in counts.items()}, "batches": batches, "wall_s": wall,
            "executions": len(ids), "status": dict(Counter(status.values()))}


def _per_execution(run: dict[str, Any]) -> dict[str, Any]:
    """Requests per execution by API, the poller's idle receives taken out."""
    n = run["executions"]
    function = Counter(run["counts"]["function"])
    runtime = Counter(run["counts"]["runtime"])
    receives = runtime.get("sqs:ReceiveMessage", 0)
    requests: Counter = Counter(function)
    requests["sqs:ReceiveMessage"] += run["batches"]
    requests["sqs:DeleteMessageBatch"] += runtime.get("sqs:DeleteMessageBatch", 0)
    requests["lambda:Invoke"] += run["batches"] + n  # worker batches + one control-plane call per start
    per = {api: c / n for api, c in sorted(requests.items())}
    return {"requests": per, "aws_requests": sum(v for a, v in per.items() if not a.startswith("lambda:")),
            "idle_receives": receives - run["batches"]}


def measure(progress: Callable[[str], None] = print, quick: bool = False) -> dict[str, Any]:
    try:
        from loom_local.stack import LocalStack, StackOptions
    except ImportError:
        return _pending("the local runtime (packages/local-runtime, module loom_local) is not installed in the "
                        "venv: `make local-runtime` installs it (`make bench` tries to).", progress)
    if shutil.which("terraform") is None:
        return _pending("no terraform CLI on PATH: the local runtime deploys with terraform/envs/local.", progress)
    if not list((ROOT / "dist" / "local").glob("*.zip")):
        return _pending("no zips in dist/local: run `make build-local` (`make bench` does).", progress)
    rc = ROOT / "build" / "terraform" / "terraformrc"
    if rc.exists():
        os.environ["TF_CLI_CONFIG_FILE"] = str(rc)
    run_dir = Path(tempfile.mkdtemp(prefix="loom-bench-local-"))
    os.environ["MOTO_RECORDER_FILEPATH"] = str(run_dir / "moto_recording")  # the emulator inherits it
    os.environ.pop("MOTO_ENABLE_RECORDING", None)
    opts = StackOptions(repo=ROOT, run_dir=run_dir, sweep_every_s=3600.0,
                        progress=lambda m: None if m.lstrip().startswith("module.") else progress(f"  local: {m}"))
    started = time.perf_counter()
    try:
        with LocalStack(opts) as stack:
            import boto3
            from botocore.config import Config

            table = boto3.client("dynamodb", endpoint_url=stack.endpoint, region_name=opts.region,
                                 aws_access_key_id="testing", aws_secret_access_key="testing",
                                 config=Config(user_agent_extra=BENCH_UA))
            table_name = table.list_tables()["TableNames"][0]  # the deployment's one table
            concurrency = stack._worker_concurrency()
            progress(f"  local: stack up in {time.perf_counter() - started:.0f} s (worker concurrency {concurrency})")
            moto = _Moto(stack.endpoint)
            _run(stack, moto, table, table_name, [{"name": "warm-up", "failures": 0}])  # cold starts out of the way
            repeats = 1 if quick else 3
            happy = [_run(stack, moto, table, table_name, [{"name": f"b{i}", "failures": 0}]) for i in range(repeats)]
            retry = [_run(stack, moto, table, table_name, [{"name": f"r{i}", "failures": 1}]) for i in range(repeats)]
            burst = _run(stack, moto, table, table_name, [{"name": f"t{i}", "failures": 0} for i in range(20)])
    except Exception as exc:  # noqa: BLE001 - the section reports why it could not measure
        return _pending(f"the local stack did not run: {type(exc).__name__}: {exc}", progress)
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)

    def median_per_execution(runs: list[dict[str, Any]]) -> dict[str, Any]:
        per = [_per_execution(r) for r in runs]
        apis = set().union(*(p["requests"] for p in per))
        return {"requests": {a: statistics.median(p["requests"].get(a, 0) for p in per) for a in sorted(apis)},
                "aws_requests": statistics.median(p["aws_requests"] for p in per),
                "identical": all(p["requests"] == per[0]["requests"] for p in per),
                "wall_s": statistics.median(r["wall_s"] for r in runs)}

    h, r = median_per_execution(happy), median_per_execution(retry)
    steps_per_second = burst["executions"] * STEPS_PER_EXECUTION / burst["wall_s"]
    progress(f"  local: {WORKFLOW} happy path: {h['aws_requests']:.0f} DynamoDB + SQS requests per execution; "
             f"{steps_per_second:.1f} steps/s with {burst['executions']} executions in flight")
    return {
        "status": "measured", "workflow": WORKFLOW, "steps_per_execution": STEPS_PER_EXECUTION,
        "repeats": repeats, "worker_concurrency": concurrency,
        "runs": {"happy path, per execution (2 steps)": h, "first step fails once, per execution": r},
        "single_execution_wall_s": h["wall_s"], "steps_per_second": steps_per_second,
        "burst": {"executions": burst["executions"], "wall_s": burst["wall_s"], "batches": burst["batches"],
                  "status": burst["status"], "per_execution": _per_execution(burst)},
        "stack_seconds": time.perf_counter() - started,
    }
