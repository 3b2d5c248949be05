"""docs/bench/*.png: the report's charts (matplotlib, imported only when they are drawn)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .. import analysis, prices
from ..analysis import TARGET_IMPORT_MS, TARGET_REQUESTS, TARGET_USD_PER_MILLION, TARGET_WRITE_UNITS
from . import findings
from ._fmt import API_ORDER


def charts(results: dict[str, Any], out_dir: Path) -> list[Path]:
    """Write the report's PNG charts into ``out_dir``; returns their paths."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []

    def save(fig, name: str) -> None:
        path = out_dir / name
        fig.tight_layout()
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)

    if results.get("history"):
        from .history import history_chart

        history_chart(plt, results["history"], save)

    steps = results.get("steps")
    if steps:
        sizes = steps["sizes"]
        one_kb = sizes.get("1 KB") or next(iter(sizes.values()))
        small = sizes.get("100 B") or one_kb
        columns = [("happy path\n100 B", small["per_step"]), ("happy path\n1 KB", one_kb["per_step"]),
                   ("fails once,\nthen succeeds\n1 KB", one_kb["per_step_with_one_retry"])]
        conc = steps.get("concurrency")
        if conc:
            columns.append((f"{conc['executions']} in flight,\nbatch {conc['batch_size']}\n100 B",
                            conc["per_step"]))
        apis = [a for a in API_ORDER if not a.startswith("lambda:") and any(c[1]["requests"].get(a, 0) for c in columns)]
        fig, ax = plt.subplots(figsize=(8, 4.8))
        bottom = [0.0] * len(columns)
        for api in apis:
            values = [c[1]["requests"].get(api, 0) for c in columns]
            ax.bar([c[0] for c in columns], values, bottom=bottom, label=api)
            bottom = [b + v for b, v in zip(bottom, values)]
        ax.axhline(TARGET_REQUESTS, color="red", linestyle="--", label=f"target: {TARGET_REQUESTS}")
        ax.set_ylabel("DynamoDB + SQS requests per step")
        ax.set_title("Requests per step by API (in-process, moto)")
        ax.legend(fontsize=7, loc="upper right")
        save(fig, "requests_per_step.png")

        labels = list(sizes)
        fig, ax = plt.subplots(figsize=(8, 4.8))
        table = [sizes[l]["per_step"]["wcu_table"] for l in labels]
        gsi = [sizes[l]["per_step"]["wcu_gsi"] for l in labels]
        reads = [sizes[l]["per_step"]["rcu"] for l in labels]
        x = range(len(labels))
        ax.bar([i - 0.2 for i in x], table, width=0.4, label="write units, table")
        ax.bar([i - 0.2 for i in x], gsi, width=0.4, bottom=table, label="write units, GSI1")
        ax.bar([i + 0.2 for i in x], reads, width=0.4, label="read units")
        ax.axhline(TARGET_WRITE_UNITS, color="red", linestyle="--", label=f"target: {TARGET_WRITE_UNITS} write units")
        ax.set_xticks(list(x), [f"result {l}" for l in labels])
        ax.set_yscale("log")
        ax.set_ylabel("capacity units per step (log)")
        ax.set_title("DynamoDB capacity per step, by step result size")
        ax.legend(fontsize=8)
        save(fig, "capacity_per_step.png")

        fig, ax = plt.subplots(figsize=(9, 4.8))
        names, values, colors = [], [], []
        for label in labels:
            names.append(f"Loom\n{label}")
            values.append(analysis.step_cost(sizes[label]["per_step"]).usd_per_million())
            colors.append("tab:blue")
        for p in prices.PEER_PRICES:
            names.append(p.name.replace(" ", "\n", 1) + ("" if p.verified else "\n(unverified)"))
            values.append(p.usd)
            colors.append("tab:gray")
        ax.bar(names, values, color=colors)
        ax.axhline(TARGET_USD_PER_MILLION, color="red", linestyle="--", label=f"target: ${TARGET_USD_PER_MILLION:g}")
        for i, v in enumerate(values):
            ax.text(i, v, f"${v:,.1f}", ha="center", va="bottom", fontsize=8)
        ax.set_yscale("log")
        ax.set_ylabel("USD per million steps (list price, log)")
        ax.set_title("Cost per million steps: Loom by result size vs peers (1 unit per step)")
        ax.tick_params(axis="x", labelsize=7)
        ax.legend(fontsize=8)
        save(fig, "cost_per_million.png")

    sweep = results.get("sweep")
    if sweep:
        fig, axes = plt.subplots(1, 3, figsize=(11, 3.8))
        rows = sweep["by_table_size"]
        axes[0].plot([r["sleeping"] for r in rows], [r["index_items_read"] for r in rows], marker="o")
        axes[0].set_xlabel("sleeping executions in the table")
        axes[0].set_ylabel("index items read per tick")
        axes[0].set_title(f"{rows[0]['due']:,} due, {rows[0]['shards']} shard")
        axes[0].set_ylim(bottom=0)
        rows = sweep["by_due"]
        axes[1].plot([r["due"] for r in rows], [r["index_items_read"] for r in rows], marker="o")
        axes[1].set_xlabel(f"due executions ({rows[0]['sleeping']:,} sleeping)")
        axes[1].set_title("by due work")
        axes[1].set_ylim(bottom=0)
        rows = sweep["by_shards"]
        axes[2].bar([str(r["shards"]) for r in rows], [r["queries"] for r in rows], label="Query calls")
        axes[2].plot([str(r["shards"]) for r in rows], [r["index_items_read"] for r in rows], color="tab:orange",
                     marker="o", label="index items read")
        axes[2].set_xlabel(f"shards ({rows[0]['sleeping']:,} sleeping, {rows[0]['due']:,} due)")
        axes[2].set_title("per tick")
        axes[2].legend(fontsize=8)
        fig.suptitle("Sweeper: index reads follow due work, not table size" if findings.sweep(sweep).ok
                     else "Sweeper: index reads per tick")
        save(fig, "sweeper.png")

    cold = results.get("coldstart")
    if cold:
        functions = [f for f, r in cold["venv"].items() if r.get("ok")]
        runs = cold.get("zip_runs") or []
        series = [("dev venv", {f: cold["venv"][f] for f in functions})]
        series += [(f"{r['dir']} zip, Python {r['python_version']}", r["functions"]) for r in runs]
        fig, ax = plt.subplots(figsize=(8, 4.2))
        x = range(len(functions))
        width = 0.8 / max(1, len(series))
        for k, (label, rows) in enumerate(series):
            offset = (k - (len(series) - 1) / 2) * width
            ax.bar([i + offset for i in x], [(rows.get(f) or {}).get("import_ms") or 0 for f in functions],
                   width=width, label=label)
        first = runs[0]["functions"] if runs else {f: cold["venv"][f] for f in functions}
        floors = [(first.get(f) or {}).get("floor_ms") for f in functions]
        if all(v is not None for v in floors):
            # Each handler's floor (boto3 + its clients, in the first zip run) and the target band above it.
            limit = cold.get("target_over_floor_ms", 100.0)
            for i, floor in zip(x, floors):
                ax.hlines(floor, i - 0.42, i + 0.42, color="black", linewidth=1.5,
                          label="floor: boto3 + its clients" if i == 0 else None)
                ax.hlines(floor + limit, i - 0.42, i + 0.42, color="black", linestyle=":",
                          label=f"floor + {limit:g} ms" if i == 0 else None)
        ax.axhline(TARGET_IMPORT_MS, color="red", linestyle="--", label=f"target: {TARGET_IMPORT_MS:g} ms")
        ax.set_xticks(list(x), functions)
        ax.set_ylabel("handler import (init), ms (median)")
        ax.set_title("Cold start: handler init")
        ax.legend(fontsize=8)
        save(fig, "import_time.png")
    return written
