"""Instructions counted by valgrind's callgrind: a figure that other work on the machine does not move, for
before-and-after comparisons of the step path (CPU time on a shared 2-core machine moves 30% and more
between runs).

A section runs a program of its own (``python -m bench.<section> ...``) twice, once with its measured
work and once without, and divides the difference by the steps the work ran: imports, warm-up and the
work's setup (building its registry and engine, collecting the heap), done alike in both, cancel out
(``bench.overhead``, ``bench.code``).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NOT_INSTALLED = {"status": "not measured: valgrind is not installed"}
TOOL = "valgrind --tool=callgrind"
_COLLECTED = re.compile(r"Collected\s*:\s*(\d+)")


def available() -> bool:
    return shutil.which("valgrind") is not None


def count(module: str, *args: object) -> int | None:
    """Instructions of ``python -m module args`` under callgrind (None: it failed)."""
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    done = subprocess.run(["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", sys.executable, "-m",
                           module, *map(str, args)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800)
    found = _COLLECTED.search(done.stderr)
    return int(found.group(1)) if done.returncode == 0 and found else None


def count_all(commands: list[tuple[object, ...]]) -> list[int | None]:
    """``count(*command)`` for each command, two at a time (one per core here)."""
    with ThreadPoolExecutor(max_workers=2) as pool:
        return list(pool.map(lambda command: count(*command), commands))


def per_unit(with_work: int | None, without: int | None, units: int) -> float | None:
    return None if with_work is None or without is None else (with_work - without) / units
