"""The report's section on code-first workflows beside step lists (``bench/code.py``)."""

from __future__ import annotations

from typing import Any

from ._fmt import Write, cmd


def code_section(w: Write, results: dict[str, Any]) -> None:
    from ..code import replayed_per_step, verdict

    w("## Code-first beside step lists\n")
    w(f"Command: {cmd('code')}. The same steps ({results['result_bytes']:,} B results) written both ways: a "
      "`@workflow` step list and an `engine_core.durable` function whose only code is a loop over its step calls "
      "(the step names built once, as the step list's are: code of its own between the calls re-runs on every "
      "replay, and costs what it costs). On the wire: the real engine on DynamoDB and "
      "SQS over moto, marginal figures per step (5 steps minus 1, divided by 4). Engine CPU: the memory store, "
      "`time.process_time` per step, the fastest of the runs (the styles take turns; on this shared machine the "
      "median of the same runs moves by 10-30% from one run of the command to the next, the fastest far less; "
      "the medians are in the last table).\n")
    w("| per step | step list | code-first | code-first / step list |")
    w("|---|---:|---:|---:|")
    for name, v in verdict(results).items():
        unit = " us" if name.startswith("cpu") else ""
        shown = (lambda x: f"{x / 1000:,.0f} K") if name.startswith("instructions") else (lambda x: f"{x:.2f}{unit}")
        w(f"| {name.replace('aws_requests', 'AWS requests').replace('write_units', 'write units').replace('rcu', 'read units')} "
          f"| {shown(v['steps'])} | {shown(v['code'])} | {v['ratio']:.2f}x{'' if v['within'] else ' (over 10%)'} |")
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
    floor = results.get("replay")
    if floor is None:
        return
    slope, steps_slope = floor["code"]["slope_us"], floor["steps"]["slope_us"]
    if slope <= 0:  # a replay costs something: a fit at or below zero measured the machine's load, not it
        w(f"What is left is the replay itself: each delivery runs the function from the top, and every durable "
          f"call it makes before the first unrecorded one is a position replayed. This run's fit of each "
          f"delivery's CPU against the positions it replays ({floor['n_steps']} steps, one a delivery) came out "
          f"at {slope:.2f} us per replayed position: other work on the machine moved the deliveries' CPU more "
          "than the replays did, so it says nothing about them. The instruction rows above are the figure to "
          "read.\n")
        return
    w(f"What is left is the replay itself: each delivery runs the function from the top, and every durable call "
      f"it makes before the first unrecorded one is a position replayed (the call, its check against the record, "
      f"a fresh copy of the recorded value). Measured by the same command (one step a delivery, {floor['n_steps']} "
      f"steps, the CPU of each delivery against the positions it replays): **{slope:.2f} us per replayed position** "
      f"(a step list's delivery: {steps_slope:+.2f} us per recorded step), and a delivery costs "
      f"{floor['code']['intercept_us']:.0f} us before any (step list: {floor['steps']['intercept_us']:.0f} us). "
      "That is the floor of the style, not a read or a decode: the positions replayed per step, times that.\n")
    w("| case | positions replayed per step | replay floor per step | step list per step | median runs: step list, code-first |")
    w("|---|---:|---:|---:|---:|")
    for row in results["cpu"]:
        per_step = replayed_per_step(row["steps"], row["chain"])
        medians = "-" if "steps_median_us_per_step" not in row else (
            f"{row['steps_median_us_per_step']:.1f} us, {row['code_median_us_per_step']:.1f} us")
        w(f"| {row['steps']} steps, {row['chain']} a delivery | {per_step:.1f} | {per_step * slope:.1f} us "
          f"| {row['steps_us_per_step']:.1f} us | {medians} |")
    w("")
    fresh = next((row for row in results["cpu"] if replayed_per_step(row["steps"], row["chain"]) == 0), None)
    gap = "" if fresh is None else (
        f" Where nothing is replayed ({fresh['steps']} steps, {fresh['chain']} a delivery) the difference, "
        f"{fresh['code_us_per_step'] - fresh['steps_us_per_step']:+.1f} us a step, is what running a step through "
        "the function adds (the call, its position and its description on the execution item) and the noise of "
        "the measurement.")
    w("So one step a delivery stays above the step list by about the replay floor (each delivery replays "
      "half the history on average) plus a delivery's own start, and long chained histories by a few replayed "
      f"positions per step; chaining (100 steps a delivery by default) is what keeps replays rare.{gap}\n")
