"""The cost ledger against the wire: N executions through the real engine on DynamoStore + SqsQueue over
moto (``steps.run_executions``), then each execution's ledger (read from its item) summed and set beside
what ``wire.WireRecorder`` saw the same deliveries do.

- requests: DynamoDB calls in the worker's deliveries (phases ``worker`` and ``finalize``);
- units: the ``ConsumedCapacity`` the service returned for those calls (what the ledger carries), and,
  for reference, the units computed from item sizes by DynamoDB's documented rules (moto's reported
  units are not faithful, so those two differ on moto, not on AWS);
- messages: step messages sent (the control plane's first, the worker's next ones).

And the ledger's own overhead: bytes it adds to the execution item (DynamoDB's item-size rules), and
engine CPU per step with the ledger on and off (``overhead.run_once``, interleaved, medians).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Any

from engine_core import EngineSettings
from engine_core.adapters.dynamodb import DynamoStore

from . import capacity, overhead
from .steps import bench_registry, run_executions
from .wire import totals
from .world import TABLE, aws_world

TOLERANCE = 0.05
CASES = {
    "chained": {"settings": {}, "fail_once_at": None},
    "one step per delivery": {"settings": {"max_chain_steps": 1}, "fail_once_at": None},
    "one step per delivery, one retry": {"settings": {"max_chain_steps": 1}, "fail_once_at": 2},
}
CPU_STEPS = 1000


def _ledgers(world: Any) -> list[Any]:
    store = DynamoStore(world.dynamodb_side, TABLE, shards=4)
    out, args = [], {"TableName": TABLE, "FilterExpression": "SK = :meta",
                     "ExpressionAttributeValues": {":meta": {"S": "#META"}}}
    while True:
        resp = world.dynamodb_side.scan(**args)
        for item in resp.get("Items", []):
            out.append(store._decode_meta(item["PK"]["S"].removeprefix("EXEC#"), item))
        if "LastEvaluatedKey" not in resp:
            return out
        args["ExclusiveStartKey"] = resp["LastEvaluatedKey"]


def _off_by(ledger: float, wire: float) -> float:
    return 0.0 if ledger == wire else (ledger - wire) / wire if wire else float("inf")


def compare(executions: int, n_steps: int, settings: dict[str, Any], fail_once_at: int | None) -> dict[str, Any]:
    """One case: the summed ledgers and the wire's counts of the same deliveries."""
    with aws_world() as world:
        run = run_executions(world, bench_registry(n_steps, 100, fail_once_at), count=executions,
                             settings=EngineSettings(shards=4, **settings))
        with world.recorder.paused():
            executions_read = _ledgers(world)
            meta_bytes = [capacity.item_size(world.dynamodb_side.get_item(
                TableName=TABLE, Key={"PK": {"S": f"EXEC#{e.execution_id}"}, "SK": {"S": "#META"}})["Item"])
                for e in executions_read]
    ledgers = [e.ledger for e in executions_read if e.ledger is not None]
    delivery_calls = [c for c in run.calls if c.service == "dynamodb" and c.phase in ("worker", "finalize")]
    wire = totals(delivery_calls)
    sent = totals(run.calls, {"control", "worker"}).requests.get("sqs:SendMessage", 0)
    ledger = {"requests": sum(x.requests for x in ledgers), "units": sum(x.read_units + x.write_units for x in ledgers),
              "read_units": sum(x.read_units for x in ledgers), "write_units": sum(x.write_units for x in ledgers),
              "messages": sum(x.messages for x in ledgers), "lambda_ms": sum(x.lambda_ms for x in ledgers)}
    on_wire = {"requests": len(delivery_calls), "units": wire.moto_units, "messages": sent,
               "units_by_size_rules": wire.wcu + wire.gsi_wcu + wire.rcu, "reported_missing": wire.moto_missing}
    off = {"requests": _off_by(ledger["requests"], on_wire["requests"]),
           "units": _off_by(ledger["units"], on_wire["units"]),
           "messages": _off_by(ledger["messages"], on_wire["messages"])}
    return {"executions": executions, "with_ledger": len(ledgers), "deliveries": sum(run.outcomes.values()),
            "outcomes": run.outcomes, "ledger": ledger, "wire": on_wire, "off_by": off,
            "within_tolerance": len(ledgers) == executions and all(abs(v) <= TOLERANCE for v in off.values()),
            "units_by_size_off_by": _off_by(ledger["units"], on_wire["units_by_size_rules"]),
            "meta_item_bytes": statistics.median(meta_bytes)}


def item_bytes() -> dict[str, Any]:
    """Bytes the ledger adds to an execution item, by DynamoDB's size rules, for small and large counts."""
    from engine_core.model import Ledger

    from .world import REGION  # noqa: F401  (the same world the comparison used)
    out = {}
    with aws_world() as world:
        run_executions(world, bench_registry(2, 100), count=1)
        e = _ledgers(world)[0]
        store = DynamoStore(world.dynamodb_side, TABLE, shards=4)
        without = capacity.item_size(store._meta_item(e.model_copy(update={"ledger": None})))
        for label, ledger in (("this execution", e.ledger),
                              ("a long one", Ledger(requests=123_456, read_units=9_876.5, write_units=54_321.5,
                                                    messages=12_345, lambda_ms=98_765_432))):
            withit = capacity.item_size(store._meta_item(e.model_copy(update={"ledger": ledger})))
            out[label] = {"without": without, "with": withit, "added": withit - without}
    return out


def cpu(repeats: int, steps: int = CPU_STEPS) -> dict[str, Any]:
    """Engine CPU per step transition with the ledger on and off, interleaved runs: medians, and the least
    disturbed run of each (the machine is shared: other processes inflate some runs)."""
    runs: dict[str, list[float]] = {"on": [], "off": []}
    for _ in range(repeats):
        for mode in ("off", "on"):
            r = overhead.run_once(steps, 100, ledger=(mode == "on"))
            runs[mode].append(r["cpu_s"] / r["transitions"] * 1e6)
    on, off = statistics.median(runs["on"]), statistics.median(runs["off"])
    return {"steps": steps, "repeats": repeats, "on_us": on, "off_us": off, "added_us": on - off,
            "min_on_us": min(runs["on"]), "min_off_us": min(runs["off"]),
            "min_added_us": min(runs["on"]) - min(runs["off"]),
            "runs_on_us": [round(x, 1) for x in runs["on"]], "runs_off_us": [round(x, 1) for x in runs["off"]]}


def measure(executions: int = 20, n_steps: int = 5, repeats: int = 7,
            progress: Callable[[str], None] = print) -> dict[str, Any]:
    out: dict[str, Any] = {"executions": executions, "n_steps": n_steps, "tolerance": TOLERANCE, "cases": {}}
    for name, case in CASES.items():
        result = compare(executions, n_steps, case["settings"], case["fail_once_at"])
        out["cases"][name] = result
        progress(f"  ledger: {name}: requests {result['ledger']['requests']} vs {result['wire']['requests']} on the "
                 f"wire, units {result['ledger']['units']:.1f} vs {result['wire']['units']:.1f}, messages "
                 f"{result['ledger']['messages']} vs {result['wire']['messages']}")
    out["item_bytes"] = item_bytes()
    out["cpu"] = cpu(repeats)
    out["all_within_tolerance"] = all(c["within_tolerance"] for c in out["cases"].values())
    progress(f"  ledger: {out['cpu']['added_us']:+.1f} us CPU per step ({out['cpu']['off_us']:.0f} -> "
             f"{out['cpu']['on_us']:.0f} us); +{out['item_bytes']['this execution']['added']} bytes on the item")
    return out
