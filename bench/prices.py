"""List prices (us-east-1) and always-free allowances, each a named constant with its source, and the
arithmetic that turns per-step counts into dollars and free-tier headroom.

Sources are the ones collected in ``shared/reference/peers.md`` (sections 2a and 2c), read on
PRICES_CHECKED. ``verified`` says whether the figure comes from AWS/the vendor itself or only from a
third-party transcription of the vendor's page; the report prints it beside every price.
"""

from __future__ import annotations

from dataclasses import dataclass

from loom_cli.prices import (  # noqa: F401  (one table: the CLI's `loom cost` prices the ledger with it)
    DYNAMODB_READ_REQUEST_UNIT,
    DYNAMODB_WRITE_REQUEST_UNIT,
    LAMBDA_GB_SECOND,
    LAMBDA_REQUEST,
    PRICES_CHECKED,
    SQS_REQUEST,
    Price,
)

SECONDS_PER_MONTH = 30 * 24 * 3600  # 2,592,000: a 30-day month, the convention AWS's examples use


# -- peers ------------------------------------------------------------------------------------------
STEP_FUNCTIONS_STANDARD = Price(
    "Step Functions Standard", 25.0, "per 1M state transitions",
    "aws/agent-toolkit-for-aws .../references/step-functions.md (peers.md 2a)", verified=True,
    note="AWS's own guide; excludes the Lambda that runs each Task state")
LAMBDA_DURABLE_OPERATIONS = Price(
    "Lambda durable functions", 8.0, "per 1M durable operations",
    "Lambda pricing worked example via api-evangelist/aws-lambda plans YAML (peers.md 2a)", verified=False,
    note="UNVERIFIED third-party transcription; plus compute, requests and storage written/persisted (rates not found)")
TEMPORAL_CLOUD_ACTIONS = Price(
    "Temporal Cloud", 50.0, "per 1M actions (first 5M; falls to $25/M above 100M)",
    "temporalio/documentation docs/evaluate/cloud/pricing.mdx (peers.md 2a)", verified=True,
    note="vendor docs; plus storage, and a $500/month minimum on Business")

DYNAMODB_PROVISIONED_WCU_HOUR = Price(
    "DynamoDB provisioned writes", 0.00065, "per WCU-hour",
    "zeonedge.com DynamoDB cost guide (third-party)", verified=False,
    note="UNVERIFIED third-party figure; used only for the what-if, never for the headline")

AWS_PRICES = [LAMBDA_REQUEST, LAMBDA_GB_SECOND, DYNAMODB_WRITE_REQUEST_UNIT, DYNAMODB_READ_REQUEST_UNIT, SQS_REQUEST,
              DYNAMODB_PROVISIONED_WCU_HOUR]
PEER_PRICES = [STEP_FUNCTIONS_STANDARD, LAMBDA_DURABLE_OPERATIONS, TEMPORAL_CLOUD_ACTIONS]

# -- always-free allowances (peers.md 2c "Always-free" row) ------------------------------------------
FREE_SOURCE = ("api-evangelist Lambda YAML; todayilearnedcloud; freetier.co; aws/agent-toolkit-for-aws free-tier.md "
               "(peers.md 2c). AWS's own guide says to check `aws freetier get-free-tier-usage` rather than trust memory")
FREE_LAMBDA_REQUESTS = 1_000_000
FREE_LAMBDA_GB_SECONDS = 400_000
FREE_DYNAMODB_WCU = 25  # provisioned capacity units, a rate, shared by the table and its GSIs
FREE_DYNAMODB_RCU = 25
FREE_SQS_REQUESTS = 1_000_000

# -- deployment assumptions the dollar figures need (not measured here) -------------------------------
ASSUMED_WORKER_MEMORY_MB = 256
ASSUMED_WORKER_BILLED_MS = 100
"""Per invocation: four to five in-region AWS calls at ~10-20 ms each plus ~1 ms of engine CPU (measured
below). Replace with the p50 Duration from CloudWatch once deployed; the report shows 50 and 200 ms too."""
SWEEPER_TICKS_PER_MONTH = SECONDS_PER_MONTH // 60  # EventBridge rate(1 minute): 43,200
ASSUMED_SWEEPER_MEMORY_MB = 256
ASSUMED_SWEEPER_BILLED_MS = 100
ASSUMED_ESM_IDLE_POLLERS = 5
"""Lambda's SQS event source mapping starts with five concurrent pollers (peers.md 2c); each long-polls
(20 s) when the queue is empty. How many stay active on an idle queue is not published: an assumption."""
ESM_LONG_POLL_S = 20


def usd_per_million(count_per_unit: float, price: Price) -> float:
    """Dollars per million units of work when each unit needs ``count_per_unit`` of ``price``'s unit
    (prices here are quoted per 1M of their unit, except GB-seconds)."""
    return count_per_unit * price.usd


def provisioned_usd_per_million_writes(utilization: float) -> float:
    """What a million write units cost on provisioned capacity used at ``utilization`` (0-1]."""
    return DYNAMODB_PROVISIONED_WCU_HOUR.usd / (3600 * utilization) * 1_000_000


def lambda_gb_seconds(invocations: float, memory_mb: int, billed_ms: float) -> float:
    return invocations * (memory_mb / 1024) * (billed_ms / 1000)


@dataclass(frozen=True)
class StepCost:
    """Per-step counts, all-in (share of the poller, the completion pass and the start)."""

    lambda_invocations: float
    dynamodb_wru: float
    dynamodb_rru: float
    sqs_billed_requests: float
    memory_mb: int = ASSUMED_WORKER_MEMORY_MB
    billed_ms: float = ASSUMED_WORKER_BILLED_MS
    wru_usd_per_million: float = DYNAMODB_WRITE_REQUEST_UNIT.usd

    @property
    def gb_seconds(self) -> float:
        return lambda_gb_seconds(self.lambda_invocations, self.memory_mb, self.billed_ms)

    def breakdown_usd_per_million(self) -> dict[str, float]:
        """Dollars per million steps, by line item."""
        return {
            "Lambda requests": usd_per_million(self.lambda_invocations, LAMBDA_REQUEST),
            "Lambda duration": self.gb_seconds * 1_000_000 * LAMBDA_GB_SECOND.usd,
            "DynamoDB writes": self.dynamodb_wru * self.wru_usd_per_million,
            "DynamoDB reads": usd_per_million(self.dynamodb_rru, DYNAMODB_READ_REQUEST_UNIT),
            "SQS requests": usd_per_million(self.sqs_billed_requests, SQS_REQUEST),
        }

    def usd_per_million(self) -> float:
        return sum(self.breakdown_usd_per_million().values())


@dataclass(frozen=True)
class FixedMonthly:
    """Requests and units that do not depend on step count: sweeper ticks and idle ESM polling."""

    lambda_invocations: float
    gb_seconds: float
    dynamodb_wcu: float
    dynamodb_rcu: float
    sqs_requests: float

    def usd(self) -> float:
        return (self.lambda_invocations / 1e6 * LAMBDA_REQUEST.usd + self.gb_seconds * LAMBDA_GB_SECOND.usd
                + self.dynamodb_wcu / 1e6 * DYNAMODB_WRITE_REQUEST_UNIT.usd
                + self.dynamodb_rcu / 1e6 * DYNAMODB_READ_REQUEST_UNIT.usd
                + self.sqs_requests / 1e6 * SQS_REQUEST.usd)


def idle_esm_receives_per_month(pollers: int = ASSUMED_ESM_IDLE_POLLERS, long_poll_s: int = ESM_LONG_POLL_S) -> int:
    return pollers * SECONDS_PER_MONTH // long_poll_s


def sweeper_fixed(queries_per_tick: float, rcu_per_tick: float) -> FixedMonthly:
    ticks = SWEEPER_TICKS_PER_MONTH
    return FixedMonthly(
        lambda_invocations=ticks,
        gb_seconds=lambda_gb_seconds(ticks, ASSUMED_SWEEPER_MEMORY_MB, ASSUMED_SWEEPER_BILLED_MS),
        dynamodb_wcu=0.0, dynamodb_rcu=ticks * rcu_per_tick, sqs_requests=0.0,
    )


@dataclass(frozen=True)
class FreeTierFit:
    """Steps per month inside each always-free allowance, after the fixed monthly usage."""

    lambda_requests: float
    lambda_gb_seconds: float
    dynamodb_wcu: float
    dynamodb_rcu: float
    sqs_requests: float

    def as_dict(self) -> dict[str, float]:
        return {"Lambda requests (1M/month)": self.lambda_requests,
                "Lambda GB-seconds (400k/month)": self.lambda_gb_seconds,
                "DynamoDB 25 WCU (sustained)": self.dynamodb_wcu,
                "DynamoDB 25 RCU (sustained)": self.dynamodb_rcu,
                "SQS requests (1M/month)": self.sqs_requests}

    def binding(self) -> tuple[str, float]:
        return min(self.as_dict().items(), key=lambda kv: kv[1])


def _fit(allowance: float, fixed: float, per_step: float) -> float:
    left = max(0.0, allowance - fixed)
    return float("inf") if per_step <= 0 else left / per_step


def free_tier_fit(step: StepCost, wcu_per_step: float, rcu_per_step: float, fixed: FixedMonthly) -> FreeTierFit:
    """Provisioned DynamoDB capacity is a rate: 25 units/s sustained is 25 x seconds-per-month units,
    and only if the load is perfectly even. Bursty traffic fits far fewer steps."""
    return FreeTierFit(
        lambda_requests=_fit(FREE_LAMBDA_REQUESTS, fixed.lambda_invocations, step.lambda_invocations),
        lambda_gb_seconds=_fit(FREE_LAMBDA_GB_SECONDS, fixed.gb_seconds, step.gb_seconds),
        dynamodb_wcu=_fit(FREE_DYNAMODB_WCU * SECONDS_PER_MONTH, fixed.dynamodb_wcu, wcu_per_step),
        dynamodb_rcu=_fit(FREE_DYNAMODB_RCU * SECONDS_PER_MONTH, fixed.dynamodb_rcu, rcu_per_step),
        sqs_requests=_fit(FREE_SQS_REQUESTS, fixed.sqs_requests, step.sqs_billed_requests),
    )
