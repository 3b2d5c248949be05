"""``loom dev``: Loom without AWS, for a package of workflows. One process runs the worker, the sweeper and
the API on 127.0.0.1 with everything in one SQLite file (the ``loom-lite`` package; ``python -m loom_lite``
is the same command). It records its URL where ``loom`` and ``LoomClient()`` look, so every other command
works against it from any directory.

    loom dev myflows              # import myflows (its @workflow classes register), serve until Ctrl-C
    loom dev --db /tmp/a.db       # another file; the default is .loom/loom.db under the current directory
"""

from __future__ import annotations

import argparse
import sys
from importlib.metadata import entry_points
from typing import Any

from .args import port, seconds

ENTRY_POINTS = "loom.dev"
"""The entry-point group a runtime for ``loom dev`` registers its ``serve(args)`` under (loom-lite does)."""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("modules", nargs="*", metavar="MODULE",
                   help="workflow modules to import (a module or package name, importable from the current directory, "
                        "or a .py file); installed packages with a loom.workflows entry point load too")
    p.add_argument("--db", help="the SQLite file (default: $LOOM_SQLITE_PATH, else .loom/loom.db); created if missing, "
                               "kept across runs")
    p.add_argument("--port", type=port, default=None, help="the API's port on 127.0.0.1 (default: a free one, printed)")
    p.add_argument("--sweep-every", type=seconds, default=None, metavar="SECONDS",
                   help="the sweeper's schedule (default 1 s)")
    p.add_argument("--no-record", action="store_true",
                   help="do not record the URL in the per-user state file (loom and LoomClient() then need --url)")
    p.add_argument("--no-entry-points", action="store_true",
                   help="load only the MODULEs named, not the installed loom.workflows packages")
    p.add_argument("--quiet", action="store_true", help="print no line per handled message")


DESCRIPTION = ("run Loom without AWS for a package of workflows: worker, sweeper and the API on 127.0.0.1, state in "
               "one SQLite file; Ctrl-C stops it (a killed run resumes where it stood)")
"""What ``loom dev --help`` and ``python -m loom_lite --help`` say the command does."""


def add_parser(sub: Any) -> None:
    d = sub.add_parser("dev", help=DESCRIPTION, description=DESCRIPTION)
    add_arguments(d)
    d.set_defaults(func=run, without_api=True)


def run(args: argparse.Namespace) -> int:
    """Serve through the runtime the ``loom.dev`` entry point names (loom-lite's), found when it is installed."""
    found = entry_points(group=ENTRY_POINTS, name="serve")
    if not found:
        print("loom: error: loom dev needs the loom-lite package, which provides the runtime; install it "
              "(pip install loom-lite; in this repository `make venv` installs it)", file=sys.stderr)
        return 2
    try:
        serve = next(iter(found)).load()
    except ImportError as exc:
        print(f"loom: error: loom-lite is installed but cannot be imported ({exc}); reinstall it", file=sys.stderr)
        return 2
    return serve(args)
