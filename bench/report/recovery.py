"""The recovery section: a worker SIGKILLed mid-step, until the step re-ran, beside the design's bound."""

from __future__ import annotations

from typing import Any

from ._fmt import Write, cmd, fmt


def recovery_section(w: Write, recovery: dict[str, Any]) -> None:
    w("## Recovery after a worker is killed mid-step\n")
    if recovery.get("status") != "measured":
        w(f"**Pending.** {recovery.get('reason', '')}\n")
        return
    w(f"Command: {cmd('recovery')}. On the local stack (the `dist/local` zips on moto), each sample starts a "
      f"`{recovery['workflow']}` execution whose worker is SIGKILLed as its first step's body starts (crash point "
      "`step.enter`, attempt 1). Recovery is the time from the kill to attempt 2's start (the step record's "
      "`started_at`). The design's bound for the same kill is the killed invocation's deadline (its start as the "
      f"runtime saw it, plus the worker's timeout) + {fmt(recovery['margin_s'])} s + one sweeper tick, counted from "
      "the kill.\n")
    w("| configuration | worker timeout | sweeper tick | lease | kills | recovery median | recovery max | "
      "bound (median) | within the bound |")
    w("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name, run in recovery["runs"].items():
        if run.get("status") == "failed":
            w(f"| {name} | | | | | | | | not measured: {run['reason']} |")
            continue
        n = len(run["samples"])
        within = sum(1 for x in run["samples"] if x["bound_s"] is not None and x["recovery_s"] <= x["bound_s"])
        w(f"| {name} | {fmt(run['worker_timeout_s'])} s | {fmt(run['sweep_every_s'])} s | {fmt(run['lease_s'])} s | "
          f"{n} | {fmt(run['median_s'], 1)} s | {fmt(run['max_s'], 1)} s | {fmt(run['median_bound_s'], 1)} s | "
          f"{within} of {n}{'' if within == n else ' (**missed**)'} |")
    w("")
    w("`make up` is the local stack as `make up` runs it (`LOCAL_TF_VARS=lease_s=5`, a sweep every 5 s); "
      "`deployed defaults` applies terraform/envs/local without overrides and plays the schedule at its deployed "
      "`rate(1 minute)`. The bound moves with the worker's timeout and the tick, so it is computed per "
      "configuration; with the module's own defaults (60 s worker, 1 minute tick) it is 60 + 5 + 60 s after the "
      "killed invocation started.\n")
