"""Running composition seeds: one in-process (with its trace when asked), or many across processes."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from engine_core.adapters.memory import MemoryStore
from engine_core.kinds import KINDS

from .composition import CompositionSim
from .composition_broken import BROKEN_ENGINES, BROKEN_KINDS, broken_kinds, broken_store_class
from .composition_checks import check_composition
from .composition_config import make_config


@dataclass
class CompResult:
    seed: int
    violations: list[str]
    stats: Counter
    seconds: float
    trace: list[str] = field(default_factory=list)
    describe: str = ""
    digest: str = ""

    @property
    def ok(self) -> bool:
        return not self.violations

    def report(self, tail: int = 60) -> str:
        from .runner import focused_trace
        import re

        lines = [f"composition seed {self.seed} FAILED -- replay: make soak-composition SEED={self.seed}"]
        lines += [f"  - {v}" for v in self.violations[:10]]
        if self.trace:
            m = re.match(r"^([0-9a-f]{8})", self.violations[0])
            focus = focused_trace(self.trace, m.group(1)) if m else self.trace
            lines += [f"    {t}" for t in focus[-tail:]]
        return "\n".join(lines)


def run_seed(seed: int, tracing: bool = False, store_factory=None, broken: str | None = None,
             **overrides) -> CompResult:
    """One seed, checked. ``broken`` names a deliberately broken store (``BROKEN_KINDS``) or engine
    (``BROKEN_ENGINES``) to run against instead."""
    import hashlib
    import time

    from .runner import _Quiet

    if broken in BROKEN_KINDS:
        store_factory = broken_store_class(broken)
    kinds = broken_kinds(broken) if broken in BROKEN_ENGINES else KINDS
    config = make_config(seed, **overrides)
    started = time.perf_counter()
    with _Quiet():
        sim = CompositionSim(config, store_factory or MemoryStore, tracing=tracing, kinds=kinds)
        sim.run()
        check_composition(sim)
    digest = hashlib.sha256("\n".join(sim.trace).encode()).hexdigest()[:16] if tracing else ""
    return CompResult(seed, list(sim.violations), sim.stats, time.perf_counter() - started, sim.trace,
                      config.describe(), digest)


def _run_chunk(args) -> list[CompResult]:
    seeds, broken = args
    out = []
    for seed in seeds:
        r = run_seed(seed, broken=broken)
        if not r.ok:
            r = run_seed(seed, tracing=True, broken=broken)
        out.append(r)
    return out


def run_many(seeds: list[int], jobs: int = 0, broken: str | None = None, chunk: int = 20) -> list[CompResult]:
    import multiprocessing
    import os

    jobs = jobs or min(2, os.cpu_count() or 1)
    chunks = [(seeds[i:i + chunk], broken) for i in range(0, len(seeds), chunk)]
    if jobs == 1 or len(chunks) == 1:
        return [r for c in chunks for r in _run_chunk(c)]
    with multiprocessing.get_context("fork").Pool(jobs) as pool:
        results = [r for part in pool.imap_unordered(_run_chunk, chunks) for r in part]
    return sorted(results, key=lambda r: r.seed)
