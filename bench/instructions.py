"""Instructions counted by valgrind's callgrind: a figure that other work on the machine does not move, for
before-and-after comparisons of the step path (CPU time on a shared 2-core machine moves 30% and more
between runs).

A section runs a program of its own (``python -m bench.<section> ...``) twice, once with its measured
work and once without, and divides the difference by the steps the work ran: imports, warm-up and the
work's setup (building its registry and engine, collecting and freezing the heap), done alike in both,
cancel out (``bench.overhead``, ``bench.code``).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from . import layout as layout_program

ROOT = Path(__file__).resolve().parent.parent
NOT_INSTALLED = {"status": "not measured: valgrind is not installed"}
TOOL = "valgrind --tool=callgrind"
LAYOUTS = 3
"""Memory layouts each program is counted in (``bench/layout.py``): the figure is their mean."""
_COLLECTED = re.compile(r"Collected\s*:\s*(\d+)")


def available() -> bool:
    return shutil.which("valgrind") is not None


def count(module: str, *args: object, layout: int = 0) -> int | None:
    """Instructions of ``python -m module args`` under callgrind, in memory layout ``layout``
    (``bench/layout.py``; None: it failed)."""
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    done = subprocess.run(["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", sys.executable, "-m",
                           layout_program.__name__, str(layout), module, *map(str, args)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800)
    found = _COLLECTED.search(done.stderr)
    return int(found.group(1)) if done.returncode == 0 and found else None


def compile_sources() -> None:
    """Byte-compile the engine and the bench before counting. Two programs counted at once would otherwise
    race to compile a source file changed since its last import: the one that compiles it counts a few
    million instructions the other does not (3-4% of a 100-step count)."""
    import compileall

    import engine_core

    for where in (Path(engine_core.__file__).parent, ROOT / "bench"):
        compileall.compile_dir(str(where), quiet=2)


def count_all(commands: list[tuple[object, ...]], layouts: int = LAYOUTS) -> list[list[int] | None]:
    """``count(*command)`` for each command in each of ``layouts`` memory layouts, two at a time (one per
    core here), the sources compiled first: a list of counts per command (None: a count failed)."""
    compile_sources()
    jobs = [(command, layout) for command in commands for layout in range(layouts)]
    with ThreadPoolExecutor(max_workers=2) as pool:
        counts = list(pool.map(lambda job: count(*job[0], layout=job[1]), jobs))
    out: list[list[int] | None] = []
    for i in range(len(commands)):
        mine = counts[i * layouts:(i + 1) * layouts]
        out.append(None if any(c is None for c in mine) else [c for c in mine if c is not None])
    return out


def per_unit(with_work: list[int] | None, without: list[int] | None, units: int) -> float | None:
    """The work's instructions per unit: the mean over layouts of (with - without) / units."""
    spread = per_unit_range(with_work, without, units)
    return None if spread is None else spread[2]


def per_unit_range(with_work: list[int] | None, without: list[int] | None,
                   units: int) -> tuple[float, float, float] | None:
    """(lowest, highest, mean) over layouts of the work's instructions per unit."""
    if not with_work or not without or len(with_work) != len(without):
        return None
    each = [(w - wo) / units for w, wo in zip(with_work, without)]
    return min(each), max(each), sum(each) / len(each)
