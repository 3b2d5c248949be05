"""Derived figures: dollars per million steps, free-tier headroom and the targets, from the raw
section results. Pure functions over dicts, so the report and the tests share them."""

from __future__ import annotations

from typing import Any

from . import prices

TARGET_REQUESTS = 2
TARGET_WRITE_UNITS = 3
TARGET_USD_PER_MILLION = 2.0
TARGET_IMPORT_MS = 300.0
TARGET_OVER_FLOOR_MS = 100.0
"""Issue 15: a handler's import within this much of the floor (boto3 and the clients the handler creates)."""
DEFAULT_SHARDS = 4
EXECUTION_STEPS_FOR_ALL_IN = 5


def worker_invocations(per_step: dict[str, Any]) -> float:
    return per_step["requests"].get("lambda:Invoke", 0.0)


def step_cost(per_step: dict[str, Any], billed_ms: float = prices.ASSUMED_WORKER_BILLED_MS) -> prices.StepCost:
    return prices.StepCost(lambda_invocations=worker_invocations(per_step), dynamodb_wru=per_step["write_units"],
                           dynamodb_rru=per_step["rcu"], sqs_billed_requests=per_step["sqs_billed"],
                           billed_ms=billed_ms)


def what_if(per_step: dict[str, Any], write_units: float | None = None, sqs_billed: float | None = None,
            invocations: float | None = None, wru_usd_per_million: float | None = None) -> prices.StepCost:
    """The step's cost with some counts or the write price replaced (for the report's what-ifs)."""
    base = step_cost(per_step)
    return prices.StepCost(
        lambda_invocations=base.lambda_invocations if invocations is None else invocations,
        dynamodb_wru=base.dynamodb_wru if write_units is None else write_units,
        dynamodb_rru=base.dynamodb_rru,
        sqs_billed_requests=base.sqs_billed_requests if sqs_billed is None else sqs_billed,
        wru_usd_per_million=prices.DYNAMODB_WRITE_REQUEST_UNIT.usd if wru_usd_per_million is None else wru_usd_per_million,
    )


def all_in(per_step: dict[str, Any], fixed: dict[str, Any], steps: int = EXECUTION_STEPS_FOR_ALL_IN) -> dict[str, Any]:
    """Per step of a ``steps``-step execution, its start and completion included."""
    out: dict[str, Any] = {}
    for key, value in per_step.items():
        if key == "requests":
            apis = set(value) | set(fixed["requests"])
            out[key] = {a: value.get(a, 0) + fixed["requests"].get(a, 0) / steps for a in sorted(apis)}
        elif isinstance(value, (int, float)):
            out[key] = value + fixed.get(key, 0) / steps
    return out


def sweeper_idle_rcu_per_tick(shards: int) -> float:
    """One eventually consistent Query per shard, each at least half a read unit."""
    return shards * 0.5


def fixed_monthly(shards: int = DEFAULT_SHARDS, idle_pollers: int = prices.ASSUMED_ESM_IDLE_POLLERS) -> prices.FixedMonthly:
    sweeper = prices.sweeper_fixed(queries_per_tick=shards, rcu_per_tick=sweeper_idle_rcu_per_tick(shards))
    return prices.FixedMonthly(
        lambda_invocations=sweeper.lambda_invocations, gb_seconds=sweeper.gb_seconds,
        dynamodb_wcu=0.0, dynamodb_rcu=sweeper.dynamodb_rcu,
        sqs_requests=prices.idle_esm_receives_per_month(idle_pollers),
    )


def free_tier(per_step: dict[str, Any], fixed: prices.FixedMonthly) -> prices.FreeTierFit:
    return prices.free_tier_fit(step_cost(per_step), per_step["write_units"], per_step["rcu"], fixed)


def peer_rows(loom_usd: float) -> list[dict[str, Any]]:
    rows = [{"system": "Loom (this bench, 1 KB results)", "usd_per_million_steps": loom_usd,
             "basis": "measured counts x AWS list prices", "verified": False}]
    for p in prices.PEER_PRICES:
        rows.append({"system": p.name, "usd_per_million_steps": p.usd, "basis": f"${p.usd:g} {p.unit}, 1 per step",
                     "verified": p.verified, "note": p.note})
    return rows
