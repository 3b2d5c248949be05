"""The composition simulation (parallel, map, wait_for_event, compensation) from the command line:
``make soak-composition COMPOSITION_SEEDS=N`` or ``make soak-composition SEED=n`` (replay one, with its trace).

    .venv/bin/python packages/engine-core/tests/simulation/composition_main.py --seeds 3000 --jobs 2
    .venv/bin/python packages/engine-core/tests/simulation/composition_main.py --seed 147 --trace
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections import Counter

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from loomsim.composition_broken import BROKEN_ENGINES, BROKEN_KINDS  # noqa: E402
from loomsim.composition_runner import run_many, run_seed  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seed", type=int, help="replay one seed (its configuration, outcome and violations)")
    ap.add_argument("--trace", action="store_true", help="with --seed: print every operation")
    ap.add_argument("--seeds", type=int, default=1000, help="how many seeds (default 1000)")
    ap.add_argument("--first", type=int, default=0, help="first seed (default 0)")
    ap.add_argument("--jobs", type=int, default=0, help="worker processes (default: CPUs, at most 2)")
    ap.add_argument("--broken", choices=BROKEN_KINDS + BROKEN_ENGINES,
                    help="run against a deliberately broken store or engine")
    ap.add_argument("--digest", action="store_true", help="with --seed: print only the trace digest")
    args = ap.parse_args(argv)

    if args.seed is not None:
        r = run_seed(args.seed, tracing=True, broken=args.broken)
        if args.digest:
            print(r.digest)
            return 0 if r.ok else 1
        print(r.describe)
        if args.trace:
            print("\n".join(r.trace))
        print(f"\ncomposition seed {r.seed}: {'ok' if r.ok else 'FAILED'} in {r.seconds:.3f}s")
        for text in r.violations:
            print(f"  - {text}")
        return 0 if r.ok else 1

    seeds = list(range(args.first, args.first + args.seeds))
    started = time.perf_counter()
    results = run_many(seeds, jobs=args.jobs, broken=args.broken)
    elapsed = time.perf_counter() - started
    failed = [r for r in results if not r.ok]
    for r in failed[:10]:
        print(r.report(tail=40), "\n")
    stats: Counter = Counter()
    for r in results:
        stats.update(r.stats)
    outcomes = {k[8:]: n for k, n in sorted(stats.items()) if k.startswith("outcome.")}
    print(f"outcomes: {outcomes}")
    print(f"\n{len(results)} composition seeds ({args.first}..{args.first + args.seeds - 1}) in {elapsed:.1f}s: "
          f"{len(results) - len(failed)} passed, {len(failed)} failed")
    for r in failed:
        print(f"  replay: make soak-composition SEED={r.seed}   # {r.violations[0][:120]}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
