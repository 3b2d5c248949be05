"""Formatting shared by the report's text modules: numbers, money, verdicts, lists of calls."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any

RUN_ALL = "make bench"
PY = ".venv/bin/python -m bench"
API_ORDER = ["dynamodb:GetItem", "dynamodb:UpdateItem", "dynamodb:TransactWriteItems", "dynamodb:PutItem",
             "dynamodb:Query", "sqs:SendMessage", "sqs:ReceiveMessage", "sqs:DeleteMessageBatch", "lambda:Invoke"]
Write = Callable[[str], None]


def cmd(section: str) -> str:
    return f"`{RUN_ALL}` (this section alone: `{PY} --only {section}`)"


def fmt(x: float | None, digits: int = 2) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    if isinstance(x, float) and math.isinf(x):
        return "unbounded"
    if abs(x - round(x)) < 1e-9:
        return f"{int(round(x)):,}"
    return f"{x:,.{digits}f}"


def usd(x: float) -> str:
    return f"${x:,.2f}" if x >= 0.995 else f"${x:,.3f}"


def steps_count(n: float) -> str:
    if math.isinf(n):
        return "unbounded"
    if n >= 1e6:
        return f"{n / 1e6:,.2f}M"
    if n >= 1e3:
        return f"{n / 1e3:,.0f}k"
    return f"{n:,.0f}"


def verdict(ok: bool) -> str:
    return "**met**" if ok else "**missed**"


def met(ok: bool) -> str:
    return "met" if ok else "missed"


def and_join(parts: Iterable[str]) -> str:
    parts = list(parts)
    if len(parts) <= 1:
        return "".join(parts) or "nothing"
    return ", ".join(parts[:-1]) + " and " + parts[-1]


def calls(requests: dict[str, float]) -> str:
    """{"dynamodb:PutItem": 2, "sqs:SendMessage": 1} -> "2 PutItem and 1 SendMessage"."""
    order = {api: i for i, api in enumerate(API_ORDER)}
    apis = sorted(requests, key=lambda a: (order.get(a, len(order)), a))
    return and_join(f"{fmt(requests[a])} {a.split(':', 1)[1]}" for a in apis)


def api_table(w: Write, columns: list[tuple[str, dict[str, Any]]]) -> None:
    apis = [a for a in API_ORDER if any(c[1]["requests"].get(a, 0) for c in columns)]
    apis += sorted({a for c in columns for a, n in c[1]["requests"].items() if n and a not in apis})
    w("| API | " + " | ".join(name for name, _ in columns) + " |")
    w("|---|" + "---:|" * len(columns))
    for api in apis:
        w(f"| {api} | " + " | ".join(fmt(c["requests"].get(api, 0)) for _, c in columns) + " |")
    w("| **DynamoDB + SQS requests** | " + " | ".join(f"**{fmt(c['aws_requests'])}**" for _, c in columns) + " |")
    if all(isinstance(c.get("sqs_billed"), (int, float)) and not math.isnan(c["sqs_billed"]) for _, c in columns):
        w("| SQS billed requests (64 KB chunks) | " + " | ".join(fmt(c["sqs_billed"]) for _, c in columns) + " |")
