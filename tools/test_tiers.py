"""Run `make test`'s tiers side by side and keep their output readable.

    python tools/test_tiers.py run test-unit -- make test-unit   # one tier, its output kept and shown whole
    python tools/test_tiers.py summary test-unit test-docs ...   # the table that closes `make test`

Tiers run concurrently (the root Makefile says which), so each one's output goes to
``build/test-logs/<tier>.log`` while it runs (``tail -f`` it to follow) and is printed in one piece
when the tier ends, followed by its verdict and time. The summary lists every tier with its result,
its time, the CPU seconds it and its children used, and the counts of its pytest summary line, then the totals on a line of their own.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import re
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LOGS = ROOT / "build" / "test-logs"
_COUNTS = re.compile(r"(\d+) (passed|failed|errors?|skipped|xfailed|xpassed|deselected)\b")
_PYTEST_SUMMARY = re.compile(r"^=+ .*\b(passed|failed|errors?|no tests ran)\b.* in [\d.]+s.*=+$")


def _say(text: str) -> None:
    """Print ``text`` whole: tiers that end at the same moment never interleave their lines."""
    with open(LOGS / ".print-lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
        sys.stdout.flush()
        fcntl.flock(lock, fcntl.LOCK_UN)


def _duration(seconds: float) -> str:
    return f"{int(seconds) // 60}m{int(seconds) % 60:02d}s"


def counts(log_text: str) -> dict[str, int]:
    """The outcome counts of every pytest summary line in a tier's output, added up."""
    total: dict[str, int] = {}
    for line in log_text.splitlines():
        if _PYTEST_SUMMARY.match(line.strip()):
            for n, what in _COUNTS.findall(line):
                key = "errors" if what.startswith("error") else what
                total[key] = total.get(key, 0) + int(n)
    return total


def run(tier: str, command: list[str]) -> int:
    LOGS.mkdir(parents=True, exist_ok=True)
    log = LOGS / f"{tier}.log"
    _say(f"== {tier}: started at {time.strftime('%H:%M:%S')} (follow it: tail -f {log.relative_to(ROOT)})")
    started = time.monotonic()
    with open(log, "wb") as out:
        code = subprocess.run(command, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL).returncode
    seconds = time.monotonic() - started
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = used.ru_utime + used.ru_stime
    text = log.read_text(errors="replace")
    found = counts(text)
    (LOGS / f"{tier}.json").write_text(json.dumps({"tier": tier, "exit": code, "seconds": round(seconds, 1),
                                                   "cpu_seconds": round(cpu, 1), "counts": found}))
    verdict = "passed" if code == 0 else f"FAILED (exit {code})"
    _say(f"== {tier}: output\n{text.rstrip()}\n== {tier}: {verdict} in {_duration(seconds)} ({cpu:.0f} CPU-s)\n")
    return code


def summary(tiers: list[str]) -> int:
    rows, totals, failed = [], {"passed": 0, "failed": 0, "errors": 0}, 0
    for tier in tiers:
        path = LOGS / f"{tier}.json"
        if not path.exists():
            rows.append(f"  {tier:<18} not run")
            continue
        r = json.loads(path.read_text())
        for key in totals:
            totals[key] += r["counts"].get(key, 0)
        failed += r["exit"] != 0
        tests = ", ".join(f"{n} {what}" for what, n in sorted(r["counts"].items())) or "no pytest summary"
        verdict = "passed" if r["exit"] == 0 else f"FAILED (exit {r['exit']})"
        cpu = f"{r['cpu_seconds']:.0f} CPU-s" if "cpu_seconds" in r else ""
        rows.append(f"  {tier:<18} {verdict:<18} {_duration(r['seconds']):>7} {cpu:>10}  {tests}")
    LOGS.mkdir(parents=True, exist_ok=True)
    _say("== make test: tiers (full output above and in build/test-logs/)\n" + "\n".join(rows))
    _say(f"{totals['passed']} passed, {totals['failed'] + totals['errors']} failed")
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    run_cmd = sub.add_parser("run", help="run one tier: its output to build/test-logs/<tier>.log, shown whole at its end")
    run_cmd.add_argument("tier")
    run_cmd.add_argument("argv", nargs=argparse.REMAINDER, help="-- then the tier's command")
    summary_cmd = sub.add_parser("summary", help="the closing table of the given tiers")
    summary_cmd.add_argument("tiers", nargs="+")
    args = parser.parse_args(argv)
    if args.command == "run":
        command = args.argv[1:] if args.argv[:1] == ["--"] else args.argv
        if not command:
            parser.error("run needs the tier's command after --")
        return run(args.tier, command)
    return summary(args.tiers)


if __name__ == "__main__":
    sys.exit(main())
