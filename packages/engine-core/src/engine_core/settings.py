"""Engine settings, read from LOOM_* environment variables by the Lambda handlers."""

from __future__ import annotations

import os
from collections.abc import Mapping

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from .errors import EngineError

DYNAMODB_ITEM_LIMIT = 400 * 1024


class ConfigurationError(EngineError):
    pass


ENV_VARS = {
    "shards": "LOOM_SHARDS",
    "lease_s": "LOOM_LEASE_S",
    "retention_days": "LOOM_RETENTION_DAYS",
    "max_steps": "LOOM_MAX_STEPS",
    "max_total_attempts": "LOOM_MAX_TOTAL_ATTEMPTS",
    "sweep_max_items": "LOOM_SWEEP_MAX_ITEMS",
}


class EngineSettings(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    shards: int = Field(default=1, ge=1, le=256)
    """Due-index shards (GSI1PK = DUE#<0..shards-1>). Fixed for a table's life: changing it strands due items."""
    lease_s: float = Field(default=900.0, gt=0, le=43200)
    """How long an in-flight step message may go unanswered before the sweeper re-drives it."""
    retention_days: float = Field(default=30.0, gt=0)
    max_steps: int = Field(default=1000, ge=1, le=1000)
    """Safety cap: executions reaching this step index end FAILED (Loom's own loop protection). At most
    1000, the width of the history sort key STEP#<nnn>."""
    max_total_attempts: int = Field(default=5000, ge=1)
    """Safety cap on step attempts over an execution's life."""
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


def lease_seconds(settings: EngineSettings, step_timeout_s: float) -> float:
    """How long an in-flight step message is trusted. It must outlast the step it covers, or the
    sweeper would re-drive a healthy attempt."""
    return max(settings.lease_s, step_timeout_s + settings.time_margin_ms / 1000)
