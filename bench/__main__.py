"""``python -m bench``: run the benchmark sections, then write docs/benchmarks.md and docs/bench/*.png.

    .venv/bin/python -m bench                      # everything (what `make bench` runs)
    .venv/bin/python -m bench --only steps,sweep   # some sections; the others come from bench/.results/
                                                   # (none there: docs/benchmarks.md is left as it is)
    .venv/bin/python -m bench --report-only        # re-render from the cached results
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path
from typing import Any

from . import report

SECTIONS = ["steps", "sweep", "overhead", "ledger", "history", "code", "coldstart", "local", "fanout", "recovery", "lite",
            "chaos"]
CACHE = Path(__file__).resolve().parent / ".results"


def say(message: str) -> None:
    print(message, flush=True)


def run_section(name: str, quick: bool) -> dict[str, Any]:
    if name == "steps":
        from . import steps

        return steps.measure(n_steps=5, repeats=1 if quick else 3, progress=say)
    if name == "sweep":
        from . import sweep

        return sweep.measure(repeats=1 if quick else 3, progress=say)
    if name == "overhead":
        from . import overhead

        return overhead.measure(repeats=3 if quick else 9, progress=say, instructions=not quick)
    if name == "ledger":
        from . import ledger

        return ledger.measure(executions=5 if quick else 20, repeats=3 if quick else 9, progress=say)
    if name == "history":
        from . import history

        return history.measure(repeats=1 if quick else 3, progress=say)
    if name == "code":
        from . import code

        return code.measure(repeats=1 if quick else 3, progress=say, instructions=not quick)
    if name == "coldstart":
        from . import coldstart

        return coldstart.measure(runs=3 if quick else 7, progress=say)
    if name == "local":
        from . import local

        return local.measure(progress=say, quick=quick)
    if name == "recovery":
        from . import recovery

        return recovery.measure(progress=say, quick=quick)
    if name == "chaos":
        from . import chaos

        return chaos.measure(progress=say, quick=quick)
    if name == "fanout":
        from . import fanout

        return fanout.measure_cases(fanout.CASES[:1] if quick else fanout.CASES, progress=say)
    if name == "lite":
        from . import lite

        return lite.measure(repeats=1 if quick else 3, progress=say, quick=quick)
    raise ValueError(name)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="", help=f"comma-separated sections: {', '.join(SECTIONS)}")
    parser.add_argument("--skip", default="", help="comma-separated sections not to run (cached results are kept)")
    parser.add_argument("--quick", action="store_true", help="fewer repeats (for a smoke run, not for the report)")
    parser.add_argument("--report-only", action="store_true", help="render docs/benchmarks.md from cached results")
    args = parser.parse_args(argv)
    logging.getLogger("engine_core").setLevel(logging.ERROR)  # the engine's step logs are not the bench's output

    chosen = [s.strip() for s in args.only.split(",") if s.strip()] or list(SECTIONS)
    skipped = {s.strip() for s in args.skip.split(",") if s.strip()}
    unknown = [s for s in chosen + list(skipped) if s not in SECTIONS]
    if unknown:
        parser.error(f"unknown section(s): {', '.join(unknown)}")
    CACHE.mkdir(exist_ok=True)
    if not args.report_only:
        for name in chosen:
            if name in skipped:
                continue
            say(f"== {name}")
            t0 = time.perf_counter()
            result = run_section(name, args.quick)
            result["_seconds"] = round(time.perf_counter() - t0, 1)
            (CACHE / f"{name}.json").write_text(json.dumps(result, indent=1, default=str))
            say(f"   {name} done in {time.perf_counter() - t0:.0f} s")
    results: dict[str, Any] = {}
    for name in SECTIONS:
        path = CACHE / f"{name}.json"
        if path.exists():
            results[name] = json.loads(path.read_text())
    timings = ", ".join(f"{n} {results[n].get('_seconds', '?')} s" for n in SECTIONS if n in results)
    results["meta"] = {**report.meta(), "timings": timings}
    missing = [n for n in SECTIONS if n not in results]
    if missing:  # a section run alone on a checkout whose cache lacks the others: the report would lose them
        partial = CACHE / "benchmarks.partial.md"
        partial.write_text(report.render(results))
        say(f"{report.DOC.relative_to(report.ROOT)} left as it is: no results here for {', '.join(missing)} (a fresh "
            f"checkout keeps none), and the report from these alone would drop their sections. This run's report "
            f"is {partial.relative_to(report.ROOT)}; `make bench` runs every section and writes the whole report")
        return 0
    report.DOC.parent.mkdir(parents=True, exist_ok=True)
    report.DOC.write_text(report.render(results))
    written = report.charts(results)
    say(f"wrote {report.DOC.relative_to(report.ROOT)} and {len(written)} charts in "
        f"{report.CHARTS.relative_to(report.ROOT)}/")
    ledger = results.get("ledger")
    if not args.report_only and "ledger" in chosen and "ledger" not in skipped and ledger is not None \
            and not ledger.get("all_within_tolerance"):
        say("FAILED: an execution's cost ledger is off the wire's counts by more than "
            f"{ledger['tolerance'] * 100:g}% (docs/benchmarks.md, \"The cost ledger against the wire\")")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
