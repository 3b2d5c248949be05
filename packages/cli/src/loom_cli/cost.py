"""``loom cost``: the cost ledgers of recent executions, summed per workflow and priced at AWS list prices
(``loom_cli.prices``). The list gives ids only, so each execution is one ``GET /executions/{id}``: the
command reads at most ``--max`` executions, a page at a time, and says when there were more."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from .prices import PRICES_CHECKED, ledger_usd, usd_text
from .render import table
from .sdk import LoomClient, LoomError, PAGE_MAX
from .sdk.models import Cost


@dataclass
class WorkflowCost:
    """One workflow's summed ledgers."""

    executions: int = 0
    without_ledger: int = 0
    """Executions with no ledger (not delivered yet, ended before any delivery, started before the ledger, or
    the ledger off)."""
    requests: int = 0
    read_units: float = 0.0
    write_units: float = 0.0
    messages: int = 0
    lambda_ms: int = 0
    statuses: dict[str, int] = field(default_factory=dict)

    def add(self, status: str, cost: Cost | None) -> None:
        self.executions += 1
        self.statuses[status] = self.statuses.get(status, 0) + 1
        if cost is None:
            self.without_ledger += 1
            return
        self.requests += cost.requests
        self.read_units += cost.read_units
        self.write_units += cost.write_units
        self.messages += cost.messages
        self.lambda_ms += cost.lambda_ms

    def usd(self, memory_mb: int) -> dict[str, float]:
        return ledger_usd(self.read_units, self.write_units, self.messages, self.lambda_ms, memory_mb)

    def document(self, memory_mb: int) -> dict[str, Any]:
        items = self.usd(memory_mb)
        return {"executions": self.executions, "without_ledger": self.without_ledger, "statuses": self.statuses,
                "requests": self.requests, "read_units": round(self.read_units, 1),
                "write_units": round(self.write_units, 1), "messages": self.messages, "lambda_ms": self.lambda_ms,
                "usd": sum(items.values()), "usd_by_item": items}


def summed(client: LoomClient, workflow: str | None, since: str | None, most: int) -> tuple[dict[str, WorkflowCost], bool]:
    """Each workflow's summed ledgers over the newest ``most`` executions that match; True when more matched."""
    out: dict[str, WorkflowCost] = {}
    seen, token = 0, None
    while seen < most:
        page = client.list_page(workflow=workflow, started_after=since, limit=min(PAGE_MAX, most - seen),
                                next_token=token)
        for entry in page.executions:
            try:
                e = client.get(entry.execution_id)
            except LoomError as exc:
                if exc.code == "execution_not_found":  # expired since the list read it
                    continue
                raise
            out.setdefault(e.workflow, WorkflowCost()).add(e.status, e.cost)
            seen += 1
        token = page.next_token
        if not token:
            return out, False
    return out, True


def run(client: LoomClient, args) -> int:
    costs, more = summed(client, args.workflow, args.since, args.max)
    if args.json:
        print(json.dumps({"workflows": {w: c.document(args.memory_mb) for w, c in sorted(costs.items())},
                          "more": more, "memory_mb": args.memory_mb, "prices_checked": PRICES_CHECKED},
                         indent=2, sort_keys=True))
        return 0
    if not costs:
        print("no executions match" + ("" if not args.workflow else f" (of workflow {args.workflow!r}: "
                                        "`loom workflows` lists the deployed ones)"))
        return 0
    rows = []
    for name, c in sorted(costs.items()):
        usd = sum(c.usd(args.memory_mb).values())
        counted = c.executions - c.without_ledger
        rows.append([name, c.executions, c.requests, f"{c.read_units:.1f}", f"{c.write_units:.1f}", c.messages,
                     f"{c.lambda_ms / 1000:.2f}", usd_text(usd), usd_text(usd / counted) if counted else "-"])
    print(table(["workflow", "executions", "requests", "read units", "write units", "messages", "worker s",
                 "usd", "usd/execution"], rows))
    uncounted = sum(c.without_ledger for c in costs.values())
    print(f"\nAWS list prices (us-east-1) read {PRICES_CHECKED}; worker at {args.memory_mb} MB (--memory-mb); "
          "each message priced as one Lambda invocation and 3 SQS requests; the sweeper, the control plane and "
          "idle polling are not per execution and not included (docs/operating.md#what-an-execution-cost).")
    if uncounted:
        print(f"{uncounted} execution(s) have no ledger (not delivered yet, ended before any delivery such as a cancel "
              "while queued, started before the ledger, or with LOOM_LEDGER=0): counted, not priced.")
    if more:
        print(f"more executions match: only the newest {args.max} were summed (raise --max, or narrow --since).")
    return 0
