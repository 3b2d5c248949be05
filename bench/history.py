"""Per-step cost against history length: executions of 10 to 10,000 steps, chained (the default, 100 steps
a delivery) and not (one step a delivery), on the memory store.

A delivery reads the history from the latest checkpoint on (a record that also holds the whole context),
so what one step costs should not grow with the steps before it. Measured per step: engine CPU
(``time.process_time``), store requests, history records read and the read units DynamoDB would charge
for those reads (strongly consistent: one unit per 4 KB a query returns, rounded up per query). The
results are 1 KB each under one key, so the context itself stays the same size.
"""

from __future__ import annotations

import gc
import json
import math
import time
from collections.abc import Callable
from typing import Any

from engine_core import Engine, EngineSettings, ManualClock, Registry
from engine_core.adapters.memory import MemoryStore
from engine_core.registry import build_workflow
from engine_core.testing import FakeQueue

from .steps import payload_for

LENGTHS = [10, 100, 1000, 10_000]
CHAINS = [1, 100]
RESULT_BYTES = 1024


class ReadMeter(MemoryStore):
    """The memory store, metering what each delivery's read returns."""

    def __init__(self):
        super().__init__()
        self.reads = self.records_read = self.read_units = 0

    def load_state(self, execution_id, since=None):
        state = super().load_state(execution_id, since)
        if state is None:
            return None
        items = self.steps.get(execution_id, {})
        meta = len(json.dumps(self.metas.get(execution_id, {}))) + len(self.inputs.get(execution_id, ""))
        keys = self._sorted_keys(execution_id)[-len(state.records):] if state.records else []
        history = [len(json.dumps(items[k])) for k in keys]
        queries = 1 if since is None else 2
        self.reads += queries
        self.records_read += len(state.records)
        self.read_units += max(queries, math.ceil(meta / 4096) + math.ceil(sum(history) / 4096))
        return state


def _registry(n_steps: int) -> Registry:
    payload = payload_for(RESULT_BYTES)

    def make(index: int) -> Callable:
        def body(ctx):
            return {"payload": payload}

        body.__name__ = f"step_{index:05d}"
        return body

    registry = Registry()
    registry.register(build_workflow("bench_history", [make(i) for i in range(n_steps)], source="bench.history"))
    return registry


def run_once(n_steps: int, chain: int) -> dict[str, Any]:
    registry, clock, store = _registry(n_steps), ManualClock(), ReadMeter()
    queue = FakeQueue(clock)
    engine = Engine(store, queue, registry, clock, EngineSettings(max_steps=100_000, max_total_attempts=1_000_000, max_chain_steps=chain))
    gc.collect()
    cpu = time.process_time()
    engine.start("bench_history", {})
    done = False
    while not done:
        batch = queue.receive()
        if not batch:
            raise RuntimeError("the queue ran dry before the execution completed")
        for message in batch:
            outcome = engine.process(message.body)
            queue.ack(message)
            done = done or outcome.kind == "completed"
    cpu = time.process_time() - cpu
    requests = sum(store.calls.values())
    return {"steps": n_steps, "chain": chain, "cpu_us_per_step": cpu / n_steps * 1e6,
            "requests_per_step": requests / n_steps, "reads_per_step": store.reads / n_steps,
            "records_read_per_step": store.records_read / n_steps, "read_units_per_step": store.read_units / n_steps,
            "deliveries": store.reads}


def measure(repeats: int = 3, progress: Callable[[str], None] = print,
            lengths: list[int] | None = None) -> dict[str, Any]:
    rows = []
    for chain in CHAINS:
        for n in lengths or LENGTHS:
            runs = [run_once(n, chain) for _ in range(1 if n >= 10_000 else repeats)]
            row = dict(runs[0])
            row["cpu_us_per_step"] = sorted(r["cpu_us_per_step"] for r in runs)[len(runs) // 2]
            rows.append(row)
            progress(f"  history {n:>6} steps, chain {chain:>3}: {row['cpu_us_per_step']:.0f} us CPU, "
                     f"{row['read_units_per_step']:.2f} read units, {row['records_read_per_step']:.1f} records read "
                     "per step")
    return {"rows": rows, "result_bytes": RESULT_BYTES, "flatness": flatness(rows)}


SLACK = {"cpu_us_per_step": 20.0, "read_units_per_step": 0.05, "records_read_per_step": 0.5, "requests_per_step": 0.05}
"""Differences too small to call growth (a chained execution reads once per hundred steps: 0.01 read units
a step against 0.02 is no trend)."""


def flatness(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Per chain setting: the per-step figures at the longest history over the same at 100 steps (the
    shortest histories pay the start's cost over few steps). Flat when each figure at the longest is at
    most 1.5 times its value at 100 steps, or within ``SLACK`` of it."""
    out: dict[str, Any] = {}
    for chain in sorted({r["chain"] for r in rows}):
        mine = {r["steps"]: r for r in rows if r["chain"] == chain}
        if 100 not in mine or len(mine) < 2:
            continue
        longest = mine[max(mine)]
        ratios = {k: (longest[k] / mine[100][k] if mine[100][k] else None)
                  for k in ("cpu_us_per_step", "read_units_per_step", "records_read_per_step", "requests_per_step")}
        grew = [k for k in ratios if longest[k] > 1.5 * mine[100][k] and longest[k] - mine[100][k] > SLACK[k]]
        out[str(chain)] = {"longest": max(mine), "ratios": ratios, "grew": grew, "flat": not grew}
    return out
