"""``make bench``'s ``lite`` section: Loom on its SQLite store beside DBOS Transact on SQLite, in the same run.

- **Per step at 1,000 steps**, each step one durable commit: wall and CPU time of one 1,000-step execution
  (``bench/lite_run.py``, a fresh process per run), Loom and DBOS alternating, ``repeats`` of each; the
  medians, and their ratio.
- **fsyncs per step**, counted by ``strace -f -c`` (fsync + fdatasync) around a 10-step and a 1,000-step run:
  the difference divided by 990, so startup, schema creation and the warm-up are not counted. Without
  strace on the machine the count is reported as not measured.
- **The fsync floor**: the median time of a 100-byte write plus ``fdatasync`` on a file in the same
  directory, sampled 50 times before each run; no durable step can cost less.
- **Growth**: Loom's time per step for 10, 100, 1,000 and 10,000 steps in one file (executions of at most
  1,000 steps, ``LOOM_MAX_STEPS``' cap: 10,000 steps are ten 1,000-step executions one after another).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

STEPS = 1000
GROWTH = [10, 100, 1000, 10000]
ROOT = Path(__file__).resolve().parents[1]


def run(engine: str, steps: int, executions: int, work: Path, strace_out: Path | None = None) -> dict[str, Any]:
    """One ``bench.lite_run`` process; its JSON line (and, with ``strace_out``, the syscall summary there)."""
    args = [sys.executable, "-m", "bench.lite_run", engine, "--steps", str(steps), "--executions", str(executions),
            "--dir", str(work)]
    if strace_out is not None:
        args = ["strace", "-f", "-c", "-e", "trace=fsync,fdatasync", "-o", str(strace_out), *args]
    done = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        raise RuntimeError(f"bench.lite_run {engine} --steps {steps} failed: {done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def strace_syncs(summary: str) -> int:
    """fsync + fdatasync calls in an ``strace -c`` summary (its table's ``calls`` column)."""
    total = 0
    for line in summary.splitlines():
        parts = line.split()
        if parts and parts[-1] in ("fsync", "fdatasync"):
            numbers = [p for p in parts[:-1] if re.fullmatch(r"\d+(\.\d+)?", p)]
            total += int(numbers[3])  # % time, seconds, usecs/call, calls[, errors]
    return total


def marginal(small: float, big: float, n_small: int, n_big: int) -> float:
    """What one more step costs: (the big run - the small run) / the steps between them."""
    return (big - small) / (n_big - n_small)


def fsync_samples_us(directory: Path, samples: int = 50) -> list[float]:
    path = directory / "floor.bin"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        os.write(fd, b"\0" * 4096 * 8)
        os.fsync(fd)
        times = []
        for i in range(samples):
            t = time.perf_counter()
            os.pwrite(fd, b"y" * 100, (i % 8) * 4096)
            os.fdatasync(fd)
            times.append(time.perf_counter() - t)
    finally:
        os.close(fd)
        path.unlink(missing_ok=True)
    return [t * 1e6 for t in times]


def _per_step(runs: list[dict[str, Any]]) -> dict[str, Any]:
    ms = [r["wall_s"] / r["steps"] * 1000 for r in runs]
    cpu = [r["cpu_s"] / r["steps"] * 1000 for r in runs]
    return {"per_step_ms": statistics.median(ms), "cpu_per_step_ms": statistics.median(cpu),
            "per_step_ms_runs": [round(x, 3) for x in ms]}


def measure(repeats: int = 3, progress: Callable[[str], None] = print, quick: bool = False) -> dict[str, Any]:
    import sqlite3

    import dbos

    work = Path(tempfile.mkdtemp(prefix="loom-bench-lite-"))
    try:
        out: dict[str, Any] = {"steps": STEPS, "repeats": repeats, "sqlite": sqlite3.sqlite_version,
                               "dbos_version": getattr(dbos, "__version__", None) or _dist_version("dbos")}
        floor: list[float] = []
        runs: dict[str, list] = {"loom": [], "dbos": []}
        for r in range(repeats):  # alternating, so both meet the same disk and the same neighbours
            for engine in ("loom", "dbos"):
                floor += fsync_samples_us(work)  # the floor is sampled between the runs it is compared with
                runs[engine].append(run(engine, STEPS, 1, work / f"{engine}-{r}"))
                progress(f"  lite: {engine} {STEPS} steps: {runs[engine][-1]['wall_s'] / STEPS * 1000:.2f} ms per step")
        out["fsync_floor_us"] = statistics.median(floor)
        progress(f"  lite: fsync floor {out['fsync_floor_us']:.0f} us (100 B write + fdatasync, median of "
                 f"{len(floor)} taken between the runs)")
        for engine in runs:
            out[engine] = _per_step(runs[engine])
        out["ratio"] = out["dbos"]["per_step_ms"] / out["loom"]["per_step_ms"]
        out["growth"] = []
        for n in GROWTH[:3] if quick else GROWTH:
            executions, steps = max(1, n // STEPS), min(n, STEPS)
            r = run("loom", steps, executions, work / f"growth-{n}")
            out["growth"].append({"steps": n, "executions": executions, **_per_step([r])})
            progress(f"  lite: growth {n} steps: {out['growth'][-1]['per_step_ms']:.2f} ms per step")
        out["fsyncs_per_step"] = _syncs(work, progress)
        return out
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _syncs(work: Path, progress: Callable[[str], None]) -> dict[str, float] | None:
    if shutil.which("strace") is None:
        progress("  lite: strace not found; fsyncs per step not measured")
        return None
    counts: dict[str, float] = {}
    for engine in ("loom", "dbos"):
        found = []
        for n in (10, STEPS):
            summary = work / f"strace-{engine}-{n}.txt"
            run(engine, n, 1, work / f"strace-{engine}-{n}", strace_out=summary)
            found.append(strace_syncs(summary.read_text()))
        counts[engine] = marginal(found[0], found[1], 10, STEPS)
        progress(f"  lite: {engine}: {counts[engine]:.2f} fsyncs per step (strace)")
    return counts


def _dist_version(name: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return None
