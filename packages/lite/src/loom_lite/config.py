"""What the one-process runtime runs with: the file, the address, the loops' pace, and the engine's settings
with the defaults a process on one machine wants (the Lambda's are for a 15-minute function and SQS).

Settings come from the same ``LOOM_*`` variables as the Lambdas (``engine_core.settings.ENV_VARS``) and the
SQLite store's (``LOOM_SQLITE_SYNCHRONOUS``, ``LOOM_SQLITE_BUSY_TIMEOUT_MS``); where one is not set:

- ``LOOM_FUNCTION_TIMEOUT_S`` = 30: each delivery's deadline, as a Lambda invocation's timeout. A step
  without a ``timeout_s`` gets this minus 2.5 s; a claim holds its step until the later of its budget and
  that deadline, so a process killed inside a step has it re-driven about this long after the claim. A
  workflow with a longer step is refused at start, naming both numbers: raise it.
- ``LOOM_LEASE_S`` = 60: how long a step message may wait unanswered before the sweeper sends it again.
- a 0.5 s time margin around a step (the Lambda's is 3 s: a cold start, the network).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from engine_core import EngineSettings
from engine_core.adapters.sqlite_db import BUSY_TIMEOUT_ENV, DEFAULT_BUSY_TIMEOUT_MS, PATH_ENV, SYNCHRONOUS_ENV
from engine_core.schedules.config import Schedules
from engine_core.settings import ConfigurationError

DEFAULT_DB = Path(".loom") / "loom.db"
LITE_DEFAULTS = {"LOOM_FUNCTION_TIMEOUT_S": "30", "LOOM_LEASE_S": "60"}
TIME_MARGIN_MS = 500


def lite_settings(env: Mapping[str, str]) -> EngineSettings:
    """The engine's settings from ``env``, with the one-process defaults where a variable is unset."""
    merged = {**LITE_DEFAULTS, **{k: v for k, v in env.items() if v != ""}}
    return EngineSettings.from_env(merged).model_copy(update={"time_margin_ms": TIME_MARGIN_MS})


@dataclass
class LiteConfig:
    """How to run. ``LiteConfig.from_env()`` reads ``LOOM_SQLITE_PATH``, the engine's settings and ``LOOM_SCHEDULES``."""

    db: Path = DEFAULT_DB
    host: str = "127.0.0.1"
    port: int = 0
    """0: a free port, chosen at start (printed, and recorded for ``loom``)."""
    sweep_every_s: float = 1.0
    """The sweeper's schedule (EventBridge's is a minute; a sweep of a local file costs a few queries)."""
    poll_s: float = 0.05
    """How often an idle worker looks at the queue for messages sent by another process (its own process's
    sends wake it at once)."""
    record: bool = True
    """Write the per-user state file, where ``loom`` and ``LoomClient()`` find the API."""
    synchronous: str = "FULL"
    busy_timeout_ms: int = DEFAULT_BUSY_TIMEOUT_MS
    max_receives: int = 10
    """A message received this many times goes to the dead letters (SQS's maxReceiveCount)."""
    settings: EngineSettings = field(default_factory=lambda: lite_settings({}))
    schedules: Schedules = field(default_factory=Schedules)
    """What fires while the runtime runs (``LOOM_SCHEDULES``, as a deployment's Terraform renders it; ``scheduler.py``)."""

    @property
    def delivery_s(self) -> float:
        """Each delivery's deadline (the engine leases claims to it), from ``LOOM_FUNCTION_TIMEOUT_S``."""
        assert self.settings.function_timeout_s is not None
        return self.settings.function_timeout_s

    @property
    def visibility_s(self) -> float:
        """A received message stays hidden past its delivery's deadline (SQS: at least the function timeout)."""
        return self.delivery_s + 5.0

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides) -> LiteConfig:
        env = os.environ if env is None else env
        busy = env.get(BUSY_TIMEOUT_ENV) or str(DEFAULT_BUSY_TIMEOUT_MS)
        if not busy.isdigit():
            raise ConfigurationError(f"{BUSY_TIMEOUT_ENV}={busy!r} must be a whole number of milliseconds")
        values = dict(db=Path(env.get(PATH_ENV) or DEFAULT_DB), synchronous=env.get(SYNCHRONOUS_ENV) or "FULL",
                      busy_timeout_ms=int(busy), settings=lite_settings(env), schedules=Schedules.from_env(env))
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)
