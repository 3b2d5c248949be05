"""The report's section on code-first workflows beside step lists (``bench/code.py``)."""

from __future__ import annotations

from typing import Any

from ._fmt import Write, cmd


def code_section(w: Write, results: dict[str, Any]) -> None:
    from ..code import CPU_RUNS, verdict

    w("## Code-first beside step lists\n")
    w(f"Command: {cmd('code')}. The same steps ({results['result_bytes']:,} B results) written both ways: a "
      "`@workflow` step list and an `engine_core.durable` function whose only code is a loop over its step calls "
      "(the step names built once, as the step list's are: code of its own between the calls re-runs on every "
      "replay, and costs what it costs). On the wire: the real engine on DynamoDB and "
      "SQS over moto, marginal figures per step (5 steps minus 1, divided by 4). Engine CPU: the memory store, "
      f"`time.process_time` per step, the fastest of {CPU_RUNS} runs of each (the styles take turns; on this shared machine the "
      "median of the same runs moves by 10-30% from one run of the command to the next, the fastest far less; "
      "the medians are in the last table). The CPU ratio judged is the median of the runs' own ratios, each "
      "code-first run against the step list's run just before it: one lucky run of either style moves the "
      "ratio of the fastest (shown beside it) by several percent, the median of pairs by far less.\n")
    w("| per step | step list | code-first | code-first / step list |")
    w("|---|---:|---:|---:|")
    for name, v in verdict(results).items():
        unit = " us" if name.startswith("cpu") else ""
        shown = (lambda x: f"{x / 1000:,.0f} K") if name.startswith("instructions") else (lambda x: f"{x:.2f}{unit}")
        label = name.replace('aws_requests', 'AWS requests').replace('write_units', 'write units').replace('rcu', 'read units')
        fastest = f" (fastest runs: {v['fastest_ratio']:.2f}x)" if "fastest_ratio" in v else ""
        w(f"| {label} | {shown(v['steps'])} | {shown(v['code'])} | {v['ratio']:.2f}x"
          f"{'' if v['within'] else ' (over 10%)'}{fastest} |")
    w("")
    counted = results.get("instructions") or {}
    if counted.get("status") == "measured":
        w("*Instructions* are counted by `valgrind --tool=callgrind` over one execution of each case "
          "(`bench/instructions.py`): unlike CPU time on this shared machine, other work does not move them. "
          f"Each is the mean over {counted.get('layouts', 1)} memory layouts of the interpreter (`bench/layout.py`); "
          "lowest to highest layout, per step:\n")
        for row in counted.get("rows", []):
            spreads = [f"{style} {row[f'{style}_range'][0] / 1000:,.0f}-{row[f'{style}_range'][1] / 1000:,.0f} K"
                       for style in ("steps", "code") if row.get(f"{style}_range")]
            if spreads:
                w(f"- {row['steps']} steps, {row['chain']} a delivery: " + ", ".join(spreads))
        w("")
    w("Requests, write units and messages per step are the same by construction (a step's record, then one "
      "conditional write that moves on and claims the next call), and `functional/test_durable_faults.py` "
      "checks it. The history a code-first delivery needs is read and decoded once per worker process: the "
      "process keeps the records of the positions an execution has passed (`durable/prefix.py`), so its next "
      "delivery reads only the records after them, as a step list reads from its latest checkpoint (a fresh "
      "process reads the whole history once).\n")
    fits = {(c["n_steps"], c["chain"]): c for c in (results.get("replay") or {}).get("cases", [])}
    if fits:
        replay_section(w, results["cpu"], fits)


def _fit_cell(fit: dict[str, Any] | None, style: str) -> str:
    if fit is None:
        return "-"
    slope = fit[style]["slope_us"]
    return f"{slope:+.2f} us" if style == "steps" else (f"{slope:.2f} us" if slope > 0 else f"{slope:.2f} us (noise)")


def replay_section(w: Write, cpu: list[dict[str, Any]], fits: dict[tuple[int, int], dict[str, Any]]) -> None:
    """What replays cost, case by case: the fit of each delivery's CPU up to its first step's body against
    the positions it replays (``bench/code.py``, ``replay``)."""
    from ..code import replayed_per_step

    w("What is left is the replay itself: each delivery runs the function from the top, and every durable call "
      "it makes before the first unrecorded one is a position replayed (the call, its check against the record, "
      "a fresh copy of the recorded value). Measured by the same command, for each case that replays: the CPU of "
      "each delivery from its start to its first step's body (the read, the replay, the claim; the bodies and "
      "commits after it are the same work in every delivery and are left out) against the positions it replays, "
      "a straight line through the deliveries' medians. Its slope is what a replayed position costs (a step "
      "list's delivery against the recorded steps before it, beside it); a slope at or below zero measured the "
      "machine's load, not the replay, and is marked as noise.\n")
    w("| case | positions replayed per step | a replayed position | replays per step | step list: a recorded step "
      "| step list per step | median runs: step list, code-first |")
    w("|---|---:|---:|---:|---:|---:|---:|")
    for row in cpu:
        per_step = replayed_per_step(row["steps"], row["chain"])
        fit = fits.get((row["steps"], row["chain"]))
        slope = None if fit is None else fit["code"]["slope_us"]
        cost = "0.0 us" if per_step == 0 else ("-" if slope is None or slope <= 0 else f"{per_step * slope:.1f} us")
        medians = "-" if "steps_median_us_per_step" not in row else (
            f"{row['steps_median_us_per_step']:.1f} us, {row['code_median_us_per_step']:.1f} us")
        w(f"| {row['steps']} steps, {row['chain']} a delivery | {per_step:.1f} | {_fit_cell(fit, 'code')} | {cost} "
          f"| {_fit_cell(fit, 'steps')} | {row['steps_us_per_step']:.1f} us | {medians} |")
    w("")
    fresh = next((row for row in cpu if replayed_per_step(row["steps"], row["chain"]) == 0), None)
    gap = "" if fresh is None else (
        f" Where nothing is replayed ({fresh['steps']} steps, {fresh['chain']} a delivery) the difference of the "
        f"fastest runs, {fresh['code_us_per_step'] - fresh['steps_us_per_step']:+.1f} us a step"
        + ("" if "fastest_ratio" not in fresh else f" ({fresh['ratio']:.2f}x in paired runs)")
        + ", is what running a step through the function adds (the call, its position and its description on the "
        "execution item), within the noise of the measurement.")
    slopes = sorted(((n, c), f["code"]["slope_us"]) for (n, c), f in fits.items() if f["code"]["slope_us"] > 0)
    growth = ""
    if len(slopes) >= 2 and slopes[-1][1] > slopes[0][1]:
        (small, low), (large, high) = slopes[0], slopes[-1]
        growth = (f" A position replayed among {large[0]:,} costs {high / low:.1f}x one among {small[0]:,} "
                  f"({high:.2f} against {low:.2f} us) for the same calls: a replay's work does not depend on the "
                  "history's length, the memory it reaches does.")
    w("Replays are what a long history adds to code-first, a few positions per step once chained (100 steps a "
      f"delivery by default), half the history per step at one step a delivery.{growth}{gap}\n")
