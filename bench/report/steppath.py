"""The step path v2 beside v1, and the capacity model, worded from ``findings``.

The v1 figures are ``bench/baseline/v1.json`` (measured on this machine before the step path v2, with
the command it names); the current ones come from this run's ``steps`` and ``overhead`` sections.
"""

from __future__ import annotations

from typing import Any

from . import findings
from .findings import FREE_TIER_WCU, HEADROOM, INDEX_WRITES_PER_HANDOFF, PARTITION_WCU_PER_S, RATES, TABLE_WCU_PER_S
from ._fmt import Write, and_join, fmt


def versus_section(w: Write, results: dict[str, Any]) -> None:
    steps, overhead = results.get("steps"), results.get("overhead")
    if not steps:
        return
    base = findings.baseline()
    w("## The step path v2 against v1\n")
    w(f"v1 figures: `bench/baseline/v1.json` ({base['about']}) v2 figures: this run "
      "(`.venv/bin/python -m bench --only steps,overhead`). Per step of a sequential execution on the happy path; "
      "v2 runs the steps as one chain.\n")
    w("| Per step | v1 | v2 | target | verdict |")
    w("|---|---|---|---|---|")
    rows = findings.versus(steps, overhead, base)
    for r in rows:
        w(f"| {r.label} | {r.old:.{r.digits}f} | {r.new:.{r.digits}f} | {r.target} | "
          f"{'met' if r.ok else '**missed**'} |")
    w("")
    missed = [r.label for r in rows if not r.ok]
    worse = [r.label for r in rows if r.new > r.old + 1e-9]
    w(f"v2 meets {len(rows) - len(missed)} of these {len(rows)} targets"
      + (f"; it misses {and_join(missed)}." if missed else ".")
      + (f" Worse than v1: {and_join(worse)}." if worse else " Nothing is worse than in v1.") + "\n")
    ref = findings.reference_size(steps)
    fixed = steps["sizes"][ref].get("per_execution_fixed")
    per_step = steps["sizes"][ref]["per_step"]
    if fixed:
        w(f"Per execution, on top of its steps (start, first delivery, end; {ref} results): "
          f"{fmt(fixed['wcu_table'])} table and {fmt(fixed['wcu_gsi'])} index write units, "
          f"{fmt(fixed['aws_requests'])} requests, {fmt(findings.reads(fixed))} of them reads; a step on the chain "
          f"adds {fmt(per_step['wcu_gsi'])} index write units and {fmt(findings.reads(per_step))} reads. The dollar "
          "figures use the same prices and the same worker duration as the section *Dollars per million steps*.\n")


def capacity_model(w: Write, results: dict[str, Any]) -> None:
    steps = results.get("steps")
    if not steps or "1 KB" not in steps["sizes"]:
        return
    base = findings.baseline()
    w("## Capacity model\n")
    w(f"From the measured write units per step and DynamoDB's documented limits: {PARTITION_WCU_PER_S:,} WCU/s "
      f"per partition (table or index), {TABLE_WCU_PER_S:,} WCU/s per on-demand table by default, "
      f"{FREE_TIER_WCU} provisioned WCU in the always-free tier (table and index writes together).\n")
    labels = [label for label in findings.TARGET_SIZES if label in steps["sizes"] and label in base["steps"]]
    w("| Per step | " + " | ".join(f"{label} v1 | {label} v2" for label in labels) + " |")
    w("|---|" + "---|---|" * len(labels))
    cells: dict[str, list[str]] = {"table write units": [], "index write units (chained)": [],
                                    "steps/s, one execution (its own partition)": [],
                                    "steps/s per table at the default quota": [],
                                    f"steady steps/s on {FREE_TIER_WCU} provisioned WCU": []}
    for label in labels:
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
    chained = steps["sizes"]["1 KB"]["per_step"]["wcu_gsi"]
    w(f"**Due-index shards.** Every step goes through one shard partition (`DUE#<shard>`). A step handed on "
      f"through the queue (a chain limit of 1, or a yield) moves the index key twice: {INDEX_WRITES_PER_HANDOFF} "
      f"index writes, so one shard carries at most {per_shard:,.0f} such steps/s. A chained step is measured here "
      f"at {chained:.2f} index write units ({chained / INDEX_WRITES_PER_HANDOFF:.0%} of a handed-on step's). "
      f"Shards to plan for, with every step handed on and each partition at {HEADROOM:.0%} of its limit:\n")
    w("| steps/s | shards (`shard_count`) |")
    w("|---|---|")
    for rate in RATES:
        w(f"| {rate:,} | {findings.shards_for(rate)} |")
    w("")
