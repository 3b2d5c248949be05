"""Run seeds: one in-process, or many across worker processes, with a replay line for each failure."""

from __future__ import annotations

import logging
import re
import multiprocessing
import os
import time
from collections import Counter
from dataclasses import dataclass, field

from .checks import check_run
from .sim import Simulation, make_config

SIM_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REPO = os.path.abspath(os.path.join(SIM_DIR, "..", "..", "..", ".."))


def replay_command(seed: int) -> str:
    return f"make soak SEED={seed}"


def replay_python(seed: int) -> str:
    script = os.path.relpath(os.path.join(SIM_DIR, "sim_main.py"), REPO)
    return f".venv/bin/python {script} --seed {seed} --trace"


@dataclass
class SimResult:
    seed: int
    violations: list[str]
    stats: Counter
    seconds: float
    trace: list[str] = field(default_factory=list)
    describe: str = ""
    digest: str = ""
    known: list[str] = field(default_factory=list)
    """Known engine defects seen (checks.KNOWN_DEFECTS): reported, not violations."""

    @property
    def ok(self) -> bool:
        return not self.violations

    def report(self, trace_tail: int = 80) -> str:
        lines = [f"seed {self.seed} FAILED -- replay: {replay_command(self.seed)}   (or: {replay_python(self.seed)})"]
        lines += [f"  - {text}" for text in self.violations[:12]]
        if len(self.violations) > 12:
            lines.append(f"  ... and {len(self.violations) - 12} more")
        if self.trace:
            eid = re.match(r"^([0-9a-f]{8}) ", self.violations[0])
            focus = focused_trace(self.trace, eid.group(1)) if eid else self.trace
            what = f"operations on {eid.group(1)}" if eid else "trace lines"
            lines.append(f"  last {min(trace_tail, len(focus))} {what} (the full trace: --trace):")
            lines += [f"    {t}" for t in focus[-trace_tail:]]
        return "\n".join(lines)


_HEADER = re.compile(r"^\s*[\d.]+s\s+(deliver|sweep|start|queue:|==)")
_MARK = re.compile(r"^\s*[\d.]+s\s+(->|\*\*|~~|body|!!)")


def focused_trace(trace: list[str], eid: str) -> list[str]:
    """The operations that touched one execution: each one's lines about it, its outcome, crashes and
    pauses (nested operations appear indented inside the one that paused)."""
    blocks: list[list[str]] = []
    for line in trace:
        if _HEADER.match(line) or not blocks:
            blocks.append([line])
        else:
            blocks[-1].append(line)
    out = []
    for block in blocks:
        if any(eid in line for line in block):
            out.append(block[0])
            out += [line for line in block[1:] if eid in line or _MARK.match(line)]
    return out


class _Quiet:
    """Engine logging off during runs (the simulation keeps its own trace)."""

    def __enter__(self):
        self.logger = logging.getLogger("engine_core")
        self.level, self.propagate = self.logger.level, self.logger.propagate
        self.logger.setLevel(logging.CRITICAL + 1)
        return self

    def __exit__(self, *exc):
        self.logger.setLevel(self.level)


def finish_script(sim: Simulation) -> list[str]:
    """A hand-scripted run's end: the quiet phase, the checks, and the violations (scripts are short on purpose,
    so "the run says nothing" is not one)."""
    sim.__dict__.pop("plan", None)
    sim.quiet_phase()
    check_run(sim)
    return [v for v in sim.violations if "the run says nothing" not in v]


def script_report(sim: Simulation, violations: list[str]) -> str:
    """The violations of a hand-scripted run, then the operations on its first execution."""
    eid = sim.planned[0].eid or ""
    return "\n".join(violations + [f"operations on {eid[:8]}:"] + focused_trace(sim.trace, eid[:8])[:60])


def run_seed(seed: int, tracing: bool = False, store_factory=None, **overrides) -> SimResult:
    import hashlib

    from engine_core.adapters.memory import MemoryStore

    config = make_config(seed, **overrides)
    started = time.perf_counter()
    with _Quiet():
        sim = Simulation(config, store_factory or MemoryStore, tracing=tracing)
        sim.run()
    elapsed = time.perf_counter() - started
    digest = hashlib.sha256("\n".join(sim.trace).encode()).hexdigest()[:16] if tracing else ""
    return SimResult(seed, list(sim.violations), sim.stats, elapsed, sim.trace, config.describe(), digest,
                     list(sim.known))


def _run_chunk(args) -> list[SimResult]:
    seeds, store_kind = args
    factory = None
    if store_kind:
        from .world import broken_store_class

        factory = broken_store_class(store_kind)
    out = []
    for seed in seeds:
        r = run_seed(seed, store_factory=factory)
        if not r.ok:  # deterministic: run it again with the trace on, for the report
            r = run_seed(seed, tracing=True, store_factory=factory)
        else:
            r.trace = []
        out.append(r)
    return out


def run_many(seeds: list[int], jobs: int = 0, store_kind: str | None = None, chunk: int = 25,
             progress=None) -> list[SimResult]:
    """Every seed, across ``jobs`` processes (default: one per CPU, at most 2 here)."""
    jobs = jobs or min(2, os.cpu_count() or 1)
    chunks = [(seeds[i:i + chunk], store_kind) for i in range(0, len(seeds), chunk)]
    results: list[SimResult] = []
    if jobs == 1 or len(chunks) == 1:
        for c in chunks:
            results += _run_chunk(c)
            if progress:
                progress(results)
        return results
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(jobs) as pool:
        for part in pool.imap_unordered(_run_chunk, chunks):
            results += part
            if progress:
                progress(results)
    results.sort(key=lambda r: r.seed)
    return results


def summarize(results: list[SimResult]) -> Counter:
    total: Counter = Counter()
    for r in results:
        total.update(r.stats)
    return total
