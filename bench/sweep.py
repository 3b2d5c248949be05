"""Sweeper cost against table size: index items read per tick must follow the due work, not the table.

DynamoStore on moto, the design's sparse KEYS_ONLY GSI1. Sleeping executions (wake tomorrow) and due
ones (woke a minute ago) are seeded with BatchWriteItem of the store's own item shape, outside the
recorder; then one ``Sweeper.sweep()`` runs instrumented and we count Query calls, index items read
(``DuePage.read_count``, i.e. ScannedCount), read units, and the re-drive calls per due execution.
"""

from __future__ import annotations

import datetime as dt
import statistics
import time
import uuid
from collections.abc import Callable
from typing import Any

from engine_core import EngineSettings, Execution, Registry, Status, Sweeper, SystemClock, Timer
from engine_core import sleep as sleep_marker
from engine_core.registry import build_workflow
from engine_core.adapters.sqs import SqsQueue
from engine_core.adapters.dynamodb import DynamoStore

from .wire import totals
from .world import TABLE, World, aws_world, quick_moto_sort

WORKFLOW = "bench_sweep"
TABLE_SIZES = [0, 1_000, 10_000]
DUE_COUNTS = [10, 40, 120]
SHARD_COUNTS = [1, 4, 16]


def _registry() -> Registry:
    def wake(ctx):
        return {}

    def before(ctx):
        return {}

    registry = Registry()
    registry.register(build_workflow(WORKFLOW, [before, sleep_marker(days=1), wake], source="bench.sweep"))
    return registry


def _execution(now: dt.datetime, wake_at: dt.datetime, fingerprint: str) -> Execution:
    return Execution(
        execution_id=str(uuid.uuid4()), workflow=WORKFLOW, status=Status.SLEEPING, current_step=2, version=3,
        fingerprint=fingerprint, input_digest="d" * 64,
        created_at=now - dt.timedelta(days=1), updated_at=now - dt.timedelta(days=1),
        next_wake_at=wake_at, timer=Timer.SLEEP, layout=2,
        # as the engine keeps a live execution: its items stamped past its timer (so a re-drive re-stamps nothing)
        stamped_until=wake_at + dt.timedelta(days=30),
    )


def seed(world: World, store: DynamoStore, count: int, wake_at: dt.datetime, now: dt.datetime,
         fingerprint: str) -> float:
    """Write ``count`` sleeping executions with BatchWriteItem (25 a call), unrecorded. Returns seconds."""
    started = time.perf_counter()
    items = [store._meta_item(_execution(now, wake_at, fingerprint)) for _ in range(count)]  # the store's own shape
    client = world.dynamodb_seed
    for i in range(0, len(items), 25):
        request = {TABLE: [{"PutRequest": {"Item": item}} for item in items[i:i + 25]]}
        while request:
            request = client.batch_write_item(RequestItems=request).get("UnprocessedItems") or None
    return time.perf_counter() - started


def _sweep_once(world: World, store: DynamoStore, settings: EngineSettings, registry: Registry) -> dict[str, Any]:
    rec = world.recorder
    sweeper = Sweeper(store, SqsQueue(world.sqs, world.queue_url, world.dlq_url), SystemClock(), settings, registry)
    first = len(rec.calls)
    seconds = time.perf_counter()
    with rec.phase("sweeper"):
        report = sweeper.sweep()
    seconds = time.perf_counter() - seconds
    calls = rec.calls[first:]
    t = totals(calls)
    queries = [c for c in calls if c.op == "Query"]
    return {
        "redriven": report.total_redriven, "index_items_read": report.index_items_read,
        "queries": len(queries), "query_rcu": sum(c.rcu for c in queries),
        "get_items": t.requests.get("dynamodb:GetItem", 0), "put_items": t.requests.get("dynamodb:PutItem", 0),
        "sends": t.requests.get("sqs:SendMessage", 0), "rcu": t.rcu, "write_units": t.write_units,
        "aws_requests": t.aws_requests, "truncated": report.truncated, "moto_seconds": seconds,
    }


def _median_row(runs: list[dict[str, Any]]) -> dict[str, Any]:
    row: dict[str, Any] = {}
    for key in runs[0]:
        values = [r[key] for r in runs]
        row[key] = any(values) if isinstance(values[0], bool) else statistics.median(values)
    return row


def _counts(run: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in run.items() if k != "moto_seconds"}


def measure(repeats: int = 3, progress: Callable[[str], None] = print) -> dict[str, Any]:
    registry = _registry()
    fingerprint = registry.get(WORKFLOW).fingerprint
    out: dict[str, Any] = {"by_table_size": [], "by_due": [], "by_shards": [], "seed": []}
    for shards in SHARD_COUNTS:
        settings = EngineSettings(shards=shards)
        with aws_world() as world, quick_moto_sort():
            store = DynamoStore(world.dynamodb, TABLE, shards=shards, return_consumed_capacity=True)
            seeded = 0
            sizes = TABLE_SIZES if shards == 1 else [TABLE_SIZES[-1]]
            for size in sizes:
                now = dt.datetime.now(dt.timezone.utc)
                seconds = seed(world, store, size - seeded, now + dt.timedelta(days=1), now, fingerprint)
                if size - seeded:
                    out["seed"].append({"shards": shards, "items": size - seeded, "seconds": seconds})
                    progress(f"  sweeper: seeded {size - seeded:,} sleeping executions ({shards} shards) "
                             f"in {seconds:.1f} s")
                seeded = size
                dues = DUE_COUNTS if (shards == 1 and size == TABLE_SIZES[-1]) else [DUE_COUNTS[0]]
                for due in dues:
                    runs = []
                    for _ in range(repeats):
                        now = dt.datetime.now(dt.timezone.utc)
                        seed(world, store, due, now - dt.timedelta(minutes=1), now, fingerprint)
                        runs.append(_sweep_once(world, store, settings, registry))
                    row = {"shards": shards, "sleeping": size, "due": due, **_median_row(runs),
                           "runs_identical": all(_counts(r) == _counts(runs[0]) for r in runs)}
                    if shards == 1 and due == DUE_COUNTS[0]:
                        out["by_table_size"].append(row)
                    if shards == 1 and size == TABLE_SIZES[-1]:
                        out["by_due"].append(row)
                    if size == TABLE_SIZES[-1] and due == DUE_COUNTS[0]:
                        out["by_shards"].append(row)
                    progress(f"  sweeper: {size:,} sleeping + {due} due, {shards} shard(s): "
                             f"{row['queries']:.0f} Query, {row['index_items_read']:.0f} index items read, "
                             f"{row['redriven']:.0f} re-driven")
    return out
