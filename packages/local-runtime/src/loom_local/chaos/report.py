"""A chaos run's figures and invariant violations as text, beside the goals (each goal met or missed, with the
numbers that decide it)."""

from __future__ import annotations

from typing import Any

from .config import STALE_SHARE_GOAL, RERUN_MARGIN_S


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.1f}%"


def _s(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.1f} s"


def _counts(d: dict[str, int]) -> str:
    return ", ".join(f"{k} {v}" for k, v in d.items()) or "none"


def stale_goal(f: dict[str, Any]) -> tuple[bool | None, str]:
    """(met, sentence) for the stale-share goal; ``met`` is None when the profile is not the one it is set for."""
    share = f["deliveries"]["stale_share"]
    if f["profile"] != "backlog":
        return None, f"stale share {_pct(share)} (the {_pct(STALE_SHARE_GOAL)} goal is the backlog profile's)"
    met = share is not None and share <= STALE_SHARE_GOAL
    return met, (f"stale share {_pct(share)} of {f['deliveries']['total']} deliveries: goal at most "
                 f"{_pct(STALE_SHARE_GOAL)}: {'met' if met else 'MISSED'}")


def rerun_goal(f: dict[str, Any]) -> tuple[bool | None, str]:
    k = f["kills"]
    timed = k["rerun"]["n"]
    if not k["reruns"]:
        return None, "no kill interrupted a claimed step: no re-run to time"
    single, within = k.get("single_fault", len(k["reruns"])), k.get("single_fault_within_bound", k["within_bound"])
    double = len(k["reruns"]) - single
    met = within == single
    never = len(k["reruns"]) - timed
    return met, (f"killed step re-run: median {_s(k['rerun']['median'])}, max {_s(k['rerun']['max'])} after the kill "
                 f"(re-driven by the sweeper a median {_s(k['redriven']['median'])} after it); "
                 f"{within} of {single} within the bound (the killed invocation's deadline + "
                 f"{RERUN_MARGIN_S:g} s + one {f['settings']['sweep_every_s']:g} s tick, median "
                 f"{_s(k['rerun_bound']['median'])})" + (f"; {never} never re-ran" if never else "")
                 + (f"; {double} more whose re-driving sweeper was killed after its claim too (a second fault: "
                    "not held to the bound)" if double else "")
                 + f": {'met' if met else 'MISSED'}")


def dominant(f: dict[str, Any]) -> str:
    """What most of the wasted deliveries came from, from the run's own counts."""
    causes = sorted(f["redrives"]["by_reason"], key=lambda r: -r["n"])
    wasted = {k: v for k, v in f["deliveries"]["by_category"].items() if k != "work"}
    top = ", ".join(f"{r['reason']} ({r['cause']}) {r['n']}" for r in causes[:3]) or "none"
    return (f"not work: {_counts(wasted)}; each sweeper re-drive sends one more message, the largest: {top}; "
            f"{f['deliveries']['redelivered']} deliveries were SQS redeliveries (receive count above 1)")


def render(figures: dict[str, Any], violations: list[dict[str, Any]]) -> str:
    f, s = figures, figures["settings"]
    d, r, k = f["deliveries"], f["redrives"], f["kills"]
    lines = [f"Chaos run, profile {f['profile']} (seed {f['seed']}): {f['executions']} executions, started over "
             f"{_s(f['started_over_s'])}; worker timeout {s['worker_timeout_s']:g} s, sweeper every "
             f"{s['sweep_every_s']:g} s, lease {s['lease_s']:g} s, {s['worker_concurrency']} worker batches of "
             f"{s['batch_size']}"]
    if violations:
        lines.append(f"INVARIANTS: {len(violations)} violation(s):")
        lines += [f"  - {v['rule']}: {v['execution_id']} ({v['variant']}): {v['detail']}" for v in violations[:40]]
        if len(violations) > 40:
            lines.append(f"  ... and {len(violations) - 40} more (in the run's JSON record)")
    else:
        lines.append("invariants: all held (one charge per order, each compensated charge refunded once, every "
                     "execution ended as its actions dictate, idempotent starts answered with the same id, each step "
                     "once, stale copies changed nothing)")
    lines.append(f"executions by status: {_counts(f['by_status'])}"
                 + (f" (the run's bound was reached after {_s(f['load_s'])})" if f["timed_out"] else ""))
    t = f["time_to_end"]
    lines.append(f"time to end: median {_s(t['median'])}, p90 {_s(t['p90'])}, max {_s(t['max'])}; by workflow "
                 + ", ".join(f"{w} {_s(v['median'])}" for w, v in f["time_to_end_by_workflow"].items()))
    lines.append(f"deliveries: {d['total']}: {_counts(d['by_category'])}")
    lines.append(f"re-drives by the sweeper's reason: {r['total']}: "
                 + (", ".join(f"{x['reason']} {x['cause']} {x['n']}" for x in r["by_reason"]) or "none")
                 + f"; sweeper invocations {_counts(r['sweeper_invocations'])}")
    lines.append(f"kills fired: {_counts(k['fired'])} (armed: {_counts(k['armed'])}); worker kills by point: "
                 f"{_counts(k['worker_points'])}; the killed worker invocations held {k['held_by_killed']} messages")
    if k["never_fired"]:
        lines.append(f"armed but never reached: {', '.join(k['never_fired'])}")
    lines.append(f"injected: {_counts(f['injected'])}; operator actions: {_counts(f['actions'])}")
    for met, sentence in (stale_goal(f), rerun_goal(f)):
        lines.append(("goal: " if met is not None else "") + sentence)
    if stale_goal(f)[0] is False:
        lines.append(f"what dominates: {dominant(f)}")
    if d["by_category"].get("no outcome logged"):
        lines.append(f"note: {d['by_category']['no outcome logged']} deliveries of invocations that ended normally have "
                     "no outcome in the worker's log (a worker zip older than its message_id log field? `make "
                     "build-local`)")
    if f["left_on_queue"]:
        lines.append(f"note: {f['left_on_queue']} messages were still on the queue when the run stopped waiting; "
                     "their deliveries are not counted")
    return "\n".join(lines)
