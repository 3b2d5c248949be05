"""One directory per stack run, so nothing one run writes is read as another's.

    RUN_DIR/runs/<run id>/logs/      the functions' logs (one file per function), runtime.log, moto.log
    RUN_DIR/runs/<run id>/faults/    crash points armed, claimed and fired in this run
    RUN_DIR/runs/<run id>/calls/     the AWS calls of Loom's principals (loom_local.calls)
    RUN_DIR/current -> runs/<run id> the newest run
    RUN_DIR/logs    -> current/logs  (where `make up` has always said the logs are)

A run id is the UTC start time (to the microsecond) plus the runtime's pid
(``20261201T184702.123456Z-4242``), so ids sort by start and two stacks of one process never share one. The newest :data:`KEEP` runs are kept; older ones are deleted when a new one starts.
"""

from __future__ import annotations

import datetime as dt
import os
import shutil
from pathlib import Path

KEEP = 5
RUNS = "runs"
CURRENT = "current"


def new_run_id() -> str:
    return f"{dt.datetime.now(dt.timezone.utc):%Y%m%dT%H%M%S.%fZ}-{os.getpid()}"


def _symlink(link: Path, target: str) -> None:
    """Point ``link`` at ``target`` atomically (a rename over the old link)."""
    tmp = link.with_name(f".{link.name}.{os.getpid()}.tmp")
    tmp.unlink(missing_ok=True)
    os.symlink(target, tmp)
    os.replace(tmp, link)


def start_run(run_dir: Path, run_id: str | None = None) -> Path:
    """Create this run's directory, make it ``current``, and delete all but the newest :data:`KEEP` runs.

    ``run_id`` names it (``make up`` picks one before its runtime starts, to put runtime.log there);
    without one, a new id is made.
    """
    given = run_id is not None
    runs = run_dir / RUNS
    while run_id is None or (runs / run_id).exists() and not given:
        given, run_id = False, new_run_id()  # a fresh id is never an existing run's
    stack_dir = runs / run_id
    for sub in ("logs", "faults", "calls"):
        (stack_dir / sub).mkdir(parents=True, exist_ok=True)
    for name, target in ((CURRENT, f"{RUNS}/{run_id}"), ("logs", f"{CURRENT}/logs")):
        link = run_dir / name
        if link.is_dir() and not link.is_symlink():  # a real directory (the layout before runs/): keep it aside
            link.rename(runs / f"00000000T000000Z-{name}-{os.getpid()}")
        _symlink(link, target)
    for old in sorted(p for p in runs.iterdir() if p.is_dir())[:-KEEP]:
        if old != stack_dir:
            shutil.rmtree(old, ignore_errors=True)
    return stack_dir
