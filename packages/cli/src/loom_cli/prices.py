"""AWS list prices (us-east-1) the cost ledger is priced at, each a named constant with its source: the one
table ``loom cost`` and ``make bench`` (``bench/prices.py`` imports these) both use.

``verified`` says whether the figure comes from AWS itself or only from a third-party transcription of
its page; ``loom cost`` prints the date they were read.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

PRICES_CHECKED = "2026-11-29"


@dataclass(frozen=True)
class Price:
    name: str
    usd: float
    unit: str
    source: str
    verified: bool
    note: str = ""


# -- AWS, the stack Loom runs on ---------------------------------------------------------------------
LAMBDA_REQUEST = Price(
    "Lambda requests", 0.20, "per 1M invocations",
    "aws.amazon.com/lambda/pricing, as transcribed in api-evangelist/aws-lambda plans/aws-lambda-plans-pricing.yml "
    "(peers.md 2a)", verified=False, note="third-party transcription of the AWS page")
LAMBDA_GB_SECOND = Price(
    "Lambda duration (x86)", 0.0000166667, "per GB-second",
    "same as Lambda requests (peers.md 2a)", verified=False, note="third-party transcription of the AWS page")
DYNAMODB_WRITE_REQUEST_UNIT = Price(
    "DynamoDB on-demand writes", 0.625, "per 1M write request units",
    "airbyte.com DynamoDB pricing page (peers.md 2c), after AWS's November-2024 50% on-demand cut", verified=False,
    note="third-party; some older pages still quote the pre-cut $1.25")
DYNAMODB_READ_REQUEST_UNIT = Price(
    "DynamoDB on-demand reads", 0.125, "per 1M read request units",
    "airbyte.com DynamoDB pricing page (peers.md 2c)", verified=False,
    note="third-party; one RRU = one strongly consistent or two eventually consistent reads of <= 4 KB")
SQS_REQUEST = Price(
    "SQS standard requests", 0.40, "per 1M requests (each 64 KB chunk of payload is one request)",
    "factualminds.com / cloudburn.io SQS pricing guides, 2026 (peers.md 2c)", verified=False,
    note="third-party; two independent guides agree")

# -- pricing a cost ledger ------------------------------------------------------------------------------
WORKER_MEMORY_MB = 512
"""The worker's memory unless told otherwise: Terraform's ``worker_memory_mb`` default."""
SQS_REQUESTS_PER_MESSAGE = 3
"""A step message is sent, received and deleted: three SQS requests (batched receives and deletes cost less:
an upper bound)."""


def ledger_usd(read_units: float, write_units: float, messages: int, lambda_ms: int,
               memory_mb: int = WORKER_MEMORY_MB) -> dict[str, float]:
    """Dollars by line item for a ledger's counts at these list prices. Each delivering message is priced as
    one Lambda invocation (a batch of one: an upper bound) and three SQS requests; Lambda duration is the
    ledger's worker milliseconds at ``memory_mb`` (unrounded: Lambda bills whole milliseconds per invocation).
    DynamoDB requests cost nothing by themselves on demand: their units do."""
    return {
        "Lambda requests": messages * LAMBDA_REQUEST.usd / 1e6,
        "Lambda duration": lambda_ms / 1000 * memory_mb / 1024 * LAMBDA_GB_SECOND.usd,
        "DynamoDB reads": read_units * DYNAMODB_READ_REQUEST_UNIT.usd / 1e6,
        "DynamoDB writes": write_units * DYNAMODB_WRITE_REQUEST_UNIT.usd / 1e6,
        "SQS requests": messages * SQS_REQUESTS_PER_MESSAGE * SQS_REQUEST.usd / 1e6,
    }


def usd_text(usd: float) -> str:
    """A small dollar amount people can read: $0.0000123, $0.0450, $1.24 (three significant digits below a
    dollar, never an exponent)."""
    if usd <= 0:
        return "$0"
    places = 2 - math.floor(math.log10(usd))
    if places <= 2 or round(usd, places) >= 1:
        return f"${usd:.2f}"
    return f"${usd:.{places}f}"
