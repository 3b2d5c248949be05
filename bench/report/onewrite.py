"""The report's section on a one-write step (issue 22 item 4): what carrying a step's record in the advancing
conditional write would cost, from the sizes of the items the steps run actually stored (``bench/steps.py``)."""

from __future__ import annotations

import math
import statistics
from typing import Any

from ._fmt import Write, cmd

KB = 1024
WRITES = frozenset({"dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:TransactWriteItems"})
FOLD_INTERVALS = (1, 2, 4, 8, 16)
"""Carried records are folded into the history every k steps (or the execution item grows without bound): the
table shows the k that costs least."""


def item_sizes(trace: dict[str, Any]) -> tuple[int, int] | None:
    """The median stored size of the execution item (``#META``) and of a step record, from one trace's writes."""
    calls = trace.get("happy") or trace.get("retry_first") or []
    metas, records = [], []
    for call in calls:
        if call.get("error") or call["api"] not in WRITES:
            continue
        for key, _before, after in call["items"]:
            if after and key == "#META":
                metas.append(after)
            elif after and key.startswith("STEP#"):
                records.append(after)
    if not metas or not records:
        return None
    return int(statistics.median(metas)), int(statistics.median(records))


def best(meta: int, record: int) -> dict[str, float]:
    """The fold interval that costs the fewest write units per step."""
    return min((model(meta, record, k) for k in FOLD_INTERVALS), key=lambda m: (m["one_write"], -m["k"]))


def model(meta: int, record: int, fold_every: int) -> dict[str, float]:
    """Write units per step: today (the record, then the advance) and with the record carried in the advance
    (the execution item holding up to ``fold_every`` records, folded into one history item at the last)."""
    now = math.ceil(meta / KB) + math.ceil(record / KB)
    carried = statistics.mean(math.ceil((meta + i * record) / KB) for i in range(1, fold_every + 1))
    fold = math.ceil(fold_every * record / KB) / fold_every
    return {"k": fold_every, "now": now, "carried": carried, "fold": fold, "one_write": carried + fold,
            "requests_now": 2.0, "requests_one_write": 1.0 + 1.0 / fold_every}


def one_write_section(w: Write, steps: dict[str, Any]) -> None:
    rows = []
    for label, trace in steps.get("traces", {}).items():
        sizes = item_sizes(trace)
        if sizes is not None:
            rows.append((label, *sizes, best(*sizes)))
    if not rows:
        return
    w("## One write per step: why not (yet)\n")
    w(f"Sizes from {cmd('steps')} (the items the steps run stored, median); write units by DynamoDB's rules "
      "(*Capacity model*). Today a step writes its record, then the conditional write that moves the execution "
      "on: two writes, two durable round trips. A one-write step would carry the record in that conditional "
      "write (the execution item holding the records since the last fold) and fold them into the history every k "
      "steps (one more write), so the item stays bounded and a delivery still reads a bounded history; each row "
      f"takes the k of {', '.join(map(str, FOLD_INTERVALS))} that costs least.\n")
    w("| results | execution item | step record | write units today | best k | carried in the advance | fold | one-write total | requests today / one-write |")
    w("|---|---:|---:|---:|---:|---:|---:|---:|---|")
    for label, meta, record, m in rows:
        w(f"| {label} | {meta:,} B | {record:,} B | {m['now']:.2f} | {m['k']} | {m['carried']:.2f} | {m['fold']:.2f} | "
          f"{m['one_write']:.2f} | {m['requests_now']:.2f} / {m['requests_one_write']:.2f} |")
    w("")
    cheaper = [label for label, _m, _r, m in rows if m["one_write"] < m["now"]]
    w("DynamoDB bills a write by the size of the item written, in 1 KB units, not by the request: one write carrying "
      "the record costs the units of both, and an execution item that grows by every carried record costs more on "
      "each advance. "
      + (f"It would be cheaper at {', '.join(cheaper)} only. " if cheaper else
         "It is not cheaper in dollars at any of these sizes, so it is not shipped. ")
      + "What it would save is one durable round trip per step (the latency of a step, not its price), with a "
      "larger execution item on every read of it and a fold whose crash points the simulation would have to "
      "cover.\n")
