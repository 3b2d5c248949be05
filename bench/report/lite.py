"""docs/benchmarks.md: Loom without AWS (the ``lite`` section), its store beside DBOS Transact on SQLite.

Every figure and verdict is computed here from the section's results (``bench/lite.py``); the typed prose is
method only.
"""

from __future__ import annotations

from typing import Any

from ._fmt import Write, cmd, fmt, met, verdict

TARGET_RATIO = 3.0
"""Issue 24: per step at 1,000 steps, at least 3 times faster than DBOS on SQLite."""


def ratio(lite: dict[str, Any]) -> float:
    """How many times DBOS's time per step Loom's is (above 1: Loom is faster)."""
    return lite["dbos"]["per_step_ms"] / lite["loom"]["per_step_ms"]


def ratio_ok(lite: dict[str, Any]) -> bool:
    return ratio(lite) >= TARGET_RATIO


def above_floor(lite: dict[str, Any]) -> float:
    """Loom's time per step as a multiple of one fsync."""
    return lite["loom"]["per_step_ms"] * 1000 / lite["fsync_floor_us"]


def growth_factor(lite: dict[str, Any]) -> float | None:
    """Time per step at the largest measured size over the time per step at 1,000 steps."""
    rows = {g["steps"]: g["per_step_ms"] for g in lite.get("growth", [])}
    if 1000 not in rows or len(rows) < 2:
        return None
    return rows[max(rows)] / rows[1000]


def target_row(w: Write, lite: dict[str, Any]) -> None:
    w(f"| SQLite store at least {TARGET_RATIO:g}x faster per step than DBOS on SQLite (1,000 steps, durable commit "
      f"per step) | {fmt(ratio(lite))}x ({fmt(lite['loom']['per_step_ms'])} vs {fmt(lite['dbos']['per_step_ms'])} ms) "
      f"| {verdict(ratio_ok(lite))} |")


def lite_section(w: Write, lite: dict[str, Any]) -> None:
    loom, dbos = lite["loom"], lite["dbos"]
    syncs = lite.get("fsyncs_per_step")
    w("## Loom without AWS: the SQLite store beside DBOS on SQLite\n")
    w(f"Command: {cmd('lite')}. SQLite {lite.get('sqlite', '?')}, DBOS Transact {lite.get('dbos_version') or '?'}.\n")
    w("**How it is measured.** The same workflow on both: 1,000 steps, each a function returning a small dict, one "
      "durable commit per step. Loom: the SQLite store and its step queue in one file (WAL, `synchronous=FULL`), "
      "driven by `loom dev`'s worker loop (`loom_lite.worker`: receive, `Engine.process` with a deadline, ack) "
      "with the runtime's defaults. DBOS: a `@DBOS.workflow` calling 1,000 `@DBOS.step`s, on SQLite with its "
      "defaults. Each run is a fresh process (`bench/lite_run.py`) that first runs a 3-step warm-up; the two "
      f"alternate, {lite['repeats']} runs each, medians reported. fsyncs are counted by `strace -f -c` (fsync and "
      "fdatasync) as (a 1,000-step run - a 10-step run) / 990. The floor is one 100-byte write plus `fdatasync` on "
      "the same disk: the median of 50 samples taken before each run.\n")
    w("| per step, 1,000 steps | Loom, SQLite store | DBOS on SQLite |")
    w("|---|---:|---:|")
    w(f"| wall time (median) | {fmt(loom['per_step_ms'], 3)} ms | {fmt(dbos['per_step_ms'], 3)} ms |")
    w(f"| CPU time (median) | {fmt(loom['cpu_per_step_ms'], 3)} ms | {fmt(dbos['cpu_per_step_ms'], 3)} ms |")
    if syncs:
        w(f"| fsyncs (strace) | {fmt(syncs['loom'])} | {fmt(syncs['dbos'])} |")
    else:
        w("| fsyncs (strace) | not measured (no strace) | not measured (no strace) |")
    w(f"| runs (ms per step) | {', '.join(fmt(x, 3) for x in loom['per_step_ms_runs'])} | "
      f"{', '.join(fmt(x, 3) for x in dbos['per_step_ms_runs'])} |")
    w("")
    w(f"**Against the target (at least {TARGET_RATIO:g}x faster than DBOS on SQLite): {met(ratio_ok(lite))}, "
      f"{fmt(ratio(lite))}x.** The fsync floor on this disk in this run: {fmt(lite['fsync_floor_us'], 0)} us; a Loom "
      f"step took {fmt(above_floor(lite))} times that"
      + (f", with {fmt(syncs['loom'])} fsyncs per step against DBOS's {fmt(syncs['dbos'])}" if syncs else "")
      + ". A step's history record is written without waiting for the disk and made durable by the execution's "
      "commit that follows it (the log is written in order), so a step costs one sync.\n")
    rows = lite.get("growth") or []
    if rows:
        w("Growth (Loom; executions of at most 1,000 steps, `LOOM_MAX_STEPS`' cap, one after another in one file):\n")
        w("| steps | executions | wall per step | CPU per step |")
        w("|---:|---:|---:|---:|")
        for g in rows:
            w(f"| {fmt(g['steps'])} | {fmt(g['executions'])} | {fmt(g['per_step_ms'], 3)} ms | "
              f"{fmt(g['cpu_per_step_ms'], 3)} ms |")
        factor = growth_factor(lite)
        if factor is not None:
            w(f"\nFrom 1,000 to {fmt(max(g['steps'] for g in rows))} steps the time per step changed "
              f"{fmt(factor)}x.")
        w("")
