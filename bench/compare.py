"""The step path v2 beside v1, and the capacity model: every figure computed from measured data.

The v1 figures are `bench/baseline/v1.json` (measured on this machine before the step path v2, with
the command it names); the current ones come from this run's `steps` and `overhead` sections.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from . import analysis

BASELINE = Path(__file__).resolve().parent / "baseline" / "v1.json"

# The targets for a step of a sequential execution, happy path.
TARGET_WRITE_REQUESTS = 2
TARGET_WRITE_UNITS = {"100 B": 2.0, "1 KB": 3.0}
TARGET_USD = {"100 B": 1.50, "1 KB": 2.00}
TARGET_CPU_US = 100.0

PARTITION_WCU_PER_S = 1000
"""DynamoDB's documented per-partition write limit (a table partition or a GSI partition)."""
TABLE_WCU_PER_S = 40_000
"""The default on-demand table throughput quota (per table, adjustable)."""
FREE_TIER_WCU = 25
"""DynamoDB's always-free provisioned write capacity (table and index writes together)."""
INDEX_WRITES_PER_HANDOFF = 4
"""Due-index writes of one step handed on through the queue: the commit moves the key to the message's
lease (delete + put), and the next delivery's claim moves it to the claim's lease (delete + put)."""
RATES = (10, 100, 1000)
HEADROOM = 0.5
"""Plan shards to run each index partition at half its limit."""


def baseline() -> dict[str, Any]:
    return json.loads(BASELINE.read_text())


def _write_requests(per_step: dict[str, Any]) -> float:
    return sum(v for api, v in per_step["requests"].items()
               if api in ("dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem",
                          "dynamodb:TransactWriteItems", "dynamodb:BatchWriteItem"))


def _durable_round_trips(per_step: dict[str, Any]) -> float:
    """Calls the step waits for on the step path: reads and writes to DynamoDB and sends to SQS."""
    return sum(v for api, v in per_step["requests"].items()
               if api.startswith("dynamodb:") or api == "sqs:SendMessage")


def _row(w, label: str, old: float, new: float, target: str, ok: bool | None, digits: int = 2) -> None:
    verdict = "" if ok is None else ("met" if ok else "**missed**")
    w(f"| {label} | {old:.{digits}f} | {new:.{digits}f} | {target} | {verdict} |")


def step_path_section(w, results: dict[str, Any]) -> None:
    steps, overhead = results.get("steps"), results.get("overhead")
    if not steps:
        return
    base = baseline()
    w("## The step path v2 against v1\n")
    w(f"v1 figures: `bench/baseline/v1.json` ({base['about']}) v2 figures: this run "
      "(`.venv/bin/python -m bench --only steps,overhead`). Per step of a sequential execution on the happy path; "
      "v2 runs the steps as one chain.\n")
    w("| Per step | v1 | v2 | target | verdict |")
    w("|---|---|---|---|---|")
    for label in ("100 B", "1 KB"):
        new, old = steps["sizes"].get(label, {}).get("per_step"), base["steps"].get(label)
        if not new or not old:
            continue
        _row(w, f"DynamoDB write requests ({label})", _write_requests(old), _write_requests(new),
             f"<= {TARGET_WRITE_REQUESTS}", _write_requests(new) <= TARGET_WRITE_REQUESTS)
        _row(w, f"durable round trips the step waits for ({label})", _durable_round_trips(old),
             _durable_round_trips(new), "1, or 2", _durable_round_trips(new) <= 2)
        _row(w, f"write units, table + index ({label})", old["write_units"], new["write_units"],
             f"<= {TARGET_WRITE_UNITS[label]:g}", new["write_units"] <= TARGET_WRITE_UNITS[label])
        sqs_old = old["requests"].get("sqs:SendMessage", 0) + old["requests"].get("sqs:ReceiveMessage", 0)
        sqs_new = new["requests"].get("sqs:SendMessage", 0) + new["requests"].get("sqs:ReceiveMessage", 0)
        _row(w, f"SQS requests ({label})", sqs_old, sqs_new, "0 while chained", sqs_new < 0.5)
        inv_old, inv_new = analysis.worker_invocations(old), analysis.worker_invocations(new)
        _row(w, f"Lambda invocations ({label})", inv_old, inv_new, "0 while chained", inv_new < 0.5)
        reads_old = old["requests"].get("dynamodb:GetItem", 0) + old["requests"].get("dynamodb:Query", 0)
        reads_new = new["requests"].get("dynamodb:GetItem", 0) + new["requests"].get("dynamodb:Query", 0)
        _row(w, f"reads ({label})", reads_old, reads_new, "<= 1 per invocation", reads_new <= max(inv_new, 1 / 5))
        usd_old = analysis.step_cost(old).usd_per_million()
        usd_new = analysis.step_cost(new).usd_per_million()
        _row(w, f"$ per million steps, list price ({label})", usd_old, usd_new, f"<= {TARGET_USD[label]:.2f}",
             usd_new <= TARGET_USD[label])
    if overhead:
        for size, label in (("100", "100 B"), ("10240", "10 KB")):
            new = overhead["sizes"].get(size) or overhead["sizes"].get(int(size))
            old = base["overhead_us_per_step"].get(size)
            if new and old:
                _row(w, f"engine CPU per step, memory store ({label} results)", old, new["per_transition_cpu_us"],
                     f"<= {TARGET_CPU_US:g} µs", new["per_transition_cpu_us"] <= TARGET_CPU_US, digits=0)
    w("")
    fixed = steps["sizes"]["1 KB"].get("per_execution_fixed")
    if fixed:
        w(f"Per execution, on top of its steps (start, first delivery, end; 1 KB results): "
          f"{fixed['wcu_table']:.0f} table and {fixed['wcu_gsi']:.0f} index write units, {fixed['aws_requests']:.0f} "
          "requests. The index units include the list index (`GET /executions`), whose entry is written once when "
          "an execution starts and once when it ends, and never on a step.\n")
    w("Reads are one Query per delivery (the execution, its input and its history together), shared by every "
      "step of the chain. The dollar figures use the same prices and the same worker duration as the section "
      "below. Engine CPU per step is dominated by decoding the history once per delivery (the context is "
      "rebuilt from it) and by writing each history item; it grows with the history's length divided by the "
      "chain's.\n")


def capacity_section(w, results: dict[str, Any]) -> None:
    steps = results.get("steps")
    if not steps or "1 KB" not in steps["sizes"]:
        return
    base = baseline()
    w("## Capacity model\n")
    w(f"From the measured write units per step and DynamoDB's documented limits: {PARTITION_WCU_PER_S:,} WCU/s "
      f"per partition (table or index), {TABLE_WCU_PER_S:,} WCU/s per on-demand table by default, "
      f"{FREE_TIER_WCU} provisioned WCU in the always-free tier (table and index writes together).\n")
    w("| Per step | 100 B v1 | 100 B v2 | 1 KB v1 | 1 KB v2 |")
    w("|---|---|---|---|---|")
    cells: dict[str, list[str]] = {"table write units": [], "index write units (chained)": [],
                                    "steps/s, one execution (its own partition)": [],
                                    "steps/s per table at the default quota": [],
                                    f"steady steps/s on {FREE_TIER_WCU} provisioned WCU": []}
    for label in ("100 B", "1 KB"):
        for p in (base["steps"][label], steps["sizes"][label]["per_step"]):
            cells["table write units"].append(f"{p['wcu_table']:.2f}")
            cells["index write units (chained)"].append(f"{p['wcu_gsi']:.2f}")
            cells["steps/s, one execution (its own partition)"].append(f"{PARTITION_WCU_PER_S / p['wcu_table']:,.0f}")
            cells["steps/s per table at the default quota"].append(f"{TABLE_WCU_PER_S / p['write_units']:,.0f}")
            cells[f"steady steps/s on {FREE_TIER_WCU} provisioned WCU"].append(f"{FREE_TIER_WCU / p['write_units']:.1f}")
    for name, values in cells.items():
        w(f"| {name} | " + " | ".join(values) + " |")
    w("")
    per_shard = PARTITION_WCU_PER_S / INDEX_WRITES_PER_HANDOFF
    w(f"**Due-index shards.** Every step goes through one shard partition (`DUE#<shard>`). A step handed on "
      f"through the queue (a chain limit of 1, or a yield) moves the index key twice: {INDEX_WRITES_PER_HANDOFF} "
      f"index writes, so one shard carries at most {per_shard:,.0f} such steps/s. Inside a chain the key moves "
      f"only once per slack period (`LOOM_INDEX_SLACK_S`, 300 s) per execution (measured here: "
      f"{steps['sizes']['1 KB']['per_step']['wcu_gsi']:.2f} index write units per chained step), so chained steps "
      "barely load the index. Shards to plan for, with every step handed on and each partition at "
      f"{HEADROOM:.0%} of its limit:\n")
    w("| steps/s | shards (`shard_count`) |")
    w("|---|---|")
    for rate in RATES:
        shards = max(1, math.ceil(rate * INDEX_WRITES_PER_HANDOFF / (PARTITION_WCU_PER_S * HEADROOM)))
        w(f"| {rate:,} | {shards} |")
    w("")
