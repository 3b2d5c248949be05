"""Engine overhead: CPU time (``time.process_time``) per step transition in engine-core on the memory
store, and a 1,000-step execution's total (LOOM_MAX_STEPS caps executions at 1,000 steps).

The loop is the worker's: take the next message from the fake queue, ``Engine.process`` it, ack it.
No AWS, no serialisation to DynamoDB JSON: this is what the engine itself costs per step (codec,
model validation, transitions), the floor under the Lambda's billed duration.
"""

from __future__ import annotations

import gc
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

from engine_core import Engine, EngineSettings, ManualClock, Registry, codec
from engine_core.registry import build_workflow
from engine_core.adapters.memory import MemoryStore
from engine_core.testing import FakeQueue

from . import instructions as counted
from .steps import payload_for

WORKFLOW = "bench_overhead"
STEPS = 1000
RESULT_SIZES = [100, 10 * 1024]
COUNTED_STEPS = 500
"""Steps of each execution ``instructions_per_step`` counts (two of them)."""


def _registry(n_steps: int, result_bytes: int) -> Registry:
    payload = payload_for(result_bytes)

    def make(index: int) -> Callable:
        def body(ctx):
            return {"payload": payload}

        body.__name__ = f"step_{index:04d}"
        return body

    registry = Registry()
    registry.register(build_workflow(WORKFLOW, [make(i) for i in range(n_steps)], source="bench.overhead"))
    return registry


def settle_heap() -> None:
    """The heap as a deployed worker's is when its first message comes: collected, then frozen
    (``engine_core.adapters.lambda_runtime.init_done``), so a full collection during the steps scans only
    what they allocated, not every object imported and prepared before them. Without it, whether a full
    collection of the whole heap falls inside the measured steps depends on how many objects the
    process happened to allocate before (an import more or less moved a 100-step count by 3%)."""
    gc.unfreeze()
    gc.collect()
    gc.freeze()


def prepare(n_steps: int, result_bytes: int, ledger: bool = True) -> tuple[Engine, FakeQueue]:
    """An engine on the memory store with the ``n_steps``-step workflow registered, the heap collected."""
    registry = _registry(n_steps, result_bytes)
    clock = ManualClock()
    queue = FakeQueue(clock)
    engine = Engine(MemoryStore(), queue, registry, clock, EngineSettings(ledger=ledger))
    settle_heap()
    return engine, queue


def run_once(n_steps: int, result_bytes: int, ledger: bool = True) -> dict[str, Any]:
    """One execution of ``n_steps`` steps, start to COMPLETED. CPU seconds and transitions (``ledger``: the
    cost ledger counted, the default, as deployed)."""
    return execute(*prepare(n_steps, result_bytes, ledger))


def execute(engine: Engine, queue: FakeQueue, workflow: str = WORKFLOW) -> dict[str, Any]:
    """Start ``workflow`` on ``engine`` and drive it to COMPLETED: CPU seconds, wall seconds, transitions."""
    cpu = time.process_time()
    wall = time.perf_counter()
    engine.start(workflow, {})
    transitions = 0
    done = False
    while not done:
        batch = queue.receive()
        if not batch:
            raise RuntimeError("queue ran dry before the execution completed")
        for message in batch:
            outcome = engine.process(message.body)
            queue.ack(message)
            transitions += max(1, outcome.steps_run)  # a chained delivery runs many steps
            done = done or outcome.kind == "completed"
            if outcome.kind not in ("advanced", "completed"):
                raise RuntimeError(f"unexpected outcome {outcome}")
    cpu = time.process_time() - cpu
    wall = time.perf_counter() - wall
    return {"cpu_s": cpu, "wall_s": wall, "transitions": transitions}


def encode_floor_us(result_bytes: int, rounds: int = 2000) -> float:
    """CPU microseconds to encode one step's result as the engine stores it (``codec.encode``: the value
    walk and CPython's ``json.dumps``), median of 5 batches: the part of a step's cost that grows with
    its result, paid once per step by any engine that stores results as JSON text."""
    result = {"payload": payload_for(result_bytes)}
    batches = []
    for _ in range(5):
        started = time.process_time()
        for _ in range(rounds):
            codec.encode(result, "result")
        batches.append((time.process_time() - started) / rounds * 1e6)
    return statistics.median(batches)


def measure(repeats: int = 9, progress: Callable[[str], None] = print, instructions: bool = True) -> dict[str, Any]:
    """``repeats`` runs of each size, the sizes taking turns run after run (load from other work on the
    machine then reaches every size alike), after one unmeasured run of each."""
    out: dict[str, Any] = {"steps": STEPS, "repeats": repeats, "sizes": {}}
    for size in RESULT_SIZES:
        run_once(STEPS, size)
    runs: dict[int, list[dict[str, Any]]] = {size: [] for size in RESULT_SIZES}
    for _ in range(repeats):
        for size in RESULT_SIZES:
            runs[size].append(run_once(STEPS, size))
    for size in RESULT_SIZES:
        cpu = statistics.median(r["cpu_s"] for r in runs[size])
        transitions = runs[size][0]["transitions"]
        out["sizes"][size] = {
            "encode_result_us": encode_floor_us(size),
            "execution_cpu_ms": cpu * 1000, "execution_wall_ms": statistics.median(r["wall_s"] for r in runs[size]) * 1000,
            "per_transition_cpu_us": cpu / transitions * 1e6, "transitions": transitions,
            "fastest_per_transition_cpu_us": min(r["cpu_s"] for r in runs[size]) / transitions * 1e6,
            "cpu_ms_runs": [round(r["cpu_s"] * 1000, 1) for r in runs[size]],
        }
        progress(f"  overhead: {STEPS}-step execution, {size} B results: {cpu * 1000:.0f} ms CPU, "
                 f"{cpu / transitions * 1e6:.0f} us per transition")
    if instructions:
        progress("  overhead: counting instructions per step under valgrind (about two minutes)")
        out["instructions"] = instructions_per_step(RESULT_SIZES)
        progress(f"  overhead: instructions {out['instructions']}")
    return out


def instructions_per_step(sizes: list[int]) -> dict[str, Any]:
    """Instructions per step of this section's loop for each result size, under callgrind: this module run
    as a program that prepares two ``COUNTED_STEPS``-step executions (registry, engine, the heap collected
    and frozen) and runs them, and as one that prepares them alike and runs neither (a 100-step one warms up
    both): the difference is the executions alone, the mean over ``instructions.LAYOUTS`` memory layouts."""
    if not counted.available():
        return dict(counted.NOT_INSTALLED)
    jobs = [("bench.overhead", size, runs) for size in sizes for runs in (0, 2)]
    counts = dict(zip(jobs, counted.count_all(jobs)))
    spreads = {str(size): counted.per_unit_range(counts[("bench.overhead", size, 2)],
                                                 counts[("bench.overhead", size, 0)], 2 * COUNTED_STEPS)
               for size in sizes}
    return {"status": "measured", "tool": counted.TOOL, "steps": 2 * COUNTED_STEPS, "layouts": counted.LAYOUTS,
            "per_step": {size: None if s is None else s[2] for size, s in spreads.items()},
            "range": {size: None if s is None else [s[0], s[1]] for size, s in spreads.items()}}


if __name__ == "__main__":  # the program instructions_per_step counts: SIZE RUNS (RUNS=0: prepared, not run)
    size_arg, runs_arg = int(sys.argv[1]), int(sys.argv[2])
    run_once(100, size_arg)
    for _ in range(2):
        prepared = prepare(COUNTED_STEPS, size_arg)
        if runs_arg:
            execute(*prepared)
