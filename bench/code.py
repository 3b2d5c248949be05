"""Code-first beside step lists: the same steps written both ways (``engine_core.durable`` and
``@workflow``), measured the same way.

- On the wire (the real Engine on DynamoStore + SqsQueue over moto, the poller of ``steps.py``): marginal
  requests, write units and read units per step, ``n`` steps minus one, divided by ``n - 1``.
- Engine CPU per step (``time.process_time``, memory store): a 100-step and a 1,000-step execution,
  chained (100 steps a delivery, the default) and one step a delivery, where a code-first delivery
  replays every recorded step before running the next (its whole history is read and decoded again).
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

from engine_core import Engine, EngineSettings, ManualClock, Registry, faults
from engine_core.adapters.memory import MemoryStore
from engine_core.durable import durable
from engine_core.durable import step as durable_step
from engine_core.registry import build_workflow
from engine_core.testing import FakeQueue

from . import instructions as counted
from . import overhead
from .steps import WORKFLOW, _lin, _median_runs, _summary, payload_for, run_executions
from .world import aws_world

STYLES = ["steps", "code"]
RESULT_BYTES = 1024
CPU_CASES = [(100, 100), (1000, 100), (100, 1)]
"""(steps, steps a delivery)."""
CPU_RUNS = 21
"""Runs of each style per case for the CPU figures (the fastest counts): a run takes a tenth of a second or less,
and with 7 the fastest of a case still moved by 3% between runs of the command."""


def registry_for(style: str, n_steps: int, result_bytes: int = RESULT_BYTES) -> Registry:
    """``n_steps`` steps returning ``result_bytes`` each, as a step list or as a code-first function."""
    payload = payload_for(result_bytes)
    registry = Registry()
    if style == "steps":
        def make(index: int) -> Callable:
            def body(ctx):
                return {"payload": payload}

            body.__name__ = f"step_{index:04d}"
            return body

        registry.register(build_workflow(WORKFLOW, [make(i) for i in range(n_steps)], source="bench.code"))
        return registry

    def one() -> dict[str, str]:
        return {"payload": payload}

    names = [f"step_{i:04d}" for i in range(n_steps)]  # built once, as the step list's are

    @durable(WORKFLOW, registry=registry)
    def flow(input: dict[str, Any]) -> None:
        for name in names:
            durable_step(name, one)

    return registry


def wire(n_steps: int = 5, repeats: int = 3, progress: Callable[[str], None] = print) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for style in STYLES:
        runs = []
        for _ in range(repeats):
            with aws_world() as world:
                one = run_executions(world, registry_for(style, 1))
                many = run_executions(world, registry_for(style, n_steps))
            runs.append(_lin(_summary(many.calls), _summary(one.calls), -1, n_steps - 1))
        per_step, same = _median_runs(runs)
        out[style] = {"per_step": per_step, "runs_identical": same}
        progress(f"  code: {style}: {per_step['aws_requests']:.2f} requests, {per_step['write_units']:.2f} write "
                 f"units, {per_step['rcu']:.2f} read units per step")
    return out


def prepare(style: str, n_steps: int, chain: int) -> tuple[Engine, FakeQueue]:
    """An engine on the memory store with the workflow of ``style`` registered, the heap collected."""
    registry = registry_for(style, n_steps)
    clock = ManualClock()
    queue = FakeQueue(clock)
    engine = Engine(MemoryStore(), queue, registry, clock,
                    EngineSettings(max_chain_steps=chain, max_steps=max(1000, n_steps + 1)))
    overhead.settle_heap()
    return engine, queue


def cpu_once(style: str, n_steps: int, chain: int) -> float:
    """Engine CPU seconds for one execution of ``n_steps`` steps, start to COMPLETED."""
    return execute(*prepare(style, n_steps, chain))


def execute(engine: Engine, queue: FakeQueue) -> float:
    """Start the workflow on ``engine`` and drive it to COMPLETED (the overhead section's loop): CPU seconds."""
    return overhead.execute(engine, queue, WORKFLOW)["cpu_s"]


def cpu(repeats: int = 5, progress: Callable[[str], None] = print) -> list[dict[str, Any]]:
    rows = []
    for n_steps, chain in CPU_CASES:
        row: dict[str, Any] = {"steps": n_steps, "chain": chain}
        # The styles take turns, run after run, so a change in the machine's load reaches both alike.
        seconds: dict[str, list[float]] = {style: [] for style in STYLES}
        for _ in range(repeats):
            for style in STYLES:
                seconds[style].append(cpu_once(style, n_steps, chain))
        for style in STYLES:  # the fastest run: the one other work on the machine disturbed least
            row[f"{style}_us_per_step"] = min(seconds[style]) / n_steps * 1e6
            row[f"{style}_median_us_per_step"] = statistics.median(seconds[style]) / n_steps * 1e6
        row["fastest_ratio"] = row["code_us_per_step"] / row["steps_us_per_step"]
        # The ratio judged: each code-first run against the step list's run just before it, the median of those.
        # A burst of other work moves a pair or two; the fastest of each style alone swings with one lucky run
        # (1.08x to 1.14x between runs of the command, the code unchanged).
        row["ratio"] = statistics.median(c / s for c, s in zip(seconds["code"], seconds["steps"]))
        rows.append(row)
        progress(f"  code: {n_steps} steps, {chain} a delivery: step list {row['steps_us_per_step']:.0f} us, "
                 f"code-first {row['code_us_per_step']:.0f} us per step (fastest {row['fastest_ratio']:.2f}x; "
                 f"paired runs {row['ratio']:.2f}x)")
    return rows


def deliveries_cpu(style: str, n_steps: int, chain: int = 1) -> list[float]:
    """Engine CPU seconds of each delivery of one execution of ``n_steps`` steps, ``chain`` a delivery, up to
    the moment its first step's body starts (``faults``' ``step.enter``): the read, the replay and the claim.
    Delivery k of a code-first execution replays the k * ``chain`` positions recorded before it; the bodies
    and the commits after them, the same work in every delivery, are left out, and so is their noise."""
    engine, queue = prepare(style, n_steps, chain)
    engine.start(WORKFLOW, {})
    overhead.settle_heap()  # again: the start's objects too, as a worker's heap is before its delivery
    times: list[float] = []
    entered: list[float] = []

    def first_body(point: str, _: dict) -> None:
        if point == "step.enter" and not entered:
            entered.append(time.process_time())

    faults.install(first_body)
    try:
        while batch := queue.receive():
            for message in batch:
                entered.clear()
                started = time.process_time()
                engine.process(message.body)
                if entered:  # the last delivery only returns: it runs no body
                    times.append(entered[0] - started)
                queue.ack(message)
    finally:
        faults.install(None)
    return times


def _line(ys: list[float]) -> tuple[float, float]:
    """Least-squares intercept and slope of ``ys`` against their index."""
    n = len(ys)
    mx, my = (n - 1) / 2, sum(ys) / n
    slope = sum((x - mx) * (y - my) for x, y in enumerate(ys)) / sum((x - mx) ** 2 for x in range(n))
    return my - slope * mx, slope


REPLAY_CASES = [(100, 1), (1000, 100)]
"""The CPU cases whose deliveries replay (steps, steps a delivery): each gets its own fit, since a position
replayed among 1,000 costs more than one among 100 (the history's objects outgrow the processor's caches)."""


def replay(cases: list[tuple[int, int]] = REPLAY_CASES, repeats: int = 5,
           progress: Callable[[str], None] = print) -> dict[str, Any]:
    """What a replayed position costs, case by case: each delivery's CPU up to its first step's body against
    the positions the delivery replays (the median of ``repeats`` executions, delivery by delivery, then a
    straight line through them)."""
    out: dict[str, Any] = {"cases": []}
    for n_steps, chain in cases:
        row: dict[str, Any] = {"n_steps": n_steps, "chain": chain}
        for style in STYLES:
            runs = [deliveries_cpu(style, n_steps, chain) for _ in range(repeats)]
            per_delivery = [statistics.median(column) for column in zip(*runs)]
            intercept, slope = _line(per_delivery)
            row[style] = {"intercept_us": intercept * 1e6, "slope_us": slope * 1e6 / chain}
        out["cases"].append(row)
        progress(f"  code: {n_steps} steps, {chain} a delivery: a replayed position costs "
                 f"{row['code']['slope_us']:.2f} us (step list: {row['steps']['slope_us']:+.2f} us a recorded step); "
                 f"a delivery costs {row['code']['intercept_us']:.0f} us (step list {row['steps']['intercept_us']:.0f} us) "
                 "up to its first step's body, with nothing to replay")
    return out


def replayed_per_step(n_steps: int, chain: int) -> float:
    """Recorded positions a code-first execution's deliveries replay, per step (delivery k replays the
    k * chain positions before it; a delivery that ends in the function's return replays nothing more)."""
    deliveries = -(-n_steps // chain)
    return sum(k * chain for k in range(deliveries)) / n_steps


def measure(repeats: int = 3, progress: Callable[[str], None] = print, instructions: bool = True) -> dict[str, Any]:
    out = {"result_bytes": RESULT_BYTES, "wire": wire(repeats=repeats, progress=progress),
           "cpu": cpu(repeats=CPU_RUNS if repeats > 1 else 7, progress=progress),
           "replay": replay(repeats=max(3, repeats + 2), progress=progress)}
    if instructions:
        progress("  code: counting instructions per step under valgrind (a few minutes)")
        out["instructions"] = instructions_per_step(CPU_CASES)
        progress(f"  code: instructions {out['instructions']}")
    return out


def instructions_per_step(cases: list[tuple[int, int]]) -> dict[str, Any]:
    """Instructions per step of one execution of each style for each (steps, steps a delivery), under
    callgrind: this module run as a program that prepares the execution (registry, engine, the heap
    collected and frozen) and runs it, and as one that prepares it alike and does not run it (a 20-step one
    warms up both): the difference is the execution alone, not the building of either style's registry.
    Each program is counted in ``instructions.LAYOUTS`` memory layouts (``bench/layout.py``): the mean, and
    the lowest and highest."""
    if not counted.available():
        return dict(counted.NOT_INSTALLED)
    jobs = [("bench.code", style, n, chain, runs) for n, chain in cases for style in STYLES for runs in (0, 1)]
    counts = dict(zip(jobs, counted.count_all(jobs)))
    rows = []
    for n, chain in cases:
        row: dict[str, Any] = {"steps": n, "chain": chain}
        for style in STYLES:
            spread = counted.per_unit_range(counts[("bench.code", style, n, chain, 1)],
                                            counts[("bench.code", style, n, chain, 0)], n)
            row[f"{style}_per_step"] = None if spread is None else spread[2]
            row[f"{style}_range"] = None if spread is None else [spread[0], spread[1]]
        rows.append(row)
    return {"status": "measured", "tool": counted.TOOL, "layouts": counted.LAYOUTS, "rows": rows}


def verdict(results: dict[str, Any], tolerance: float = 0.10) -> dict[str, Any]:
    """Whether code-first stays within ``tolerance`` of the step list, figure by figure."""
    wire_steps, wire_code = results["wire"]["steps"]["per_step"], results["wire"]["code"]["per_step"]
    figures = {name: (wire_steps[name], wire_code[name]) for name in ("aws_requests", "write_units", "rcu")}
    paired: dict[str, float] = {}
    for row in results["cpu"]:
        name = f"cpu {row['steps']} steps, {row['chain']} a delivery"
        figures[name] = (row["steps_us_per_step"], row["code_us_per_step"])
        if "fastest_ratio" in row:  # measured in pairs (``cpu``): their median ratio is the one judged
            paired[name] = row["ratio"]
    for row in (results.get("instructions") or {}).get("rows", []):
        if row.get("steps_per_step") and row.get("code_per_step") is not None:
            figures[f"instructions {row['steps']} steps, {row['chain']} a delivery"] = (row["steps_per_step"],
                                                                                       row["code_per_step"])
    out = {}
    for name, (a, b) in figures.items():
        fastest = (b / a) if a else (1.0 if b == a else float("inf"))
        ratio = paired.get(name, fastest)
        out[name] = {"steps": a, "code": b, "ratio": ratio, "within": abs(ratio - 1.0) <= tolerance,
                     **({"fastest_ratio": fastest} if name in paired else {})}
    return out


if __name__ == "__main__":  # the program instructions_per_step counts: STYLE STEPS CHAIN RUNS (0: prepared, not run)
    style_arg, n_arg, chain_arg, runs_arg = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    cpu_once(style_arg, 20, chain_arg)
    prepared = prepare(style_arg, n_arg, chain_arg)
    if runs_arg:
        execute(*prepared)
