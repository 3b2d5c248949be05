"""Build the engine a Lambda needs from its environment. Imports boto3; handlers call it at module scope.

Environment (set by the Terraform function module):
    LOOM_STORE                        the state store (``adapters.STORES``): ``dynamodb`` (default), ``memory``
    LOOM_TABLE_NAME                   required by the ``dynamodb`` store
    LOOM_QUEUE_URL                    required
    LOOM_DLQ_URL                      the worker's failure notices
    LOOM_EVENT_BUS_NAME               status-change events (empty: none)
    LOOM_SHARDS, LOOM_LEASE_S, LOOM_RETENTION_DAYS, LOOM_MAX_STEPS, LOOM_MAX_TOTAL_ATTEMPTS,
    LOOM_SWEEP_MAX_ITEMS              see EngineSettings
AWS endpoints follow boto3's own configuration (AWS_ENDPOINT_URL for a local emulator).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import NamedTuple

import boto3
from botocore.config import Config

from ..clock import SystemClock
from ..engine import Engine
from ..ports import Metrics
from ..registry import REGISTRY, Registry
from ..settings import EngineSettings, require_env
from ..sweeper import Sweeper
from . import build_store
from .eventbridge import EventBridgePublisher
from .sqs import SqsQueue

log = logging.getLogger("engine_core")


def client_config(settings: EngineSettings) -> Config:
    """Every boto3 client explicitly: the standard retry mode (with its retry quota) and connect and
    read timeouts well under the function's, so a hung connection fails a call, not the invocation."""
    read_s = 10.0 if settings.function_timeout_s is None else max(2.0, min(10.0, settings.function_timeout_s / 6))
    return Config(retries={"mode": "standard", "max_attempts": 3}, connect_timeout=2, read_timeout=read_s,
                  tcp_keepalive=True)


class Runtime(NamedTuple):
    engine: Engine
    sweeper: Sweeper
    settings: EngineSettings
    registry: Registry

    def release(self, receipt_handle: str) -> None:
        """Return a received step message to the queue now; a failure only leaves it for the visibility
        timeout (the record is reported failed either way, and the due index covers a lost one)."""
        try:
            self.engine.queue.release(receipt_handle)
        except Exception:  # noqa: BLE001 - best effort: the record's redelivery does not depend on it
            log.warning("could not release the record for redelivery now; it returns after the visibility timeout",
                        exc_info=True)


def from_environment(env: Mapping[str, str] | None = None, metrics: Metrics | None = None,
                     registry: Registry = REGISTRY, load_workflows: bool = True) -> Runtime:
    env = os.environ if env is None else env
    settings = EngineSettings.from_env(env)
    if load_workflows:
        registry.load_entry_points()
    config = client_config(settings)
    store = build_store(env, settings, config)
    queue = SqsQueue(boto3.client("sqs", config=config), require_env("LOOM_QUEUE_URL", env),
                     env.get("LOOM_DLQ_URL") or None)
    clock = SystemClock()
    bus = env.get("LOOM_EVENT_BUS_NAME") or ""
    events = EventBridgePublisher(boto3.client("events", config=config), bus) if bus else None
    engine = Engine(store, queue, registry, clock, settings, metrics, events)
    sweeper = Sweeper(store, queue, clock, settings, registry, metrics, events=events)
    return Runtime(engine, sweeper, settings, registry)
