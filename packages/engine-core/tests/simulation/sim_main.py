"""The simulation from the command line: ``make soak SEEDS=N`` or ``make soak SEED=n`` (replay one).

    .venv/bin/python packages/engine-core/tests/simulation/sim_main.py --seeds 5000 --jobs 2
    .venv/bin/python packages/engine-core/tests/simulation/sim_main.py --seed 1234 --trace
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from loomsim.runner import replay_command, run_many, run_seed, summarize  # noqa: E402
from loomsim.world import BROKEN_KINDS  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seed", type=int, help="replay one seed (prints its configuration and outcome)")
    ap.add_argument("--trace", action="store_true", help="with --seed: print the full operation trace")
    ap.add_argument("--seeds", type=int, default=1000, help="how many seeds to run (default 1000)")
    ap.add_argument("--first", type=int, default=0, help="first seed (default 0)")
    ap.add_argument("--jobs", type=int, default=0, help="worker processes (default: CPUs, at most 2)")
    ap.add_argument("--broken", choices=BROKEN_KINDS, help="run against a deliberately broken store")
    ap.add_argument("--digest", action="store_true", help="with --seed: print only the trace digest")
    args = ap.parse_args(argv)

    if args.seed is not None:
        factory = None
        if args.broken:
            from loomsim.world import broken_store_class

            factory = broken_store_class(args.broken)
        r = run_seed(args.seed, tracing=True, store_factory=factory)
        if args.digest:
            print(r.digest)
            return 0 if r.ok else 1
        print(r.describe)
        if args.trace:
            print("\n".join(r.trace))
        print(f"\nseed {r.seed}: {'ok' if r.ok else 'FAILED'} in {r.seconds:.3f}s; "
              f"results {dict(sorted((k[7:], n) for k, n in r.stats.items() if k.startswith('result.')))}")
        for text in r.violations:
            print(f"  - {text}")
        for text in r.known:
            print(f"  known engine defect (not counted): {text}")
        if not r.ok and not args.trace:
            print(f"(add --trace, or run `{replay_command(r.seed)}`, for every operation)")
        return 0 if r.ok else 1

    seeds = list(range(args.first, args.first + args.seeds))
    started = time.perf_counter()
    last = [0.0]

    def progress(done):
        now = time.perf_counter()
        if now - last[0] > 5:
            last[0] = now
            bad = sum(not r.ok for r in done)
            print(f"  {len(done)}/{len(seeds)} seeds, {bad} failing, {now - started:.0f}s", flush=True)

    results = run_many(seeds, jobs=args.jobs, store_kind=args.broken, progress=progress)
    elapsed = time.perf_counter() - started
    failed = [r for r in results if not r.ok]
    for r in failed:
        print(r.report(trace_tail=40), "\n")
    stats = summarize(results)
    print(format_stats(stats))
    print(f"\n{len(results)} seeds ({args.first}..{args.first + args.seeds - 1}) in {elapsed:.1f}s: "
          f"{len(results) - len(failed)} passed, {len(failed)} failed")
    for r in failed:
        print(f"  replay: {replay_command(r.seed)}   # {r.violations[0][:120]}")
    known = [r for r in results if r.known]
    if known:
        print(f"known engine defects (loomsim/checks.py KNOWN_DEFECTS, not counted as failures) in "
              f"{len(known)} seeds:")
        for r in known[:20]:
            print(f"  seed {r.seed}: {r.known[0][:140]}")
    return 1 if failed else 0


def format_stats(stats) -> str:
    groups: dict[str, list[str]] = {}
    for key in sorted(stats):
        head = key.split(".")[0]
        groups.setdefault(head, []).append(f"{key[len(head) + 1:] or head}={stats[key]}")
    return "\n".join(f"{head:>9}: " + ", ".join(items) for head, items in groups.items())


if __name__ == "__main__":
    sys.exit(main())
