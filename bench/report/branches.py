"""The fan-out section of docs/benchmarks.md: what one branch of a map step costs, from ``bench.fanout``."""

from __future__ import annotations

from typing import Any

from . import findings
from ._fmt import Write, and_join, calls, cmd, fmt

_NAMES = {"write_units": "write units", "rcu": "read units", "sqs_messages_sent": "SQS messages",
          "join_writes": "join-item writes"}


def fanout_section(w: Write, section: dict[str, Any]) -> None:
    f = findings.fanout(section)
    if not f.cases:
        return
    w("## Fan-out: what a branch of a map step costs\n")
    w(f"Command: {cmd('fanout')} (one map alone: `.venv/bin/python -m bench.fanout --branches N --max-concurrency C`).\n")
    w("The real `Engine` on `DynamoStore` + `SqsQueue` over moto runs a workflow of three steps whose middle one maps "
      f"over N items ({section.get('result_bytes', '?')} B results), every message handled as the worker would. "
      "Per-branch figures are marginal: the execution's totals minus those of the same map over one item, divided "
      "by N - 1, so what an execution pays once is left out and each branch's share of the fan-in is kept. Write and "
      "read units are priced by `bench/capacity.py` from the items each call touched (a transactional write costs "
      "twice).\n")
    w("| Branches, at most running | Execution | Write units per branch (table + index) | Read units per branch | "
      "SQS messages per branch | Join-item writes per branch | DynamoDB requests per branch | Whole execution | Took |")
    w("|---|---|---:|---:|---:|---:|---|---:|---:|")
    for c in f.cases:
        p, e = c["per_branch"], c["execution"]
        requests = {api: n for api, n in p["dynamodb_requests"].items() if abs(n) > 1e-9}
        w(f"| {fmt(c['branches'])}, {fmt(c['max_concurrency'])} | {e['status']}"
          f"{' (errors: ' + str(e['errors']) + ')' if e['errors'] else ''} | {fmt(p['write_units'])} "
          f"({fmt(p['wcu_table'])} + {fmt(p['wcu_gsi'])}) | {fmt(p['rcu'])} | {fmt(p['sqs_messages_sent'])} | "
          f"{fmt(p['join_writes'])} | {calls(requests)} | {fmt(e['write_units'], 0)} write units, "
          f"{fmt(sum(e['dynamodb_requests'].values()))} requests | {fmt(c.get('seconds'), 0)} s |")
    w("")
    status = ("every map completed with no error on the wire" if f.all_completed
              else "a map did not complete cleanly (see its row)")
    if not f.trends:
        w(f"**{status.capitalize()}.** One map size measured: run without `--quick` for how the cost moves with size.\n")
        return
    small, large = fmt(f.cases[0]["branches"]), fmt(f.cases[-1]["branches"])
    flat = [t for t in f.trends if t.flat]
    moved = [t for t in f.trends if not t.flat]
    parts = []
    if flat:
        parts.append(f"per branch, {and_join(f'{_NAMES[t.figure]} ({fmt(t.smallest)})' for t in flat)} "
                     f"{'stays' if len(flat) == 1 else 'stay'} the same from {small} to {large} branches")
    for t in moved:
        parts.append(f"{_NAMES[t.figure]} per branch {'grow' if t.grows else 'fall'} from {fmt(t.smallest)} at {small} "
                     f"branches to {fmt(t.largest)} at {large}")
    w(f"**The cost of a branch against the map's size: {'; '.join(parts)}; {status}.**\n")
