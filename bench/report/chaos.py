"""The chaos section: both profiles' figures beside the goals (invariants, stale share, a killed step's re-run)."""

from __future__ import annotations

from typing import Any

from ._fmt import Write, cmd, fmt, verdict

STALE_GOAL = 0.05


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def _s(x: float | None) -> str:
    return "-" if x is None else f"{fmt(x, 1)} s"


def _counts(d: dict[str, Any]) -> str:
    return ", ".join(f"{k} {fmt(v)}" for k, v in d.items()) or "none"


def goals(runs: dict[str, Any]) -> list[tuple[str, str, str, bool]]:
    """(goal, run, measured, met) rows, computed from the runs."""
    rows = []
    for name, run in runs.items():
        f, bad = run["figures"], run["violations"]
        rows.append(("Every invariant holds: one charge per order, each compensated charge refunded once, every "
                     "execution ended as its actions dictate, idempotent starts answered with the same id",
                     name, f"{len(bad)} violation(s) over {f['executions']} executions" + (
                         f": {bad[0]['rule']}: {bad[0]['detail']}" if bad else ""), not bad))
    backlog = runs.get("backlog")
    if backlog:
        d = backlog["figures"]["deliveries"]
        share = d["stale_share"]
        rows.append((f"Stale share at most {_pct(STALE_GOAL)} of deliveries with no faults (issue 27: the 300-execution "
                     "run)", "backlog", f"{_pct(share)} ({fmt(d['stale'])} of {fmt(d['total'])} deliveries)",
                     share is not None and share <= STALE_GOAL))
    for name, run in runs.items():
        k = run["figures"]["kills"]
        if k["reruns"]:
            n = k.get("single_fault", len(k["reruns"]))
            within = k.get("single_fault_within_bound", k["within_bound"])
            double = [r for r in k["reruns"] if r.get("sweeper_killed")]
            extra = "".join(f"; and 1 whose re-driving sweeper was killed after its claim too (a second fault), "
                            f"re-run after {_s(r['rerun_s'])}" for r in double)
            rows.append(("A killed step re-runs within its killed invocation's deadline + 5 s + one sweeper tick",
                         name, f"{within} of {n} within; re-run median {_s(k['rerun']['median'])}, max "
                               f"{_s(k['rerun']['max'])}; bound median {_s(k['rerun_bound']['median'])}{extra}",
                         within == n))
    return rows


def chaos_section(w: Write, chaos: dict[str, Any]) -> None:
    w("## Chaos runs on the local stack\n")
    if chaos.get("status") != "measured":
        w(f"**Pending.** {chaos.get('reason', '')}\n")
        return
    runs = chaos["runs"]
    w(f"Command: {cmd('chaos')}, a shorter run than `make chaos` (`make chaos PROFILE=both` runs 150 and 300 "
      "executions). Both profiles on one fresh local stack as `make up` runs it (the `dist/local` zips on moto, "
      "`lease_s=5`, a sweep every 5 s), seed "
      f"{chaos['seed']}, every example workflow. `faults`: the issue-27 fault mix scaled to the count (worker SIGKILLs "
      "at each crash point then at random, sweeper kills after a re-drive claim, control-plane kills after a "
      "create, duplicated and replayed step messages, cancels, wakes, fixes and redrives, events and callbacks "
      "mid-flight); `backlog`: starts at the rate of 300 in 45 s and no faults. Every count is taken from what the "
      "stack recorded (each worker invocation's messages and end, each step body started, the worker's outcome "
      "per message, the sweeper's re-drives) and from the API and the examples' payment ledger, never assumed.\n")
    w("| Goal | Run | Measured | Verdict |")
    w("|---|---|---|---|")
    for goal, run, measured, ok in goals(runs):
        w(f"| {goal} | {run} | {measured} | {verdict(ok)} |")
    w("")
    names = list(runs)
    fig = {n: runs[n]["figures"] for n in names}
    w("| | " + " | ".join(f"{n} ({fmt(fig[n]['executions'])} executions)" for n in names) + " |")
    w("|---|" + "---|" * len(names))
    rows = [
        ("started over", lambda f: _s(f["started_over_s"])),
        ("ended", lambda f: _counts(f["by_status"])),
        ("time to end: median, p90", lambda f: f"{_s(f['time_to_end']['median'])}, {_s(f['time_to_end']['p90'])}"),
        ("deliveries", lambda f: fmt(f["deliveries"]["total"])),
        ("of which", lambda f: _counts(f["deliveries"]["by_category"])),
        ("stale share", lambda f: _pct(f["deliveries"]["stale_share"])),
        ("sweeper re-drives (its reason, and whether something died holding the execution)",
         lambda f: _counts({f"{r['reason']} {r['cause']}": r["n"] for r in f["redrives"]["by_reason"]})),
        ("sweeper invocations", lambda f: _counts(f["redrives"]["sweeper_invocations"])),
        ("kills that fired", lambda f: _counts(f["kills"]["fired"])),
        ("worker kills by crash point", lambda f: _counts(f["kills"]["worker_points"])),
        ("messages the killed worker invocations held", lambda f: fmt(f["kills"]["held_by_killed"])),
        ("killed step: sweeper re-drive, then body re-run (median after the kill)",
         lambda f: f"{_s(f['kills']['redriven']['median'])}, {_s(f['kills']['rerun']['median'])}"
         if f["kills"]["reruns"] else "-"),
        ("messages injected", lambda f: _counts(f["injected"])),
        ("operator actions", lambda f: _counts(f["actions"])),
    ]
    for label, cell in rows:
        w(f"| {label} | " + " | ".join(cell(fig[n]) for n in names) + " |")
    w("")
    w("A stale copy is a delivery that found nothing to do (its execution had moved past the message's step and "
      "version, or ended); `released` is a record the worker put back at once for want of invocation time; `lost "
      "with its invocation` is a message whose invocation was killed, timed out or failed its cold start. A "
      "sweeper re-drive sends one more message: after a kill it replaces what died; with nothing dead it is a "
      "re-send of a message that was not claimed within its lease (behind a backlog) or of a timer's delayed "
      "message still queued, and the copy that arrives second is stale. The bound of a killed step is its killed "
      "invocation's deadline (its start plus the worker's timeout) + 5 s + one sweeper tick, counted from the "
      "kill; the re-run is the step's next body start (`steps.jsonl`).\n")
