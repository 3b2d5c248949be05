"""The report's section on per-step cost against history length (``bench/history.py``)."""

from __future__ import annotations

from typing import Any

from ._fmt import Write, cmd


def history_section(w: Write, history: dict[str, Any]) -> None:
    w("## Per-step cost against history length\n")
    w(f"Command: {cmd('history')}. Figure: `docs/bench/history.png`.\n")
    w(f"Executions of 10 to 10,000 steps ({history['result_bytes']:,} B results under one key) on the memory "
      "store, one step per delivery (`max_chain_steps` 1) and chained (100, the default). A delivery reads the "
      "execution, its input and the history from the latest checkpoint on: a record that also holds the whole "
      "context, written with the step's own record when the results since the last one outweigh the context (or "
      "at most every 100 steps). Read units are DynamoDB's for those reads (strongly consistent, 4 KB a unit, "
      "per query).\n")
    w("| steps | steps a delivery | CPU per step | requests per step | records read per step | read units per step |")
    w("|---:|---:|---:|---:|---:|---:|")
    for r in history["rows"]:
        w(f"| {r['steps']:,} | {r['chain']} | {r['cpu_us_per_step']:.0f} us | {r['requests_per_step']:.2f} | "
          f"{r['records_read_per_step']:.1f} | {r['read_units_per_step']:.2f} |")
    w("")
    for chain, verdict in sorted(history["flatness"].items(), key=lambda kv: int(kv[0])):
        ratios = verdict["ratios"]
        words = ", ".join(f"{name.replace('_per_step', '').replace('_', ' ')} {value:.2f}x"
                          for name, value in ratios.items() if value is not None)
        state = "**flat**" if verdict["flat"] else f"**grows** ({', '.join(verdict['grew'])})"
        w(f"- {chain} step(s) a delivery: from 100 to {verdict['longest']:,} steps the per-step figures move "
          f"{words}: {state}.")
    w("")


def history_chart(plt: Any, history: dict[str, Any], save) -> None:
    fig, (cpu, reads) = plt.subplots(1, 2, figsize=(10, 4.2))
    for chain in sorted({r["chain"] for r in history["rows"]}):
        rows = sorted((r for r in history["rows"] if r["chain"] == chain), key=lambda r: r["steps"])
        xs = [r["steps"] for r in rows]
        cpu.plot(xs, [r["cpu_us_per_step"] for r in rows], marker="o", label=f"{chain} step(s) a delivery")
        reads.plot(xs, [r["read_units_per_step"] for r in rows], marker="o", label=f"{chain} step(s) a delivery")
    for ax, label in ((cpu, "engine CPU per step (us)"), (reads, "read units per step")):
        ax.set_xscale("log")
        ax.set_xlabel("steps in the execution")
        ax.set_ylabel(label)
        ax.set_ylim(bottom=0)
        ax.legend(fontsize=8)
    fig.suptitle("Per-step cost against history length (memory store)")
    save(fig, "history.png")
