"""Instructions per step, counted by valgrind's callgrind: a figure that other work on the machine does not
move, for before-and-after comparisons of the step path (CPU time on a shared 2-core machine moves 30% and
more between runs).

``python -m bench.instructions SIZE RUNS`` is the measured program: one 100-step execution to warm up,
then ``RUNS`` executions of ``STEPS`` steps (``bench.overhead.run_once``). Each size is counted at
``RUNS`` = 0 and 2; the difference over ``2 * STEPS`` steps is what a step costs, imports and warm-up
left out. ``python -m bench.instructions code STYLE N CHAIN RUNS`` does the same for the code-first
section's executions (``bench.code.cpu_once``), counted at ``RUNS`` = 0 and 1.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
STEPS = 500
_COLLECTED = re.compile(r"Collected\s*:\s*(\d+)")


def _count(*args: object) -> int | None:
    """Instructions of one run of this module's program under callgrind (None: it failed)."""
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    done = subprocess.run(["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", sys.executable, "-m",
                           "bench.instructions", *map(str, args)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800)
    found = _COLLECTED.search(done.stderr)
    return int(found.group(1)) if done.returncode == 0 and found else None


def measure(sizes: list[int]) -> dict[str, Any]:
    """Instructions per step for each result size, or why not (no valgrind here)."""
    if shutil.which("valgrind") is None:
        return {"status": "not measured: valgrind is not installed"}
    jobs = [(size, runs) for size in sizes for runs in (0, 2)]
    with ThreadPoolExecutor(max_workers=2) as pool:
        counts = dict(zip(jobs, pool.map(lambda job: _count(*job), jobs)))
    out: dict[str, Any] = {"status": "measured", "tool": "valgrind --tool=callgrind", "steps": 2 * STEPS,
                           "per_step": {}}
    for size in sizes:
        base, more = counts[(size, 0)], counts[(size, 2)]
        out["per_step"][str(size)] = None if base is None or more is None else (more - base) / (2 * STEPS)
    return out


def measure_code(cases: list[tuple[int, int]], styles: list[str]) -> dict[str, Any]:
    """Instructions per step of one code-first and one step-list execution for each (steps, steps a delivery)."""
    if shutil.which("valgrind") is None:
        return {"status": "not measured: valgrind is not installed"}
    jobs = [(style, n, chain, runs) for n, chain in cases for style in styles for runs in (0, 1)]
    with ThreadPoolExecutor(max_workers=2) as pool:
        counts = dict(zip(jobs, pool.map(lambda job: _count("code", *job), jobs)))
    rows = []
    for n, chain in cases:
        row: dict[str, Any] = {"steps": n, "chain": chain}
        for style in styles:
            base, more = counts[(style, n, chain, 0)], counts[(style, n, chain, 1)]
            row[f"{style}_per_step"] = None if base is None or more is None else (more - base) / n
        rows.append(row)
    return {"status": "measured", "tool": "valgrind --tool=callgrind", "rows": rows}


def _program(size: int, runs: int) -> None:
    from bench.overhead import run_once

    run_once(100, size)
    for _ in range(runs):
        run_once(STEPS, size)


def _code_program(style: str, n: int, chain: int, runs: int) -> None:
    from bench.code import cpu_once

    cpu_once(style, 20, chain)
    for _ in range(runs):
        cpu_once(style, n, chain)


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    if sys.argv[1] == "code":
        _code_program(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]))
    else:
        _program(int(sys.argv[1]), int(sys.argv[2]))
