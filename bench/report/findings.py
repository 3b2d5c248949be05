"""What the results say: every number, comparison and verdict the report states, computed from them.

Pure functions over the section results (the dicts ``python -m bench`` caches in ``bench/.results/``)
and the v1 baseline. ``text.py`` only words what these return, so no sentence of the report can
claim what the data does not show; ``bench/tests/test_report.py`` feeds altered results through both.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import analysis, prices
from ..analysis import TARGET_REQUESTS, TARGET_USD_PER_MILLION, TARGET_WRITE_UNITS

BASELINE = Path(__file__).resolve().parent.parent / "baseline" / "v1.json"
INSTRUCTIONS_BEFORE = BASELINE.parent / "instructions-before-issue22-cpu.json"
"""The cold start section as measured at the commit before issue 22's handler-import work (the zips)."""
"""The cold start section's results at the commit before issue 15 (the "before" of its before/after)."""
TARGET_SIZES = ("100 B", "1 KB")
"""The result sizes the per-step targets are stated for."""

# The step path v2 issue's targets for a step of a sequential execution, happy path.
TARGET_WRITE_REQUESTS = 2
TARGET_ROUND_TRIPS = 2
TARGET_V2_WRITE_UNITS = {"100 B": 2.0, "1 KB": 3.0}
TARGET_V2_USD = {"100 B": 1.50, "1 KB": 2.00}
TARGET_CPU_US = 100.0

PARTITION_WCU_PER_S = 1000
"""DynamoDB's documented per-partition write limit (a table partition or a GSI partition)."""
TABLE_WCU_PER_S = 40_000
"""The default on-demand table throughput quota (per table, adjustable)."""
FREE_TIER_WCU = prices.FREE_DYNAMODB_WCU
INDEX_WRITES_PER_HANDOFF = 4
"""Due-index writes of one step handed on through the queue: the commit moves the key to the message's
lease (delete + put), and the next delivery's claim moves it to the claim's lease (delete + put)."""
RATES = (10, 100, 1000)
HEADROOM = 0.5
"""Plan shards to run each index partition at half its limit."""
SQS_CHUNK_BYTES = 64 * 1024
"""SQS bills each started 64 KB of a message's payload as one request."""
_WRITE_APIS = ("dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem", "dynamodb:TransactWriteItems",
               "dynamodb:BatchWriteItem")
_EPS = 1e-9


@dataclass(frozen=True)
class Check:
    """One measured figure against its target."""

    name: str
    """What is measured, e.g. "requests per step"."""
    subject: str
    """Which case: a result size, a function."""
    value: float
    limit: float
    ok: bool


def baseline() -> dict[str, Any]:
    return json.loads(BASELINE.read_text())


def instructions_before() -> dict[str, Any]:
    """Instructions per step before issue 22's step-path CPU work (``bench/instructions.py`` at that commit)."""
    return json.loads(INSTRUCTIONS_BEFORE.read_text())


def nonzero(requests: dict[str, float], *, aws_only: bool = True) -> dict[str, float]:
    """The APIs called at all, without Lambda invocations unless ``aws_only`` is false."""
    return {api: n for api, n in requests.items() if n > _EPS and not (aws_only and api.startswith("lambda:"))}


def difference(more: dict[str, float], less: dict[str, float]) -> dict[str, float]:
    """Per API, what ``more`` calls beyond ``less`` (only the APIs where it calls more)."""
    return {api: n - less.get(api, 0) for api, n in sorted(more.items()) if n - less.get(api, 0) > _EPS}


def reference_size(steps: dict[str, Any]) -> str:
    """The size the prose describes: 1 KB when measured, else the first one."""
    return "1 KB" if "1 KB" in steps["sizes"] else next(iter(steps["sizes"]))


# -- targets -------------------------------------------------------------------------------------------
def request_checks(steps: dict[str, Any]) -> list[Check]:
    return [Check("requests per step", label, p["aws_requests"], TARGET_REQUESTS, p["aws_requests"] <= TARGET_REQUESTS)
            for label in TARGET_SIZES if (p := steps["sizes"].get(label, {}).get("per_step"))]


def write_unit_checks(steps: dict[str, Any]) -> list[Check]:
    return [Check("write units per step", label, p["write_units"], TARGET_WRITE_UNITS,
                  p["write_units"] <= TARGET_WRITE_UNITS)
            for label in TARGET_SIZES if (p := steps["sizes"].get(label, {}).get("per_step"))]


def usd_check(steps: dict[str, Any]) -> Check | None:
    if "1 KB" not in steps["sizes"]:
        return None
    usd = analysis.step_cost(steps["sizes"]["1 KB"]["per_step"]).usd_per_million()
    return Check("USD per million steps", "1 KB", usd, TARGET_USD_PER_MILLION, usd < TARGET_USD_PER_MILLION)


def all_met(checks: list[Check]) -> bool:
    return all(c.ok for c in checks)


# -- requests ------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Requests:
    """Where a step's requests go (the reference size), from the marginal per-step counts."""

    label: str
    per_step: dict[str, float]
    """DynamoDB and SQS calls of a happy step."""
    per_execution: dict[str, float]
    """Calls an execution pays once (start, first delivery, end)."""
    retry_extra: dict[str, float]
    """What a step that fails once calls beyond a happy one."""
    worker_invocations: float
    retry_invocations: float
    execution_invocations: float
    receives_per_step: float
    """The poller's ReceiveMessage per step of one sequential execution."""


def requests(steps: dict[str, Any]) -> Requests:
    label = reference_size(steps)
    s = steps["sizes"][label]
    happy, retry, fixed = s["per_step"], s["per_step_with_one_retry"], s["per_execution_fixed"]
    return Requests(label=label, per_step=nonzero(happy["requests"]), per_execution=nonzero(fixed["requests"]),
                    retry_extra=difference(nonzero(retry["requests"]), nonzero(happy["requests"])),
                    worker_invocations=analysis.worker_invocations(happy),
                    retry_invocations=analysis.worker_invocations(retry),
                    execution_invocations=analysis.worker_invocations(fixed),
                    receives_per_step=happy["requests"].get("sqs:ReceiveMessage", 0.0))


def runs_identical(steps: dict[str, Any]) -> bool:
    return all(s["runs_identical"] for s in steps["sizes"].values())


def trace_residual_units(steps: dict[str, Any]) -> float:
    """Write units of the per-step figure that the traced step's own calls do not account for."""
    label = reference_size(steps)
    rows = steps["traces"].get(label, {}).get("happy", [])
    return steps["sizes"][label]["per_step"]["write_units"] - sum(r["wcu"] + r["gsi_wcu"] for r in rows)


# -- capacity ------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Capacity:
    label: str
    write_units: float
    table_units: float
    index_units: float
    execution_index_units: float
    """Index write units an execution pays once (its start and end)."""
    message_bytes: tuple[float, float]
    """Smallest and largest SQS message body over the result sizes."""
    message_chunks: int
    """Billed 64 KB chunks of the largest message."""
    units_per_result_kb: float | None
    """Write units per step added by each further KB of result, from the smallest to the largest size."""


def capacity(steps: dict[str, Any]) -> Capacity:
    label = reference_size(steps)
    s = steps["sizes"][label]
    p = s["per_step"]
    messages = [t.get("sqs_bytes_per_message", 0) for t in steps["traces"].values()] or [0]
    measured = sorted(steps["sizes"].values(), key=lambda x: x["bytes"])
    first, last = measured[0], measured[-1]
    slope = None
    if last["bytes"] > first["bytes"]:
        slope = ((last["per_step"]["write_units"] - first["per_step"]["write_units"])
                 / ((last["bytes"] - first["bytes"]) / 1024))
    return Capacity(label=label, write_units=p["write_units"], table_units=p["wcu_table"], index_units=p["wcu_gsi"],
                    execution_index_units=s["per_execution_fixed"].get("wcu_gsi", 0.0),
                    message_bytes=(min(messages), max(messages)),
                    message_chunks=max(1, math.ceil(max(messages) / SQS_CHUNK_BYTES)),
                    units_per_result_kb=slope)


# -- dollars -------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Dollars:
    usd: float
    """Per million steps of 1 KB results, list price, on demand."""
    write_share: float
    """DynamoDB writes' share of it."""
    sqs_per_step: float
    invocations_per_step: float
    usd_per_write_unit: float
    """What one write unit per step adds per million steps on demand."""
    provisioned_usd: float
    """The same step on provisioned capacity at 70% utilisation."""
    cheapest_peer: prices.Price
    peer_ratio: float
    """The cheapest peer's price over Loom's."""


PROVISIONED_UTILIZATION = 0.7


def dollars(steps: dict[str, Any]) -> Dollars | None:
    if "1 KB" not in steps["sizes"]:
        return None
    p = steps["sizes"]["1 KB"]["per_step"]
    cost = analysis.step_cost(p)
    usd = cost.usd_per_million()
    writes = cost.breakdown_usd_per_million()["DynamoDB writes"]
    provisioned = analysis.what_if(
        p, wru_usd_per_million=prices.provisioned_usd_per_million_writes(PROVISIONED_UTILIZATION)).usd_per_million()
    peer = min(prices.PEER_PRICES, key=lambda x: x.usd)
    return Dollars(usd=usd, write_share=writes / usd if usd else 0.0,
                   sqs_per_step=sum(n for a, n in p["requests"].items() if a.startswith("sqs:")),
                   invocations_per_step=analysis.worker_invocations(p),
                   usd_per_write_unit=prices.DYNAMODB_WRITE_REQUEST_UNIT.usd, provisioned_usd=provisioned,
                   cheapest_peer=peer, peer_ratio=peer.usd / usd if usd else math.inf)


@dataclass(frozen=True)
class FreeTier:
    label: str
    binding: str
    steps: float
    binding_without_idle_polls: str
    steps_without_idle_polls: float
    idle_receives_per_month: float
    write_units: float
    steps_per_s_on_free_wcu: float


def free_tier(steps: dict[str, Any]) -> FreeTier | None:
    if "1 KB" not in steps["sizes"]:
        return None
    p = steps["sizes"]["1 KB"]["per_step"]
    fixed = analysis.fixed_monthly()
    name, n = analysis.free_tier(p, fixed).binding()
    name_quiet, n_quiet = analysis.free_tier(p, analysis.fixed_monthly(idle_pollers=0)).binding()
    return FreeTier(label="1 KB", binding=allowance_name(name), steps=n,
                    binding_without_idle_polls=allowance_name(name_quiet), steps_without_idle_polls=n_quiet,
                    idle_receives_per_month=fixed.sqs_requests, write_units=p["write_units"],
                    steps_per_s_on_free_wcu=FREE_TIER_WCU / p["write_units"] if p["write_units"] else math.inf)


def allowance_name(name: str) -> str:
    """"DynamoDB 25 WCU (sustained)" -> "DynamoDB 25 WCU"."""
    return name.split(" (")[0]


# -- sweeper -------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Sweep:
    flat_in_table_size: bool
    """Index items read do not change with the sleeping executions in the table."""
    follows_due: bool
    """Index items read equal the due executions."""
    queries_per_shard: float
    """Query calls per shard per tick, at the fewest due executions."""
    extra_queries_at_most_due: float
    """Query calls beyond those at the most due executions (one shard)."""
    most_due: float
    rcu_per_shard: float
    """Read units per shard per tick when (nearly) idle."""
    most_shards: int
    rcu_per_tick_at_most_shards: float
    usd_per_month_at_most_shards: float
    per_redrive: dict[str, float]
    """Requests per re-driven execution, by API."""
    runs_identical: bool

    @property
    def ok(self) -> bool:
        return self.flat_in_table_size and self.follows_due


def sweep(result: dict[str, Any]) -> Sweep:
    by_size, by_due, by_shards = result["by_table_size"], result["by_due"], result["by_shards"]
    fewest, most = min(by_due, key=lambda r: r["due"]), max(by_due, key=lambda r: r["due"])
    widest = max(by_shards, key=lambda r: r["shards"])
    redriven = [r for k in ("by_table_size", "by_due", "by_shards") for r in result[k] if r["redriven"]]
    total = sum(r["redriven"] for r in redriven) or 1
    per_redrive = {api: sum(r[key] for r in redriven) / total
                   for api, key in (("dynamodb:GetItem", "get_items"), ("dynamodb:PutItem", "put_items"),
                                    ("sqs:SendMessage", "sends"))}
    rcu_tick = widest["query_rcu"]
    return Sweep(
        flat_in_table_size=len({r["index_items_read"] for r in by_size}) == 1,
        follows_due=all(r["index_items_read"] == r["due"] for r in by_due),
        queries_per_shard=min(r["queries"] / r["shards"] for r in by_shards),
        extra_queries_at_most_due=most["queries"] - fewest["queries"], most_due=most["due"],
        rcu_per_shard=min(r["query_rcu"] / r["shards"] for r in by_shards),
        most_shards=widest["shards"], rcu_per_tick_at_most_shards=rcu_tick,
        usd_per_month_at_most_shards=rcu_tick * prices.SWEEPER_TICKS_PER_MONTH / 1e6
        * prices.DYNAMODB_READ_REQUEST_UNIT.usd,
        per_redrive={a: n for a, n in per_redrive.items() if n > _EPS},
        runs_identical=all(r["runs_identical"] for k in ("by_table_size", "by_due", "by_shards") for r in result[k]))


# -- the local runtime ---------------------------------------------------------------------------------
def predicted_local(steps: dict[str, Any], n_steps: int) -> dict[str, Any] | None:
    """What the in-process counts predict for one ``n_steps``-step execution of 100 B results."""
    s = steps["sizes"].get("100 B") if steps else None
    if not s:
        return None
    per = analysis.all_in(s["per_step"], s["per_execution_fixed"], steps=n_steps)
    return {"requests": {a: n * n_steps for a, n in per["requests"].items()},
            "aws_requests": per["aws_requests"] * n_steps, "sqs_billed": per["sqs_billed"] * n_steps}


def happy_run(local: dict[str, Any]) -> dict[str, Any]:
    """The local runtime's happy-path run (the first one when none is named so)."""
    runs = local["runs"]
    return next((run for name, run in runs.items() if name.startswith("happy")), next(iter(runs.values())))


def matches_prediction(predicted: dict[str, Any], measured: dict[str, Any]) -> bool:
    """The same calls, API by API (Lambda invocations included)."""
    a, b = nonzero(predicted["requests"], aws_only=False), nonzero(measured["requests"], aws_only=False)
    return a.keys() == b.keys() and all(abs(a[k] - b[k]) < 1e-6 for k in a)


def invocations_are_batches_plus_starts(local: dict[str, Any]) -> bool:
    """Under load, lambda:Invoke per execution equals the worker batches shared out plus its one start."""
    burst = local["burst"]
    expected = burst["batches"] / burst["executions"] + 1
    return abs(burst["per_execution"]["requests"].get("lambda:Invoke", 0) - expected) < 1e-6


# -- the step path v2 against v1 -----------------------------------------------------------------------
def write_requests(per_step: dict[str, Any]) -> float:
    return sum(v for api, v in per_step["requests"].items() if api in _WRITE_APIS)


def round_trips(per_step: dict[str, Any]) -> float:
    """Calls the step waits for on the step path: reads and writes to DynamoDB and sends to SQS."""
    return sum(v for api, v in per_step["requests"].items() if api.startswith("dynamodb:") or api == "sqs:SendMessage")


def reads(per_step: dict[str, Any]) -> float:
    return per_step["requests"].get("dynamodb:GetItem", 0) + per_step["requests"].get("dynamodb:Query", 0)


def sqs_requests(per_step: dict[str, Any]) -> float:
    return per_step["requests"].get("sqs:SendMessage", 0) + per_step["requests"].get("sqs:ReceiveMessage", 0)


@dataclass(frozen=True)
class Versus:
    """One row of the v1/v2 table."""

    label: str
    old: float
    new: float
    target: str
    ok: bool
    digits: int = 2


def versus(steps: dict[str, Any], overhead: dict[str, Any] | None, base: dict[str, Any]) -> list[Versus]:
    rows: list[Versus] = []
    for label in TARGET_SIZES:
        new, old = steps["sizes"].get(label, {}).get("per_step"), base["steps"].get(label)
        if not new or not old:
            continue
        inv_new = analysis.worker_invocations(new)
        usd_old, usd_new = analysis.step_cost(old).usd_per_million(), analysis.step_cost(new).usd_per_million()
        rows += [
            Versus(f"DynamoDB write requests ({label})", write_requests(old), write_requests(new),
                   f"<= {TARGET_WRITE_REQUESTS}", write_requests(new) <= TARGET_WRITE_REQUESTS),
            Versus(f"durable round trips the step waits for ({label})", round_trips(old), round_trips(new),
                   f"<= {TARGET_ROUND_TRIPS}", round_trips(new) <= TARGET_ROUND_TRIPS),
            Versus(f"write units, table + index ({label})", old["write_units"], new["write_units"],
                   f"<= {TARGET_V2_WRITE_UNITS[label]:g}", new["write_units"] <= TARGET_V2_WRITE_UNITS[label]),
            Versus(f"SQS requests ({label})", sqs_requests(old), sqs_requests(new), "0 while chained",
                   sqs_requests(new) < 0.5),
            Versus(f"Lambda invocations ({label})", analysis.worker_invocations(old), inv_new, "0 while chained",
                   inv_new < 0.5),
            Versus(f"reads ({label})", reads(old), reads(new), "<= 1 per invocation",
                   reads(new) <= max(inv_new, 1 / steps["n_steps"])),
            Versus(f"$ per million steps, list price ({label})", usd_old, usd_new, f"<= {TARGET_V2_USD[label]:.2f}",
                   usd_new <= TARGET_V2_USD[label]),
        ]
    for size, label in (("100", "100 B"), ("10240", "10 KB")):
        new = (overhead or {}).get("sizes", {}).get(size)
        old = base["overhead_us_per_step"].get(size)
        if new and old:
            rows.append(Versus(f"engine CPU per step, memory store ({label} results)", old,
                               new["per_transition_cpu_us"], f"<= {TARGET_CPU_US:g} µs",
                               new["per_transition_cpu_us"] <= TARGET_CPU_US, digits=0))
    return rows


def shards_for(rate: float) -> int:
    return max(1, math.ceil(rate * INDEX_WRITES_PER_HANDOFF / (PARTITION_WCU_PER_S * HEADROOM)))


def ratio(new: float, old: float) -> float:
    return new / old if old else math.inf


# -- fan-out -------------------------------------------------------------------------------------------
FANOUT_FLAT = 0.05
"""Per-branch figures within 5% of each other from the smallest to the largest map count as flat."""


@dataclass(frozen=True)
class FanoutTrend:
    """How one per-branch figure moves from the smallest map measured to the largest."""

    figure: str
    """The key in ``per_branch`` (``write_units``, ``rcu``, ...)."""
    smallest: float
    largest: float

    @property
    def flat(self) -> bool:
        return abs(self.largest - self.smallest) <= FANOUT_FLAT * max(abs(self.smallest), 1e-9)

    @property
    def grows(self) -> bool:
        return not self.flat and self.largest > self.smallest


@dataclass(frozen=True)
class Fanout:
    cases: list[dict[str, Any]]
    """The measured maps, fewest branches first."""
    all_completed: bool
    trends: list[FanoutTrend]
    """Per figure, smallest against largest map (empty with one case)."""


FANOUT_FIGURES = ("write_units", "rcu", "sqs_messages_sent", "join_writes")


def fanout(section: dict[str, Any]) -> Fanout:
    cases = sorted(section.get("cases", []), key=lambda c: c["branches"])
    trends = []
    if len(cases) > 1:
        first, last = cases[0]["per_branch"], cases[-1]["per_branch"]
        trends = [FanoutTrend(k, first[k], last[k]) for k in FANOUT_FIGURES]
    return Fanout(cases, all(c["execution"]["status"] == "COMPLETED" and not c["execution"]["errors"] for c in cases),
                  trends)


CODE_TOLERANCE = 0.10
"""Code-first's target: per-step requests, write units and engine CPU within 10% of the step list's."""


def code_first(code: dict[str, Any]) -> tuple[dict[str, str], bool]:
    """Code-first beside the step list (``bench/code.py``'s verdict, figure by figure): the ratios to state,
    by measure (requests, write units, CPU, instructions: one ratio, or the lowest and highest over the
    cases), and whether every figure is within ``CODE_TOLERANCE``."""
    from ..code import verdict as figures_of

    figures = figures_of(code, CODE_TOLERANCE)
    spans: dict[str, str] = {}
    for label, prefix in (("requests", "aws_requests"), ("write units", "write_units"), ("CPU", "cpu"),
                          ("instructions", "instructions")):
        ratios = [v["ratio"] for name, v in figures.items() if name.startswith(prefix)]
        if ratios:
            low, high = min(ratios), max(ratios)
            spans[label] = f"{low:.2f}x" if round(low, 2) == round(high, 2) else f"{low:.2f}-{high:.2f}x"
    return spans, all(v["within"] for v in figures.values())

