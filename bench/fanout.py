"""Requests and write units per branch of a map step, in-process: the real Engine on DynamoStore + SqsQueue
over moto, every message handled as the worker would (one delivery each).

    .venv/bin/python -m bench.fanout            # 100 branches at concurrency 10, 100 B results
    .venv/bin/python -m bench --only fanout     # the report's section: 100 at 10 and 1,000 at 50

Per-branch figures are *marginal*: the totals of a map over ``n`` items minus those of a map over one
item, divided by ``n - 1``, so what every execution pays once (start, the step before and after the
map, completion) is left out, and each branch's share of the fan-in (the step's record, one Query of
the branch partition) is kept. Write units are priced by ``bench.capacity`` from the items each call
touched (a transactional write costs twice), not by moto's ``ConsumedCapacity``.
"""

from __future__ import annotations

import argparse
import logging
import time
from collections.abc import Callable
from typing import Any

from engine_core import Engine, EngineSettings, Registry, StepMessage, SystemClock, map_
from engine_core.registry import build_workflow
from engine_core.adapters.sqs import SqsQueue
from engine_core.adapters.dynamodb import DynamoStore

from .wire import totals
from .world import TABLE, World, aws_world

WORKFLOW = "bench_fanout"
INVOKE_BUDGET_MS = 900_000


def _registry(result_bytes: int, max_concurrency: int) -> Registry:
    payload = "x" * max(0, result_bytes - 2)  # a JSON string of ``result_bytes`` bytes

    def prepare(ctx):
        return {"items": list(range(ctx["n"]))}

    def work(ctx):
        return payload

    def done(ctx):
        return {"count": len(ctx["fan"])}

    registry = Registry()
    registry.register(build_workflow(WORKFLOW, [prepare, map_(work, over="items", max_concurrency=max_concurrency,
                                                              name="fan"), done], source="bench.fanout"))
    return registry


def run_one(world: World, n: int, result_bytes: int, max_concurrency: int) -> dict[str, Any]:
    """One execution mapping over ``n`` items; every wire call it made, summed by API."""
    rec = world.recorder
    settings = EngineSettings(shards=4)
    store = DynamoStore(world.dynamodb, TABLE, shards=4, return_consumed_capacity=True)
    queue = SqsQueue(world.sqs, world.queue_url, world.dlq_url)
    engine = Engine(store, queue, _registry(result_bytes, max_concurrency), SystemClock(), settings)
    first = len(rec.calls)
    eid = engine.start(WORKFLOW, {"n": n}).execution.execution_id
    outcomes: dict[str, int] = {}
    deadline = time.monotonic() + 600
    while engine.get(eid).status.value not in ("COMPLETED", "FAILED"):
        if time.monotonic() > deadline:
            raise TimeoutError("the fan-out did not finish")
        with rec.phase("esm"):
            resp = world.sqs.receive_message(QueueUrl=world.queue_url, MaxNumberOfMessages=10, WaitTimeSeconds=1)
        messages = resp.get("Messages", [])
        if not messages:
            continue
        for m in messages:
            with rec.phase("worker"):
                outcome = engine.process(StepMessage.model_validate_json(m["Body"]), remaining_ms=lambda: INVOKE_BUDGET_MS)
            outcomes[outcome.kind] = outcomes.get(outcome.kind, 0) + 1
        with rec.phase("esm"):
            world.sqs.delete_message_batch(QueueUrl=world.queue_url, Entries=[
                {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(messages)])
    calls = [c for c in rec.calls[first:] if c.phase == "worker"]
    t = totals(calls)
    dynamo = {api: count for api, count in t.requests.items() if api.startswith("dynamodb:")}
    return {"status": engine.get(eid).status.value, "outcomes": outcomes, "dynamodb_requests": dynamo,
            "write_units": t.write_units, "wcu_table": t.wcu, "wcu_gsi": t.gsi_wcu, "rcu": t.rcu,
            "sqs_messages_sent": t.sqs_messages_sent, "errors": dict(t.errors),
            "join_writes": sum(1 for c in calls if c.op == "TransactWriteItems" and not c.error)}


def measure(n: int = 100, max_concurrency: int = 10, result_bytes: int = 100) -> dict[str, Any]:
    with aws_world() as world:
        many = run_one(world, n, result_bytes, max_concurrency)
        one = run_one(world, 1, result_bytes, max_concurrency)
    per: dict[str, Any] = {}
    for key in ("write_units", "wcu_table", "wcu_gsi", "rcu", "sqs_messages_sent", "join_writes"):
        per[key] = (many[key] - one[key]) / (n - 1)
    apis = set(many["dynamodb_requests"]) | set(one["dynamodb_requests"])
    per["dynamodb_requests"] = {api: (many["dynamodb_requests"].get(api, 0) - one["dynamodb_requests"].get(api, 0))
                                / (n - 1) for api in sorted(apis)}
    return {"branches": n, "max_concurrency": max_concurrency, "result_bytes": result_bytes, "per_branch": per,
            "execution": many, "baseline_one_branch": one}


CASES = ((100, 10), (1000, 50))
"""(branches, max_concurrency) for ``python -m bench``'s fan-out section (``--quick``: the first only)."""


def measure_cases(cases: tuple[tuple[int, int], ...] = CASES, result_bytes: int = 100,
                  progress: Callable[[str], None] = print) -> dict[str, Any]:
    """The ``fanout`` section of ``python -m bench``: :func:`measure` for each case, each on a fresh moto."""
    out: dict[str, Any] = {"result_bytes": result_bytes, "cases": []}
    for n, concurrency in cases:
        started = time.perf_counter()
        case = measure(n, concurrency, result_bytes)
        case["seconds"] = round(time.perf_counter() - started, 1)
        out["cases"].append(case)
        per = case["per_branch"]
        progress(f"  fan-out: {n} branches at concurrency {concurrency}: {case['execution']['status']}, "
                 f"{per['write_units']:.2f} write units and {per['rcu']:.2f} read units per branch "
                 f"({case['seconds']:.0f} s)")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.fanout", description=__doc__.splitlines()[0])
    parser.add_argument("--branches", type=int, default=100)
    parser.add_argument("--max-concurrency", type=int, default=10)
    parser.add_argument("--result-bytes", type=int, default=100)
    args = parser.parse_args(argv)
    logging.getLogger("engine_core").setLevel(logging.ERROR)
    out = measure(args.branches, args.max_concurrency, args.result_bytes)
    per = out["per_branch"]
    print(f"map over {out['branches']} items, max_concurrency {out['max_concurrency']}, "
          f"{out['result_bytes']} B results: {out['execution']['status']}")
    print(f"  per branch: {per['write_units']:.2f} write units ({per['wcu_table']:.2f} table, {per['wcu_gsi']:.2f} "
          f"index), {per['rcu']:.2f} read units, {per['sqs_messages_sent']:.2f} SQS messages, "
          f"{per['join_writes']:.2f} join-item writes")
    print("  DynamoDB requests per branch: " + ", ".join(
        f"{api.split(':')[1]} {count:.2f}" for api, count in per["dynamodb_requests"].items() if count))
    print(f"  whole execution: {out['execution']['write_units']:.0f} write units, "
          f"{sum(out['execution']['dynamodb_requests'].values())} DynamoDB requests, outcomes {out['execution']['outcomes']}")
    if out["execution"]["errors"]:
        print(f"  errors on the wire: {out['execution']['errors']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
