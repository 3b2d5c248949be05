"""Engine settings, read from LOOM_* environment variables by the Lambda handlers."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from .errors import EngineError

DYNAMODB_ITEM_LIMIT = 400 * 1024
STARTUP_RESERVE_S = 2.0
"""Invocation time a derived default budget leaves for the read and the commit around a step."""
READ_RESERVE_S = 0.25
"""Invocation time any budget must leave for the read before its step: a delivery reaches a step with less than
the worker's timeout left, so a budget that needs all of it (``timeout_s`` plus the margin equal to the timeout)
would be put back at every delivery, for ever."""
ATTEMPTS_PER_STEP, ATTEMPTS_FLOOR = 5, 5000
"""The attempts cap a steps cap implies when ``LOOM_MAX_TOTAL_ATTEMPTS`` is unset."""


class ConfigurationError(EngineError):
    pass


ENV_VARS = {
    "shards": "LOOM_SHARDS",
    "lease_s": "LOOM_LEASE_S",
    "retention_days": "LOOM_RETENTION_DAYS",
    "max_steps": "LOOM_MAX_STEPS",
    "max_total_attempts": "LOOM_MAX_TOTAL_ATTEMPTS",
    "sweep_max_items": "LOOM_SWEEP_MAX_ITEMS",
    "function_timeout_s": "LOOM_FUNCTION_TIMEOUT_S",
    "invocation_timeout_s": "LOOM_INVOCATION_TIMEOUT_S",
    "max_chain_steps": "LOOM_MAX_CHAIN_STEPS",
    "index_slack_s": "LOOM_INDEX_SLACK_S",
    "max_resend_doublings": "LOOM_MAX_RESEND_DOUBLINGS",
    "checkpoint_records": "LOOM_CHECKPOINT_RECORDS",
    "ledger": "LOOM_LEDGER",
    "backlog_marks": "LOOM_BACKLOG_MARKS",
    "replay_cache_mb": "LOOM_REPLAY_CACHE_MB",
}

FALLBACK_STEP_TIMEOUT_S = 60.0
"""The default step budget when the function timeout is unknown (in-process tests, the harness)."""


class EngineSettings(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    shards: int = Field(default=1, ge=1, le=256)
    """Due-index shards (GSI1PK = DUE#<0..shards-1>). Fixed for a table's life: changing it strands due items."""
    lease_s: float = Field(default=900.0, gt=0, le=43200)
    """How long an in-flight step message may go unanswered before the sweeper re-drives it."""
    retention_days: float = Field(default=30.0, gt=0)
    max_steps: int = Field(default=1000, ge=1, le=100_000)
    """Safety cap: executions reaching this step index end FAILED (Loom's own loop protection). Up to
    100,000 (history keys run STEP#000..STEP#999, then STEP#~001000 on, in order)."""
    max_total_attempts: int = Field(default=5000, ge=1)
    """Safety cap on step attempts over an execution's life. Unset: five per step of ``max_steps``, at least
    5,000 (so raising the steps cap alone lets an execution use it)."""
    max_queue_delay_s: int = Field(default=900, ge=0, le=900)
    """Longest wait that rides SQS DelaySeconds; longer ones are left to the sweeper."""
    item_budget_bytes: int = Field(default=DYNAMODB_ITEM_LIMIT - 16 * 1024, ge=1024, le=DYNAMODB_ITEM_LIMIT)
    """Largest encoded context or result; the rest of the 400 KB item is headroom for attributes."""
    early_tolerance_s: float = Field(default=1.0, ge=0)
    """A timer message this close to its due time runs now rather than being delayed again."""
    time_margin_ms: int = Field(default=3000, ge=0)
    """Invocation time kept in reserve beyond a step's timeout budget before taking a record."""
    sweep_max_items: int = Field(default=500, ge=1)
    """Most executions one sweep claims, across all shards (bounds one sweeper invocation)."""
    function_timeout_s: float | None = Field(default=None, gt=0, le=900)
    """The worker Lambda's timeout (Terraform passes it). Steps without a timeout of their own get
    ``function_timeout_s - time_margin`` as their budget, and a workflow whose budget cannot fit is
    refused when the worker starts."""
    invocation_timeout_s: float | None = Field(default=None, gt=0, le=900)
    """This function's own timeout (Terraform passes each function its own; unset: ``function_timeout_s``).
    Its AWS clients' read timeout is a sixth of it (2-10 s), so a hung call fails inside the invocation,
    with an error that says so, rather than timing the whole invocation out."""
    max_chain_steps: int = Field(default=100, ge=1, le=10000)
    """Most steps one delivery runs back to back before handing the execution on through the queue.
    1 means one step per delivery."""
    index_slack_s: float = Field(default=2.0, ge=0, le=3600)
    """How far past a claim's lease the due-index key may lie. Within one invocation every claim of a
    chain is leased to the invocation's deadline (plus the margin), so the key does not move from step
    to step whatever this is; it spares the index write when a delivery's claim lands close to its
    message's lease. The sweeper looks this far ahead in the index (and re-reads each candidate), so a
    crashed attempt is still re-driven at its lease: with the defaults, its invocation's deadline plus
    the 3 s margin, plus up to one sweeper tick."""
    checkpoint_records: int = Field(default=100, ge=1, le=10_000)
    """At most this many step records between two checkpoints (records that also hold the whole context):
    a delivery reads the history from the latest one, so its read is bounded however long the history."""
    max_resend_doublings: int = Field(default=6, ge=0, le=16)
    """A step message that stays unclaimed past its lease is re-sent by the sweeper with the lease doubled
    each time (``resends``), at most 2**this times the lease: under a backlog, copies per execution
    grow with the logarithm of the backlog's age, not linearly."""
    ledger: bool = True
    """Count each execution's requests, units, messages and worker time on its item (``LOOM_LEDGER=0``: off)."""
    backlog_marks: bool = True
    """Workers mark a queue backlog (a record that waited half a lease) and the sweeper leaves a queued
    message that may still be behind it alone (``backlog.py``); ``LOOM_BACKLOG_MARKS=0``: the lease alone
    decides."""
    replay_cache_mb: float = Field(default=32.0, ge=0, le=4096)
    """Code-first: how much of the histories it has read a worker process keeps (least recently used
    dropped first), so the next delivery of an execution reads only the records after them
    (``durable/prefix.py``). 0: every delivery reads the whole history."""
    history_grace_s: float = Field(default=86400.0, ge=0)
    """History items are written with ``expires_at`` = written + retention + this; executions that
    outlive it get their history re-stamped (rare), so completion normally stamps nothing per step."""

    @model_validator(mode="before")
    @classmethod
    def _attempts_follow_steps(cls, values: Any) -> Any:
        """An unset ``max_total_attempts`` follows ``max_steps`` (as the Terraform module derives it)."""
        if isinstance(values, dict) and values.get("max_total_attempts") is None and "max_steps" in values:
            try:
                steps = int(values["max_steps"])
            except (TypeError, ValueError):
                return values  # the field's own check says what is wrong with it
            return {**values, "max_total_attempts": max(ATTEMPTS_FLOOR, ATTEMPTS_PER_STEP * steps)}
        return values

    @property
    def default_step_timeout_s(self) -> float:
        if self.function_timeout_s is None:
            return FALLBACK_STEP_TIMEOUT_S
        return max(1.0, self.function_timeout_s - self.time_margin_ms / 1000 - STARTUP_RESERVE_S)

    @property
    def slack_s(self) -> float:
        return min(self.index_slack_s, self.lease_s)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> EngineSettings:
        env = os.environ if env is None else env
        values = {field: env[var] for field, var in ENV_VARS.items() if env.get(var, "") != ""}
        try:
            return cls(**values)
        except ValidationError as exc:
            problems = "; ".join(
                f"{ENV_VARS[str(e['loc'][0])]}={env.get(ENV_VARS[str(e['loc'][0])])!r}: {e['msg']}" for e in exc.errors()
            )
            raise ConfigurationError(f"invalid Loom settings in the environment: {problems}") from None


def require_env(name: str, env: Mapping[str, str] | None = None) -> str:
    env = os.environ if env is None else env
    value = env.get(name, "")
    if not value:
        raise ConfigurationError(f"environment variable {name} is not set; the Terraform module sets it for each function")
    return value


def unfit_budget(settings: EngineSettings, timeout_s: float) -> str | None:
    """Why a step with a ``timeout_s`` budget can never run under this worker's timeout (no delivery
    has that much time left), or None when it fits or the timeout is unknown."""
    ceiling, margin = settings.function_timeout_s, settings.time_margin_ms / 1000
    if ceiling is None or timeout_s + margin + READ_RESERVE_S <= ceiling:
        return None
    return (f"a {timeout_s:g} s budget; with the {margin:g} s margin and {READ_RESERVE_S:g} s for the read before it, "
            f"it needs {timeout_s + margin + READ_RESERVE_S:g} s")


UNFIT_REMEDY = ("Raise the worker's timeout (Terraform: worker_timeout_s) or lower the step's timeout_s (to at most "
                f"the worker's timeout less the margin and {READ_RESERVE_S:g} s); steps without one get the worker "
                f"timeout minus the margin and a {STARTUP_RESERVE_S:g} s start-up reserve")


def lease_seconds(settings: EngineSettings, step_timeout_s: float) -> float:
    """How long a step message in flight (sent, not yet claimed) is trusted before the sweeper
    re-drives it. It must outlast the step it leads to, or the sweeper would re-drive a healthy one."""
    return max(settings.lease_s, step_timeout_s + settings.time_margin_ms / 1000)
