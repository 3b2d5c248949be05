"""Requests and capacity per step, in-process: the real Engine on DynamoStore + SqsQueue over moto, and a
poller that plays Lambda's SQS event source mapping (ESM).

The poller does what the ESM does for a function with ``ReportBatchItemFailures``: ReceiveMessage
(up to the batch size), one worker invocation per non-empty batch, then delete the handled messages
(modelled as one DeleteMessageBatch per invocation; AWS does not document the poller's exact calls,
but either form is one billed request per batch). Empty receives are labelled ``esm_idle``: a real
ESM long-polls all the time, so they are a monthly fixed cost, not a per-step one.

Per-step figures are *marginal*: the totals of an N-step execution minus those of a 1-step one,
divided by N-1. That includes each step's share of the completion pass (the TTL stamped on every
history item) and excludes what every execution pays once (start, completion, DLQ notices).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from engine_core import Engine, EngineSettings, Registry, RetryPolicy, StepMessage, SystemClock
from engine_core import codec
from engine_core.registry import build_workflow
from engine_core.adapters.sqs import SqsQueue
from engine_core.adapters.dynamodb import DynamoStore

from .wire import Call, WireRecorder, totals
from .world import TABLE, World, aws_world

RESULT_SIZES = [100, 1024, 10 * 1024, 100 * 1024]
SIZE_LABELS = {100: "100 B", 1024: "1 KB", 10 * 1024: "10 KB", 100 * 1024: "100 KB"}
WORKFLOW = "bench_steps"
INVOKE_BUDGET_MS = 900_000


class PhasedStore(DynamoStore):
    """DynamoStore whose completion pass is labelled ``finalize`` on the wire."""

    def __init__(self, recorder: WireRecorder, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.recorder = recorder

    def finalize(self, execution_id, version, expires_at):  # type: ignore[override]
        with self.recorder.phase("finalize"):
            return super().finalize(execution_id, version, expires_at)


def payload_for(result_bytes: int) -> str:
    """A string whose step result ``{"payload": s}`` encodes to exactly ``result_bytes`` bytes."""
    overhead = len(codec.encode({"payload": ""}).encode())
    text = "x" * max(0, result_bytes - overhead)
    assert len(codec.encode({"payload": text}).encode()) == max(result_bytes, overhead)
    return text


def bench_registry(n_steps: int, result_bytes: int, fail_once_at: int | None = None) -> Registry:
    """``n_steps`` steps each returning a result of ``result_bytes`` (same key, so the context holds one
    result, not the sum); optionally one step fails its first attempt (a retryable error)."""
    payload = payload_for(result_bytes)

    def make(index: int) -> Callable:
        def body(ctx):
            if index == fail_once_at and ctx.attempt == 1:
                raise RuntimeError("transient failure injected by the bench")
            return {"payload": payload}

        body.__name__ = f"step_{index:03d}"
        return body

    registry = Registry()
    # base/max_delay 0.01 s: the retry message rides SQS DelaySeconds=1, the shortest SQS allows.
    retry = RetryPolicy(max_attempts=3, base=0.01, max_delay=0.01, jitter=False)
    registry.register(build_workflow(WORKFLOW, [make(i) for i in range(n_steps)], retry=retry, source="bench.steps"))
    return registry


@dataclass
class RunResult:
    calls: list[Call]
    steps_run: int
    wall_s: float
    outcomes: dict[str, int]


def run_executions(world: World, registry: Registry, count: int = 1, batch_size: int = 1,
                   settings: EngineSettings | None = None, timeout_s: float = 120.0) -> RunResult:
    """Start ``count`` executions through the engine (as the control plane would) and pump the queue
    like the ESM until all are terminal. Returns every call made."""
    rec = world.recorder
    settings = settings or EngineSettings(shards=4)
    store = PhasedStore(rec, world.dynamodb, TABLE, shards=settings.shards, return_consumed_capacity=True)
    queue = SqsQueue(world.sqs, world.queue_url, world.dlq_url)
    engine = Engine(store, queue, registry, SystemClock(), settings)
    first = len(rec.calls)
    started = time.perf_counter()
    pending = set()
    for _ in range(count):
        with rec.phase("control"):
            rec.note("lambda", "Invoke")  # the control plane's Function URL invocation
            pending.add(engine.start(WORKFLOW, {}).execution.execution_id)
    outcomes: dict[str, int] = {}
    steps_run = 0
    deadline = time.monotonic() + timeout_s
    while pending:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{len(pending)} executions still running after {timeout_s} s")
        with rec.phase("esm"):
            resp = world.sqs.receive_message(QueueUrl=world.queue_url, MaxNumberOfMessages=batch_size,
                                             WaitTimeSeconds=1)
        messages = resp.get("Messages", [])
        if not messages:
            rec.calls[-1].phase = "esm_idle"
            continue
        with rec.phase("worker"):
            rec.note("lambda", "Invoke")
        for m in messages:
            message = StepMessage.model_validate_json(m["Body"])
            with rec.phase("worker", tag=f"step{message.step}"):
                outcome = engine.process(message, remaining_ms=lambda: INVOKE_BUDGET_MS)
            outcomes[outcome.kind] = outcomes.get(outcome.kind, 0) + 1
            if outcome.kind in ("advanced", "completed", "retry_scheduled", "failed"):
                steps_run += 1
            if outcome.kind in ("completed", "failed", "missing", "terminal"):
                pending.discard(message.execution_id)
        with rec.phase("esm"):
            world.sqs.delete_message_batch(QueueUrl=world.queue_url, Entries=[
                {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(messages)])
    return RunResult(rec.calls[first:], steps_run, time.perf_counter() - started, outcomes)


# -- the measurements --------------------------------------------------------------------------------
BILLED_PHASES = {"control", "worker", "finalize", "esm"}


def _summary(calls: list[Call]) -> dict[str, Any]:
    t = totals(calls, BILLED_PHASES)
    return {**t.scaled(1.0), "sqs_payload_bytes": t.sqs_payload_bytes, "sqs_messages_sent": t.sqs_messages_sent,
            "errors": dict(t.errors)}


def _lin(a: dict[str, Any], b: dict[str, Any], wb: float = -1.0, divisor: float = 1.0) -> dict[str, Any]:
    """(a + wb * b) / divisor, field by field (request counts by API too)."""
    out: dict[str, Any] = {}
    for key, value in a.items():
        if key == "requests":
            apis = set(value) | set(b["requests"])
            out[key] = {api: (value.get(api, 0) + wb * b["requests"].get(api, 0)) / divisor for api in sorted(apis)}
        elif isinstance(value, (int, float)):
            out[key] = (value + wb * b.get(key, 0)) / divisor
    return out


def _median_runs(runs: list[dict[str, Any]]) -> tuple[dict[str, Any], bool]:
    """Field-wise median of repeated runs, and whether every run agreed exactly."""
    identical = all(r == runs[0] for r in runs)
    out: dict[str, Any] = {}
    for key, value in runs[0].items():
        if key == "requests":
            apis = set().union(*(r[key] for r in runs))
            out[key] = {api: statistics.median(r[key].get(api, 0) for r in runs) for api in sorted(apis)}
        elif isinstance(value, (int, float)):
            out[key] = statistics.median(r[key] for r in runs)
        else:
            out[key] = value
    return out, identical


def _trace(calls: list[Call], tag: str) -> list[dict[str, Any]]:
    """The wire calls made while handling one step message (plus its share of the poller)."""
    rows = []
    for c in calls:
        if c.phase == "worker" and c.tag == tag:
            rows.append({"api": c.api, "wcu": c.wcu, "gsi_wcu": c.gsi_wcu, "rcu": c.rcu, "moto": c.moto_units,
                         "items": [(t.key.split("/")[-1], t.size_before, t.size_after) for t in c.items],
                         "error": c.error, "sqs_payload": c.sqs_payload_bytes})
    return rows


def measure(n_steps: int = 5, repeats: int = 3, sizes: list[int] | None = None,
            progress: Callable[[str], None] = print) -> dict[str, Any]:
    sizes = sizes or RESULT_SIZES
    out: dict[str, Any] = {"n_steps": n_steps, "repeats": repeats, "sizes": {}, "traces": {}}
    started = time.perf_counter()
    for size in sizes:
        label = SIZE_LABELS.get(size, f"{size} B")
        happy_runs, retry_runs, fixed_runs, wall = [], [], [], []
        for rep in range(repeats):
            with aws_world() as world:
                one = run_executions(world, bench_registry(1, size))
                many = run_executions(world, bench_registry(n_steps, size))
                retried = run_executions(world, bench_registry(n_steps, size, fail_once_at=n_steps // 2))
            s1, sn, sr = _summary(one.calls), _summary(many.calls), _summary(retried.calls)
            per_step = _lin(sn, s1, -1, n_steps - 1)
            happy_runs.append(per_step)
            fixed_runs.append(_lin(s1, per_step))
            retry_runs.append(_lin(per_step, _lin(sr, sn), +1))
            wall.append(many.wall_s / max(1, many.steps_run))
            if rep == 0:
                out["traces"][label] = {"happy": _trace(many.calls, "step1"),
                                        "retry_first": _trace(retried.calls, f"step{n_steps // 2}"),
                                        "outcomes": retried.outcomes,
                                        "sqs_bytes_per_message": sn["sqs_payload_bytes"] / max(1, sn["sqs_messages_sent"])}
        happy, happy_same = _median_runs(happy_runs)
        retry, retry_same = _median_runs(retry_runs)
        fixed, fixed_same = _median_runs(fixed_runs)
        out["sizes"][label] = {"bytes": size, "per_step": happy, "per_step_with_one_retry": retry,
                               "per_execution_fixed": fixed, "runs_identical": happy_same and retry_same and fixed_same,
                               "wall_ms_per_step_on_moto": statistics.median(wall) * 1000}
        progress(f"  steps: result {label}: {happy['aws_requests']:.2f} requests, "
                 f"{happy['write_units']:.2f} write units, {happy['rcu']:.2f} read units per step "
                 f"({time.perf_counter() - started:.0f} s so far)")
    out["concurrency"] = measure_batching(n_steps, progress=progress)
    return out


def measure_batching(n_steps: int, executions: int = 10, batch_size: int = 10,
                     progress: Callable[[str], None] = print) -> dict[str, Any]:
    """Ten executions in flight at once with ESM batch size 10: the poller's share per step shrinks."""
    with aws_world() as world:
        run = run_executions(world, bench_registry(n_steps, 100), count=executions, batch_size=batch_size)
    t = totals(run.calls, BILLED_PHASES)
    steps = run.steps_run
    receives = t.requests.get("sqs:ReceiveMessage", 0)
    deletes = t.requests.get("sqs:DeleteMessageBatch", 0)
    worker = totals(run.calls, {"worker"}).invocations
    result = {"executions": executions, "batch_size": batch_size, "steps": steps,
              "receives_per_step": receives / steps, "deletes_per_step": deletes / steps,
              "worker_invocations_per_step": worker / steps, "invocations_per_step": t.invocations / steps,
              "aws_requests_per_step": t.aws_requests / steps,
              "per_step": {"requests": {a: n / steps for a, n in sorted(t.requests.items())},
                           "aws_requests": t.aws_requests / steps}}
    progress(f"  steps: {executions} concurrent executions, batch {batch_size}: "
             f"{result['receives_per_step']:.2f} receives and {result['worker_invocations_per_step']:.2f} worker invocations per step")
    return result
