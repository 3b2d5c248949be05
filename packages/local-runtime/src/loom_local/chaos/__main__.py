"""``python -m loom_local.chaos``: a fresh local stack, a chaos run of each profile asked for, its report.

    python -m loom_local.chaos --profile faults --seed 1          # what `make chaos` runs
    python -m loom_local.chaos --profile backlog --count 300      # 300 starts in 45 s, no faults
    python -m loom_local.chaos --check .loom/chaos/current/chaos-faults.json   # check a recorded run again

Exit status: 0 when every invariant held, 1 when one did not (the report lists each violation), 2 when
the run could not be made. A missed speed goal is printed, not an exit status.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from ..options import options_from, stack_args
from . import figures, invariants, report
from .config import PROFILES, profile


def analyse(record: dict[str, Any]) -> tuple[dict[str, Any], list[dict[str, Any]], str]:
    """The figures, the violations and the report of one recorded run."""
    found = invariants.check(record)
    measured = figures.measure(record)
    return measured, found, report.render(measured, found)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m loom_local.chaos", description=__doc__.splitlines()[0])
    stack_args(p)
    p.add_argument("--profile", choices=[*PROFILES, "both"], default="faults", help="faults (default), backlog, both")
    p.add_argument("--seed", type=int, default=1, help="the load plan's seed (default 1)")
    p.add_argument("--count", type=int, default=None, help="executions per profile (default: faults 150, backlog 300)")
    p.add_argument("--duration", type=float, default=None, metavar="SECONDS",
                   help="bound on each run from its first start (default: faults 900, backlog 1200)")
    p.add_argument("--start-window", type=float, default=None, metavar="SECONDS",
                   help="spread the starts over this long (default: faults 0.4 s, backlog 0.15 s per execution)")
    p.add_argument("--drain", type=float, default=None, metavar="SECONDS",
                   help="after the last execution ended, wait at most this long for the queue to empty "
                        "(default: the visibility timeout + 30 s)")
    p.add_argument("--check", type=Path, default=None, metavar="RECORD",
                   help="do not run: check and report a recorded run (a chaos-<profile>.json)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.check is not None:
        try:
            record = json.loads(args.check.read_text())
        except (OSError, ValueError) as exc:
            print(f"cannot read the recorded run {args.check}: {exc}", file=sys.stderr)
            return 2
        _, found, text = analyse(record)
        print(text)
        return 1 if found else 0
    names = list(PROFILES) if args.profile == "both" else [args.profile]
    if args.count is not None and args.count < 1:
        print(f"--count must be at least 1, got {args.count}", file=sys.stderr)
        return 2
    configs = [profile(n, seed=args.seed, count=args.count, duration_s=args.duration,
                       start_window_s=args.start_window) for n in names]
    if args.run_dir is None:
        args.run_dir = args.repo.resolve() / ".loom" / "chaos"  # its own runs: `make up`'s current stays put
    options = options_from(args)
    from ..stack import StackError
    from ..terraform import TerraformError
    from .session import run_profiles

    try:
        records, where = run_profiles(options, configs, progress=options.progress or print, drain_s=args.drain)
    except (StackError, TerraformError) as exc:
        print(f"the chaos run could not start the local stack: {exc}", file=sys.stderr)
        return 2
    failed = False
    for record in records:
        measured, found, text = analyse(record)
        name = record["plan"]["config"]["profile"]
        (where / f"chaos-{name}-report.json").write_text(json.dumps({"figures": measured, "violations": found},
                                                                    indent=1, default=str))
        print(text + "\n")
        failed = failed or bool(found)
    print(f"records and reports: {where}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
